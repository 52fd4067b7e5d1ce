"""DuckDB through a catalog, timed: PostgreSQL 15 and `rocklake serve` on each engine, side by side.

usage: python bench.py --pg-dsn DSN --rocklake-bin PATH --engine slatedb [--engine sled ...]
                       [--store-url URL ...] [--ext-dir DIR] [--rounds N] [--commits N]
                       [--no-embedded] [--out FILE.md]

Each target gets a fresh catalog and data folder and one DuckDB connection; each operation is
timed N times (after one untimed warm-up) and the table shows medians and the ratio to
PostgreSQL. Targets: PostgreSQL, DuckLake's own SQLite-file and DuckDB-file catalogs (the
embedded alternatives), and `rocklake serve` on each engine (and on a new store under each `--store-url`, e.g. SlateDB
on `s3://` with `simulate_latency_ms`; the data files stay in a local folder). Operations: a one-row INSERT
(inlined), a 1,000-row INSERT (a Parquet file), CREATE TABLE, a time-travel
`count(*) AT (VERSION => n)`, a one-row UPDATE, a series of single-row commits (total time) and
`count(*)` after it, and ATTACH of an existing catalog by a new DuckDB connection. The
figures are wall-clock times of DuckDB calls, so they include DuckLake's own work and the wire
round trips. Durability: RockLake syncs before COMMIT returns (SlateDB WAL object written,
sled flush, RocksDB log sync); PostgreSQL as configured by the caller (CI starts it with
fsync=off; say so when quoting figures).
"""
import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def connect(ext_dir):
    return common.duck(ext_dir, threads=1)


def timed(fn, rounds):
    fn(-1)  # warm-up, not timed
    out = []
    for i in range(rounds):
        t0 = time.perf_counter()
        fn(i)
        out.append((time.perf_counter() - t0) * 1000.0)
    return statistics.median(out)


