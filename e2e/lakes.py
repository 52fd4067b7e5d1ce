"""Many lakes, one server: `rocklake serve --lakes URL` beside PostgreSQL 15, through DuckDB.

On each target the same DuckDB steps run: two databases made with CREATE DATABASE (through
DuckDB's postgres extension, connected to database `postgres`), a DuckLake lake attached in
each with tables of its own, a CREATE DATABASE of a name taken, an ATTACH of a name that does
not exist; then a new DuckDB connection reads both lakes again. What each target answered (the
lakes' tables and rows, the two errors' messages) must be PostgreSQL's.

usage: python lakes.py --rocklake-bin PATH --pg-dsn DSN [--ext-dir DIR] [--engine E ...]
"""
import argparse
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

LAKES = ["lakes_e2e_sales", "lakes_e2e_audit"]
MISSING = "lakes_e2e_nowhere"


def error_of(con, sql):
    """The server's message in the error `sql` fails with (what follows `ERROR:` or
    `FATAL:`), or None if it succeeds."""
    try:
        con.execute(sql)
    except Exception as e:  # noqa: BLE001 - DuckDB raises several kinds
        m = re.search(r"(?:ERROR|FATAL):\s+([^\n]*)", str(e))
        return m.group(1).strip() if m else str(e)
    return None


def run(ext_dir, admin, dsn_of, data):
    """The DuckDB steps against a server: `admin` is the libpq string of its database
    `postgres`, `dsn_of(name)` that of database `name`; what it answered."""
    seen = {}
    con = common.duck(ext_dir)
    con.execute(f"ATTACH '{admin}' AS pg (TYPE postgres)")
    for name in LAKES:
        con.execute(f"CALL postgres_execute('pg', 'CREATE DATABASE {name}', "
                    "use_transaction := false)")
    seen["duplicate"] = error_of(con, f"CALL postgres_execute('pg', 'CREATE DATABASE {LAKES[0]}', "
                                      "use_transaction := false)")
    seen["listed"] = sorted(r[0] for r in con.execute(
        "SELECT datname FROM postgres_query('pg', 'SELECT datname FROM pg_database') "
        f"WHERE datname LIKE 'lakes_e2e_%'").fetchall())
    for i, name in enumerate(LAKES):
        con.execute(f"ATTACH 'ducklake:postgres:{dsn_of(name)}' AS l{i} "
                    f"(DATA_PATH '{data}/{name}/')")
    con.execute("CREATE TABLE l0.orders AS SELECT range AS id, range * 2 AS amount "
                "FROM range(100)")
    con.execute("CREATE TABLE l1.events (what VARCHAR)")
    con.execute("INSERT INTO l1.events VALUES ('login'), ('logout')")
    con.execute("UPDATE l0.orders SET amount = 0 WHERE id < 10")
    seen["missing"] = error_of(con, f"ATTACH 'ducklake:postgres:{dsn_of(MISSING)}' AS nope "
                                    f"(DATA_PATH '{data}/nope/')")
    con.close()

    # A new connection: each lake kept its own tables and rows.
    con = common.duck(ext_dir)
    for i, name in enumerate(LAKES):
        con.execute(f"ATTACH 'ducklake:postgres:{dsn_of(name)}' AS l{i} "
                    f"(DATA_PATH '{data}/{name}/')")
        seen[name] = {
            "tables": sorted(r[0] for r in con.execute(
                f"SELECT table_name FROM duckdb_tables() WHERE database_name = 'l{i}'"
            ).fetchall()),
        }
    seen["orders"] = con.execute("SELECT count(*), sum(amount) FROM l0.orders").fetchall()
    seen["events"] = con.execute("SELECT what FROM l1.events ORDER BY what").fetchall()
    con.close()
    return seen


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rocklake-bin", required=True)
    ap.add_argument("--pg-dsn", default=os.environ.get("ROCKLAKE_TEST_PG"), required=False)
    ap.add_argument("--ext-dir", default=common.DEFAULT_EXT_DIR)
    ap.add_argument("--engine", action="append", default=[])
    a = ap.parse_args()
    if not a.pg_dsn:
        raise SystemExit("--pg-dsn (or ROCKLAKE_TEST_PG) is required: PostgreSQL is the reference")
    common.ensure_extensions(a.ext_dir)
    engines = a.engine or ["slatedb"]
    work = tempfile.mkdtemp(prefix="rocklake-lakes-")

    pg_admin = common.with_dbname(a.pg_dsn, "postgres")
    for name in LAKES:
        common.drop_pg_database(pg_admin, name)
    try:
        want = run(a.ext_dir, pg_admin, lambda n: common.with_dbname(a.pg_dsn, n),
                   f"{work}/pg")
    finally:
        for name in LAKES:
            common.drop_pg_database(pg_admin, name)
    print(f"PostgreSQL: {want}")

    failed = False
    for engine in engines:
        url = common.engine_url(engine, f"{work}/{engine}-lakes")
        srv = common.Server(a.rocklake_bin, url, f"{work}/{engine}.log",
                            extra_args=["--lakes"]).start()
        try:
            got = run(a.ext_dir, srv.dsn(dbname="postgres"), lambda n: srv.dsn(dbname=n),
                      f"{work}/{engine}")
        finally:
            srv.stop()
        same = got == want
        print(f"{engine}: {'as PostgreSQL' if same else got}")
        if not same:
            failed = True
            for k in sorted(set(want) | set(got)):
                if want.get(k) != got.get(k):
                    print(f"  {k}: PostgreSQL {want.get(k)!r}, RockLake {got.get(k)!r}")
            print(common.tail(srv.log_path))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
