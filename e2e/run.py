"""End-to-end: the DuckLake workload on PostgreSQL 15 and on `rocklake serve`, step by step.

usage: python run.py --pg-dsn "host=127.0.0.1 port=N user=postgres dbname=postgres"
                     --rocklake-bin PATH --engine slatedb [--engine sled ...]
                     [--engine-url URL ...] [--ext-dir DIR] [--s3] [--pg-twice] [--maintain]
                     [--keep]

The reference run goes to a fresh PostgreSQL database; each engine gets a fresh store folder
and its own `rocklake serve`. Every run gets its own DATA_PATH. Every recorded step result is
compared with PostgreSQL's; the exit code is non-zero on any difference or error.
--pg-twice adds a second PostgreSQL run as a candidate: it must match all steps, which shows
that the workload's masking and sorting leave nothing run-dependent.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

WORKLOAD = os.path.join(common.HERE, "workload.py")
WORKLOAD_TIMEOUT = 600  # seconds; the workload takes a few seconds on PostgreSQL


def data_path_for(args, tmp, name):
    if args.s3:
        base = os.environ.get("ROCKLAKE_TEST_S3_URL", "s3://rocklake-test/e2e").rstrip("/")
        return f"{base}/{uuid.uuid4().hex[:8]}-{name}"
    path = os.path.join(tmp, f"{name}-data")
    os.makedirs(path)
    return path


def run_workload(args, tmp, name, catalog, phase="all", data_path=None):
    """Run workload.py in its own process (a crash in DuckDB must not take the harness down).
    Returns (steps, seconds, problem, data_path) where problem is None or a text for the
    report. The reread phase is given the data path the workload used."""
    out = os.path.join(tmp, f"{name}-{phase}.json")
    err = os.path.join(tmp, f"{name}-{phase}-workload.log")
    data_path = data_path or data_path_for(args, tmp, name)
    cmd = [sys.executable, WORKLOAD, "--catalog", catalog, "--ext-dir", args.ext_dir,
           "--data-path", data_path, "--out", out, "--phase", phase]
    if args.s3:
        cmd.append("--s3")
    t0 = time.monotonic()
    with open(err, "w") as f:
        try:
            rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT,
                                timeout=WORKLOAD_TIMEOUT).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
    secs = time.monotonic() - t0
    steps = []
    if os.path.exists(out):
        with open(out) as f:
            steps = json.load(f)["steps"]
    problem = None
    if rc != 0:
        problem = f"workload.py exited with {rc}; its output:\n{common.tail(err)}"
    return steps, secs, problem, data_path


def rocklake(args, *cli):
    """Run the rocklake command; returns its stdout, or raises RuntimeError with its output."""
    p = subprocess.run([args.rocklake_bin, *cli], capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        raise RuntimeError(f"rocklake {' '.join(cli[:2])} exited with {p.returncode}:\n"
                           f"{p.stdout[-2000:]}{p.stderr[-2000:]}")
    return p.stdout


def maintain(args, url):
    """RockLake's own maintenance on a stopped server's store, after DuckLake's expire and
    cleanup: retain-from at the oldest snapshot DuckLake keeps, gc, then verify (clean or
    RuntimeError). Returns a line for the report."""
    out = rocklake(args, "--json", "sql", url, "SELECT min(snapshot_id) FROM ducklake_snapshot")
    oldest = int(json.loads(out.strip().splitlines()[-1])["rows"][0][0])
    rocklake(args, "retain-from", url, str(oldest))
    gc = rocklake(args, "gc", url).strip().splitlines()
    verify = rocklake(args, "verify", url).strip().splitlines()
    return f"retain-from {oldest}; gc: {gc[-1] if gc else ''}; verify: {verify[-1] if verify else ''}"


def scrape(port):
    """The server's metrics: `name{labels}` -> value."""
    import urllib.request
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def check_metrics(port, steps):
    """After the workload, the server's metrics must have moved as the workload did: a
    statement for every step DuckDB ran (it sends several per step), commits each covered by
    one flush, and no transaction left open. (The steps that must fail fail in DuckDB, not
    on the catalog server.) Returns a problem or None; prints the figures."""
    m = scrape(port)
    ok = sum(v for k, v in m.items()
             if k.startswith("rocklake_statements_total{") and 'sqlstate="00000"' in k)
    failed = sum(v for k, v in m.items()
                 if k.startswith("rocklake_statements_total{") and 'sqlstate="00000"' not in k)
    commits = m.get("rocklake_commits_total", 0)
    flushes = m.get("rocklake_group_commit_size_count", 0)
    print(f"e2e: metrics: {ok:.0f} statements ok, {failed:.0f} failed, {commits:.0f} commits in "
          f"{flushes:.0f} flushes, {m.get('rocklake_connections_accepted_total', 0):.0f} "
          f"sessions", flush=True)
    problems = []
    if ok < len(steps):
        problems.append(f"{ok:.0f} successful statements for {len(steps)} steps")
    if commits < 1 or m.get("rocklake_durable_commits_total") != commits:
        problems.append(f"commits {commits}, durable {m.get('rocklake_durable_commits_total')}")
    if m.get("rocklake_group_commit_size_sum") != m.get("rocklake_durable_commits_total"):
        problems.append("the flushes do not cover the durable commits exactly once")
    if m.get("rocklake_open_transactions") != 0:
        problems.append(f"{m.get('rocklake_open_transactions')} transactions left open")
    if m.get("rocklake_ready") != 1:
        problems.append("not ready while serving")
    return f"metrics: {'; '.join(problems)}" if problems else None


