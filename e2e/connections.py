"""What an idle connection costs: `rocklake serve` on each engine beside PostgreSQL 15.

usage: python connections.py --rocklake-bin PATH [--engine slatedb ...] [--pg-dsn DSN]
                             [--connections N] [--out FILE.md]

For each target, N clients log in over the wire protocol (spoken here by hand, no driver), in
three states: logged in only; after one query each (DuckLake's first catalog read: the latest
snapshot); and N more sockets that connect and send nothing. The table gives the server's
memory per connection in each state: for RockLake the growth of the one process's RSS divided
by N; for PostgreSQL the proportional set size (PSS: private pages plus a share of shared ones)
of each backend process, as /proc reports it (run as a user that may read the backends' /proc
entries, e.g. root or postgres). Loopback only; every socket is closed at the end.
"""
import argparse
import os
import socket
import struct
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

QUERY = ("SELECT snapshot_id, schema_version, next_catalog_id, next_file_id "
         "FROM ducklake_snapshot WHERE snapshot_id = (SELECT max(snapshot_id) FROM ducklake_snapshot)")


def message(s):
    head = b""
    while len(head) < 5:
        chunk = s.recv(5 - len(head))
        if not chunk:
            raise ConnectionError("server closed the connection")
        head += chunk
    kind, length = head[:1], struct.unpack("!I", head[1:])[0]
    body = b""
    while len(body) < length - 4:
        chunk = s.recv(length - 4 - len(body))
        if not chunk:
            raise ConnectionError("server closed the connection")
        body += chunk
    return kind, body


def until_ready(s):
    """Read to ReadyForQuery; the first ErrorResponse's fields if one came."""
    error = None
    while True:
        try:
            kind, body = message(s)
        except ConnectionError:
            if error:  # a FATAL error ends the connection without ReadyForQuery
                return error
            raise
        if kind == b"E" and error is None:
            error = {f[:1].decode(): f[1:].decode() for f in body.split(b"\0") if f}
        if kind == b"Z":
            return error


def login(port, user, dbname):
    s = socket.create_connection(("127.0.0.1", port), timeout=120)
    params = f"user\0{user}\0database\0{dbname}\0\0".encode()
    s.sendall(struct.pack("!II", len(params) + 8, 196608) + params)
    error = until_ready(s)
    if error:
        raise RuntimeError(f"login refused: {error.get('C')} {error.get('M')}")
    return s


def query(s, sql):
    body = sql.encode() + b"\0"
    s.sendall(b"Q" + struct.pack("!I", len(body) + 4) + body)
    error = until_ready(s)
    if error:
        raise RuntimeError(f"{sql!r}: {error.get('C')} {error.get('M')}")


def proc_kib(pid, file, field):
    """One `field:` line of /proc/PID/FILE, in KiB."""
    with open(f"/proc/{pid}/{file}") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/{pid}/{file}")


def rss_kib(pid):
    return proc_kib(pid, "status", "VmRSS")


def pss_kib(pid):
    return proc_kib(pid, "smaps_rollup", "Pss")


def settle():
    time.sleep(1.0)


def measure_rocklake(binary, engine, n):
    with tempfile.TemporaryDirectory() as tmp:
        url = common.engine_url(engine, os.path.join(tmp, "catalog"))
        server = common.Server(binary, url, os.path.join(tmp, "server.log"),
                               extra_args=["--max-connections", str(n + 10)]).start()
        try:
            # The catalog DuckLake would have made: its first query reads ducklake_snapshot.
            setup = login(server.port, "duck", "lake")
            query(setup, "CREATE TABLE ducklake_snapshot(snapshot_id BIGINT PRIMARY KEY, "
                         "snapshot_time TIMESTAMPTZ, schema_version BIGINT, "
                         "next_catalog_id BIGINT, next_file_id BIGINT)")
            query(setup, "INSERT INTO ducklake_snapshot VALUES (0, now(), 0, 1, 0)")
            settle()
            base = rss_kib(server.proc.pid)
            conns = [login(server.port, "duck", "lake") for _ in range(n)]
            settle()
            logged_in = rss_kib(server.proc.pid)
            for c in conns:
                query(c, QUERY)
            settle()
            queried = rss_kib(server.proc.pid)
            silent = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(n)]
            settle()
            with_silent = rss_kib(server.proc.pid)
            for s in conns + silent + [setup]:
                s.close()
            return {
                "logged in, idle": (logged_in - base) / n,
                "after one query each, idle": (queried - base) / n,
                "silent socket (no startup packet)": (with_silent - queried) / n,
                "base": base,
            }
        finally:
            server.stop()


def measure_pg(dsn, n):
    d = common.parse_dsn(dsn)
    port, user = int(d.get("port", 5432)), d.get("user", "postgres")
    name = f"rocklake_conn_{os.getpid()}"
    common.create_pg_database(dsn, name)
    try:
        setup = login(port, user, name)
        query(setup, "CREATE TABLE ducklake_snapshot(snapshot_id BIGINT PRIMARY KEY, "
                     "snapshot_time TIMESTAMPTZ, schema_version BIGINT, "
                     "next_catalog_id BIGINT, next_file_id BIGINT)")
        query(setup, "INSERT INTO ducklake_snapshot VALUES (0, now(), 0, 1, 0)")
        conns = [login(port, user, name) for _ in range(n)]
        pids = []
        for c in conns:
            # A backend's pid, from BackendKeyData, is not kept by login(): ask for it.
            body = b"SELECT pg_backend_pid()\0"
            c.sendall(b"Q" + struct.pack("!I", len(body) + 4) + body)
            while True:
                kind, msg = message(c)
                if kind == b"D":
                    pids.append(int(msg[6:].decode()))
                if kind == b"Z":
                    break
        settle()
        logged_in = sum(pss_kib(p) for p in pids) / n
        for c in conns:
            query(c, QUERY)
        settle()
        queried = sum(pss_kib(p) for p in pids) / n
        for s in conns + [setup]:
            s.close()
        return {"logged in, idle": logged_in, "after one query each, idle": queried,
                "silent socket (no startup packet)": None, "base": None}
    finally:
        time.sleep(0.5)
        common.drop_pg_database(dsn, name)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rocklake-bin", required=True)
    ap.add_argument("--engine", action="append", default=[])
    ap.add_argument("--pg-dsn")
    ap.add_argument("--connections", type=int, default=250)
    ap.add_argument("--out")
    a = ap.parse_args()
    engines = a.engine or ["slatedb"]
    n = a.connections
    results = {}
    if a.pg_dsn:
        results["PostgreSQL 15 (PSS per backend)"] = measure_pg(a.pg_dsn, n)
    for e in engines:
        results[f"RockLake {e} (RSS growth / N)"] = measure_rocklake(a.rocklake_bin, e, n)
    states = ["logged in, idle", "after one query each, idle", "silent socket (no startup packet)"]
    lines = [f"Memory per connection, {n} connections, KiB",
             "", "| state | " + " | ".join(results) + " |",
             "|---|" + "---|" * len(results)]
    for st in states:
        cells = []
        for r in results.values():
            v = r[st]
            cells.append("n/a" if v is None else f"{v:,.0f}")
        lines.append(f"| {st} | " + " | ".join(cells) + " |")
    bases = [f"{k}: {v['base']:,} KiB" for k, v in results.items() if v["base"] is not None]
    if bases:
        lines += ["", "Server RSS before the connections: " + "; ".join(bases)]
    text = "\n".join(lines)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
