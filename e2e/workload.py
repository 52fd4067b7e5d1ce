"""A deterministic DuckLake workload through stock DuckDB, recording every step's result.

usage: python workload.py --catalog "host=127.0.0.1 port=N user=U dbname=D" --data-path DIR
                          --ext-dir DIR --out results.json [--s3]

The catalog is DuckLake's metadata database reached through DuckDB's postgres extension
(`ducklake:postgres:<libpq string>`): PostgreSQL itself, or `rocklake serve`; or DuckLake's own
embedded catalogs, `sqlite:PATH` (a SQLite file) or `duckdb:PATH` (a DuckDB file), where the
steps that use the catalog as a PostgreSQL database are left out. Each step is a named
query; its result rows are normalised so that two runs against two different catalogs can be
compared with `==`:
  * values that legitimately differ between runs are masked, and only those: snapshot times
    (NOW() on the catalog), the uuids DuckLake draws (columns named `*uuid`, and the uuid in
    the names of the files it writes, `ducklake-<uuid>...`) and the run's own DATA_PATH. A
    uuid anywhere else (a UUID column or array of the user's tables) is compared as it is;
  * rows are sorted unless the query has its own ORDER BY.
A step that raises records the error instead of rows; steps marked `error=True` must raise.
The workload goes on after an unexpected error so one run reports every failing step.
"""
import argparse
import datetime
import decimal
import json
import os
import re
import sys
import time
import uuid

import duckdb

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

VERBOSE = bool(os.environ.get("E2E_VERBOSE"))  # print each step as it starts (to find a crash)
# The uuid DuckLake puts in the name of each file it writes (a data or delete file).
FILE_UUID_RE = re.compile(
    r"ducklake-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.I)


def connect(ext_dir):
    """A DuckDB connection that autoloads extensions from ext_dir and never downloads."""
    # One thread: files are written in one order, so file counts and sizes repeat.
    con = common.duck(ext_dir, threads=1)
    con.execute("SET TimeZone = 'UTC'")
    return con


def s3_secret_sql():
    """A DuckDB secret for the local S3 emulator, from the usual AWS environment variables."""
    endpoint = os.environ["AWS_ENDPOINT_URL"]
    use_ssl = endpoint.startswith("https://")
    host = re.sub(r"^https?://", "", endpoint).rstrip("/")
    return ("CREATE OR REPLACE SECRET e2e_s3 (TYPE s3, "
            f"KEY_ID '{os.environ.get('AWS_ACCESS_KEY_ID', 'testing')}', "
            f"SECRET '{os.environ.get('AWS_SECRET_ACCESS_KEY', 'testing')}', "
            f"REGION '{os.environ.get('AWS_REGION', 'us-east-1')}', "
            f"ENDPOINT '{host}', URL_STYLE 'path', USE_SSL {str(use_ssl).lower()})")


def norm(v):
    """A JSON-able, comparable form of one DuckDB value."""
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, decimal.Decimal):
        return str(v)
    if isinstance(v, uuid.UUID):
        return str(v)
    if isinstance(v, (datetime.datetime, datetime.date, datetime.time)):
        return v.isoformat()
    if isinstance(v, datetime.timedelta):
        return str(v)
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v).hex()
    if isinstance(v, (list, tuple)):
        return [norm(x) for x in v]
    if isinstance(v, dict):
        # STRUCTs keep their field order; MAP keys are sorted (their order is not meaningful).
        return [[norm(k), norm(x)] for k, x in v.items()]
    return repr(v)


class Recorder:
    def __init__(self, con, data_path):
        self.con = con
        self.data_path = data_path.rstrip("/")
        self.steps = []
        self.names = set()

    def mask_str(self, s):
        s = s.replace(self.data_path, "<data>")
        return FILE_UUID_RE.sub("ducklake-<uuid>", s)

    def mask(self, v):
        if isinstance(v, str):
            return self.mask_str(v)
        if isinstance(v, list):
            return [self.mask(x) for x in v]
        return v

    def q(self, name, sql, sort=None, mask_cols=(), error=False, record=True):
        """Run one step; return the raw rows (or None on error) so later steps can use them.

        sort: sort the recorded rows; by default, unless the SQL has an ORDER BY.
        mask_cols: result columns replaced by '<masked>' (non-NULL) or None.
        error: the statement must fail; only the fact that it failed is compared, since
               the message may name internal ids.
        """
        assert name not in self.names, f"duplicate step name {name}"
        self.names.add(name)
        if VERBOSE:
            print(f"step {name}", file=sys.stderr, flush=True)
        t0 = time.monotonic()
        try:
            cur = self.con.execute(sql)
            raw = cur.fetchall() if cur.description else []
            cols = [d[0] for d in cur.description] if cur.description else []
        except Exception as e:  # noqa: BLE001 - any DuckDB error is a recorded result
            msg = f"{type(e).__name__}: {e}".splitlines()[0]
            res = {"name": name, "sql": sql, "ms": round((time.monotonic() - t0) * 1000, 1)}
            if error:
                res["rows"] = [["<expected error>"]]
                res["detail"] = msg
            else:
                res["error"] = msg
            if record:
                self.steps.append(res)
            return None
        ms = round((time.monotonic() - t0) * 1000, 1)
        rows = []
        for r in raw:
            row = []
            for c, v in zip(cols, r):
                if c in mask_cols:
                    row.append(None if v is None else "<masked>")
                elif c.lower().endswith("uuid"):
                    # A uuid DuckLake drew (a table's, a schema's, a view's).
                    row.append(None if v is None else "<uuid>")
                else:
                    row.append(self.mask(norm(v)))
            rows.append(row)
        if sort is None:
            sort = not re.search(r"\border\s+by\b", sql, re.I)
        if sort:
            rows.sort(key=lambda r: json.dumps(r))
        if error:
            rows = [["<no error>"]] + rows
        if record:
            self.steps.append({"name": name, "sql": sql, "ms": ms, "columns": cols, "rows": rows})
        return raw

    def read_or_fail(self, name, sql):
        """A read that may fail (time travel to a snapshot before its table existed): an
        error is recorded as a row, so that both catalogs must fail it alike."""
        assert name not in self.names, f"duplicate step name {name}"
        self.names.add(name)
        t0 = time.monotonic()
        try:
            cur = self.con.execute(sql)
            rows = sorted(json.dumps([self.mask(norm(v)) for v in row]) for row in cur.fetchall())
        except Exception:  # noqa: BLE001 - the failure itself is the result
            rows = ["<error>"]
        ms = round((time.monotonic() - t0) * 1000, 1)
        self.steps.append({"name": name, "sql": sql, "ms": ms, "rows": rows})

    def x(self, name, sql):
        """A statement whose only result is success (DDL, DML without RETURNING, CALLs)."""
        return self.q(name, sql, sort=False)


