"""A DuckLake catalog moved from PostgreSQL into RockLake and back out (#23 items 1-3).

usage: python migrate.py --pg-dsn "host=127.0.0.1 port=N user=postgres dbname=postgres"
                         --rocklake-bin PATH --engine sled [--engine ...] [--ext-dir DIR] [--keep]
                         [--s3-prefix s3://bucket/prefix] [--no-embedded | --only-embedded]

The e2e workload (workload.py) builds a lake on a fresh PostgreSQL database; DuckDB then reads
everything it keeps back (every snapshot's time travel, table_changes, snapshots(), table info,
the metadata tables' counts: workload.py's "reread" phase), which is the reference. For each
engine, `rocklake import` copies the catalog into a new store and `rocklake serve` serves it:
DuckDB must read the same answers there. `rocklake export` then writes the store into another
fresh PostgreSQL database (on SlateDB while its server keeps serving): every table must equal
the source's row for row, and DuckDB must read the same answers on it too. Last, DuckDB writes
to the imported catalog (a new table, an insert) and reads its writes back.

The same for DuckLake's embedded catalogs: the workload builds a lake on a SQLite file; each
engine imports it, serves it (DuckDB must read the SQLite catalog's answers) and exports it into a
new SQLite file, which must equal the source table by table, value for value (storage classes
included), and give the same answers again. And a lake built on a DuckDB file moves the way the
README says: DuckDB copies the metadata database into SQLite (`COPY FROM DATABASE`), which the
first engine imports and serves (the DuckDB file's answers). `--no-embedded` leaves these out.

While DuckDB keeps committing to the source, an import into the first engine copies one
snapshot of it: at least every commit acknowledged before it began, none begun after it ended,
every table equal to the source at that snapshot, nothing of a later commit, `verify` clean.

Bad sources are refused before anything is written, or with nothing left behind: a database
without a DuckLake catalog, a catalog of a newer DuckLake version, a table RockLake cannot
create, and a row it cannot take in the table loaded last (after every other table's rows were
committed); the store then takes the good import. An export into a schema
that holds the tables is refused and leaves it as it was.
"""
import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import run as e2e  # noqa: E402
import workload  # noqa: E402


def cli(args, *argv, fail=False):
    return common.rocklake(args.rocklake_bin, *argv, fail=fail)


psql_rows = common.psql_rows


def table_names(dsn):
    return psql_rows(dsn, "SELECT relname FROM pg_class c JOIN pg_namespace n ON "
                          "n.oid = c.relnamespace WHERE nspname = 'public' AND relkind = 'r' "
                          "ORDER BY 1").split()


def table_text(dsn, table):
    """Every row of a table in PostgreSQL's COPY text, sorted by all of its columns."""
    n = int(psql_rows(dsn, f"SELECT count(*) FROM information_schema.columns "
                           f"WHERE table_schema = 'public' AND table_name = '{table}'"))
    order = ", ".join(str(i + 1) for i in range(n))
    return psql_rows(dsn, f"COPY (SELECT * FROM public.\"{table}\" ORDER BY {order}) TO STDOUT")


def same_tables(a, b):
    """The tables that differ between two databases (by name set and row for row)."""
    ta, tb = table_names(a), table_names(b)
    if ta != tb:
        return [f"table sets differ: only in source {sorted(set(ta) - set(tb))}, "
                f"only in export {sorted(set(tb) - set(ta))}"]
    return [t for t in ta if table_text(a, t) != table_text(b, t)]


def expect_refusal(args, argv, words):
    """A command that must fail, saying `words`."""
    _, err = cli(args, *argv, fail=True)
    if words not in err:
        raise RuntimeError(f"rocklake {argv[0]} failed without saying {words!r}:\n{err[-1500:]}")
    print(f"migrate: refused as it must: {err.strip().splitlines()[-1][:200]}", flush=True)


