"""DuckDB on a large DuckLake catalog: does each operation's cost stay flat as the catalog grows?

usage: python large_catalog.py --rocklake-bin PATH [--engine slatedb ...] [--pg-dsn DSN]
                               [--tables 1000] [--files-per-table 100] [--columns 20]
                               [--rounds 10] [--ext-dir DIR] [--out FILE.md] [--server-time]
                               [--import] [--backup]

Each target (PostgreSQL 15, `rocklake serve` on each engine) gets two catalogs: a small one (one
wide table of `--files-per-table` data files) and a large one (`--tables` such tables: by
default 1,000 tables, 100,000 data files and 2,000,000 `ducklake_file_column_stats` rows, the
shape DuckLake's users report). Both also hold `small`, a two-column table DuckDB writes to.

How a catalog is built:
1. DuckDB creates the wide tables through DuckLake, in one transaction (one snapshot), so the
   schema rows are DuckLake's own.
2. Their data files, file column stats and table stats are generated on the catalog server by
   `INSERT ... SELECT` over `generate_series`, the same SQL on PostgreSQL and RockLake, in
   chunks (through the real SQL path: the server's parser, planner and transactions). The
   latest snapshot's `next_file_id` is moved past them. The files are not on disk: nothing
   below reads the wide tables' data.
3. DuckDB creates `small` and inserts a row.

Then, on each catalog, with DuckDB 1.5.5 (one thread), median of `--rounds`:
- ATTACH + `count(*)` of `small` from a new connection (DuckLake loads the whole schema);
- a one-row INSERT into `small` (one commit);
- a time-travel `count(*)` of `small` at an older snapshot;
- `ducklake_table_info()` (every table's files and sizes);
- `ducklake_expire_snapshots` + `ducklake_cleanup_old_files` (one expired snapshot each round).

With `--import` (needs --pg-dsn) RockLake's catalogs are not generated through its SQL layer:
`rocklake import` copies each PostgreSQL catalog (after PostgreSQL's rounds) into a new store
of each engine, and the script prints the import's time and rows per second.

With `--backup`, after each served RockLake catalog's rounds, `rocklake backup` copies it
through its running server into a new SlateDB folder and `rocklake restore` copies that into a
new store of the engine, each timed with its peak memory; PostgreSQL's catalogs get `pg_dump
-Fc` for comparison.

With `--server-time` the servers also write their per-statement log (as `server_time.py`
reads it), and after each RockLake catalog's operations the script prints where the server's
time went: statements per operation and the shapes that cost most, with their phase split.
The log costs time of its own, so figures for the table come from runs without it.

The table gives each operation's median on the small and the large catalog, their ratio (1.0
is flat), and the large catalog's ratio to PostgreSQL's. Build times are printed too.
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
import server_time  # noqa: E402
from bench import timed as bench_timed  # noqa: E402  (median of N timed rounds after one warm-up)

# Rows per generated INSERT ... SELECT: one statement and one commit each.
CHUNK = 100_000


def sql_rows(dsn, sql):
    """Rows of one query through psql (text, `|`-separated)."""
    out = subprocess.run([common.psql_path(), dsn, "-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1",
                          "-c", sql], check=True, capture_output=True, text=True)
    return [line.split("|") for line in out.stdout.splitlines() if line]


def timed_cli(binary, argv, what):
    """One `rocklake --json ...` command, timed, with its peak memory (its maximum resident
    set, from GNU time where it is installed); returns its JSON answer, seconds and peak MiB."""
    cmd = [binary, "--json", *argv]
    if os.path.exists("/usr/bin/time"):
        cmd = ["/usr/bin/time", "-f", "peak-rss-kib %M"] + cmd
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    secs = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"large_catalog: {what}: rocklake {argv[0]} failed:\n{p.stdout}{p.stderr}")
    got = json.loads(p.stdout.strip().splitlines()[-1])
    peak = [ln.split()[1] for ln in p.stderr.splitlines() if ln.startswith("peak-rss-kib ")]
    return got, secs, (int(peak[-1]) / 1024 if peak else None)


def peak_text(peak):
    return f", peak memory {peak:.0f} MiB" if peak is not None else ""


def imported(binary, source, url, what):
    """`rocklake import` of the catalog at `source` into a new store at `url`, timed."""
    got, secs, peak = timed_cli(binary, ["import", source, url], what)
    print(f"{what}: rocklake import of {got['tables']} tables, {got['rows']} rows in "
          f"{secs:.1f} s ({got['rows'] / secs:.0f} rows/s)" + peak_text(peak), flush=True)


def backed_up(binary, server, engine, folder, what):
    """`rocklake backup` through the running `server` into a new SlateDB folder, then
    `rocklake restore` of it into a new store of `engine`, each timed."""
    dest = common.engine_url("slatedb", folder + "-backup")
    got, secs, peak = timed_cli(binary, ["backup", server.dsn(), dest], what)
    print(f"{what}: rocklake backup through the server of snapshot {got['snapshot']}: "
          f"{got['keys']} pairs, {got['bytes'] / 2**20:.0f} MiB in {secs:.1f} s "
          f"({got['keys'] / secs:.0f} pairs/s){peak_text(peak)}", flush=True)
    restored = common.engine_url(engine, folder + "-restored")
    got, secs, peak = timed_cli(binary, ["restore", dest, restored], what)
    print(f"{what}: rocklake restore into {engine}: {got['keys']} pairs in {secs:.1f} s"
          f"{peak_text(peak)}", flush=True)


def pg_dumped(dsn, folder, what):
    """PostgreSQL's own online backup of the catalog (`pg_dump -Fc`), timed, for comparison."""
    pg_dump = os.path.join(os.path.dirname(common.psql_path()), "pg_dump")
    t0 = time.perf_counter()
    subprocess.run([pg_dump, "-Fc", "-f", os.path.join(folder, "catalog.dump"), dsn],
                   check=True, capture_output=True)
    secs = time.perf_counter() - t0
    size = os.path.getsize(os.path.join(folder, "catalog.dump"))
    print(f"{what}: pg_dump -Fc in {secs:.1f} s ({size / 2**20:.0f} MiB)", flush=True)


