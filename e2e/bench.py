"""DuckDB through a catalog, timed: PostgreSQL 15 and `rocklake serve` on each engine, side by side.

usage: python bench.py --pg-dsn DSN --rocklake-bin PATH --engine slatedb [--engine sled ...]
                       [--ext-dir DIR] [--rounds N] [--out FILE.md]

Each target gets a fresh catalog and data folder and one DuckDB connection; each operation is
timed N times (after one untimed warm-up) and the table shows medians and the ratio to
PostgreSQL. Operations: one single-row INSERT transaction; CREATE TABLE; a time-travel
`count(*) AT (VERSION => n)`; ATTACH of an existing catalog by a new DuckDB connection. The
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


def measure(catalog, data_path, ext_dir, rounds):
    attach = f"ATTACH 'ducklake:postgres:{catalog}' AS lake (DATA_PATH '{data_path}/')"
    con = connect(ext_dir)
    con.execute(attach)
    con.execute("CREATE TABLE lake.main.b(i BIGINT, s VARCHAR)")
    r = {}
    r["single-row INSERT transaction"] = timed(
        lambda i: con.execute(f"INSERT INTO lake.main.b VALUES ({i}, 'x')"), rounds)
    r["CREATE TABLE"] = timed(
        lambda i: con.execute(f"CREATE TABLE lake.main.t_{i + 1} (a BIGINT, b VARCHAR)"),
        max(3, rounds // 3))
    version = con.execute("SELECT max(snapshot_id) FROM lake.snapshots()").fetchone()[0] - 2
    r["time travel count(*) AT (VERSION => n)"] = timed(
        lambda i: con.execute(f"SELECT count(*) FROM lake.main.b AT (VERSION => {version})")
        .fetchall(), rounds)
    con.close()

    def reattach(_):
        c = connect(ext_dir)
        c.execute(attach)
        c.execute("SELECT count(*) FROM lake.main.b").fetchall()
        c.close()
    r["ATTACH + count(*) from a new connection"] = timed(reattach, max(3, rounds // 3))
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pg-dsn", default=os.environ.get("ROCKLAKE_TEST_PG"))
    ap.add_argument("--rocklake-bin", required=True)
    ap.add_argument("--engine", action="append", default=[], choices=sorted(common.ENGINE_SCHEMES))
    ap.add_argument("--ext-dir", default=common.DEFAULT_EXT_DIR)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--out", help="also write the table (markdown) here")
    a = ap.parse_args()
    common.exit_on_sigterm()
    common.ensure_extensions(a.ext_dir)
    tmp = tempfile.mkdtemp(prefix="rocklake-bench-")
    results = {}
    if a.pg_dsn:
        db = f"bench_{uuid.uuid4().hex[:8]}"
        try:
            os.makedirs(os.path.join(tmp, "pg-data"))
            results["PostgreSQL 15"] = measure(common.create_pg_database(a.pg_dsn, db),
                                               os.path.join(tmp, "pg-data"), a.ext_dir, a.rounds)
        finally:
            common.drop_pg_database(a.pg_dsn, db)
    for e in a.engine:
        server = common.Server(a.rocklake_bin, common.engine_url(e, os.path.join(tmp, f"{e}-store")),
                               os.path.join(tmp, f"{e}-serve.log"))
        try:
            server.start()
            os.makedirs(os.path.join(tmp, f"{e}-data"))
            results[f"RockLake {e}"] = measure(server.dsn(), os.path.join(tmp, f"{e}-data"),
                                               a.ext_dir, a.rounds)
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