def changed_copy(args, src, name, dbs, *sql):
    """A new database made from the source's, then changed by `sql`; its libpq string."""
    dbs.append(name)
    common.psql(args.pg_dsn, f"CREATE DATABASE {name} TEMPLATE {src}")
    dsn = common.with_dbname(args.pg_dsn, name)
    common.psql(dsn, *sql)
    return dsn


def bad_sources(args, tag, src, url, dbs):
    """The refusals; each leaves `url` without a catalog (the caller's import proves it)."""
    empty = f"mig_empty_{tag}"
    dbs.append(empty)
    expect_refusal(args, ["import", common.create_pg_database(args.pg_dsn, empty), url],
                   "holds no DuckLake catalog")
    newer = changed_copy(args, src, f"mig_newer_{tag}", dbs,
                         "UPDATE ducklake_metadata SET value = '9.9' WHERE key = 'version'")
    expect_refusal(args, ["import", newer, url], "is version 9.9")
    # A table RockLake cannot create: refused before any row is written.
    shape = changed_copy(args, src, f"mig_shape_{tag}", dbs, "CREATE TABLE zz_extra (p point)")
    expect_refusal(args, ["import", shape, url], "creating table zz_extra")
    # A row RockLake cannot take (a numeric NaN), in the table made last: every other table's
    # rows are committed first, and then removed again.
    late = changed_copy(args, src, f"mig_late_{tag}", dbs,
                        "CREATE TABLE zz_extra (n numeric(10, 2))",
                        "INSERT INTO zz_extra VALUES (1.5), ('NaN')")
    expect_refusal(args, ["import", late, url], "what it had written was removed")


def store_url(args, engine, tmp, name):
    """Where `engine`'s store for `name` goes: under --s3-prefix for SlateDB when given (an
    import into a bucket), else a folder in `tmp`."""
    if engine == "slatedb" and args.s3_prefix:
        return f"{args.s3_prefix.rstrip('/')}/{engine}-{name}"
    return common.engine_url(engine, os.path.join(tmp, f"{engine}-{name}"))


def sqlite_rows(path):
    """Every table of a SQLite file: its rows sorted, each value beside its storage class."""
    con = sqlite3.connect(path)
    try:
        out = {}
        for (name,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table' "
                                   "ORDER BY name").fetchall():
            cols = [r[1] for r in con.execute(f'PRAGMA table_info("{name}")')]
            sel = ", ".join(f'typeof("{c}"), "{c}"' for c in cols)
            out[name] = sorted(repr(r) for r in con.execute(f'SELECT {sel} FROM "{name}"'))
        return out
    finally:
        con.close()


def sqlite_differs(a, b):
    """The tables that differ between two SQLite files (by name set and row for row)."""
    ta, tb = sqlite_rows(a), sqlite_rows(b)
    if set(ta) != set(tb):
        return [f"table sets differ: only in source {sorted(set(ta) - set(tb))}, "
                f"only in export {sorted(set(tb) - set(ta))}"]
    return [t for t in ta if ta[t] != tb[t]]


def sqlite_scanner_installed(ext_dir):
    con = common.duck(ext_dir)
    try:
        return con.execute("SELECT count(*) FROM duckdb_extensions() WHERE extension_name = "
                           "'sqlite_scanner' AND installed").fetchone()[0] == 1
    finally:
        con.close()


def serve_and_reread(args, tmp, name, url, data_path, logs, results, timings, failures):
    """Serve the store at `url` and read the lake back through it; the running server."""
    log = os.path.join(tmp, f"{name}-serve.log")
    logs[name] = log
    server = common.Server(args.rocklake_bin, url, log).start(timeout=60)
    results[name], timings[name], problem, _ = e2e.run_workload(
        args, tmp, name, server.dsn(), "reread", data_path)
    if problem:
        failures.append((name, problem))
    return server