def measure(attach, ext_dir, rounds, commits):
    """Every operation on one catalog; `attach` is the whole ATTACH statement."""
    con = connect(ext_dir)
    con.execute(attach)
    con.execute("CREATE TABLE lake.main.b(i BIGINT, s VARCHAR)")
    con.execute("CREATE TABLE lake.main.big(i BIGINT, s VARCHAR)")
    r = {}
    r["insert 1 row (inlined)"] = timed(
        lambda i: con.execute(f"INSERT INTO lake.main.b VALUES ({i}, 'x')"), rounds)
    r["insert 1,000 rows (one Parquet file)"] = timed(
        lambda i: con.execute(
            f"INSERT INTO lake.main.big SELECT {i} * 1000 + range, 'y' FROM range(1000)"),
        rounds)
    r["CREATE TABLE"] = timed(
        lambda i: con.execute(f"CREATE TABLE lake.main.t_{i + 1} (a BIGINT, b VARCHAR)"),
        max(3, rounds // 3))
    version = con.execute("SELECT max(snapshot_id) FROM lake.snapshots()").fetchone()[0] - 2
    r["time travel count(*) AT (VERSION => n)"] = timed(
        lambda i: con.execute(f"SELECT count(*) FROM lake.main.b AT (VERSION => {version})")
        .fetchall(), rounds)
    r["UPDATE 1 row"] = timed(
        lambda i: con.execute(f"UPDATE lake.main.b SET s = 'u{i}' WHERE i = {max(i, 0)}"),
        rounds)
    con.execute("CREATE TABLE lake.main.c(i BIGINT)")
    t0 = time.perf_counter()
    for i in range(commits):
        con.execute(f"INSERT INTO lake.main.c VALUES ({i})")
    r[f"{commits} single-row commits (total ms)"] = (time.perf_counter() - t0) * 1000.0
    r[f"count(*) after those {commits} commits"] = timed(
        lambda i: con.execute("SELECT count(*) FROM lake.main.c").fetchall(), rounds)
    con.close()

    def reattach(_):
        c = connect(ext_dir)
        c.execute(attach)
        c.execute("SELECT count(*) FROM lake.main.b").fetchall()
        c.close()
    r["ATTACH + count(*) from a new connection"] = timed(reattach, max(3, rounds // 3))
    return r


def embedded_available(ext_dir):
    """Whether DuckDB's sqlite extension is installed (DuckLake's SQLite catalog needs it)."""
    con = connect(ext_dir)
    try:
        return bool(con.execute(
            "SELECT count(*) FROM duckdb_extensions() WHERE extension_name = 'sqlite_scanner' "
            "AND installed").fetchone()[0])
    finally:
        con.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pg-dsn", default=os.environ.get("ROCKLAKE_TEST_PG"))
    ap.add_argument("--rocklake-bin", required=True)
    ap.add_argument("--engine", action="append", default=[], choices=sorted(common.ENGINE_SCHEMES))
    ap.add_argument("--store-url", action="append", default=[],
                    help="also serve a new store under this URL (its options kept), e.g. "
                         "s3://bucket/prefix?simulate_latency_ms=20 for a bucket 20 ms away")
    ap.add_argument("--ext-dir", default=common.DEFAULT_EXT_DIR)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--commits", type=int, default=100,
                    help="single-row commits of the commit-series operation")
    ap.add_argument("--no-embedded", action="store_true",
                    help="leave out DuckLake's SQLite and DuckDB-file catalogs")
    ap.add_argument("--out", help="also write the table (markdown) here")
    a = ap.parse_args()
    common.exit_on_sigterm()
    common.ensure_extensions(a.ext_dir)
    tmp = tempfile.mkdtemp(prefix="rocklake-bench-")
    results = {}

    def data(name):
        path = os.path.join(tmp, f"{name}-data")
        os.makedirs(path)
        return path

    if a.pg_dsn:
        db = f"bench_{uuid.uuid4().hex[:8]}"
        try:
            cat = common.create_pg_database(a.pg_dsn, db)
            results["PostgreSQL 15"] = measure(
                f"ATTACH 'ducklake:postgres:{cat}' AS lake (DATA_PATH '{data('pg')}/')",
                a.ext_dir, a.rounds, a.commits)
        finally:
            common.drop_pg_database(a.pg_dsn, db)
    if not a.no_embedded:
        # DuckLake's embedded catalogs, the alternatives a user would pick over a server.
        if embedded_available(a.ext_dir):
            results["SQLite file"] = measure(
                f"ATTACH 'ducklake:sqlite:{tmp}/catalog.sqlite' AS lake "
                f"(DATA_PATH '{data('sqlite')}/')", a.ext_dir, a.rounds, a.commits)
        else:
            print("bench: DuckDB's sqlite extension is not installed: no SQLite column "
                  "(e2e/requirements.txt lists it)", file=sys.stderr)
        results["DuckDB file"] = measure(
            f"ATTACH 'ducklake:{tmp}/catalog.ducklake' AS lake (DATA_PATH '{data('duckdb')}/')",
            a.ext_dir, a.rounds, a.commits)
    stores = [(f"RockLake {e}", e, common.engine_url(e, os.path.join(tmp, f"{e}-store")))
              for e in a.engine]
    for i, url in enumerate(a.store_url):
        base, _, options = url.partition("?")
        if "://" not in base:
            raise SystemExit(f"--store-url {url!r} is not a store URL (s3://bucket/prefix, ...)")
        under = f"{base.rstrip('/')}/bench-{uuid.uuid4().hex[:8]}" + (f"?{options}" if options else "")
        stores.append((f"RockLake {url}", f"url{i}", under))
    for name, key, url in stores:
        server = common.Server(a.rocklake_bin, url, os.path.join(tmp, f"{key}-serve.log"))
        try:
            server.start()
            results[name] = measure(
                f"ATTACH 'ducklake:postgres:{server.dsn()}' AS lake (DATA_PATH '{data(key)}/')",
                a.ext_dir, a.rounds, a.commits)
        finally:
            server.stop()
    names = list(results)
    ops = list(next(iter(results.values())))
    lines = ["| operation (median ms) | " + " | ".join(names) + " |",
             "|---|" + "---|" * len(names)]
    for op in ops:
        cells = []
        base = results[names[0]][op]
        for n in names:
            v = results[n][op]
            ratio = "" if n == names[0] or not a.pg_dsn else f" ({v / base:.1f}×)"
            cells.append(f"{v:.1f}{ratio}")
        lines.append(f"| {op} | " + " | ".join(cells) + " |")
    table = "\n".join(lines)
    print(table)
    print(f"({a.rounds} rounds per operation; ratios are to the first column)")
    if a.out:
        with open(a.out, "w") as f:
            f.write(table + "\n")


if __name__ == "__main__":
    main()
