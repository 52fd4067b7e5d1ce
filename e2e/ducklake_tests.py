"""DuckLake's own sqllogictest files against PostgreSQL 15 and `rocklake serve`, side by side.

usage: python ducklake_tests.py --suite DIR --pg-dsn DSN --rocklake-bin PATH --engine sled
                                [--engine slatedb ...] [--shards N] [--rotate K]
                                [--ext-dir DIR] [--out DIR] [--timeout S] [paths ...]

DIR is the folder with DuckLake's tests, their runner and the PostgreSQL test configuration
(shared/ducklake-tests). The runner treats its server as a plain PostgreSQL: it drops and
recreates `public` in database `ducklakedb` before every file. Prints pass/fail/skip counts of
both, lists every file that passes on PostgreSQL and not on RockLake, and exits non-zero when
there is one.

The files are split over --shards servers run side by side. With several --engine, server i
runs engine i mod (number of engines), so each file runs on one engine and every engine gets
its share; --rotate K shifts which file goes to which server (CI passes the day of the year,
so that over successive runs every file meets every engine). Give one --engine to run every
file on it.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def all_files(suite):
    """Every `.test` file of the suite, as the runner names them."""
    found = []
    for d, _, files in os.walk(os.path.join(suite, "test")):
        found += [os.path.relpath(os.path.join(d, f), suite) for f in files if f.endswith(".test")]
    return sorted(found)


def run_suite(a, name, dsn, out_dir, paths=None):
    """Run the runner on `paths` (default: all) against `dsn`; (results by file, counts, s)."""
    out = os.path.join(out_dir, f"results-{name}.json")
    env = dict(os.environ, DUCK_EXT_DIR=os.path.abspath(a.ext_dir), SQLLOGIC_REPO=".",
               SQLLOGIC_WORK=tempfile.mkdtemp(prefix=f"ducklake-tests-{name}-"))
    cmd = [sys.executable, "runner.py", "run", "--config", "test/configs/postgres.json",
           "--pg-dsn", dsn, "--jobs", "1", "--timeout", str(a.timeout), "--out", out,
           "--quiet"] + (a.paths if paths is None else paths)
    t0 = time.monotonic()
    log = os.path.join(out_dir, f"run-{name}.log")
    with open(log, "w") as f:
        rc = subprocess.run(cmd, cwd=a.suite, env=env, stdout=f, stderr=subprocess.STDOUT).returncode
    secs = time.monotonic() - t0
    if not os.path.exists(out):
        raise SystemExit(f"{name}: the runner wrote no results (exit {rc}); see {log}:\n"
                         f"{common.tail(log)}")
    with open(out) as f:
        r = json.load(f)
    files = r.get("results") or r.get("files_results") or []
    if isinstance(r.get("files"), list):
        files = r["files"]
    by_file = {x["file"]: x for x in files}
    return by_file, counts_of(by_file), secs


def counts_of(by_file):
    return {k: sum(1 for x in by_file.values() if x["status"] == k)
            for k in ("pass", "fail", "skip")}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", required=True)
    ap.add_argument("--pg-dsn", default=os.environ.get("ROCKLAKE_TEST_PG"))
    ap.add_argument("--rocklake-bin", required=True)
    ap.add_argument("--engine", action="append", choices=sorted(common.ENGINE_SCHEMES),
                    help="engine of the RockLake servers (repeatable: servers take turns)")
    ap.add_argument("--ext-dir", default=common.DEFAULT_EXT_DIR)
    ap.add_argument("--out", default=None, help="folder for results and logs")
    # Per file. RockLake runs the slowest files (bucket_partitioning.test: 70 s beside one other
    # server) several times slower than PostgreSQL, and CI runs three servers on two cores.
    ap.add_argument("--timeout", type=int, default=600, help="seconds per file")
    ap.add_argument("--shards", type=int, default=2,
                    help="RockLake servers (and runners) side by side, a share of the files each")
    ap.add_argument("--rotate", type=int, default=0,
                    help="shift the assignment of files to servers by this many places")
    ap.add_argument("--pg-baseline", type=int, default=None,
                    help="files known to pass on PostgreSQL: fewer passing there fails the run "
                         "(a suite or environment that skips or fails everything on both sides "
                         "must not pass)")
    ap.add_argument("paths", nargs="*")
    a = ap.parse_args()
    a.engine = a.engine or ["sled"]
    if a.shards < len(a.engine):
        a.shards = len(a.engine)  # every engine named gets a server
    common.exit_on_sigterm()
    common.ensure_extensions(a.ext_dir)
    out_dir = a.out or tempfile.mkdtemp(prefix="ducklake-tests-")
    os.makedirs(out_dir, exist_ok=True)
    print(f"ducklake tests: suite {a.suite}, results in {out_dir}")

    # PostgreSQL: the database the configuration names, fresh.
    common.drop_pg_database(a.pg_dsn, "ducklakedb")
    pg_dsn = common.create_pg_database(a.pg_dsn, "ducklakedb")
    try:
        pg, pg_counts, pg_secs = run_suite(a, "postgres", pg_dsn, out_dir)
    finally:
        common.drop_pg_database(a.pg_dsn, "ducklakedb")
    print(f"PostgreSQL 15: {pg_counts['pass']} pass, {pg_counts['fail']} fail, "
          f"{pg_counts['skip']} skip ({pg_secs:.0f} s)")
    if a.pg_baseline is not None and pg_counts["pass"] < a.pg_baseline:
        for f, x in sorted(pg.items()):
            if x["status"] != "pass":
                print(f"  not passing on PostgreSQL: {f}: {x['status']} L{x.get('line')} "
                      f"{str(x.get('reason', ''))[:200]}")
        print(f"ducklake tests: only {pg_counts['pass']} files pass on PostgreSQL, where "
              f"{a.pg_baseline} are known to: the suite or its environment is broken")
        sys.exit(1)

    # RockLake: the files split over --shards servers, each on a store of its own, run side
    # by side (each file runs alone against its server, as on PostgreSQL).
    files = a.paths or all_files(a.suite)
    shards = [[f for j, f in enumerate(files) if (j + a.rotate) % a.shards == i]
              for i in range(a.shards)]
    engines = [a.engine[i % len(a.engine)] for i in range(a.shards)]
    engine_of = {f: engines[i] for i, shard in enumerate(shards) for f in shard}
    servers = []
    rl, rl_secs = {}, 0.0
    try:
        for i in range(a.shards):
            store = tempfile.mkdtemp(prefix="ducklake-tests-store-")
            srv = common.Server(a.rocklake_bin,
                                common.engine_url(engines[i], os.path.join(store, "db")),
                                os.path.join(out_dir, f"serve-{i}.log"))
            srv.start()
            servers.append(srv)
        import concurrent.futures
        t0 = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(a.shards) as pool:
            runs = [pool.submit(run_suite, a, f"rocklake-{i}", srv.dsn("postgres", "ducklakedb"),
                                out_dir, shard)
                    for i, (srv, shard) in enumerate(zip(servers, shards)) if shard]
            for r in runs:
                rl.update(r.result()[0])
        rl_secs = time.monotonic() - t0
    finally:
        for srv in servers:
            srv.stop()
    rl_counts = counts_of(rl)
    print(f"RockLake ({', '.join(a.engine)}): {rl_counts['pass']} pass, {rl_counts['fail']} "
          f"fail, {rl_counts['skip']} skip ({rl_secs:.0f} s)")
    if len(a.engine) > 1:
        for e in a.engine:
            c = counts_of({f: x for f, x in rl.items() if engine_of.get(f) == e})
            mine = {f for f, x in pg.items() if x["status"] == "pass" and engine_of.get(f) == e}
            print(f"  on {e}: {c['pass']} pass, {c['fail']} fail, {c['skip']} skip "
                  f"({len(mine)} of its files pass on PostgreSQL)")

    worse = sorted(f for f, x in pg.items()
                   if x["status"] == "pass" and rl.get(f, {}).get("status") != "pass")
    for f in worse:
        x = rl.get(f, {})
        print(f"  passes on PostgreSQL, not on RockLake ({engine_of.get(f)}): {f}: {x.get('status')} "
              f"L{x.get('line')} {str(x.get('reason', ''))[:300]}")
    print("ducklake tests: " + ("every file that passes on PostgreSQL passes on RockLake"
                                if not worse else f"{len(worse)} files differ"))
    sys.exit(1 if worse else 0)


if __name__ == "__main__":
    main()
