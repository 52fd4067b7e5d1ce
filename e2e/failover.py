"""Failover: two `rocklake serve --standby` on one SlateDB store, the writer made to fail while
8 DuckDB clients commit, the standby takes over (#24 items 1-2).

usage: python failover.py --rocklake-bin PATH --store-url URL [--ext-dir DIR] [--rounds N]
                          [--kinds kill,stop,cut] [--lease-ms N] [--clients N] [--pause-ms N]
                          [--seed N]

The store is a new one under --store-url (`s3://bucket/prefix` on the S3 emulator, which
AWS_ENDPOINT_URL names, or `file:///folder`); its URL gets `lease_ms`. Two servers run on it
with `--standby`: the first becomes the writer, the second serves reads and waits. Each
server reaches the emulator through a TCP relay of its own, so that it can be cut off from
the store alone.

The clients attach with one libpq string naming both servers and `target_session_attrs=
read-write`, so libpq finds whichever is the writer; a client whose connection fails opens a
new DuckDB connection and attaches again. Each commits values of its own, one per
transaction, a row in each of two tables, and records a value as acknowledged only once
DuckDB's COMMIT returned.

Each round fails the current writer in one way, while the clients commit:
- kill: SIGKILL; the killed server is started again as the standby;
- stop: SIGSTOP for three leases, then SIGCONT: the resumed server must acknowledge nothing
  (its lease ran out while it was paused, and the new writer fenced it) and serve reads as the
  standby. A paused server's sessions hang until it resumes (its kernel still acknowledges
  their packets, so no TCP timeout ends them); it then closes them at once and their clients
  reconnect, so this kind's failover time includes the pause;
- cut: its relay to the emulator refuses and resets every connection for three leases, then
  lets them through again (S3 only): the server stops answering as the writer when its lease
  runs out, and serves reads as the standby once it reaches the store again.

The round's failover time is from the failure to the first commit acknowledged that began
after it (so on the new writer). At the end, on the last writer: every acknowledged value is
present in both tables, no value is present that no client tried, no value is in one table
only, and `rocklake verify` is clean. It prints each kind's failover time (median, max).
"""
import argparse
import os
import random
import select
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

KINDS = ("kill", "stop", "cut")


class Relay:
    """A TCP relay on 127.0.0.1 to `target` that can be cut: while cut, it resets every
    connection it holds and every new one."""

    def __init__(self, target):
        self.target = target
        self.cut = False
        self.lock = threading.Lock()
        self.conns = []
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(128)
        self.port = self.sock.getsockname()[1]
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _reset(self, s):
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            s.close()
        except OSError:
            pass

    def _accept(self):
        while not self.closed:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            if self.cut:
                self._reset(c)
                continue
            try:
                u = socket.create_connection(self.target, timeout=5)
            except OSError:
                self._reset(c)
                continue
            with self.lock:
                self.conns += [c, u]
            threading.Thread(target=self._pump, args=(c, u), daemon=True).start()

    def _pump(self, a, b):
        socks = [a, b]
        try:
            while not self.cut:
                r, _, _ = select.select(socks, [], [], 0.2)
                for s in r:
                    data = s.recv(65536)
                    if not data:
                        raise OSError("closed")
                    (b if s is a else a).sendall(data)
        except OSError:
            pass
        for s in socks:
            self._reset(s)
        with self.lock:
            self.conns = [s for s in self.conns if s not in socks]

    def set_cut(self, cut):
        self.cut = cut
        if cut:
            with self.lock:
                conns, self.conns = self.conns, []
            for s in conns:
                self._reset(s)

    def close(self):
        self.closed = True
        self.set_cut(True)
        self.sock.close()


class StandbyServer(common.Server):
    """`rocklake serve URL --standby`, reaching the emulator through its own relay."""

    def __init__(self, binary, url, log_path, relay):
        super().__init__(binary, url, log_path, extra_args=["--standby"])
        self.relay = relay

    def start(self, timeout=60.0):
        saved = os.environ.get("AWS_ENDPOINT_URL")
        if self.relay:
            os.environ["AWS_ENDPOINT_URL"] = f"http://127.0.0.1:{self.relay.port}"
        try:
            return super().start(timeout)
        finally:
            if saved is not None:
                os.environ["AWS_ENDPOINT_URL"] = saved

    def role(self):
        """'writer' or 'standby' by the last role line of its log since its last start."""
        with open(self.log_path, errors="replace") as f:
            text = f.read()
        text = text[text.rfind("rocklake serve: "):]
        last, role = -1, None
        for marker, r in (("(writer;", "writer"), ("(standby:", "standby"),
                          ("took the store over: serving as its writer", "writer"),
                          ("no longer the store's writer", "standby"),
                          ("serving reads again", "standby")):
            i = text.rfind(marker)
            if i > last:
                last, role = i, r
        return role


