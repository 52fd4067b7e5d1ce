"""Concurrent DuckLake writers through one catalog: no lost and no phantom commits.

usage: python concurrency.py [--pg-dsn DSN] [--rocklake-bin PATH --engine slatedb ...]
                             [--writers 8] [--per-process 1] [--seconds 20] [--commits 200]
                             [--ext-dir DIR]

For each target (a fresh PostgreSQL database, and/or `rocklake serve` on a fresh store per
engine; PostgreSQL first) it creates one table, then starts N DuckDB clients, each its own DuckDB database with
the lake attached (one catalog connection each): `--per-process` of them run as threads of one
Python process, so hundreds fit on a small machine. All attach first; then, together, each
commits appends for a bounded time or number of commits, and after every commit reads back the
count of its own rows (which must be three per commit it was told succeeded). Each commit
inserts three rows (writer, seq, part 0..2). DuckLake retries snapshot-id conflicts itself; a
commit that still fails surfaces as an error, is counted, and is not recorded as done. At the
end a fresh attach checks: row count == 3 x successful commits, every successful commit has
exactly its three rows, and no failed commit left any row. Printed per target: commits/s and
reads/s over the window in which all clients ran, errors seen, the server's CPU over the window
(cores busy; for PostgreSQL every `postgres` process of the machine), and for `rocklake serve`
its resident memory with every client connected and its peak (VmHWM). With PostgreSQL in the
run, an engine fails if more of its commits fail after DuckLake's retries than
failure_bound() allows beside PostgreSQL's share.
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


def client(a, writer, result, ready):
    """One DuckDB client (its own database): attach, wait for the start, then commit and read
    back until the deadline or the commit budget is used up."""
    done, failed, samples = [], [], []
    reads, bad_reads = 0, []
    result.update(done=done, failed=failed, errors=samples, reads=0, bad_reads=bad_reads,
                  attached=False)
    try:
        con = connect(a.ext_dir, threads=1)
        con.execute(attach_sql(a.catalog, a.data_path))
        result["attached"] = True
    except Exception as e:  # noqa: BLE001 - reported; the parent counts it as a problem
        samples.append(f"attach: {type(e).__name__}: {e}".splitlines()[0][:300])
        ready()
        return
    start = ready()
    deadline = start + a.seconds
    seq = 0
    while time.time() < deadline and seq < a.commits:
        rows = ", ".join(f"({writer}, {seq}, {p})" for p in range(3))
        try:
            con.execute(f"INSERT INTO lake.main.appends VALUES {rows}")
            done.append(seq)
        except Exception as e:  # noqa: BLE001 - a failed commit is allowed, and counted
            failed.append(seq)
            if len(samples) < 3:  # the whole message: DuckLake's cause is on a later line
                samples.append(" / ".join(f"{type(e).__name__}: {e}".split("\n"))[:600])
        seq += 1
        try:
            n = con.execute("SELECT count(*) FROM lake.main.appends WHERE writer = ?",
                            [writer]).fetchone()[0]
            reads += 1
            if n != 3 * len(done) and len(bad_reads) < 3:
                bad_reads.append(f"writer {writer} read {n} rows after {len(done)} commits")
        except Exception as e:  # noqa: BLE001 - a failed read is a problem; say which
            bad_reads.append(f"writer {writer} read failed: {type(e).__name__}: "
                             f"{str(e).splitlines()[0][:300]}")
            break
    result["reads"] = reads
    con.close()


def worker(a):
    """One Python process with `--per-process` clients as threads. It writes `OUT.ready` once
    all have attached and waits for the parent's `OUT.go`, which holds the start time."""
    import threading
    n = a.per_process
    results = [{} for _ in range(n)]
    lock, attached, go = threading.Lock(), [0], {}

    def ready():
        with lock:
            attached[0] += 1
            if attached[0] == n:
                open(a.out + ".ready", "w").close()
        while "at" not in go:
            with lock:
                if "at" not in go and os.path.exists(a.out + ".go"):
                    go["at"] = float(open(a.out + ".go").read())
            if "at" not in go:
                time.sleep(0.01)
        return go["at"]

    threads = [threading.Thread(target=client, args=(a, a.worker * n + i, results[i], ready))
               for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with open(a.out, "w") as f:
        json.dump({str(a.worker * n + i): r for i, r in enumerate(results)}, f)


def memory_kib(pid, field):
    """A field of /proc/PID/status in KiB (VmRSS, VmHWM), or None."""
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def cpu_seconds(pid):
    """User + system CPU time of process `pid` so far (all its threads), or None."""
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def postgres_cpu_seconds():
    """CPU time of every process named `postgres` on this machine (the server and its
    backends; a backend that exited meanwhile takes its share with it)."""
    total = 0.0
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if open(f"/proc/{pid}/comm").read().strip() == "postgres":
                    total += cpu_seconds(pid) or 0.0
            except OSError:
                pass
    return total


# How many of a target's commits may fail after DuckLake's retries, against PostgreSQL's share
# with the same clients in the same run: twice PostgreSQL's share, or two points above it,
# whichever is more (a handful of the ~250 commits of 8 writers fail on either, run to run).
def failure_bound(pg_share):
    return max(2 * pg_share, pg_share + 0.02)


STATS = {}  # target -> (commits ok, commits failed after DuckLake's retries)


def run_target(name, catalog, tmp, a, server_pid=None):
    """Returns a list of problems (empty when the target passed); its commit counts go to
    STATS."""
    data_path = os.path.join(tmp, f"{name}-data")
    os.makedirs(data_path)
    con = connect(a.ext_dir)
    con.execute(attach_sql(catalog, data_path))  # create the catalog before the race
    con.execute("CREATE TABLE lake.main.appends(writer INTEGER, seq INTEGER, part INTEGER)")
    con.close()

    procs, outs = [], []
    processes = -(-a.writers // a.per_process)
    t0 = time.monotonic()
    for w in range(processes):
        out = os.path.join(tmp, f"{name}-w{w}.json")
        log = open(os.path.join(tmp, f"{name}-w{w}.log"), "w")
        outs.append(out)
        procs.append(subprocess.Popen(
            [sys.executable, __file__, "--worker", str(w), "--catalog", catalog,
             "--data-path", data_path, "--out", out, "--ext-dir", a.ext_dir,
             "--seconds", str(a.seconds), "--commits", str(a.commits),
             "--per-process", str(a.per_process)],
            stdout=log, stderr=subprocess.STDOUT))
        log.close()
    problems = []
    # Start the clock once every client has attached (or the attach budget is spent).
    attach_deadline = time.monotonic() + 60 + a.writers
    while time.monotonic() < attach_deadline and not all(
            os.path.exists(o + ".ready") or p.poll() is not None for o, p in zip(outs, procs)):
        time.sleep(0.05)
    attach_secs = time.monotonic() - t0
    rss_connected = memory_kib(server_pid, "VmRSS") if server_pid else None
    cpu_before = cpu_seconds(server_pid) if server_pid else postgres_cpu_seconds()
    start = time.time() + 0.2
    for o in outs:
        with open(o + ".go.tmp", "w") as f:
            f.write(repr(start))
        os.rename(o + ".go.tmp", o + ".go")
    # The servers' CPU over the window itself (before clients finish their last commit and
    # PostgreSQL's backends exit with their share).
    time.sleep(max(0.0, start + a.seconds - time.time()))
    cpu_after = cpu_seconds(server_pid) if server_pid else postgres_cpu_seconds()
    for w, p in enumerate(procs):
        try:
            rc = p.wait(timeout=a.seconds + 120)
        except subprocess.TimeoutExpired:
            p.kill()
            rc = "timeout"
        if rc != 0:
            problems.append(f"writer process {w} exited with {rc}: "
                            f"{common.tail(os.path.join(tmp, f'{name}-w{w}.log'), 10)}")
    secs = max(time.time() - start, 0.001)
    rss_peak = memory_kib(server_pid, "VmHWM") if server_pid else None
    done, failed, samples, bad_reads = set(), set(), [], []
    reads = not_attached = 0
    for out in outs:
        if os.path.exists(out):
            for w, r in json.load(open(out)).items():
                w = int(w)
                done |= {(w, s) for s in r["done"]}
                failed |= {(w, s) for s in r["failed"]}
                samples += r["errors"]
                reads += r["reads"]
                bad_reads += r["bad_reads"]
                not_attached += not r["attached"]
    if not_attached:
        problems.append(f"{not_attached} of {a.writers} clients could not attach")
    if bad_reads:
        problems.append(f"{len(bad_reads)} reads of a client's own rows were wrong or failed, "
                        f"e.g. {bad_reads[:3]}")

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
    STATS[name] = (len(done), len(failed))
    if name != "pg" and "pg" in STATS:
        share = len(failed) / max(len(done) + len(failed), 1)
        pg_ok, pg_failed = STATS["pg"]
        pg_share = pg_failed / max(pg_ok + pg_failed, 1)
        print(f"{name}: {share:.1%} of commits failed after DuckLake's retries, PostgreSQL "
              f"{pg_share:.1%} (bound {failure_bound(pg_share):.1%})")
        if share > failure_bound(pg_share):
            problems.append(f"{share:.1%} of commits failed after DuckLake's retries, more than "
                            f"the bound {failure_bound(pg_share):.1%} set by PostgreSQL's "
                            f"{pg_share:.1%} with the same clients")
    memory = ""
    if rss_connected is not None and rss_peak is not None:
        memory = (f", server RSS {rss_connected / 1024:.0f} MiB with all connected, "
                  f"peak {rss_peak / 1024:.0f} MiB")
    if cpu_before is not None and cpu_after is not None:
        memory += f", server CPU {(cpu_after - cpu_before) / a.seconds:.2f} cores"
        if not server_pid:
            memory += " (every postgres process of this machine)"
    print(f"{name}: {a.writers} writers ({processes} processes), attached in {attach_secs:.1f} s; "
          f"{secs:.1f} s, {len(done)} commits ok, {len(failed)} failed after DuckLake's "
          f"retries, {reads} reads, {len(rows)} rows, {snapshots} snapshots, "
          f"{len(done) / secs:.1f} commits/s, {reads / secs:.1f} reads/s{memory}")
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
    ap.add_argument("--per-process", type=int, default=1,
                    help="clients per Python process (threads, each its own DuckDB database)")
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
    if a.writers < 1 or a.per_process < 1 or a.writers % a.per_process:
        ap.error(f"--writers ({a.writers}) must be a positive multiple of --per-process "
                 f"({a.per_process})")
    common.exit_on_sigterm()
    common.ensure_extensions(a.ext_dir)
    tmp = tempfile.mkdtemp(prefix="rocklake-conc-")
    print(f"concurrency: work folder {tmp}")
    failed = []
    if a.pg_dsn:
        have = int(subprocess.run([common.psql_path(), a.pg_dsn, "-X", "-Atc", "SHOW max_connections"],
                                  check=True, capture_output=True, text=True).stdout)
        if have < 2 * a.writers + 10:
            sys.exit(f"concurrency: PostgreSQL's max_connections is {have}; {a.writers} writers "
                     f"need {2 * a.writers + 10} (start it with -c max_connections=...)")
        db = f"conc_{uuid.uuid4().hex[:8]}"
        try:
            if run_target("pg", common.create_pg_database(a.pg_dsn, db), tmp, a):
                failed.append("pg")
        finally:
            common.drop_pg_database(a.pg_dsn, db)
    for e in a.engine:
        log = os.path.join(tmp, f"{e}-serve.log")
        # DuckDB's postgres extension may open a second connection while a client's first one
        # is still open (PostgreSQL saw 251 of 250 clients at once), so twice the clients.
        extra = ["--max-connections", str(2 * a.writers + 10)] if a.writers > 45 else []
        server = common.Server(a.rocklake_bin, common.engine_url(e, os.path.join(tmp, f"{e}-store")),
                               log, extra_args=extra)
        try:
            server.start(timeout=60)
            if run_target(e, server.dsn(), tmp, a, server.proc.pid):
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