def embedded(args, tmp):
    """DuckLake's SQLite-file catalog into every engine and back out, and a DuckDB-file
    catalog in through SQLite; True when every answer matched."""
    if not sqlite_scanner_installed(args.ext_dir):
        if os.environ.get("CI"):
            raise RuntimeError("DuckDB's sqlite extension is not installed (e2e/requirements.txt "
                               "lists it): the SQLite catalogs cannot be tested")
        print("migrate: DuckDB's sqlite extension is not installed: SQLite catalogs skipped")
        return True
    src = os.path.join(tmp, "source.sqlite")
    results, timings, data_path = reference(args, tmp, "sqlite", src)
    logs, failures = {}, []
    for i, engine in enumerate(args.engine):
        url = store_url(args, engine, tmp, "from-sqlite")
        if i == 0:
            sqlite_refusals(args, tmp, src, url)
        t0 = time.monotonic()
        out, _ = cli(args, "--json", "import", f"sqlite:{src}", url)
        got = json.loads(out.strip().splitlines()[-1])
        print(f"migrate: {engine}: imported the SQLite catalog, {got['tables']} tables, "
              f"{got['rows']} rows in {time.monotonic() - t0:.1f} s", flush=True)
        verify, _ = cli(args, "verify", url)
        print(f"migrate: {engine}: verify: {verify.strip().splitlines()[-1]}", flush=True)
        name = f"{engine}_sqlite"
        server = serve_and_reread(args, tmp, name, url, data_path, logs, results, timings,
                                  failures)
        try:
            if engine != "slatedb":
                server.stop()
            out_file = os.path.join(tmp, f"{engine}-out.sqlite")
            t0 = time.monotonic()
            cli(args, "export", url, f"sqlite:{out_file}")
            print(f"migrate: {engine}: exported into SQLite in {time.monotonic() - t0:.1f} s",
                  flush=True)
            before = sqlite_rows(out_file)
            expect_refusal(args, ["export", url, f"sqlite:{out_file}"], "already holds")
            if sqlite_rows(out_file) != before:
                failures.append((name, "a refused export changed the target file"))
            differ = sqlite_differs(src, out_file)
            if differ:
                failures.append((name, f"the exported SQLite file differs from the source in "
                                       f"{differ[:5]}"))
            else:
                print(f"migrate: {engine}: all {len(before)} exported SQLite tables equal the "
                      f"source's value for value", flush=True)
            results[f"{engine}_sqlite_out"], timings[f"{engine}_sqlite_out"], problem, _ = \
                e2e.run_workload(args, tmp, f"{engine}_sqlite_out", f"sqlite:{out_file}",
                                 "reread", data_path)
            if problem:
                failures.append((f"{engine}_sqlite_out", problem))
        except RuntimeError as e:
            failures.append((name, str(e)))
        finally:
            server.stop()
    ok = e2e.report(results, timings, logs, failures, ref_name="sqlite")
    return duckdb_file(args, tmp) and ok


def reference(args, tmp, kind, path):
    """Build the lake on DuckLake's `kind` (sqlite, duckdb) catalog at `path` and read it
    back: the answers every copy must give ({kind: steps}), their timing, the DATA_PATH."""
    _, secs, problem, data_path = e2e.run_workload(args, tmp, f"{kind}_build", f"{kind}:{path}")
    if problem:
        raise RuntimeError(f"building the lake on a {kind} catalog: {problem}")
    results, timings = {}, {}
    results[kind], timings[kind], problem, _ = e2e.run_workload(
        args, tmp, kind, f"{kind}:{path}", "reread", data_path)
    if problem:
        raise RuntimeError(problem)
    print(f"migrate: lake built on a {kind} catalog in {secs:.1f} s", flush=True)
    return results, timings, data_path


def sqlite_refusals(args, tmp, src, url):
    """A SQLite file without a catalog, a newer catalog version and a missing file are refused,
    and leave `url` without a catalog (the caller's import proves it)."""
    empty = os.path.join(tmp, "not-a-catalog.sqlite")
    con = sqlite3.connect(empty)
    con.execute("CREATE TABLE t (a BIGINT)")
    con.commit()
    con.close()
    expect_refusal(args, ["import", f"sqlite:{empty}", url], "holds no DuckLake catalog")
    newer = os.path.join(tmp, "newer.sqlite")
    shutil.copyfile(src, newer)
    con = sqlite3.connect(newer)
    con.execute("UPDATE ducklake_metadata SET value = '9.9' WHERE key = 'version'")
    con.commit()
    con.close()
    expect_refusal(args, ["import", f"sqlite:{newer}", url], "is version 9.9")
    expect_refusal(args, ["import", f"sqlite:{tmp}/missing.sqlite", url], "no SQLite file")


