"""Where a DuckDB operation's time goes inside `rocklake serve`: the server's own per-statement
log (`RUST_LOG=rocklake_server=debug`: each statement's time and its parse / plan / optimize /
storage / execute / commit split, then the time to encode and queue its results as messages,
`send`), grouped by operation and by statement shape.

    e2e/server_time.py --rocklake-bin target/release/rocklake [--engine sled] [--rounds 5]

It attaches stock DuckDB to a fresh catalog, creates a table, makes `--commits` one-row
commits, then times `--rounds` of each operation (a `count(*)`, a time-travel `count(*)`, a
one-row insert) and prints, per operation: DuckDB's median wall time, the statements the
server ran for one operation, the server's time for them, and the shapes that cost most
(literals replaced by `?`). The server listens on 127.0.0.1 only and is stopped at the end.
"""
import argparse
import collections
import datetime
import os
import re
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

RECORD = re.compile(r"\n(?=\d{4}-\d\d-\d\dT)")
STAMP = re.compile(r"(\S+?)Z\s+DEBUG (query peer|query phases|query sent)")
ANSI = re.compile(r"\x1b\[[0-9;]*m")
LITERAL = re.compile(r"'(?:[^']|'')*'|\b\d+(?:\.\d+)?\b")
PHASES = ("parse", "plan", "optimize", "storage", "execute", "commit")


def now():
    return datetime.datetime.now(datetime.timezone.utc).timestamp()


def records(log_path):
    """(time, kind, payload) of each statement ('sql', text) and its timing ('time', dict)."""
    with open(log_path, errors="replace") as f:
        text = ANSI.sub("", f.read())
    out = []
    for r in RECORD.split(text):
        m = STAMP.match(r)
        if not m:
            continue
        t = datetime.datetime.fromisoformat(m.group(1) + "+00:00").timestamp()
        if m.group(2) == "query peer":
            out.append((t, "sql", r.split("sql=", 1)[1].strip()))
        elif m.group(2) == "query sent":
            out.append((t, "sent", int(re.search(r"micros=(\d+)", r).group(1))))
        else:
            timing = {"micros": int(re.search(r"micros=(\d+)", r).group(1))}
            for p in PHASES:
                v = re.search(rf"{p} ([0-9.]+)µs", r)
                timing[p] = float(v.group(1)) if v else 0.0
            out.append((t, "time", timing))
    return out


def shape(sql):
    return LITERAL.sub("?", " ".join(sql.split()))


def report(recs, windows, rounds, walls, top, log):
    """Print, for each operation's time window, the server's statements per operation, their
    time, and the `top` shapes that cost most with their phase split. `rounds` is how many
    times the operation ran inside its window; `walls` its DuckDB wall times (ms), if any.
    A statement's time is its own (the phases) plus `send`: encoding its results into
    messages after it ran."""
    for name, (start, end) in windows.items():
        per = collections.defaultdict(lambda: [0, 0.0, collections.Counter()])
        statements, total, sql = 0, 0.0, None
        for t, kind, payload in recs:
            if kind == "sql":
                sql = payload
                continue
            if not (start <= t <= end) or sql is None:
                continue
            s = per[shape(sql)]
            if kind == "sent":
                total += payload
                s[1] += payload
                s[2]["send"] += payload
                continue
            statements += 1
            total += payload["micros"]
            s[0] += 1
            s[1] += payload["micros"]
            s[2].update({p: payload[p] for p in PHASES})
        if statements == 0:
            raise SystemExit(f"server_time: the server logged no timed statement during "
                             f"{name!r} (is RUST_LOG=rocklake_server=debug still honoured, and "
                             f"the log's 'query phases' line still written?); log {log}")
        n = rounds
        wall = f"DuckDB {statistics.median(walls[name]):.2f} ms (median); " if walls else ""
        print(f"{name}: {wall}server {statements / n:.1f} statements, "
              f"{total / n / 1000:.2f} ms per operation")
        for text, (count, micros, phases) in sorted(per.items(), key=lambda x: -x[1][1])[:top]:
            count = max(count, 1)  # a window may open between a statement and its sending
            split = " ".join(f"{p} {phases[p] / count:.0f}" for p in PHASES + ("send",)
                             if phases[p])
            print(f"  {count / n:4.1f}× {micros / count:7.0f} µs  [{split}]  {text[:110]}")
        print()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rocklake-bin", required=True)
    ap.add_argument("--engine", default="slatedb", choices=sorted(common.ENGINE_SCHEMES))
    ap.add_argument("--ext-dir", default=common.DEFAULT_EXT_DIR)
    ap.add_argument("--commits", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--top", type=int, default=4, help="shapes listed per operation")
    a = ap.parse_args()
    if a.rounds < 1 or a.commits < 1:
        raise SystemExit("--rounds and --commits must be at least 1")
    common.ensure_extensions(a.ext_dir)
    tmp = tempfile.mkdtemp(prefix="rocklake-server-time-")
    log = os.path.join(tmp, "serve.log")
    os.environ["RUST_LOG"] = "rocklake_server=debug"
    server = common.Server(a.rocklake_bin, common.engine_url(a.engine, os.path.join(tmp, "store")),
                           log)
    windows = {}
    walls = collections.defaultdict(list)
    server.start()
    try:
        con = common.duck(a.ext_dir, threads=1)
        con.execute(f"ATTACH 'ducklake:postgres:{server.dsn()}' AS lake (DATA_PATH '{tmp}/data/')")
        con.execute("CREATE TABLE lake.main.c(i BIGINT)")
        for i in range(a.commits):
            con.execute(f"INSERT INTO lake.main.c VALUES ({i})")
        version = con.execute("SELECT max(snapshot_id) FROM lake.snapshots()").fetchone()[0] - 2
        ops = {
            "count(*)": lambda i: con.execute("SELECT count(*) FROM lake.main.c").fetchall(),
            "time travel count(*)": lambda i: con.execute(
                f"SELECT count(*) FROM lake.main.c AT (VERSION => {version})").fetchall(),
            "insert 1 row": lambda i: con.execute(f"INSERT INTO lake.main.c VALUES ({i})"),
        }
        for name, op in ops.items():
            op(-1)  # first sight of the statements: not measured
            start = now()
            for i in range(a.rounds):
                t0 = time.perf_counter()
                op(i)
                walls[name].append((time.perf_counter() - t0) * 1000.0)
            windows[name] = (start, now())
        con.close()
        time.sleep(0.3)  # the log's last lines
    finally:
        server.stop()
    print(f"engine {a.engine}, {a.commits} commits before, {a.rounds} rounds per operation; "
          f"server log {log}\n")
    report(records(log), windows, a.rounds, walls, a.top, log)


if __name__ == "__main__":
    main()
