"""A served catalog backed up while DuckDB clients commit, restored and read back (#23 item 4).

usage: python backup.py --rocklake-bin PATH --engine sled [--engine ...] [--ext-dir DIR]
                        [--writers 8] [--seconds 6] [--s3-prefix s3://bucket/prefix] [--keep]

For each engine: `rocklake serve` on a new store; DuckDB creates a table; 8 DuckDB clients (threads,
one connection each) commit one-row inserts until told to stop. Midway, `rocklake backup` takes
the store through the server's address into a new SlateDB store, on a folder or with
`--s3-prefix` in a bucket (for SlateDB also straight from the store folder, beside its running
server). Then the clients stop, `rocklake restore` copies
the backup into a new store of the engine, `rocklake verify` must find it clean, and a second
server serves it beside the first:

- its snapshots are exactly the original's up to the snapshot the backup reported, none after;
- at every one of them (time travel) the table reads the same as on the original;
- every commit a client was told succeeded before the backup began is in it, and no commit
  that began after the backup ended;
- a plain table (20,000 rows, so that the server sends its pairs in several pages) is equal;
- DuckDB keeps writing to it.

Refused, changing nothing: a backup into a store that is not empty, a restore from a server's
address, and (sled, RocksDB) a backup of a store folder its server holds, which names the way
that works.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def cli(args, *argv, fail=False):
    return common.rocklake(args.rocklake_bin, *argv, fail=fail)


psql_rows = common.psql_rows


def writer(args, dsn, data_path, w, stop, acked, errors):
    """Commit (w, seq) one row at a time until `stop`; note each acknowledged commit's start
    and acknowledgement times."""
    try:
        con = common.duck(args.ext_dir, threads=1)
        con.execute(common.attach_sql(dsn, data_path))
    except Exception as e:  # noqa: BLE001 - reported as a problem
        errors.append(f"writer {w} attach: {e}".splitlines()[0])
        return
    seq = 0
    while not stop.is_set():
        began = time.monotonic()
        try:
            con.execute(f"INSERT INTO lake.main.t VALUES ({w}, {seq})")
            acked.append((w, seq, began, time.monotonic()))
        except Exception as e:  # noqa: BLE001 - DuckLake's retries exhausted: allowed, counted
            if len(errors) < 50:
                errors.append(f"writer {w} seq {seq}: {e}".splitlines()[0][:300])
        seq += 1
    con.close()


def rows(con, version=None):
    at = f" AT (VERSION => {version})" if version is not None else ""
    return set(con.execute(f"SELECT w, seq FROM lake.main.t{at}").fetchall())


def digest(con, version):
    return con.execute("SELECT count(*), sum(w * 1000000 + seq) FROM lake.main.t "
                       f"AT (VERSION => {version})").fetchone()


def snapshots(con):
    return con.execute("SELECT snapshot_id, snapshot_time, changes FROM lake.snapshots() "
                       "ORDER BY snapshot_id").fetchall()


def one_engine(args, engine, tmp):
    """Returns a list of problems (empty: passed) and prints what it saw."""
    problems = []
    url = common.engine_url(engine, os.path.join(tmp, f"{engine}-store"))
    data_path = os.path.join(tmp, f"{engine}-data")
    os.makedirs(data_path)
    server = common.Server(args.rocklake_bin, url, os.path.join(tmp, f"{engine}-serve.log"))
    server.start()
    restored_server = None
    try:
        con = common.duck(args.ext_dir)
        con.execute(common.attach_sql(server.dsn(), data_path))
        con.execute("CREATE TABLE lake.main.t (w INTEGER, seq INTEGER)")
        created = con.execute("SELECT max(snapshot_id) FROM lake.snapshots()").fetchone()[0]
        # A plain table beside DuckLake's (as DuckDB's postgres extension makes them), so the
        # store holds some 40,000 pairs: the server sends them in several pages.
        common.psql(server.dsn(), "CREATE TABLE filler (id BIGINT PRIMARY KEY, v TEXT)",
                    "INSERT INTO filler SELECT value, 'x' || value FROM generate_series(1, 20000)")

        stop, acked, errors = threading.Event(), [], []
        threads = [threading.Thread(target=writer, args=(args, server.dsn(), data_path, w, stop,
                                                         acked, errors))
                   for w in range(args.writers)]
        for t in threads:
            t.daemon = True
            t.start()
        try:
            time.sleep(args.seconds / 2)
            dest = (f"{args.s3_prefix.rstrip('/')}/{engine}-backup" if args.s3_prefix else
                    common.engine_url("slatedb", os.path.join(tmp, f"{engine}-backup")))
            b_start = time.monotonic()
            out, _ = cli(args, "--json", "backup", server.dsn(), dest)
            b_end = time.monotonic()
            backup = json.loads(out.strip().splitlines()[-1])
            beside = None
            if engine == "slatedb":  # a SlateDB store is read beside its server, too
                other = next((e for e in args.engine if e != "slatedb"), "slatedb")
                beside_dest = common.engine_url(other, os.path.join(tmp, f"{engine}-beside"))
                out, _ = cli(args, "--json", "backup", url, beside_dest)
                beside = (beside_dest, json.loads(out.strip().splitlines()[-1]))
            time.sleep(args.seconds / 2)
        finally:
            stop.set()
            for t in threads:
                t.join()
        if len(acked) < args.writers:
            problems.append(f"only {len(acked)} commits acknowledged: {errors[:3]}")

        # Refusals that change nothing.
        _, err = cli(args, "backup", server.dsn(), dest, fail=True)
        if "not empty" not in err:
            problems.append(f"a backup into a full store was not refused as such: {err.strip()}")
        _, err = cli(args, "restore", server.dsn(), dest, fail=True)
        if "server's address" not in err:
            problems.append(f"a restore from a server was not refused as such: {err.strip()}")
        if engine != "slatedb":
            held = common.engine_url(engine, os.path.join(tmp, f"{engine}-store"))
            _, err = cli(args, "backup", held, os.path.join("file://" + tmp, "never"),
                         fail=True)
            if "name the server" not in err or os.path.exists(os.path.join(tmp, "never")):
                problems.append(f"a backup of a held {engine} folder: {err.strip()}")

        restored_url = common.engine_url(engine, os.path.join(tmp, f"{engine}-restored"))
        cli(args, "restore", dest, restored_url)
        verify, _ = cli(args, "verify", restored_url)
        verify = verify.strip().splitlines()[-1]
        if "clean" not in verify:
            problems.append(f"verify of the restored store: {verify}")
        restored_server = common.Server(args.rocklake_bin, restored_url,
                                        os.path.join(tmp, f"{engine}-restored.log")).start()
        rcon = common.duck(args.ext_dir)
        rcon.execute(common.attach_sql(restored_server.dsn(), data_path))

        orig_snaps, got_snaps = snapshots(con), snapshots(rcon)
        n = backup["snapshot"]
        if not got_snaps or got_snaps[-1][0] != n:
            problems.append(f"the backup reported snapshot {n}, the restored catalog's last is "
                            f"{got_snaps[-1][0] if got_snaps else None}")
        if got_snaps != [s for s in orig_snaps if s[0] <= n]:
            problems.append(f"restored snapshots differ from the original's up to {n}: "
                            f"{len(got_snaps)} against {len([s for s in orig_snaps if s[0] <= n])}")
        later = [s[0] for s in orig_snaps if s[0] > n]
        differ = [v for v in range(created, n + 1) if digest(con, v) != digest(rcon, v)]
        if differ:
            problems.append(f"time travel differs at {len(differ)} snapshots, first {differ[:5]}")

        now = rows(rcon)
        before = {(w, s) for w, s, _, ack in acked if ack < b_start}
        after = {(w, s) for w, s, began, _ in acked if began > b_end}
        during = {(w, s) for w, s, began, ack in acked if ack >= b_start and began <= b_end}
        missing, extra = before - now, after & now
        if missing:
            problems.append(f"{len(missing)} commits acknowledged before the backup began are "
                            f"missing from it, e.g. {sorted(missing)[:3]}")
        if extra:
            problems.append(f"{len(extra)} commits begun after the backup ended are in it, "
                            f"e.g. {sorted(extra)[:3]}")
        unknown = now - {(w, s) for w, s, _, _ in acked}
        if unknown:
            problems.append(f"rows no client was told of: {sorted(unknown)[:3]}")

        filler = "SELECT count(*), sum(id), min(v), max(v) FROM filler"
        if psql_rows(restored_server.dsn(), filler) != psql_rows(server.dsn(), filler):
            problems.append(f"the plain table differs: {psql_rows(restored_server.dsn(), filler)}")
        rcon.execute("INSERT INTO lake.main.t VALUES (-1, 0)")
        after_write = rcon.execute("SELECT max(snapshot_id) FROM lake.snapshots()").fetchone()[0]
        if (-1, 0) not in rows(rcon) or after_write <= n:
            problems.append(f"a write to the restored catalog: snapshot {after_write}, "
                            f"row {'there' if (-1, 0) in rows(rcon) else 'missing'}")
        if beside:
            bcon_server = None
            try:
                bcon_server = common.Server(args.rocklake_bin, beside[0], os.path.join(
                    tmp, f"{engine}-beside.log"), extra_args=["--read-only"]).start()
                bcon = common.duck(args.ext_dir)
                bcon.execute(common.attach_sql(bcon_server.dsn(), data_path))
                m = beside[1]["snapshot"]
                if snapshots(bcon) != [s for s in orig_snaps if s[0] <= m]:
                    problems.append(f"the backup read beside the server (snapshot {m}) differs")
                bcon.close()
            finally:
                if bcon_server:
                    bcon_server.stop()
        print(f"backup: {engine}: {len(acked)} commits by {args.writers} DuckDB clients "
              f"({len(errors)} failed after DuckLake's retries); backup of snapshot {n} through "
              f"the server: {backup['keys']} pairs in {backup['seconds']:.2f} s while "
              f"{len(during)} commits were under way ({len(during & now)} of them in it); "
              f"{len(later)} snapshots after it, none restored; {len(before)} earlier commits "
              f"all in it; time travel to {n - created + 1} snapshots equal; verify: {verify}"
              + (f"; beside the server: snapshot {beside[1]['snapshot']}, "
                 f"{beside[1]['keys']} pairs" if beside else ""), flush=True)
        rcon.close()
        con.close()
    finally:
        server.stop()
        if restored_server:
            restored_server.stop()
    return problems


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rocklake-bin", required=True)
    ap.add_argument("--engine", action="append", default=[], choices=sorted(common.ENGINE_SCHEMES))
    ap.add_argument("--ext-dir", default=common.DEFAULT_EXT_DIR)
    ap.add_argument("--writers", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--s3-prefix", help="back up into SlateDB stores under this s3:// prefix "
                    "(credentials and endpoint from AWS_*) instead of folders")
    ap.add_argument("--keep", action="store_true", help="keep the temp folder")
    args = ap.parse_args()
    if not args.engine:
        ap.error("at least one --engine is required")
    common.exit_on_sigterm()
    common.ensure_extensions(args.ext_dir)
    tmp = tempfile.mkdtemp(prefix="rocklake-backup-")
    failures = []
    try:
        for engine in args.engine:
            for p in one_engine(args, engine, tmp):
                failures.append(f"{engine}: {p}")
    finally:
        if args.keep or failures:
            print(f"backup: files kept in {tmp}", flush=True)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print("backup: FAILED\n  " + "\n  ".join(failures), flush=True)
        sys.exit(1)
    print(f"backup: passed on {', '.join(args.engine)}", flush=True)


if __name__ == "__main__":
    main()