def client_process(a):
    """One client process: attach (trying again until a writer answers), then commit values
    from --start on; print `try V` before each transaction and `ack V BEGAN DONE` (monotonic
    seconds) once its COMMIT returned. After a failure it opens a new DuckDB connection and
    attaches again. DuckDB's postgres extension may abort the whole process when it rolls back
    on a connection that went away; the parent then starts a new one."""
    def attach():
        while True:
            try:
                con = common.duck(a.ext_dir, threads=1)
                con.execute(common.attach_sql(a.catalog, a.data_path))
                return con
            except Exception as e:  # noqa: BLE001 - no writer yet: try again
                print(f"error {one_line(e)}", flush=True)
                time.sleep(0.05)
    con = attach()
    v = a.start
    while True:
        print(f"try {v}", flush=True)
        began = time.monotonic()
        try:
            con.execute("BEGIN TRANSACTION")
            con.execute(f"INSERT INTO lake.main.f{a.client} VALUES ({v})")
            con.execute(f"INSERT INTO lake.main.g{a.client} VALUES ({v}, 'value {v}')")
            con.execute("COMMIT")
        except Exception as e:  # noqa: BLE001 - the server failed: a new connection
            print(f"error {one_line(e)}", flush=True)
            try:
                con.close()
            except Exception:  # noqa: BLE001
                pass
            con = attach()
            v += 1
            continue
        print(f"ack {v} {began} {time.monotonic()}", flush=True)
        v += 1
        time.sleep(a.pause_ms / 1000)


def one_line(e):
    text = str(e).strip()
    return text.splitlines()[0][:100] if text else type(e).__name__