def compare(ref, cand):
    """Per step name: 'match', 'DIFFER', 'ERROR' or 'missing'."""
    by_name = {s["name"]: s for s in cand}
    out = {}
    for s in ref:
        c = by_name.get(s["name"])
        if c is None:
            out[s["name"]] = "missing"
        elif "error" in c:
            out[s["name"]] = "ERROR"
        elif "error" in s or c.get("rows") != s.get("rows"):
            out[s["name"]] = "DIFFER"
        else:
            out[s["name"]] = "match"
    return out


def side_by_side(ref_step, cand_step, width=70, limit=12):
    """The first rows that differ, PostgreSQL on the left."""
    lines = [f"  step {ref_step['name']}: {' '.join(ref_step.get('sql', '').split())[:160]}"]
    if "error" in cand_step:
        lines.append(f"    candidate error: {cand_step['error']}")
    if "error" in ref_step:
        lines.append(f"    postgres error: {ref_step['error']}")
    a, b = ref_step.get("rows") or [], cand_step.get("rows") or []
    cols = ref_step.get("columns") or []
    shown = 0
    for i in range(max(len(a), len(b))):
        ra = a[i] if i < len(a) else None
        rb = b[i] if i < len(b) else None
        if ra == rb:
            continue
        if ra is not None and rb is not None and len(ra) == len(rb) and len(ra) > 1:
            # Same shape: name only the columns that differ.
            diffs = [f"{cols[j] if j < len(cols) else j}: pg {json.dumps(x)[:width]} | "
                     f"got {json.dumps(y)[:width]}" for j, (x, y) in enumerate(zip(ra, rb)) if x != y]
            lines.append(f"    row {i:4}  " + "; ".join(diffs))
        else:
            lines.append(f"    row {i:4}  pg: {json.dumps(ra)[:width]:<{width}}  | "
                         f"got: {json.dumps(rb)[:width]}")
        shown += 1
        if shown >= limit:
            lines.append("    ...")
            break
    if len(a) != len(b):
        lines.append(f"    row counts: pg {len(a)}, got {len(b)}")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pg-dsn", default=os.environ.get("ROCKLAKE_TEST_PG"),
                    help="libpq string of a PostgreSQL 15 that may create databases "
                         "(default: $ROCKLAKE_TEST_PG)")
    ap.add_argument("--rocklake-bin", help="the rocklake binary")
    ap.add_argument("--engine", action="append", default=[], choices=sorted(common.ENGINE_SCHEMES),
                    help="run on this engine with a fresh store folder (repeatable)")
    ap.add_argument("--engine-url", action="append", default=[],
                    help="run on this exact store URL, e.g. file:///tmp/x (repeatable)")
    ap.add_argument("--ext-dir", default=common.DEFAULT_EXT_DIR)
    ap.add_argument("--s3", action="store_true",
                    help="DATA_PATH on S3 ($ROCKLAKE_TEST_S3_URL, endpoint $AWS_ENDPOINT_URL)")
    ap.add_argument("--pg-twice", action="store_true",
                    help="also compare a second PostgreSQL run (checks the workload itself)")
    ap.add_argument("--maintain", action="store_true",
                    help="after the workload, run RockLake's retain-from, gc and verify on each "
                         "store, restart its server and read everything back (read-only steps "
                         "compared with PostgreSQL's, which gets no such maintenance)")
    ap.add_argument("--keep", action="store_true", help="keep the temp folder and databases")
    args = ap.parse_args()
    if not args.pg_dsn:
        ap.error("--pg-dsn (or ROCKLAKE_TEST_PG) is required")
    if (args.engine or args.engine_url) and not args.rocklake_bin:
        ap.error("--rocklake-bin is required with --engine/--engine-url")
    if not (args.engine or args.engine_url or args.pg_twice):
        ap.error("nothing to compare: give --engine, --engine-url or --pg-twice")
    common.exit_on_sigterm()
    common.ensure_extensions(args.ext_dir)

    tmp = tempfile.mkdtemp(prefix="rocklake-e2e-")
    print(f"e2e: work folder {tmp}")
    tag = uuid.uuid4().hex[:8]
    pg_dbs = []
    failures = []
    results = {}   # column name -> steps
    timings = {}
    logs = {}      # column name -> server log
    try:
        def pg_run(col):
            db = f"e2e_{col}_{tag}"
            pg_dbs.append(db)
            dsn = common.create_pg_database(args.pg_dsn, db)
            steps, secs, problem, data_path = run_workload(args, tmp, col, dsn)
            results[col], timings[col] = steps, secs
            if problem:
                failures.append((col, problem))
            if args.maintain:
                for phase in ("expire", "reread"):
                    steps, _, problem, _ = run_workload(args, tmp, col, dsn, phase, data_path)
                    results[col] += steps
                    if problem:
                        failures.append((col, problem))

        pg_run("pg")
        if args.pg_twice:
            pg_run("pg_again")  # a longer name: DATA_PATH lengths differ, as for the engines
        targets = [(e, common.engine_url(e, os.path.join(tmp, f"{e}-store")))
                   for e in args.engine]
        for i, url in enumerate(args.engine_url):
            targets.append((f"url{i + 1}", url))
        for col, url in targets:
            log = os.path.join(tmp, f"{col}-serve.log")
            metrics_port = common.free_port()
            server = common.Server(args.rocklake_bin, url, log,
                                   extra_args=["--metrics-listen", f"127.0.0.1:{metrics_port}"])
            try:
                server.start(timeout=60)
                steps, secs, problem, data_path = run_workload(args, tmp, col, server.dsn())
                results[col], timings[col] = steps, secs
                if problem:
                    failures.append((col, problem))
                metrics_problem = check_metrics(metrics_port, steps)
                if metrics_problem:
                    failures.append((col, metrics_problem))
                if args.maintain and not problem:
                    # DuckLake's own expiry of all but the last snapshots, then RockLake's
                    # maintenance on the stopped server's store, a restart and a read of it all.
                    steps, _, problem, _ = run_workload(args, tmp, col, server.dsn(),
                                                        "expire", data_path)
                    results[col] += steps
                    if problem:
                        raise RuntimeError(problem)
                    server.stop()
                    print(f"e2e: {col}: {maintain(args, url)}", flush=True)
                    server.start(timeout=60)
                    steps, _, problem, _ = run_workload(args, tmp, col, server.dsn(),
                                                        "reread", data_path)
                    results[col] += steps
                    if problem:
                        failures.append((col, problem))
            except RuntimeError as e:
                results[col], timings[col] = [], 0.0
                failures.append((col, str(e)))
            finally:
                server.stop()
            logs[col] = log

        ok = report(results, timings, logs, failures)
    finally:
        if not args.keep:
            for db in pg_dbs:
                common.drop_pg_database(args.pg_dsn, db)
    if ok and not args.keep:
        shutil.rmtree(tmp, ignore_errors=True)
    sys.exit(0 if ok else 1)