def catalog_kind(catalog):
    """`postgres`, `sqlite` or `duckdb`: what kind of database the catalog argument names."""
    for kind in ("sqlite", "duckdb"):
        if catalog.startswith(kind + ":"):
            return kind
    return "postgres"


def ducklake_url(catalog):
    """The ATTACH string of a catalog argument."""
    kind = catalog_kind(catalog)
    if kind == "sqlite":
        return f"ducklake:{catalog}"
    if kind == "duckdb":
        return f"ducklake:{catalog[len('duckdb:'):]}"
    return f"ducklake:postgres:{catalog}"


def meta_schema(catalog):
    """Where DuckDB shows DuckLake's own tables: the metadata database's schema."""
    return "public" if catalog_kind(catalog) == "postgres" else "main"


def workload(r, attach_sql, reattach, catalog):
    """The steps. attach_sql(alias, extra_options) builds an ATTACH; reattach() returns a
    fresh Recorder on a new DuckDB connection; catalog is the libpq string of the server."""
    q, x = r.q, r.x

    # --- attach and create -------------------------------------------------------------------
    x("attach", attach_sql())
    q("options_initial", "SELECT option_name, value, scope FROM lake.options() ORDER BY ALL")
    # Global inlining limit, set before any view exists: DuckLake 1.5.5 segfaults on a global
    # set_option('data_inlining_row_limit') once the catalog holds a view (the reserved-column
    # check scans views as tables). Inserts of up to 50 rows are kept in the catalog from now on.
    x("inline_option", "CALL lake.set_option('data_inlining_row_limit', 50)")
    x("create_schema", "CREATE SCHEMA lake.s1")
    x("create_orders", """CREATE TABLE lake.s1.orders(
        id BIGINT, customer VARCHAR, amount DECIMAL(10,2), qty INTEGER, ts TIMESTAMP,
        tags VARCHAR[], info STRUCT(k VARCHAR, v INTEGER))""")
    x("create_customers", "CREATE TABLE lake.main.customers(name VARCHAR, city VARCHAR, score DOUBLE)")
    q("tables_listed", "SELECT database_name, schema_name, table_name FROM duckdb_tables() "
      "WHERE database_name = 'lake'")

    # --- inserts -----------------------------------------------------------------------------
    batch = """INSERT INTO lake.s1.orders SELECT i, 'cust' || (i % 50), (i * 1.25)::DECIMAL(10,2),
        (i % 13)::INTEGER, TIMESTAMP '2024-01-01' + INTERVAL (i) MINUTE,
        ['t' || (i % 3), 't' || (i % 7)], {{'k': 'k' || (i % 5), 'v': (i % 11)::INTEGER}}
        FROM range({lo}, {hi}) t(i)"""
    q("insert_batch_1", batch.format(lo=0, hi=1500))
    q("insert_batch_2", batch.format(lo=1500, hi=3000))
    q("insert_batch_3", batch.format(lo=3000, hi=4500))
    q("insert_values", """INSERT INTO lake.main.customers VALUES
        ('ann', 'oslo', 1.5), ('bob', 'rome', 2.25), ('cid', NULL, -3.0), ('dee', 'oslo', 1e10),
        ('eve', 'lima', 0.0), ('fay', 'rome', NULL), ('gus', 'kyiv', 7.75), ('hal', 'oslo', 8.0)""")
    q("orders_aggregate", "SELECT count(*), sum(amount), sum(qty), min(ts), max(ts), "
      "count(DISTINCT customer) FROM lake.s1.orders")
    q("orders_sample", "SELECT * FROM lake.s1.orders WHERE id % 397 = 0 ORDER BY id")
    q("orders_by_customer", "SELECT customer, count(*), sum(amount) FROM lake.s1.orders "
      "WHERE customer < 'cust2' GROUP BY customer")
    q("orders_filter_nested", "SELECT count(*), sum(id) FROM lake.s1.orders "
      "WHERE list_contains(tags, 't2') AND info.k = 'k3'")
    q("customers_all", "SELECT * FROM lake.main.customers")

    # --- update / delete ---------------------------------------------------------------------
    q("update_orders", "UPDATE lake.s1.orders SET amount = amount + 1, customer = upper(customer) "
      "WHERE id % 10 = 0")
    q("delete_orders", "DELETE FROM lake.s1.orders WHERE id % 7 = 3")
    q("update_customers", "UPDATE lake.main.customers SET score = score * 2 WHERE city = 'oslo'")
    q("delete_customers", "DELETE FROM lake.main.customers WHERE city IS NULL")
    q("after_dml", "SELECT count(*), sum(amount), count(*) FILTER (WHERE customer LIKE 'CUST%') "
      "FROM lake.s1.orders")
    q("customers_after_dml", "SELECT * FROM lake.main.customers")

    # --- explicit transactions ---------------------------------------------------------------
    x("txn_begin", "BEGIN")
    q("txn_insert", "INSERT INTO lake.main.customers VALUES ('ivy', 'bern', 9.5), ('jon', 'bern', 9.0)")
    q("txn_update", "UPDATE lake.s1.orders SET qty = qty + 100 WHERE id < 20")
    q("txn_sees_own_writes", "SELECT count(*) FROM lake.main.customers WHERE city = 'bern'")
    x("txn_commit_message", "CALL lake.set_commit_message('alice', 'batch one', "
      "extra_info => '{\"ticket\": 42}')")
    x("txn_commit", "COMMIT")
    x("rollback_begin", "BEGIN")
    q("rollback_delete", "DELETE FROM lake.main.customers")
    q("rollback_insert", "INSERT INTO lake.s1.orders VALUES "
      "(-1, 'ghost', 0, 0, NULL, NULL, NULL)")
    q("rollback_sees_empty", "SELECT count(*) FROM lake.main.customers")
    x("rollback", "ROLLBACK")
    q("after_rollback", "SELECT (SELECT count(*) FROM lake.main.customers), "
      "(SELECT count(*) FROM lake.s1.orders WHERE id = -1), "
      "(SELECT sum(qty) FROM lake.s1.orders WHERE id < 20)")

    # --- alter -------------------------------------------------------------------------------
    x("alter_add_column", "ALTER TABLE lake.s1.orders ADD COLUMN note VARCHAR DEFAULT 'none'")
    x("alter_add_column_2", "ALTER TABLE lake.s1.orders ADD COLUMN flag BOOLEAN")
    x("alter_drop_column", "ALTER TABLE lake.s1.orders DROP COLUMN flag")
    x("alter_rename_column", "ALTER TABLE lake.s1.orders RENAME COLUMN customer TO client")
    x("alter_widen_type", "ALTER TABLE lake.s1.orders ALTER COLUMN qty SET DATA TYPE BIGINT")
    x("alter_set_not_null", "ALTER TABLE lake.s1.orders ALTER COLUMN id SET NOT NULL")
    x("alter_rename_table", "ALTER TABLE lake.s1.orders RENAME TO orders2")
    q("not_null_enforced", "INSERT INTO lake.s1.orders2 (id, client) VALUES (NULL, 'x')", error=True)
    q("insert_after_alter", "INSERT INTO lake.s1.orders2 (id, client, qty, note) "
      "VALUES (100000, 'late', 5000000000, 'big')")
    q("columns_after_alter", "SELECT column_name, data_type, is_nullable, column_default "
      "FROM information_schema.columns WHERE table_catalog = 'lake' AND table_name = 'orders2' "
      "ORDER BY ordinal_position")
    q("read_after_alter", "SELECT id, client, qty, note FROM lake.s1.orders2 "
      "WHERE id IN (0, 1, 5, 100000) ORDER BY id")
    q("old_name_gone", "SELECT count(*) FROM lake.s1.orders", error=True)

    # --- views and comments ------------------------------------------------------------------
    x("create_view", "CREATE VIEW lake.s1.big_orders AS "
      "SELECT id, client, amount FROM lake.s1.orders2 WHERE amount > 5000")
    q("read_view", "SELECT count(*), sum(amount) FROM lake.s1.big_orders")
    x("comment_table", "COMMENT ON TABLE lake.s1.orders2 IS 'all the orders'")
    x("comment_column", "COMMENT ON COLUMN lake.s1.orders2.amount IS 'in euros'")
    x("comment_view", "COMMENT ON VIEW lake.s1.big_orders IS 'orders over 5000'")
    q("comments", "SELECT table_name, comment FROM duckdb_tables() WHERE database_name = 'lake' "
      "UNION ALL SELECT view_name, comment FROM duckdb_views() WHERE database_name = 'lake' "
      "UNION ALL SELECT table_name || '.' || column_name, comment FROM duckdb_columns() "
      "WHERE database_name = 'lake' AND comment IS NOT NULL")
    q("view_definition", "SELECT view_name, sql FROM duckdb_views() WHERE database_name = 'lake'")

    # --- snapshots and time travel -----------------------------------------------------------
    q("snapshots", "SELECT snapshot_id, snapshot_time, schema_version, changes, author, "
      "commit_message, commit_extra_info FROM lake.snapshots() ORDER BY snapshot_id",
      mask_cols=("snapshot_time",))
    q("ducklake_snapshots", "SELECT snapshot_id, schema_version, changes "
      "FROM ducklake_snapshots('lake') ORDER BY snapshot_id")
    # Snapshot times come from the catalog's NOW(): compare their order, not their values.
    q("snapshot_times_increase", "SELECT count(*) FILTER (WHERE snapshot_time < prev), "
      "count(*) FILTER (WHERE snapshot_time IS NULL) FROM (SELECT snapshot_time, "
      "lag(snapshot_time) OVER (ORDER BY snapshot_id) AS prev FROM lake.snapshots())")
    q("current_snapshot", "SELECT * FROM ducklake_current_snapshot('lake')")
    q("last_committed_snapshot", "SELECT * FROM ducklake_last_committed_snapshot('lake')")
    snaps = dict(r.con.execute(
        "SELECT snapshot_id, snapshot_time FROM lake.snapshots() ORDER BY snapshot_id").fetchall())
    # Versions just after each of the three batch inserts and after the DML.
    ins = [s for s, in r.con.execute(
        "SELECT snapshot_id FROM lake.snapshots() WHERE changes['tables_inserted_into'] IS NOT NULL "
        "ORDER BY snapshot_id").fetchall()]
    # Time travel to before the rename must use the table's old name.
    for v in ins[:4]:
        q(f"at_version_{v}", f"SELECT count(*), sum(amount) FROM lake.s1.orders AT (VERSION => {v})")
    # AT (TIMESTAMP => t) with t read back from the catalog, so it lands exactly on a snapshot.
    for v in ins[:3]:
        t = snaps[v].isoformat()
        q(f"at_timestamp_of_{v}", "SELECT count(*), sum(amount) FROM lake.s1.orders "
          f"AT (TIMESTAMP => TIMESTAMPTZ '{t}')")
    created = r.con.execute("SELECT snapshot_id FROM lake.snapshots() "
                            "WHERE list_contains(changes['tables_created'], 's1.orders')").fetchone()[0]
    q("at_version_before_table", "SELECT count(*) FROM lake.s1.orders "
      f"AT (VERSION => {created - 1})", error=True)
    q("at_version_new_name_too_early", "SELECT count(*) FROM lake.s1.orders2 "
      f"AT (VERSION => {ins[2]})", error=True)
    first, last = ins[0], max(snaps)
    q("table_changes", "SELECT snapshot_id, change_type, count(*), sum(id) FROM "
      f"ducklake_table_changes('lake', 's1', 'orders2', {first}, {last}) "
      "GROUP BY ALL ORDER BY ALL")
    q("table_changes_rows", "SELECT * FROM "
      f"ducklake_table_changes('lake', 's1', 'orders2', {first + 3}, {last}) "
      "WHERE id % 501 = 0 ORDER BY ALL")
    q("table_insertions", "SELECT count(*), sum(id) FROM "
      f"ducklake_table_insertions('lake', 's1', 'orders', {first}, {ins[2]})")
    q("table_deletions", "SELECT count(*), sum(id) FROM "
      f"ducklake_table_deletions('lake', 's1', 'orders2', {ins[2]}, {last})")
    r.snap_after_batches = ins[2]

    # --- data inlining -----------------------------------------------------------------------
    x("inline_create", "CREATE TABLE lake.s1.small(k INTEGER, v VARCHAR, d DATE, x DOUBLE)")
    for i in range(3):
        q(f"inline_insert_{i}", f"INSERT INTO lake.s1.small SELECT i, 'v' || i, "
          f"DATE '2024-03-01' + i::INTEGER, i / 4 FROM range({i * 10}, {i * 10 + 10}) t(i)")
    q("inline_update", "UPDATE lake.s1.small SET v = v || '!' WHERE k % 3 = 0")
    q("inline_delete", "DELETE FROM lake.s1.small WHERE k % 4 = 1")
    q("inline_read", "SELECT * FROM lake.s1.small ORDER BY k")
    q("inline_no_files", "SELECT count(*) FROM ducklake_list_files('lake', 'small', schema => 's1')")
    q("inline_table_info", "SELECT table_name, file_count FROM ducklake_table_info('lake')")
    q("inline_flush", "SELECT * FROM ducklake_flush_inlined_data('lake', schema_name => 's1', "
      "table_name => 'small')")
    q("inline_files_after_flush", "SELECT count(*) FROM ducklake_list_files('lake', 'small', "
      "schema => 's1')")
    q("inline_read_after_flush", "SELECT * FROM lake.s1.small ORDER BY k")
    q("inline_insert_after_flush", "INSERT INTO lake.s1.small VALUES (100, 'late', NULL, NULL)")
    q("inline_flush_all", "SELECT * FROM ducklake_flush_inlined_data('lake')")
    q("inline_final", "SELECT count(*), sum(k), string_agg(v, ',' ORDER BY k) FROM lake.s1.small")

    # --- every column type DuckLake keeps in an inlined-data table ---------------------------
    # DuckLake declares these with PostgreSQL's types (interval, time with time zone, numeric,
    # bytea, ...) and sends each value as a literal; LIST/STRUCT/HUGEINT/unsigned go as text.
    x("types_create", "CREATE TABLE lake.s1.typed(b BOOLEAN, ti TINYINT, si SMALLINT, i INTEGER, "
      "bi BIGINT, ut UTINYINT, us USMALLINT, ui UINTEGER, ub UBIGINT, hi HUGEINT, f FLOAT, "
      "d DOUBLE, dec DECIMAL(38,10), v VARCHAR, bl BLOB, dt DATE, tm TIME, ttz TIMETZ, "
      "ts TIMESTAMP, tstz TIMESTAMPTZ, tsn TIMESTAMP_NS, iv INTERVAL, u UUID, j JSON, "
      "l INTEGER[], st STRUCT(a INTEGER, b VARCHAR))")
    q("types_insert", """INSERT INTO lake.s1.typed VALUES
      (true, -128, -32768, -2147483648, -9223372036854775808, 255, 65535, 4294967295,
       18446744073709551615, -12345678901234567890123, -1.5e-7, 'inf',
       -1234567890123456789012345678.0123456789, 'it''s "q" é', '\\x00\\x01'::BLOB,
       DATE '0001-01-01', TIME '00:00:00', TIMETZ '01:02:03.5-05:30',
       TIMESTAMP '1900-01-01 00:00:00.000001', TIMESTAMPTZ '2262-04-11 23:47:16+00',
       TIMESTAMP_NS '1970-01-01 00:00:00.000000001', INTERVAL '1 year 2 days 03:00:00',
       '00000000-0000-0000-0000-000000000000', '[1, {"a": null}]', [], {'a': NULL, 'b': ''}),
      (false, 127, 32767, 2147483647, 9223372036854775807, 0, 0, 0, 0,
       98765432109876543210987, 3.4e38, -0.0, 0.0000000001, '', ''::BLOB, DATE '9999-12-31',
       TIME '23:59:59.999999', TIMETZ '23:59:59+15:59', TIMESTAMP '2024-02-29 12:00:00',
       TIMESTAMPTZ '1970-01-01 00:00:00+00', TIMESTAMP_NS '2024-01-01 00:00:00.123456789',
       INTERVAL '100 hours 0.000001 seconds', 'FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF', 'null',
       [NULL, 3], NULL),
      (NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
       NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)""")
    typed = "SELECT COLUMNS(*)::VARCHAR FROM lake.s1.typed ORDER BY i NULLS LAST"
    q("types_read", typed)
    q("types_inlined", "SELECT count(*) FROM ducklake_list_files('lake', 'typed', schema => 's1')")
    q("types_filter", "SELECT i FROM lake.s1.typed WHERE iv > INTERVAL '1 month' "
      "OR ttz > TIMETZ '12:00:00+00' ORDER BY i")
    q("types_update", "UPDATE lake.s1.typed SET iv = iv + INTERVAL '1 month', "
      "ttz = TIMETZ '10:00:00+01', dec = dec * 2 WHERE i > 0")
    q("types_read_updated", typed)
    q("types_flush", "SELECT * FROM ducklake_flush_inlined_data('lake', schema_name => 's1', "
      "table_name => 'typed')")
    q("types_files_after_flush", "SELECT count(*) FROM ducklake_list_files('lake', 'typed', "
      "schema => 's1')")
    q("types_read_after_flush", typed)

    # --- options -----------------------------------------------------------------------------
    x("option_compression", "CALL lake.set_option('parquet_compression', 'zstd')")
    x("option_table_scoped", "CALL lake.set_option('parquet_row_group_size', 1000, "
      "schema => 's1', table_name => 'orders2')")
    q("options_after", "SELECT option_name, value, scope, scope_entry FROM lake.options() ORDER BY ALL")

    # --- partitioning ------------------------------------------------------------------------
    x("part_create", "CREATE TABLE lake.s1.events(id INTEGER, region VARCHAR, ts TIMESTAMP, v DOUBLE)")
    x("part_set", "ALTER TABLE lake.s1.events SET PARTITIONED BY (region, year(ts))")
    q("part_insert", "INSERT INTO lake.s1.events SELECT i, ['eu', 'us', 'ap'][i % 3 + 1], "
      "TIMESTAMP '2022-06-01' + INTERVAL (i * 7) DAY, i * 0.5 FROM range(0, 300) t(i)")
    q("part_files", "SELECT data_file FROM ducklake_list_files('lake', 'events', schema => 's1')")
    q("part_pruned_read", "SELECT count(*), sum(v) FROM lake.s1.events "
      "WHERE region = 'us' AND year(ts) = 2023")
    x("part_change", "ALTER TABLE lake.s1.events SET PARTITIONED BY (region)")
    q("part_insert_2", "INSERT INTO lake.s1.events SELECT i, 'sa', TIMESTAMP '2025-01-01', i "
      "FROM range(300, 320) t(i)")
    q("part_files_2", "SELECT data_file FROM ducklake_list_files('lake', 'events', schema => 's1')")
    q("part_read", "SELECT region, count(*), sum(v) FROM lake.s1.events GROUP BY region")

    # --- many small files, then maintenance --------------------------------------------------
    x("small_files_create", "CREATE TABLE lake.main.ticks(i INTEGER, s VARCHAR)")
    x("small_files_no_inline", "CALL lake.set_option('data_inlining_row_limit', 0, "
      "table_name => 'ticks')")
    for i in range(12):
        r.q(f"small_files_insert_{i}", f"INSERT INTO lake.main.ticks VALUES ({i}, 'tick {i}')",
            record=(i in (0, 11)))
    q("small_files_count", "SELECT count(*) FROM ducklake_list_files('lake', 'ticks')")
    q("small_files_delete", "DELETE FROM lake.main.ticks WHERE i % 2 = 0")
    q("merge_adjacent_files", "SELECT * FROM ducklake_merge_adjacent_files('lake', 'ticks')")
    q("files_after_merge", "SELECT count(*) FROM ducklake_list_files('lake', 'ticks')")
    q("rewrite_data_files", "SELECT * FROM ducklake_rewrite_data_files('lake', 'orders2', "
      "schema => 's1', delete_threshold => 0.0)")
    q("ticks_after_maintenance", "SELECT * FROM lake.main.ticks ORDER BY i")
    q("orders_after_rewrite", "SELECT count(*), sum(amount), sum(qty) FROM lake.s1.orders2")
    expire = sorted(snaps)[2:5]
    q("expire_snapshots_dry", "SELECT snapshot_id FROM ducklake_expire_snapshots('lake', "
      f"dry_run => true, versions => {expire})")
    q("expire_snapshots", "SELECT snapshot_id FROM ducklake_expire_snapshots('lake', "
      f"versions => {expire})")
    q("snapshots_after_expire", "SELECT snapshot_id FROM lake.snapshots() ORDER BY snapshot_id")
    q("cleanup_old_files_dry", "SELECT count(*) FROM ducklake_cleanup_old_files('lake', "
      "dry_run => true, cleanup_all => true)")
    q("cleanup_old_files", "SELECT path FROM ducklake_cleanup_old_files('lake', cleanup_all => true)")
    q("cleanup_old_files_again", "SELECT count(*) FROM ducklake_cleanup_old_files('lake', "
      "cleanup_all => true)")
    # A file in the data path that no snapshot references.
    q("orphan_write", f"COPY (SELECT 42 AS answer) TO '{r.data_path}/main/orphan.parquet'")
    q("delete_orphaned_files_dry", "SELECT path FROM ducklake_delete_orphaned_files('lake', "
      "dry_run => true, cleanup_all => true)")
    q("delete_orphaned_files", "SELECT path FROM ducklake_delete_orphaned_files('lake', "
      "cleanup_all => true)")
    q("delete_orphaned_files_again", "SELECT count(*) FROM ducklake_delete_orphaned_files('lake', "
      "cleanup_all => true)")
    x("checkpoint", "CHECKPOINT lake")
    q("files_after_checkpoint", "SELECT table_name, file_count, delete_file_count "
      "FROM ducklake_table_info('lake')")
    q("snapshots_after_checkpoint", "SELECT snapshot_id, schema_version, changes "
      "FROM lake.snapshots() ORDER BY snapshot_id")

    # --- the catalog's own tables, read through DuckDB's postgres extension -------------------
    meta = f"__ducklake_metadata_lake.{meta_schema(catalog)}"
    q("meta_metadata", f"SELECT key, value, scope, scope_id FROM {meta}.ducklake_metadata")
    q("meta_snapshot", f"SELECT * FROM {meta}.ducklake_snapshot", mask_cols=("snapshot_time",))
    q("meta_snapshot_changes", f"SELECT * FROM {meta}.ducklake_snapshot_changes")
    q("meta_schema", f"SELECT * FROM {meta}.ducklake_schema")
    q("meta_table", f"SELECT * FROM {meta}.ducklake_table")
    q("meta_view", f"SELECT * FROM {meta}.ducklake_view")
    q("meta_column", f"SELECT * FROM {meta}.ducklake_column")
    q("meta_data_file", f"SELECT * FROM {meta}.ducklake_data_file")
    # A delete file stores the data file's full path, so its size follows the DATA_PATH's length.
    # When one UPDATE/DELETE writes delete files for several data files, DuckLake numbers them
    # in an order that changes from run to run (seen on PostgreSQL too): mask the id.
    q("meta_delete_file", f"SELECT * FROM {meta}.ducklake_delete_file",
      mask_cols=("delete_file_id", "file_size_bytes", "footer_size"))
    q("meta_table_stats", f"SELECT * FROM {meta}.ducklake_table_stats")
    q("meta_column_stats", f"SELECT * FROM {meta}.ducklake_table_column_stats")
    q("meta_file_column_stats", f"SELECT * FROM {meta}.ducklake_file_column_stats")
    q("meta_partition", f"SELECT * FROM {meta}.ducklake_partition_info")
    q("meta_partition_column", f"SELECT * FROM {meta}.ducklake_partition_column")
    q("meta_file_partition_value", f"SELECT * FROM {meta}.ducklake_file_partition_value")
    q("meta_tag", f"SELECT * FROM {meta}.ducklake_tag")
    q("meta_column_tag", f"SELECT * FROM {meta}.ducklake_column_tag")
    q("meta_inlined_tables", f"SELECT * FROM {meta}.ducklake_inlined_data_tables")
    q("meta_files_scheduled", f"SELECT count(*) FROM {meta}.ducklake_files_scheduled_for_deletion")

    # --- the server as a plain database: a client's own table with array columns, written
    # (binary/text COPY), read, filtered, updated (DuckDB's temp table + ctid join) and deleted
    # through DuckDB's postgres extension ----------------------------------------------------
    # (Only on a PostgreSQL catalog: DuckLake's embedded catalogs are no PostgreSQL database.)
    if catalog_kind(catalog) == "postgres":
        x("plain_attach", f"ATTACH '{catalog}' AS pgdb (TYPE postgres)")
        x("arrays_create", "CREATE TABLE pgdb.public.e2e_arrays(id INTEGER, a INTEGER[], "
          "b VARCHAR[], d DOUBLE[], e BOOLEAN[], n BIGINT[], u UUID[], m DECIMAL(10,2)[], dt DATE[], "
          "ts TIMESTAMP[], iv INTERVAL[], bl BLOB[])")
        q("arrays_insert", "INSERT INTO pgdb.public.e2e_arrays VALUES "
          "(1, [1, 2, NULL], ['a b', 'c', '', 'x\"y', 'back\\slash', '{}'], [1.5, 'inf'::DOUBLE, -0.25], "
          "[true, NULL], [9223372036854775807], ['a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'], "
          "[1.5, 2], ['2024-01-02'::DATE], ['1999-12-31 23:59:59.5'::TIMESTAMP, NULL], "
          "[INTERVAL '1 year 2 months 3 days 04:05:06.7', INTERVAL '-1 day 2 hours'], "
          "['\\xde\\xad'::BLOB, ''::BLOB, 'a,b'::BLOB]), "
          "(2, [], [], NULL, [false], NULL, [], [], [], [], [], []), "
          "(3, NULL, ['only'], [1e20], [], [-1, 0], NULL, NULL, NULL, NULL, NULL, NULL)")
        q("arrays_read", "SELECT * FROM pgdb.public.e2e_arrays ORDER BY id")
        q("arrays_filter", "SELECT id, a[1], len(b) FROM pgdb.public.e2e_arrays "
          "WHERE list_contains(a, 2) OR id = 3 ORDER BY id")
        q("arrays_server_side", "SELECT * FROM postgres_query('pgdb', 'SELECT id, a, b, a[2] AS second, "
          "cardinality(b) AS nb FROM public.e2e_arrays WHERE 2 = ANY(a) OR a = ''{}''::int[] ORDER BY id')")
        q("arrays_update", "UPDATE pgdb.public.e2e_arrays SET a = [7, 8], b = ['u'], "
          "iv = [INTERVAL '5 minutes'] WHERE id = 2")
        q("arrays_delete", "DELETE FROM pgdb.public.e2e_arrays WHERE id = 3")
        q("arrays_read_after", "SELECT id, a, b, n, iv FROM pgdb.public.e2e_arrays ORDER BY id")
        x("arrays_drop", "DROP TABLE pgdb.public.e2e_arrays")
        x("plain_detach", "DETACH pgdb")

    # --- drops -------------------------------------------------------------------------------
    x("drop_create_scratch", "CREATE TABLE lake.main.scratch AS SELECT * FROM range(5) t(i)")
    x("drop_view", "DROP VIEW lake.s1.big_orders")
    x("drop_table", "DROP TABLE lake.main.scratch")
    x("drop_schema_create", "CREATE SCHEMA lake.tmp_schema")
    x("drop_schema", "DROP SCHEMA lake.tmp_schema")
    q("drop_view_gone", "SELECT count(*) FROM lake.s1.big_orders", error=True)
    q("tables_after_drop", "SELECT schema_name, table_name FROM duckdb_tables() "
      "WHERE database_name = 'lake'")
    q("schemas_after_drop", "SELECT schema_name FROM duckdb_schemas() WHERE database_name = 'lake'")

    # --- detach, fresh attach, read everything back ------------------------------------------
    x("detach", "DETACH lake")
    r = reattach()
    q, x = r.q, r.x
    # The attach option is given too; on PostgreSQL the catalog's stored limit (50) still wins
    # (the 8-row insert below stays inlined), and RockLake must behave the same.
    x("reattach", attach_sql(extra="DATA_INLINING_ROW_LIMIT 5"))
    q("reread_tables", "SELECT schema_name, table_name, comment FROM duckdb_tables() "
      "WHERE database_name = 'lake'")
    q("reread_orders", "SELECT count(*), sum(amount), sum(qty), count(DISTINCT client), "
      "max(length(note)) FROM lake.s1.orders2")
    q("reread_orders_sample", "SELECT * FROM lake.s1.orders2 WHERE id % 499 = 0 ORDER BY id")
    q("reread_customers", "SELECT * FROM lake.main.customers")
    q("reread_small", "SELECT * FROM lake.s1.small ORDER BY k")
    q("reread_events", "SELECT region, year(ts), count(*), sum(v) FROM lake.s1.events GROUP BY ALL")
    q("reread_ticks", "SELECT * FROM lake.main.ticks ORDER BY i")
    q("reread_columns", "SELECT table_name, column_name, data_type, is_nullable "
      "FROM information_schema.columns WHERE table_catalog = 'lake'")
    q("reread_snapshots", "SELECT snapshot_id, schema_version, changes, author, commit_message, "
      "commit_extra_info FROM lake.snapshots() ORDER BY snapshot_id")
    q("reread_time_travel", "SELECT count(*), sum(amount) FROM lake.s1.orders "
      f"AT (VERSION => {r.prev.snap_after_batches})")
    q("reread_options", "SELECT option_name, value, scope, scope_entry FROM lake.options() "
      "ORDER BY ALL")
    q("reread_write", "INSERT INTO lake.main.customers VALUES ('kim', 'oslo', 1.0)")
    q("reread_write_8", "INSERT INTO lake.main.customers SELECT 'n' || i, 'x', i "
      "FROM range(8) t(i)")
    q("reread_after_write", "SELECT count(*), sum(score) FROM lake.main.customers")
    q("reread_files_after_write", "SELECT table_name, file_count, delete_file_count "
      "FROM ducklake_table_info('lake')")
    # A read-only attach pinned to an old snapshot.
    x("attach_snapshot_version", attach_sql("lake_old",
                                            f"SNAPSHOT_VERSION {r.prev.snap_after_batches}"))
    q("snapshot_version_read", "SELECT count(*), sum(amount) FROM lake_old.s1.orders")
    q("snapshot_version_readonly", "INSERT INTO lake_old.main.customers VALUES ('x', 'y', 0)",
      error=True)
    x("final_detach", "DETACH lake_old")
    x("final_detach_lake", "DETACH lake")
    return r