def duckdb_file(args, tmp):
    """A lake on a DuckDB file, its metadata copied into SQLite by DuckDB, imported into the
    first engine: DuckDB must read the DuckDB file's answers there."""
    src = os.path.join(tmp, "source.ducklake")
    results, timings, data_path = reference(args, tmp, "duckdb", src)
    logs, failures = {}, []
    converted = os.path.join(tmp, "from-duckdb.sqlite")
    con = common.duck(args.ext_dir)
    try:
        con.execute(f"ATTACH '{src}' AS meta (READ_ONLY)")
        con.execute(f"ATTACH '{converted}' AS conv (TYPE sqlite)")
        con.execute("COPY FROM DATABASE meta TO conv")
    finally:
        con.close()
    engine = args.engine[0]
    url = store_url(args, engine, tmp, "from-duckdb")
    out, _ = cli(args, "--json", "import", f"sqlite:{converted}", url)
    got = json.loads(out.strip().splitlines()[-1])
    print(f"migrate: {engine}: imported the DuckDB file's catalog (copied into SQLite by "
          f"DuckDB), {got['tables']} tables, {got['rows']} rows", flush=True)
    name = f"{engine}_duckdb"
    server = serve_and_reread(args, tmp, name, url, data_path, logs, results, timings, failures)
    server.stop()
    return e2e.report(results, timings, logs, failures, ref_name="duckdb")


def import_while_writing(args, tmp, src_dsn, data_path):
    """The import of a catalog DuckDB keeps committing to copies one snapshot of it: at least
    every commit acknowledged before the import began, none that began after it ended, and at
    that snapshot every table as the source has it, nothing of a later commit."""
    engine = args.engine[0]
    url = store_url(args, engine, tmp, "while-writing")
    con = common.duck(args.ext_dir, threads=1)
    con.execute(common.attach_sql(src_dsn, data_path))
    con.execute("CREATE TABLE lake.main.during (i BIGINT)")
    stop, acked, errors = threading.Event(), [], []

    def write():
        i = 0
        while not stop.is_set():
            try:
                con.execute(f"INSERT INTO lake.main.during VALUES ({i})")
                acked.append(i)
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(str(e).splitlines()[0][:300])
            i += 1

    def newest():
        return int(psql_rows(src_dsn, "SELECT max(snapshot_id) FROM ducklake_snapshot"))

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    try:
        time.sleep(0.5)
        before = newest()
        t0 = time.monotonic()
        cli(args, "import", src_dsn, url)
        secs = time.monotonic() - t0
        after = newest()
        time.sleep(0.2)
    finally:
        stop.set()
        writer.join(timeout=60)
        con.close()
    if errors:
        raise RuntimeError(f"the writer failed during the import: {errors[:3]}")
    verify, _ = cli(args, "verify", url)
    server = common.Server(args.rocklake_bin, url, os.path.join(tmp, "while-writing-serve.log"))
    server.start(timeout=60)
    copy, source = common.duck(args.ext_dir), common.duck(args.ext_dir)
    try:
        copy.execute(common.attach_sql(server.dsn(), data_path))
        source.execute(common.attach_sql(src_dsn, data_path))
        at = copy.execute("SELECT max(snapshot_id) FROM lake.snapshots()").fetchone()[0]
        if not before <= at <= after:
            raise RuntimeError(f"the import copied snapshot {at}; the source was at {before} "
                               f"when it began and at {after} when it ended")
        differ = []
        for t in workload.USER_TABLES + ["main.during"]:
            q = f"SELECT count(*) FROM lake.{t} AT (VERSION => {at})"
            a, b = copy.execute(q).fetchone()[0], source.execute(q).fetchone()[0]
            if a != b:
                differ.append(f"{t}: {a} rows in the copy, {b} in the source")
        meta = "__ducklake_metadata_lake.public"
        inlined = [r[0] for r in copy.execute(
            f"SELECT table_name FROM {meta}.ducklake_inlined_data_tables").fetchall()]
        for t, col in [("ducklake_snapshot", "snapshot_id"),
                       ("ducklake_snapshot_changes", "snapshot_id"),
                       ("ducklake_table", "begin_snapshot"), ("ducklake_column", "begin_snapshot"),
                       ("ducklake_data_file", "begin_snapshot")] + \
                [(t, "begin_snapshot") for t in inlined]:
            later = copy.execute(f"SELECT count(*) FROM {meta}.{t} WHERE {col} > {at}").fetchone()[0]
            if later:
                differ.append(f"{t}: {later} rows of commits after snapshot {at}")
        if differ:
            raise RuntimeError(f"the import while DuckDB wrote is not one snapshot: {differ}")
    finally:
        copy.close()
        source.close()
        server.stop()
    return (f"{len(acked)} commits by DuckDB while the import ran ({after - before} during its "
            f"{secs:.2f} s); it copied snapshot {at} (the source was at {before} when it began, "
            f"{after} when it ended), every table equal there, nothing later; "
            f"verify: {verify.strip().splitlines()[-1]}")