class Client(threading.Thread):
    """Keeps one client process running (a new one after each failure) and gathers what it
    printed."""

    def __init__(self, n, a, dsn, data_path, stop):
        super().__init__(daemon=True)
        self.n, self.a, self.dsn, self.data_path, self.stop = n, a, dsn, data_path, stop
        self.acked = []      # (value, began, acknowledged) on the monotonic clock
        self.tried = set()
        self.errors = {}
        self.processes = 0
        self.proc = None

    def run(self):
        v = self.n * 1_000_000_000 + 1
        while not self.stop.is_set():
            self.processes += 1
            self.proc = subprocess.Popen(
                [sys.executable, __file__, "--client", str(self.n), "--catalog", self.dsn,
                 "--data-path", self.data_path, "--start", str(v), "--ext-dir", self.a.ext_dir,
                 "--pause-ms", str(self.a.pause_ms),
                 "--rocklake-bin", "-", "--store-url", "-"],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for line in self.proc.stdout:
                word, _, rest = line.strip().partition(" ")
                if word == "try":
                    self.tried.add(int(rest))
                    v = int(rest) + 1
                elif word == "ack":
                    val, began, done = rest.split()
                    self.acked.append((int(val), float(began), float(done)))
                else:
                    key = rest if word == "error" else line.strip()[:100]
                    self.errors[key] = self.errors.get(key, 0) + 1
            self.proc.wait()
            if self.proc.returncode not in (0, None) and not self.stop.is_set():
                key = f"client process ended with {self.proc.returncode}"
                self.errors[key] = self.errors.get(key, 0) + 1

    def end(self):
        self.stop.set()
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
        self.join(30)


def wait_for(what, cond, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rocklake-bin", required=True)
    ap.add_argument("--store-url", required=True,
                    help="s3://bucket/prefix (the emulator AWS_ENDPOINT_URL names) or file:///folder")
    ap.add_argument("--ext-dir", default=common.DEFAULT_EXT_DIR)
    ap.add_argument("--rounds", type=int, default=3, help="rounds of each kind")
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--lease-ms", type=int, default=2000,
                    help="the store's lease_ms (2 s: a 1 s lease ran out now and then on the "
                         "emulator under this load in a debug build, with no failure)")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--pause-ms", type=int, default=50,
                    help="each client's pause after a commit (8 clients committing flat out "
                         "on 2 cores starve the emulator, and with it the lease's renewals)")
    ap.add_argument("--seed", type=int)
    ap.add_argument("--client", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--catalog", help=argparse.SUPPRESS)
    ap.add_argument("--data-path", help=argparse.SUPPRESS)
    ap.add_argument("--start", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.client is not None:
        return client_process(a)
    kinds = [k for k in a.kinds.split(",") if k]
    for k in kinds:
        if k not in KINDS:
            ap.error(f"unknown kind {k!r}; known: {', '.join(KINDS)}")
    on_s3 = a.store_url.startswith("s3://")
    if "cut" in kinds and not on_s3:
        ap.error("the cut kind needs an s3:// store (the relay stands between a server and the "
                 "emulator)")
    if on_s3 and not os.environ.get("AWS_ENDPOINT_URL"):
        ap.error("an s3:// store needs AWS_ENDPOINT_URL (the emulator)")
    common.exit_on_sigterm()
    common.ensure_extensions(a.ext_dir)
    seed = a.seed if a.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    tmp = tempfile.mkdtemp(prefix="rocklake-failover-")
    data_path = os.path.join(tmp, "data")
    os.makedirs(data_path)
    base, _, options = a.store_url.partition("?")
    store = f"{base.rstrip('/')}/failover-{uuid.uuid4().hex[:12]}"
    opts = [o for o in options.split("&") if o] + [f"lease_ms={a.lease_ms}"]
    url = f"{store}?{'&'.join(opts)}"
    lease = a.lease_ms / 1000
    relays = []
    if on_s3:
        target = urllib.parse.urlparse(os.environ["AWS_ENDPOINT_URL"])
        relays = [Relay((target.hostname, target.port or 80)) for _ in range(2)]
    servers = [StandbyServer(a.rocklake_bin, url, os.path.join(tmp, f"serve-{i}.log"),
                             relays[i] if relays else None) for i in range(2)]
    print(f"failover: {url}, kinds {','.join(kinds)}, {a.rounds} rounds each, lease "
          f"{a.lease_ms} ms, {a.clients} clients, seed {seed}, work folder {tmp}", flush=True)
    stop = threading.Event()
    clients = []
    problems = []
    times = {k: [] for k in kinds}
    started = time.monotonic()
    try:
        servers[0].start()
        wait_for("the first server to become the writer", lambda: servers[0].role() == "writer", 30)
        servers[1].start()
        wait_for("the second server to be the standby", lambda: servers[1].role() == "standby", 30)
        hosts = ",".join("127.0.0.1" for _ in servers)
        ports = ",".join(str(s.port) for s in servers)
        dsn = (f"host={hosts} port={ports} dbname=lake user=duck "
               f"target_session_attrs=read-write connect_timeout=2")
        con = common.duck(a.ext_dir)
        con.execute(common.attach_sql(dsn, data_path))
        for n in range(a.clients):
            con.execute(f"CREATE TABLE lake.main.f{n}(v BIGINT)")
            con.execute(f"CREATE TABLE lake.main.g{n}(v BIGINT, label VARCHAR)")
        con.close()
        clients = [Client(n, a, dsn, data_path, stop) for n in range(a.clients)]
        for c in clients:
            c.start()

        def acks():
            return sum(len(c.acked) for c in clients)

        schedule = [k for k in kinds for _ in range(a.rounds)]
        rng.shuffle(schedule)
        for rnd, kind in enumerate(schedule, 1):
            wait_for(f"round {rnd}: a server to be the writer",
                     lambda: any(s.role() == "writer" for s in servers), 30)
            writer = next(s for s in servers if s.role() == "writer")
            other = servers[1 - servers.index(writer)]
            before = acks()
            wait_for(f"round {rnd}: three commits on the writer", lambda: acks() >= before + 3, 60)
            time.sleep(rng.uniform(0, 0.3))
            failed_at = time.monotonic()
            mend = None
            if kind == "kill":
                writer.kill9()
            elif kind == "stop":
                writer.proc.send_signal(signal.SIGSTOP)
                mend = threading.Timer(3 * lease, writer.proc.send_signal, [signal.SIGCONT])
            else:
                writer.relay.set_cut(True)
                mend = threading.Timer(3 * lease, writer.relay.set_cut, [False])
            if mend:
                mend.start()
            wait_for(f"round {rnd} ({kind}): the standby to take over",
                     lambda: other.role() == "writer", 30 + 5 * lease)
            wait_for(f"round {rnd} ({kind}): a commit on the new writer",
                     lambda: any(b > failed_at for c in clients for (_, b, _) in c.acked[-50:]),
                     60)
            first = min(t for c in clients for (_, b, t) in c.acked if b > failed_at)
            took = first - failed_at
            times[kind].append(took)
            # The failed server comes back as the standby.
            if kind == "kill":
                writer.start()  # on the same port: the clients' string names it
            else:
                mend.join()
            wait_for(f"round {rnd} ({kind}): the failed server to serve as the standby",
                     lambda: writer.role() == "standby", 60)
            print(f"round {rnd}: {kind}, failover {took * 1000:.0f} ms, {acks()} commits "
                  f"acknowledged so far", flush=True)
        for c in clients:
            c.end()
        writer = next((s for s in servers if s.role() == "writer"), None)
        if writer is None:
            raise RuntimeError("no server is the writer at the end")
        con = common.duck(a.ext_dir)
        con.execute(common.attach_sql(writer.dsn(), data_path))
        acked_total = 0
        kept_unacked = 0
        for c in clients:
            f = [r[0] for r in con.execute(f"SELECT v FROM lake.main.f{c.n}").fetchall()]
            g = [r[0] for r in con.execute(
                f"SELECT v FROM lake.main.g{c.n} WHERE label = 'value ' || v").fetchall()]
            fs = set(f)
            acked = {v for (v, _, _) in c.acked}
            acked_total += len(acked)
            missing = sorted(acked - fs)
            if missing:
                problems.append(f"client {c.n}: {len(missing)} acknowledged commits are missing, "
                                f"e.g. {missing[:5]}")
            never = sorted(fs - c.tried)
            if never:
                problems.append(f"client {c.n}: values no client tried are present: {never[:5]}")
            if sorted(f) != sorted(g):
                problems.append(f"client {c.n}: values in one table only: "
                                f"{sorted(set(f) ^ set(g))[:5]}")
            if len(f) != len(fs):
                problems.append(f"client {c.n}: {len(f) - len(fs)} duplicate rows")
            kept_unacked += len(fs - acked)
        con.close()
        for s in servers:
            s.stop()
        p = subprocess.run([a.rocklake_bin, "verify", store], capture_output=True, text=True,
                           timeout=300)
        lines = (p.stdout + p.stderr).strip().splitlines()
        if p.returncode != 0:
            problems.append(f"rocklake verify exited {p.returncode}: {lines[-3:]}")
        # A writer gives its lease up on a successor's record (or SlateDB's fencing) only if
        # the successor came while the lease still ran: a standby that took a working writer's
        # store. A lease that ran out first says so first ("could not renew ... then ...").
        takeovers = lapses = 0
        for srv in servers:
            with open(srv.log_path, errors="replace") as f:
                log = f.read()
            takeovers += log.count("took the store over: serving as its writer")
            for line in log.splitlines():
                if "no longer the store's writer" not in line:
                    continue
                why = line.partition("why=writer lease lapsed: ")[2]
                if why.startswith(("another writer took the store over", "SlateDB fenced")):
                    problems.append(f"a standby took the store while its writer's lease ran: "
                                    f"{line[:300]}")
                elif why.startswith("this writer could not renew"):
                    lapses += 1
        # Each round's failure ends one lease; the rest ran out under this load with no failure.
        print(f"{takeovers} takeovers in {len(schedule)} rounds; {lapses} leases ran out "
              f"(stop and cut rounds, and any that could not be renewed in time under load)")
        errors = {}
        for c in clients:
            for k, n in c.errors.items():
                errors[k] = errors.get(k, 0) + n
        print(f"{acked_total} commits acknowledged, all present: "
              f"{'no' if any('missing' in p for p in problems) else 'yes'}; {kept_unacked} "
              f"present whose COMMIT failed (in doubt when the server went away); verify: "
              f"{lines[-1] if lines else ''}")
        for k, n in sorted(errors.items(), key=lambda kv: -kv[1])[:6]:
            print(f"  client errors: {n} x {k}")
        print(f"client processes started: {sum(c.processes for c in clients)}")
        for k in kinds:
            ms = [t * 1000 for t in times[k]]
            if ms:
                print(f"failover after {k}: {len(ms)} rounds, median {statistics.median(ms):.0f} "
                      f"ms, max {max(ms):.0f} ms")
    except Exception as e:  # noqa: BLE001 - report with the logs
        problems.append(f"{type(e).__name__}: {e}")
    finally:
        for c in clients:
            c.end()
        for s in servers:
            if s.proc and s.proc.poll() is None:
                s.proc.send_signal(signal.SIGCONT)
            s.stop()
        for r in relays:
            r.close()
    for p in problems:
        print(f"PROBLEM: {p}")
    if problems:
        for s in servers:
            print(f"--- tail of {s.log_path}:\n{common.tail(s.log_path)}")
    print(f"failover: {time.monotonic() - started:.0f} s, "
          + ("passed" if not problems else "FAILED"))
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