# The catalog's tables whose row counts a reread compares, read through DuckDB's postgres
# extension. Of the versioned ones (`end_snapshot`), only rows some kept snapshot can see: the
# ones that ended at or before the oldest kept snapshot are invisible to every read DuckLake
# can make, DuckLake keeps some of them (a dropped table's rows), and RockLake's gc removes them.
META_TABLES = ["ducklake_snapshot", "ducklake_snapshot_changes", "ducklake_file_column_stats",
               "ducklake_table_stats", "ducklake_table_column_stats",
               "ducklake_files_scheduled_for_deletion", "ducklake_inlined_data_tables",
               "ducklake_metadata"]
META_VERSIONED = ["ducklake_schema", "ducklake_table", "ducklake_column", "ducklake_data_file",
                  "ducklake_delete_file", "ducklake_view", "ducklake_tag", "ducklake_column_tag"]
USER_TABLES = ["s1.orders2", "main.customers", "main.ticks", "s1.small", "s1.events"]


def reread(r, attach_sql, meta="__ducklake_metadata_lake.public"):
    """After the workload (and, on RockLake, a restart after `retain-from` and `gc`): read
    everything DuckLake still keeps, at every snapshot it keeps. Read only."""
    q, x = r.q, r.x
    x("after_gc_attach", attach_sql())
    snaps = [row[0] for row in r.con.execute(
        "SELECT snapshot_id FROM lake.snapshots() ORDER BY snapshot_id").fetchall()]
    q("after_gc_snapshots", "SELECT snapshot_id, schema_version, changes FROM lake.snapshots() "
      "ORDER BY snapshot_id")
    for t in USER_TABLES:
        q(f"after_gc_{t}", f"SELECT count(*) FROM lake.{t}")
        for s in snaps:
            r.read_or_fail(f"after_gc_{t}_at_{s}", f"SELECT count(*) FROM lake.{t} AT (VERSION => {s})")
        schema, name = t.split(".")
        r.read_or_fail(f"after_gc_{t}_changes", "SELECT change_type, count(*) FROM ducklake_table_changes("
            f"'lake', '{schema}', '{name}', {snaps[0]}, {snaps[-1]}) GROUP BY ALL")
    q("after_gc_table_info", "SELECT table_name, file_count, delete_file_count "
      "FROM ducklake_table_info('lake')")
    for t in META_TABLES:
        r.read_or_fail(f"after_gc_meta_{t}", f"SELECT count(*) FROM {meta}.{t}")
    for t in META_VERSIONED:
        r.read_or_fail(f"after_gc_meta_{t}", f"SELECT count(*) FROM {meta}.{t} "
                       f"WHERE end_snapshot IS NULL OR end_snapshot > {snaps[0]}")
    x("after_gc_detach", "DETACH lake")
    return r


