"""Helpers shared by run.py, concurrency.py and crash.py: ports, libpq strings, PostgreSQL
databases, and starting/stopping `rocklake serve`."""
import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_EXT_DIR = os.path.join(os.environ.get("TMPDIR", "/tmp"), "rocklake-e2e-ext")
# Engine name -> URL scheme prefix of `rocklake serve URL`; the folder is appended.
ENGINE_SCHEMES = {"slatedb": "file://", "sled": "sled://", "rocksdb": "rocksdb://"}


def engine_url(engine, folder):
    if engine not in ENGINE_SCHEMES:
        raise SystemExit(f"unknown engine {engine!r}; known: {', '.join(ENGINE_SCHEMES)}")
    return ENGINE_SCHEMES[engine] + os.path.abspath(folder)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parse_dsn(dsn):
    """A libpq key=value string as a dict (plain values only: no quoting, no spaces)."""
    out = {}
    for part in dsn.split():
        k, _, v = part.partition("=")
        out[k] = v
    return out


def format_dsn(d):
    return " ".join(f"{k}={v}" for k, v in d.items())


def with_dbname(dsn, dbname):
    d = parse_dsn(dsn)
    d["dbname"] = dbname
    return format_dsn(d)


def psql_path():
    # Prefer the real binary over Debian's pg_wrapper, which wants a configured cluster.
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/psql")) or [shutil.which("psql")]
    if not found[-1]:
        raise SystemExit("psql not found (needed to create PostgreSQL databases)")
    return found[-1]


def psql(dsn, *sql):
    """Run statements one by one (CREATE DATABASE may not run inside a transaction block)."""
    cmd = [psql_path(), dsn, "-X", "-q", "-v", "ON_ERROR_STOP=1"]
    for s in sql:
        cmd += ["-c", s]
    env = dict(os.environ, PGOPTIONS="-c client_min_messages=warning")  # no "does not exist" notices
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)


def psql_rows(dsn, sql):
    """One query's rows as psql prints them unaligned (`-A -t`)."""
    p = subprocess.run([psql_path(), dsn, "-X", "-A", "-t", "-c", sql],
                       capture_output=True, text=True, check=True)
    return p.stdout


def rocklake(binary, *argv, fail=False, timeout=900):
    """Run the rocklake command. Returns (stdout, stderr); raises RuntimeError when the exit
    code is not what `fail` asks for."""
    p = subprocess.run([binary, *argv], capture_output=True, text=True, timeout=timeout)
    if (p.returncode != 0) != fail:
        raise RuntimeError(f"rocklake {' '.join(argv[:2])} exited with {p.returncode} "
                           f"({'a failure' if fail else 'success'} was expected):\n"
                           f"{p.stdout[-2000:]}{p.stderr[-2000:]}")
    return p.stdout, p.stderr


def create_pg_database(admin_dsn, name):
    psql(admin_dsn, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)", f"CREATE DATABASE {name}")
    return with_dbname(admin_dsn, name)


def drop_pg_database(admin_dsn, name):
    try:
        psql(admin_dsn, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    except subprocess.CalledProcessError as e:
        print(f"warning: could not drop database {name}: {e}", file=sys.stderr)


def ensure_extensions(ext_dir):
    sys.path.insert(0, HERE)
    import setup_ext
    setup_ext.setup(ext_dir)


def tail(path, lines=40):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError as e:
        return f"(no log: {e})"


class Server:
    """`BIN serve URL --listen 127.0.0.1:PORT`, stdout+stderr into a log file."""

    def __init__(self, binary, url, log_path, port=None, extra_args=()):
        self.binary, self.url, self.log_path = binary, url, log_path
        self.extra_args = list(extra_args)
        self.port = port or free_port()
        self.proc = None

    def dsn(self, user="duck", dbname="lake"):
        return f"host=127.0.0.1 port={self.port} user={user} dbname={dbname}"

    def start(self, timeout=60.0):
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [self.binary, "serve", self.url, "--listen", f"127.0.0.1:{self.port}"]
            + self.extra_args,
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode} before listening; "
                                   f"log {self.log_path}:\n{tail(self.log_path)}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return self
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"server not listening on {self.port} after {timeout:.0f} s; "
                           f"log {self.log_path}:\n{tail(self.log_path)}")

    def kill9(self):
        """SIGKILL, no chance to flush: what crash.py simulates."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self):
        """SIGTERM, then SIGKILL after 10 s; safe to call twice."""
        if not self.proc or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.kill9()


def duck(ext_dir, **config):
    """A DuckDB connection that loads the extensions installed in `ext_dir` (never downloads)."""
    import duckdb
    return duckdb.connect(config={"extension_directory": os.path.abspath(ext_dir),
                                  "autoinstall_known_extensions": False,
                                  "autoload_known_extensions": True, **config})


def attach_sql(catalog, data_path):
    """DuckLake's ATTACH of the catalog at libpq string `catalog`, data under `data_path`."""
    return f"ATTACH 'ducklake:postgres:{catalog}' AS lake (DATA_PATH '{data_path}/')"


def exit_on_sigterm():
    """Turn SIGTERM into SystemExit so `finally:` blocks stop the servers we started."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