def report(results, timings, logs, failures, ref_name="pg"):
    """Compare every column of `results` with the reference column `ref_name`; print the
    table and the verdict; True when all match."""
    ref = results[ref_name]
    cols = [c for c in results if c != ref_name]
    verdicts = {c: compare(ref, results[c]) for c in cols}
    ref_errors = [s["name"] for s in ref if "error" in s]

    w = max([len(s["name"]) for s in ref] + [10])
    print(f"{'step':<{w}}  {ref_name:>8}  " + "  ".join(f"{c:>10}" for c in cols))
    cand_ms = {c: {s["name"]: s.get("ms") for s in results[c]} for c in cols}
    for s in ref:
        pg_cell = "ERROR" if "error" in s else f"{s.get('ms', 0):.0f}ms"
        cells = []
        for c in cols:
            v = verdicts[c][s["name"]]
            ms = cand_ms[c].get(s["name"])
            cells.append(f"{v}" if v != "match" or ms is None else f"ok {ms:.0f}ms")
        print(f"{s['name']:<{w}}  {pg_cell:>8}  " + "  ".join(f"{x:>10}" for x in cells))
    print("workload seconds: " + ", ".join(
        f"{c} {timings[c]:.1f}" for c in [ref_name] + cols if c in timings))

    ok = not ref_errors and not failures
    if ref_errors:
        print(f"{ref_name} itself failed {len(ref_errors)} steps: {', '.join(ref_errors[:10])}")
        for s in ref:
            if "error" in s:
                print(f"  {s['name']}: {s['error']}")
                break
    for c in cols:
        bad = [n for n, v in verdicts[c].items() if v != "match"]
        extra = {s["name"] for s in results[c]} - {s["name"] for s in ref}
        if bad or extra:
            ok = False
            print(f"\n{c}: {len(bad)} steps not matching; first: {bad[:8]}"
                  + (f"; unexpected steps {sorted(extra)[:5]}" if extra else ""))
            if bad:
                by_name = {s["name"]: s for s in results[c]}
                first = next(s for s in ref if s["name"] == bad[0])
                print(side_by_side(first, by_name.get(first["name"], {"error": "step missing"})))
            log = logs.get(c)
            if log:
                print(f"--- tail of {log}:\n{common.tail(log)}")
    for c, problem in failures:
        print(f"\n{c}: {problem}")
    n = len(ref)
    summary = ", ".join(f"{c} {sum(v == 'match' for v in verdicts[c].values())}/{n} match"
                        for c in cols)
    print(f"e2e: {n} steps, {summary}" + ("" if ok else "  FAILED"))
    return ok


if __name__ == "__main__":
    main()