def keep_writing(args, dsn, data_path):
    """DuckDB writes to the imported catalog and reads its writes back."""
    con = common.duck(args.ext_dir)
    try:
        con.execute(common.attach_sql(dsn, data_path))
        before = con.execute("SELECT count(*) FROM lake.s1.small").fetchone()[0]
        con.execute("CREATE TABLE lake.main.after_import AS SELECT * FROM lake.s1.small")
        con.execute("INSERT INTO lake.s1.small SELECT * FROM lake.s1.small LIMIT 1")
        after = con.execute("SELECT count(*) FROM lake.s1.small").fetchone()[0]
        copied = con.execute("SELECT count(*) FROM lake.main.after_import").fetchone()[0]
    finally:
        con.close()
    if (after, copied) != (before + 1, before):
        raise RuntimeError(f"writes after the import: s1.small {before} -> {after} rows, "
                           f"the copy has {copied} (expected {before + 1} and {before})")
    return f"s1.small {before} -> {after} rows, a new table of {copied}"


class Done(Exception):
    """Ends the run early (--only-embedded)."""


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pg-dsn", default=os.environ.get("ROCKLAKE_TEST_PG"),
                    help="libpq string of a PostgreSQL 15 that may create databases")
    ap.add_argument("--rocklake-bin", required=True)
    ap.add_argument("--engine", action="append", default=[], choices=sorted(common.ENGINE_SCHEMES))
    ap.add_argument("--ext-dir", default=common.DEFAULT_EXT_DIR)
    ap.add_argument("--keep", action="store_true", help="keep the temp folder and databases")
    ap.add_argument("--s3-prefix", help="SlateDB's stores under this s3:// prefix (the S3 "
                    "emulator's AWS_* variables in the environment) instead of folders")
    ap.add_argument("--no-embedded", action="store_true",
                    help="leave out DuckLake's SQLite-file and DuckDB-file catalogs")
    ap.add_argument("--only-embedded", action="store_true",
                    help="only DuckLake's SQLite-file and DuckDB-file catalogs")
    args = ap.parse_args()
    args.s3 = False
    if not args.pg_dsn or not args.engine:
        ap.error("--pg-dsn (or ROCKLAKE_TEST_PG) and at least one --engine are required")
    common.exit_on_sigterm()
    common.ensure_extensions(args.ext_dir)
    tmp = tempfile.mkdtemp(prefix="rocklake-migrate-")
    tag = uuid.uuid4().hex[:8]
    src = f"mig_src_{tag}"
    dbs = [src]
    results, timings, logs, failures = {}, {}, {}, []
    ok = False
    try:
        if args.only_embedded:
            ok = embedded(args, tmp)
            raise Done()
        src_dsn = common.create_pg_database(args.pg_dsn, src)
        _, secs, problem, data_path = e2e.run_workload(args, tmp, "build", src_dsn)
        if problem:
            raise RuntimeError(f"building the lake on PostgreSQL: {problem}")
        results["pg"], timings["pg"], problem, _ = e2e.run_workload(
            args, tmp, "pg", src_dsn, "reread", data_path)
        if problem:
            raise RuntimeError(problem)
        print(f"migrate: lake built on PostgreSQL in {secs:.1f} s", flush=True)
        for i, engine in enumerate(args.engine):
            url = store_url(args, engine, tmp, "store")
            if i == 0:
                bad_sources(args, tag, src, url, dbs)
            t0 = time.monotonic()
            out, _ = cli(args, "--json", "import", src_dsn, url)
            got = json.loads(out.strip().splitlines()[-1])
            print(f"migrate: {engine}: imported {got['tables']} tables, {got['rows']} rows in "
                  f"{time.monotonic() - t0:.1f} s ({got['rows_per_second']:.0f} rows/s)",
                  flush=True)
            verify, _ = cli(args, "verify", url)
            print(f"migrate: {engine}: verify: {verify.strip().splitlines()[-1]}", flush=True)
            log = os.path.join(tmp, f"{engine}-serve.log")
            logs[engine] = log
            server = common.Server(args.rocklake_bin, url, log).start(timeout=60)
            try:
                results[engine], timings[engine], problem, _ = e2e.run_workload(
                    args, tmp, engine, server.dsn(), "reread", data_path)
                if problem:
                    failures.append((engine, problem))
                # SlateDB's export reads beside the running server; the others lock their
                # folder, so their server stops first.
                if engine != "slatedb":
                    server.stop()
                out_db = f"mig_out_{engine}_{tag}"
                dbs.append(out_db)
                out_dsn = common.create_pg_database(args.pg_dsn, out_db)
                t0 = time.monotonic()
                cli(args, "export", url, out_dsn)
                print(f"migrate: {engine}: exported in {time.monotonic() - t0:.1f} s", flush=True)
                before = table_names(out_dsn)
                expect_refusal(args, ["export", url, out_dsn], "already holds")
                if table_names(out_dsn) != before:
                    failures.append((engine, "a refused export changed the target's tables"))
                differ = same_tables(src_dsn, out_dsn)
                if differ:
                    failures.append((engine, f"exported tables differ from the source's: {differ}"))
                else:
                    print(f"migrate: {engine}: all {len(before)} exported tables equal the "
                          f"source's row for row", flush=True)
                results[f"{engine}_out"], timings[f"{engine}_out"], problem, _ = \
                    e2e.run_workload(args, tmp, f"{engine}_out", out_dsn, "reread", data_path)
                if problem:
                    failures.append((f"{engine}_out", problem))
                if engine != "slatedb":
                    server.start(timeout=60)
                print(f"migrate: {engine}: after the import: "
                      f"{keep_writing(args, server.dsn(), data_path)}", flush=True)
            except RuntimeError as e:
                failures.append((engine, str(e)))
            finally:
                server.stop()
        ok = e2e.report(results, timings, logs, failures)
        print(f"migrate: {args.engine[0]}: import while DuckDB writes: "
              f"{import_while_writing(args, tmp, src_dsn, data_path)}", flush=True)
        if not args.no_embedded:
            ok = embedded(args, tmp) and ok
    except Done:
        pass
    except RuntimeError as e:
        print(f"migrate: FAILED: {e}")
    finally:
        if not args.keep:
            for db in dbs:
                common.drop_pg_database(args.pg_dsn, db)
    if ok and not args.keep:
        shutil.rmtree(tmp, ignore_errors=True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
