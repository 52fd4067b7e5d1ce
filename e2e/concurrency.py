"""Concurrent DuckLake writers through one catalog: no lost and no phantom commits.

usage: python concurrency.py [--pg-dsn DSN] [--rocklake-bin PATH --engine slatedb ...]
                             [--writers 8] [--seconds 20] [--commits 200] [--ext-dir DIR]

For each target (a fresh PostgreSQL database, and/or `rocklake serve` on a fresh store per
engine) it creates one table, then starts N DuckDB processes that each attach and commit
appends for a bounded time or number of commits. Each commit inserts three rows
(writer, seq, part 0..2). DuckLake retries snapshot-id conflicts itself; a commit that still
fails surfaces as an error, is counted, and is not recorded as done. At the end a fresh attach
checks: row count == 3 x successful commits, every successful commit has exactly its three
rows, and no failed commit left any row.
"""
import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


connect = common.duck


attach_sql = common.attach_sql


def worker(a):
    """One writer process: commit until the deadline or the commit budget is used up."""
    con = connect(a.ext_dir)
    con.execute(attach_sql(a.catalog, a.data_path))
    done, failed, samples = [], [], []
    deadline = time.monotonic() + a.seconds
    seq = 0
    while time.monotonic() < deadline and seq < a.commits:
        rows = ", ".join(f"({a.worker}, {seq}, {p})" for p in range(3))
        try:
            con.execute(f"INSERT INTO lake.main.appends VALUES {rows}")
            done.append(seq)
        except Exception as e:  # noqa: BLE001 - a failed commit is allowed, and counted
            failed.append(seq)
            if len(samples) < 3:
                samples.append(f"{type(e).__name__}: {e}".splitlines()[0][:300])
        seq += 1
    with open(a.out, "w") as f:
        json.dump({"done": done, "failed": failed, "errors": samples}, f)


def run_target(name, catalog, tmp, a):
    """Returns a list of problems (empty when the target passed)."""
    data_path = os.path.join(tmp, f"{name}-data")
    os.makedirs(data_path)
    con = connect(a.ext_dir)
    con.execute(attach_sql(catalog, data_path))  # create the catalog before the race
    con.execute("CREATE TABLE lake.main.appends(writer INTEGER, seq INTEGER, part INTEGER)")
    con.close()

    procs, outs = [], []
    t0 = time.monotonic()
    for w in range(a.writers):
        out = os.path.join(tmp, f"{name}-w{w}.json")
        log = open(os.path.join(tmp, f"{name}-w{w}.log"), "w")
        outs.append(out)
        procs.append(subprocess.Popen(
            [sys.executable, __file__, "--worker", str(w), "--catalog", catalog,
             "--data-path", data_path, "--out", out, "--ext-dir", a.ext_dir,
             "--seconds", str(a.seconds), "--commits", str(a.commits)],
            stdout=log, stderr=subprocess.STDOUT))
        log.close()
    problems = []
    for w, p in enumerate(procs):
        try:
            rc = p.wait(timeout=a.seconds + 120)
        except subprocess.TimeoutExpired:
            p.kill()
            rc = "timeout"
        if rc != 0:
            problems.append(f"writer {w} exited with {rc}: "
                            f"{common.tail(os.path.join(tmp, f'{name}-w{w}.log'), 10)}")
    secs = time.monotonic() - t0
    done, failed, samples = set(), set(), []
    for w, out in enumerate(outs):
        if os.path.exists(out):
            r = json.load(open(out))
            done |= {(w, s) for s in r["done"]}
            failed |= {(w, s) for s in r["failed"]}
            samples += r["errors"]

    con = connect(a.ext_dir)
    con.execute(attach_sql(catalog, data_path))  # fresh attach: what the catalog really holds
    rows = con.execute("SELECT writer, seq, part FROM lake.main.appends").fetchall()
    snapshots = con.execute("SELECT count(*) FROM lake.snapshots()").fetchone()[0]
    con.close()
    parts = collections.Counter((w, s) for w, s, _ in rows)
    if len(rows) != 3 * len(done):
        problems.append(f"row count {len(rows)} != 3 x {len(done)} successful commits")
    lost = sorted(k for k in done if parts.get(k) != 3)
    phantom = sorted(k for k in parts if k not in done)
    if lost:
        problems.append(f"{len(lost)} reported commits missing or partial, e.g. {lost[:5]}")
    if phantom:
        problems.append(f"{len(phantom)} commits present that were not reported done, "
                        f"e.g. {phantom[:5]} (failed: {sum(k in failed for k in phantom)})")
    if not done:
        problems.append("no commit succeeded")
    print(f"{name}: {a.writers} writers, {secs:.1f} s, {len(done)} commits ok, {len(failed)} "
          f"failed after DuckLake's retries, {len(rows)} rows, {snapshots} snapshots, "
          f"{len(done) / max(secs, 0.001):.1f} commits/s")
    for s in sorted(set(samples))[:3]:
        print(f"  error seen: {s}")
    for p in problems:
        print(f"  PROBLEM: {p}")
    return problems


def verify_clean(binary, url, tmp, name):
    """`rocklake verify` on the store after the server stopped: exit 0 means no finding."""
    out = os.path.join(tmp, f"{name}-verify.txt")
    with open(out, "w") as f:
        rc = subprocess.run([binary, "verify", url], stdout=f, stderr=subprocess.STDOUT,
                            timeout=300).returncode
    print(f"{name}: rocklake verify exit {rc}: {common.tail(out, 3).strip()}")
    return rc == 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pg-dsn", help="run on a fresh database of this PostgreSQL")
    ap.add_argument("--rocklake-bin")
    ap.add_argument("--engine", action="append", default=[], choices=sorted(common.ENGINE_SCHEMES))
    ap.add_argument("--writers", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--commits", type=int, default=200, help="at most this many per writer")
    ap.add_argument("--ext-dir", default=common.DEFAULT_EXT_DIR)
    # Internal: one writer process.
    ap.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--catalog", help=argparse.SUPPRESS)
    ap.add_argument("--data-path", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker is not None:
        return worker(a)
    if not a.pg_dsn and not a.engine:
        ap.error("give --pg-dsn and/or --engine")
    if a.engine and not a.rocklake_bin:
        ap.error("--rocklake-bin is required with --engine")
    common.exit_on_sigterm()
    common.ensure_extensions(a.ext_dir)
    tmp = tempfile.mkdtemp(prefix="rocklake-conc-")
    print(f"concurrency: work folder {tmp}")
    failed = []
    if a.pg_dsn:
        db = f"conc_{uuid.uuid4().hex[:8]}"
        try:
            if run_target("pg", common.create_pg_database(a.pg_dsn, db), tmp, a):
                failed.append("pg")
        finally:
            common.drop_pg_database(a.pg_dsn, db)
    for e in a.engine:
        log = os.path.join(tmp, f"{e}-serve.log")
        server = common.Server(a.rocklake_bin, common.engine_url(e, os.path.join(tmp, f"{e}-store")), log)
        try:
            server.start(timeout=60)
            if run_target(e, server.dsn(), tmp, a):
                failed.append(e)
        except Exception as ex:  # noqa: BLE001 - report and go on to the next engine
            print(f"{e}: {type(ex).__name__}: {ex}")
            failed.append(e)
        finally:
            server.stop()
        if e not in failed and not verify_clean(a.rocklake_bin, server.url, tmp, e):
            failed.append(e)
        if e in failed:
            print(f"--- tail of {log}:\n{common.tail(log)}")
    print("concurrency: " + ("all targets passed" if not failed else f"FAILED: {', '.join(failed)}"))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