def expire_old(r, attach_sql, keep=10):
    """DuckLake's own expiry of every snapshot but the last `keep`, and the cleanup of the
    files only they referenced, so that RockLake's retain-from and gc have versions to remove."""
    q, x = r.q, r.x
    x("expire_old_attach", attach_sql())
    snaps = [row[0] for row in r.con.execute(
        "SELECT snapshot_id FROM lake.snapshots() ORDER BY snapshot_id").fetchall()]
    old = snaps[:-keep]
    q("expire_old", f"SELECT snapshot_id FROM ducklake_expire_snapshots('lake', versions => {old})")
    q("expire_old_cleanup", "SELECT count(*) FROM ducklake_cleanup_old_files('lake', "
      "cleanup_all => true)")
    q("expire_old_snapshots", "SELECT snapshot_id FROM lake.snapshots() ORDER BY snapshot_id")
    x("expire_old_detach", "DETACH lake")
    return r


def run(catalog, data_path, ext_dir, s3=False, phase="all"):
    """Run the workload; return the list of recorded steps."""
    def fresh():
        con = connect(ext_dir)
        if s3:
            con.execute(s3_secret_sql())
        return con

    def attach_sql(alias="lake", extra=""):
        opts = f"DATA_PATH '{data_path.rstrip('/')}/'" + (f", {extra}" if extra else "")
        return f"ATTACH '{ducklake_url(catalog)}' AS {alias} ({opts})"
    first = Recorder(fresh(), data_path)

    def reattach():
        first.con.close()
        nxt = Recorder(fresh(), data_path)
        nxt.steps, nxt.names, nxt.prev = first.steps, first.names, first
        return nxt

    try:
        if phase == "reread":
            last = reread(first, attach_sql, f"__ducklake_metadata_lake.{meta_schema(catalog)}")
        elif phase == "expire":
            last = expire_old(first, attach_sql)
        else:
            last = workload(first, attach_sql, reattach, catalog)
        last.con.close()
    except Exception as e:  # a bug in the workload's own Python, or a lost connection
        first.steps.append({"name": "workload_aborted", "error": f"{type(e).__name__}: {e}"})
    return first.steps


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--catalog", required=True,
                    help="libpq string of the metadata catalog, or sqlite:PATH / duckdb:PATH")
    ap.add_argument("--data-path", required=True, help="DATA_PATH folder or s3:// prefix")
    ap.add_argument("--ext-dir", required=True, help="extension directory (see setup_ext.py)")
    ap.add_argument("--out", required=True, help="where to write the recorded steps as JSON")
    ap.add_argument("--s3", action="store_true", help="create an S3 secret from the environment")
    ap.add_argument("--phase", choices=["all", "expire", "reread"], default="all",
                    help="after a finished workload: expire all but the last snapshots "
                         "(expire_old()), or only read back what is left (reread())")
    a = ap.parse_args()
    t0 = time.monotonic()
    steps = run(a.catalog, a.data_path, a.ext_dir, s3=a.s3, phase=a.phase)
    with open(a.out, "w") as f:
        json.dump({"seconds": round(time.monotonic() - t0, 2), "steps": steps}, f, indent=1)
    errors = [s for s in steps if "error" in s]
    print(f"workload: {len(steps)} steps, {len(errors)} errors, "
          f"{time.monotonic() - t0:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
