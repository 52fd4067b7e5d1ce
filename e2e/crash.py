"""Crash durability: SIGKILL `rocklake serve` mid-commit, restart it, check what survived.

usage: python crash.py --rocklake-bin PATH --engine slatedb [--rounds 5] [--ext-dir DIR] [--seed N]

One store folder and one DATA_PATH for all rounds. Each round starts the server, runs a DuckDB
client process that commits one value per transaction (a row in each of two tables, between
BEGIN and COMMIT) and prints the value only after DuckDB reported the commit done, kills the
server with SIGKILL at a random moment, runs `rocklake verify` on the store (it must be
clean), restarts the server on the same folder and re-attaches. Every value the client
reported must be there, in both tables; the only other value allowed is the one in flight (the
next after the last reported), which may or may not be there, but in both tables or in none.
"""
import argparse
import os
import random
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


connect = common.duck


attach_sql = common.attach_sql


def client(a):
    """Commit start, start+1, ... and print each value once its commit returned."""
    con = connect(a.ext_dir)
    con.execute(attach_sql(a.catalog, a.data_path))
    v = a.start
    while True:
        try:
            con.execute("BEGIN TRANSACTION")
            con.execute(f"INSERT INTO lake.main.crash VALUES ({v})")
            con.execute(f"INSERT INTO lake.main.crash_pair VALUES ({v}, 'value {v}')")
            con.execute("COMMIT")
        except Exception as e:  # noqa: BLE001 - the server went away: stop
            print(f"error {type(e).__name__}", flush=True)
            return
        print(v, flush=True)
        v += 1


def read_values(a, server, data_path):
    con = connect(a.ext_dir)
    con.execute(attach_sql(server.dsn(), data_path))
    vals = [r[0] for r in con.execute("SELECT v FROM lake.main.crash").fetchall()]
    pairs = [r[0] for r in con.execute(
        "SELECT v FROM lake.main.crash_pair WHERE label = 'value ' || v").fetchall()]
    con.close()
    return vals, pairs


def verify(a, server):
    """`rocklake verify` on the killed server's store: (exit code, its last line)."""
    p = subprocess.run([a.rocklake_bin, "verify", server.url], capture_output=True, text=True,
                       timeout=300)
    lines = (p.stdout + p.stderr).strip().splitlines()
    return p.returncode, lines[-1] if lines else ""


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rocklake-bin")
    ap.add_argument("--engine", choices=sorted(common.ENGINE_SCHEMES))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--ext-dir", default=common.DEFAULT_EXT_DIR)
    ap.add_argument("--seed", type=int, help="for a reproducible kill schedule")
    ap.add_argument("--client", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--catalog", help=argparse.SUPPRESS)
    ap.add_argument("--data-path", help=argparse.SUPPRESS)
    ap.add_argument("--start", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.client:
        return client(a)
    if not (a.rocklake_bin and a.engine):
        ap.error("--rocklake-bin and --engine are required")
    common.exit_on_sigterm()
    common.ensure_extensions(a.ext_dir)
    seed = a.seed if a.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    tmp = tempfile.mkdtemp(prefix="rocklake-crash-")
    data_path = os.path.join(tmp, "data")
    os.makedirs(data_path)
    log = os.path.join(tmp, "serve.log")
    server = common.Server(a.rocklake_bin, common.engine_url(a.engine, os.path.join(tmp, "store")),
                           log)
    print(f"crash: {a.engine}, {a.rounds} rounds, seed {seed}, work folder {tmp}")
    expected = set()   # values known to be committed
    next_value = 0
    problems = []
    cli = None
    try:
        server.start()
        con = connect(a.ext_dir)
        con.execute(attach_sql(server.dsn(), data_path))
        con.execute("CREATE TABLE lake.main.crash(v BIGINT)")
        con.execute("CREATE TABLE lake.main.crash_pair(v BIGINT, label VARCHAR)")
        con.close()
        for rnd in range(1, a.rounds + 1):
            cli = subprocess.Popen(
                [sys.executable, __file__, "--client", "--catalog", server.dsn(),
                 "--data-path", data_path, "--start", str(next_value), "--ext-dir", a.ext_dir],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            reported, other = [], []

            def reader(out=cli.stdout, reported=reported, other=other):
                for line in out:
                    line = line.strip()
                    (reported if line.isdigit() else other).append(line)
            t = threading.Thread(target=reader, daemon=True)
            t.start()
            # Let a few commits land, then kill at a random moment.
            wait_until = time.monotonic() + 60
            while len(reported) < 3 and time.monotonic() < wait_until and cli.poll() is None:
                time.sleep(0.02)
            if len(reported) < 3:
                problems.append(f"round {rnd}: client made {len(reported)} commits before the kill "
                                f"window; output {other[-5:]}")
                break
            time.sleep(rng.uniform(0.0, 1.5))
            server.kill9()
            try:
                cli.wait(timeout=60)
            except subprocess.TimeoutExpired:
                cli.kill()
                cli.wait()
            t.join(5)
            got = [int(x) for x in reported]
            in_flight = (got[-1] + 1) if got else next_value
            rc, last = verify(a, server)
            if rc != 0:
                problems.append(f"round {rnd}: rocklake verify after the kill exited {rc}: {last}")
            # A new port each start: the old one may be held by TIME_WAIT connections.
            server.port = common.free_port()
            server.start()
            present, pairs = read_values(a, server, data_path)
            pset = set(present)
            if sorted(pairs) != sorted(present):
                torn = sorted(set(pairs) ^ pset)
                problems.append(f"round {rnd}: {len(torn)} transactions only partly there, "
                                f"e.g. {torn[:5]}")
            missing = sorted(v for v in set(got) | expected if v not in pset)
            extra = sorted(pset - set(got) - expected - {in_flight})
            dups = len(present) - len(pset)
            flight = "present" if in_flight in pset else "absent"
            print(f"round {rnd}: {len(got)} commits reported, killed; verify: {last}; after "
                  f"restart {len(present)} rows in each table, in-flight value {in_flight} {flight}")
            if missing:
                problems.append(f"round {rnd}: {len(missing)} reported commits lost, e.g. {missing[:5]}")
            if extra:
                problems.append(f"round {rnd}: values never committed are present: {extra[:5]}")
            if dups:
                problems.append(f"round {rnd}: {dups} duplicate rows")
            expected = pset
            next_value = in_flight + 1
    finally:
        if cli and cli.poll() is None:
            cli.kill()
        server.stop()
    for p in problems:
        print(f"PROBLEM: {p}")
    if problems:
        print(f"--- tail of {log}:\n{common.tail(log)}")
    print(f"crash: {a.rounds} rounds, {len(expected)} values durable, "
          + ("passed" if not problems else "FAILED"))
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