def run_sql(dsn, sql):
    try:
        subprocess.run([common.psql_path(), dsn, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-c", sql],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    except subprocess.CalledProcessError as e:
        raise SystemExit(f"large_catalog: the catalog refused\n  {sql[:300]}\n{e.stderr}")


def build(catalog_dsn, attach, ext_dir, tables, files, columns):
    """Build one catalog; returns seconds spent (DuckDB's DDL, generated rows)."""
    t0 = time.perf_counter()
    con = common.duck(ext_dir, threads=1)
    con.execute(attach)
    cols = ", ".join(f"c{j} BIGINT" for j in range(columns))
    con.execute("BEGIN")
    for t in range(tables):
        con.execute(f"CREATE TABLE lake.main.wide_{t} ({cols})")
    con.execute("COMMIT")
    con.close()
    ddl = time.perf_counter() - t0

    t0 = time.perf_counter()
    (lo, hi, n), = sql_rows(catalog_dsn, "SELECT min(table_id), max(table_id), count(*) "
                                         "FROM ducklake_table WHERE table_name LIKE 'wide_%'")
    lo, hi, n = int(lo), int(hi), int(n)
    if n != tables or hi - lo + 1 != tables:
        raise SystemExit(f"large_catalog: expected {tables} wide tables with consecutive ids, "
                         f"found {n} in {lo}..{hi}")
    (c_lo, c_n), = sql_rows(catalog_dsn, "SELECT min(column_id), count(*) FROM ducklake_column "
                                         f"WHERE table_id = {lo}")
    c_lo, c_n = int(c_lo), int(c_n)
    if c_n != columns:
        raise SystemExit(f"large_catalog: table {lo} has {c_n} columns, expected {columns}")
    (snap, next_file), = sql_rows(catalog_dsn, "SELECT snapshot_id, next_file_id FROM "
                                               "ducklake_snapshot ORDER BY snapshot_id DESC LIMIT 1")
    snap, f0 = int(snap), int(next_file)
    total = tables * files
    # generate_series(a, b) AS g(i): one column named i, on PostgreSQL and DataFusion alike.
    for start in range(0, total, CHUNK):
        end = min(total, start + CHUNK) - 1
        run_sql(catalog_dsn,
                "INSERT INTO ducklake_data_file (data_file_id, table_id, begin_snapshot, "
                "end_snapshot, file_order, path, path_is_relative, file_format, record_count, "
                "file_size_bytes, footer_size, row_id_start, partition_id, encryption_key) "
                f"SELECT {f0} + i, {lo} + i / {files}, {snap}, NULL, NULL, "
                "'wide/f' || CAST(i AS VARCHAR) || '.parquet', true, 'parquet', 1000, 65536, "
                f"1024, (i % {files}) * 1000, NULL, NULL FROM generate_series({start}, {end}) AS g(i)")
    stats = total * columns
    for start in range(0, stats, CHUNK):
        end = min(stats, start + CHUNK) - 1
        run_sql(catalog_dsn,
                "INSERT INTO ducklake_file_column_stats (data_file_id, table_id, column_id, "
                "column_size_bytes, value_count, null_count, min_value, max_value, contains_nan, "
                f"extra_stats) SELECT {f0} + i / {columns}, {lo} + i / {columns * files}, "
                f"{c_lo} + i % {columns}, 2048, 1000, 0, '0', '999', NULL, NULL "
                f"FROM generate_series({start}, {end}) AS g(i)")
    run_sql(catalog_dsn,
            "INSERT INTO ducklake_table_stats (table_id, record_count, next_row_id, "
            f"file_size_bytes) SELECT {lo} + i, {files * 1000}, {files * 1000}, {files * 65536} "
            f"FROM generate_series(0, {tables - 1}) AS g(i)")
    run_sql(catalog_dsn,
            "INSERT INTO ducklake_table_column_stats (table_id, column_id, contains_null, "
            f"contains_nan, min_value, max_value, extra_stats) SELECT {lo} + i / {columns}, "
            f"{c_lo} + i % {columns}, false, NULL, '0', '999', NULL "
            f"FROM generate_series(0, {tables * columns - 1}) AS g(i)")
    run_sql(catalog_dsn, f"UPDATE ducklake_snapshot SET next_file_id = {f0 + total} "
                         f"WHERE snapshot_id = {snap}")
    generated = time.perf_counter() - t0

    con = common.duck(ext_dir, threads=1)
    con.execute(attach)
    con.execute("CREATE TABLE lake.main.small (i BIGINT, s VARCHAR)")
    con.execute("INSERT INTO lake.main.small VALUES (0, 'a')")
    got = con.execute("SELECT count(*), sum(file_count) FROM ducklake_table_info('lake') "
                      "WHERE table_name LIKE 'wide_%'").fetchone()
    con.close()
    if tuple(got) != (tables, total):
        raise SystemExit(f"large_catalog: DuckDB sees {got[0]} wide tables with {got[1]} files, "
                         f"expected {tables} with {total}")
    return ddl, generated


def measure(attach, ext_dir, rounds, windows=None):
    """Each operation's median ms; `windows`, if given, gets each operation's time window (its
    warm-up and `rounds` timed runs) for the server's own log."""
    r = {}

    def timed(name, fn, n):
        start = server_time.now()
        r[name] = bench_timed(fn, n)
        if windows is not None:
            windows[name] = (start, server_time.now())

    def reattach(_):
        c = common.duck(ext_dir, threads=1)
        c.execute(attach)
        c.execute("SELECT count(*) FROM lake.main.small").fetchall()
        c.close()
    timed("ATTACH + count(*) of a small table, new connection", reattach, rounds)
    con = common.duck(ext_dir, threads=1)
    con.execute(attach)
    # The snapshot that holds `small` with its first row: the time-travel target.
    version = con.execute("SELECT max(snapshot_id) FROM lake.snapshots()").fetchone()[0]
    timed("INSERT 1 row into the small table",
        lambda i: con.execute(f"INSERT INTO lake.main.small VALUES ({i + 10}, 'x')"), rounds)
    timed("time travel count(*) of the small table",
        lambda i: con.execute(f"SELECT count(*) FROM lake.main.small AT (VERSION => {version})")
        .fetchall(), rounds)
    timed("ducklake_table_info()",
        lambda i: con.execute("SELECT count(*), sum(file_count) FROM ducklake_table_info('lake')")
        .fetchall(), rounds)

    def expire(i):
        # One more snapshot to expire each round, then its cleanup.
        con.execute(f"INSERT INTO lake.main.small VALUES ({1000 + i}, 'e')")
        oldest = con.execute("SELECT min(snapshot_id) FROM lake.snapshots() WHERE "
                             "snapshot_id > 0").fetchone()[0]
        con.execute(f"SELECT * FROM ducklake_expire_snapshots('lake', versions => [{oldest}])"
                    ).fetchall()
        con.execute("SELECT * FROM ducklake_cleanup_old_files('lake', cleanup_all => true)"
                    ).fetchall()
    timed("expire one snapshot + cleanup (incl. one INSERT)", expire, rounds)
    con.close()
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pg-dsn", default=os.environ.get("ROCKLAKE_TEST_PG"))
    ap.add_argument("--rocklake-bin", required=True)
    ap.add_argument("--engine", action="append", default=[], choices=sorted(common.ENGINE_SCHEMES))
    ap.add_argument("--ext-dir", default=common.DEFAULT_EXT_DIR)
    ap.add_argument("--tables", type=int, default=1000)
    ap.add_argument("--files-per-table", type=int, default=100)
    ap.add_argument("--columns", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--out", help="also write the table (markdown) here")
    ap.add_argument("--server-time", action="store_true",
                    help="run the servers with their per-statement log and print, for each "
                         "operation on each RockLake catalog, the statements that cost most")
    ap.add_argument("--import", dest="import_", action="store_true",
                    help="fill RockLake's catalogs with `rocklake import` of PostgreSQL's "
                         "(timed) instead of generating them through RockLake's SQL layer")
    ap.add_argument("--backup", action="store_true",
                    help="after measuring each served RockLake catalog, time `rocklake backup` "
                         "through its server and `rocklake restore` (and PostgreSQL's pg_dump)")
    a = ap.parse_args()
    if a.import_ and not a.pg_dsn:
        ap.error("--import copies PostgreSQL's catalogs: it needs --pg-dsn")
    for name in ("tables", "files_per_table", "columns", "rounds"):
        if getattr(a, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be at least 1")
    common.exit_on_sigterm()
    common.ensure_extensions(a.ext_dir)
    tmp = tempfile.mkdtemp(prefix="rocklake-large-")
    sizes = {"small": 1, "large": a.tables}
    results = {}  # (target, size) -> {op: ms}

    if a.server_time:
        os.environ["RUST_LOG"] = "rocklake_server=debug"

    def run(target, size, catalog_dsn, data, log=None):
        attach = f"ATTACH 'ducklake:postgres:{catalog_dsn}' AS lake (DATA_PATH '{data}/')"
        ddl, gen = build(catalog_dsn, attach, a.ext_dir, sizes[size], a.files_per_table,
                         a.columns)
        n = sizes[size]
        print(f"{target}, {size} catalog ({n} tables, {n * a.files_per_table} files, "
              f"{n * a.files_per_table * a.columns} stats rows): DuckDB's CREATE TABLEs "
              f"{ddl:.1f} s, generated rows {gen:.1f} s", flush=True)
        windows = {} if log else None
        results[(target, size)] = measure(attach, a.ext_dir, a.rounds, windows)
        if log:
            time.sleep(0.3)  # the log's last lines
            print(f"{target}, {size} catalog: the server's time per operation (warm-up and "
                  f"{a.rounds} rounds)")
            server_time.report(server_time.records(log), windows, a.rounds + 1, None, 4, log)

    try:
        for size in sizes:
            db = pg_data = None
            try:
                if a.pg_dsn:
                    db = f"large_{uuid.uuid4().hex[:8]}"
                    cat = common.create_pg_database(a.pg_dsn, db)
                    pg_data = tempfile.mkdtemp(dir=tmp)
                    run("PostgreSQL 15", size, cat, pg_data)
                    if a.backup:
                        pg_dumped(cat, pg_data, f"PostgreSQL 15, {size} catalog")
                for e in a.engine:
                    folder = os.path.join(tmp, f"{e}-{size}")
                    url = common.engine_url(e, folder + "-store")
                    if a.import_:
                        imported(a.rocklake_bin, cat, url, f"RockLake {e}, {size} catalog")
                    server = common.Server(a.rocklake_bin, url, folder + "-serve.log")
                    try:
                        server.start()
                        if a.import_:
                            windows = {} if a.server_time else None
                            attach = (f"ATTACH 'ducklake:postgres:{server.dsn()}' AS lake "
                                      f"(DATA_PATH '{pg_data}/')")
                            results[(f"RockLake {e}", size)] = measure(
                                attach, a.ext_dir, a.rounds, windows)
                        else:
                            run(f"RockLake {e}", size, server.dsn(), tempfile.mkdtemp(dir=tmp),
                                folder + "-serve.log" if a.server_time else None)
                        if a.backup:
                            backed_up(a.rocklake_bin, server, e, folder,
                                      f"RockLake {e}, {size} catalog")
                    finally:
                        server.stop()
            finally:
                if db:
                    common.drop_pg_database(a.pg_dsn, db)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    targets = list(dict.fromkeys(t for t, _ in results))
    ops = list(next(iter(results.values())))
    head = ["operation (median ms)"]
    for t in targets:
        head += [f"{t} small", f"{t} large (× small)"]
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    pg = "PostgreSQL 15" if a.pg_dsn else None
    for op in ops:
        cells = [op]
        for t in targets:
            s, l_ = results[(t, "small")][op], results[(t, "large")][op]
            vs_pg = ""
            if pg and t != pg:
                vs_pg = f", {l_ / results[(pg, 'large')][op]:.2f}× PG"
            cells += [f"{s:.1f}", f"{l_:.1f} ({l_ / s:.2f}×{vs_pg})"]
        lines.append("| " + " | ".join(cells) + " |")
    table = "\n".join(lines)
    print(table)
    print(f"(large: {a.tables} tables × {a.files_per_table} files × {a.columns} columns; small: "
          f"1 such table; {a.rounds} rounds per operation)")
    if a.out:
        with open(a.out, "w") as f:
            f.write(table + "\n")


if __name__ == "__main__":
    main()
