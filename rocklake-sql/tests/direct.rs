//! The direct path (single-table statements run without DataFusion's planner) answers as
//! DataFusion does: every statement here runs in `DirectMode::Check`, which answers it both
//! ways and fails it on any difference (columns, types, rows, order), and the test counts the
//! statements that really took the direct path.

mod common;

use common::{open, q, stores};
use rocklake_sql::{DirectMode, Session};

const SETUP: &str = "CREATE TABLE f (data_file_id BIGINT PRIMARY KEY, table_id BIGINT, begin_snapshot BIGINT, end_snapshot BIGINT, path VARCHAR, size DOUBLE PRECISION, ok BOOLEAN, at TIMESTAMP WITH TIME ZONE, n NUMERIC(10, 2));
CREATE TABLE stats (table_id BIGINT, record_count BIGINT, next_row_id BIGINT, file_size_bytes BIGINT);
CREATE SCHEMA s2;
CREATE TABLE s2.kv (k VARCHAR PRIMARY KEY, v VARCHAR);
CREATE TABLE e (id BIGINT)";

/// Statements of the direct path's shapes (each also run by DataFusion and compared), and
/// how many of them must have taken the direct path.
const DIRECT: &[&str] = &[
    "INSERT INTO f VALUES (1, 10, 1, NULL, 'a.parquet', 1.5, true, '2026-12-01 00:00:00+00', 1.25), (2, 10, 2, 5, 'b.parquet', NULL, false, NULL, '3'), (3, 11, 3, NULL, NULL, 2, NULL, NULL, -4.5)",
    "INSERT INTO f (data_file_id, table_id, at) VALUES (6, 13, now())",
    "INSERT INTO f (data_file_id, table_id, begin_snapshot, path) VALUES (4, '11', 4, 'd'), (5, 12, '6', 'e')",
    "INSERT INTO stats VALUES (10, 0, 0, 0), (11, 5, 5, 100), (12, NULL, 1, 2)",
    "INSERT INTO s2.kv VALUES ('x', 'y'), ('a', NULL)",
    // Literals of one type per column (taken without DataFusion's VALUES planning), and a
    // list with a value that is not a literal (planned by it).
    "INSERT INTO stats VALUES ('13', 1, NULL, -1)",
    "INSERT INTO f (data_file_id, table_id, path, size) VALUES (7, 13, 'x', NULL), (8, 13, upper('y'), 2.5)",
    "SELECT * FROM f",
    "SELECT data_file_id, path FROM f WHERE table_id = 10",
    "SELECT \"data_file_id\", \"path\" FROM \"public\".\"f\" WHERE \"begin_snapshot\" <= '3' AND (\"end_snapshot\" IS NULL OR \"end_snapshot\" > '3')",
    "SELECT path FROM f WHERE data_file_id IN (1, 3, 5, 99) ORDER BY path",
    "SELECT path, size FROM f ORDER BY size DESC",
    "SELECT path, size FROM f ORDER BY size NULLS FIRST, data_file_id DESC",
    "SELECT x.path FROM f AS x WHERE x.table_id <> 10 ORDER BY x.data_file_id",
    "SELECT f.path, at FROM public.f WHERE f.ok AND path COLLATE \"C\" > 'a'",
    "SELECT n FROM f WHERE n > 0 ORDER BY n",
    "SELECT data_file_id FROM f WHERE path LIKE '%.parquet' OR size IS NULL",
    "SELECT k, v FROM s2.kv WHERE v IS NOT NULL",
    "SELECT data_file_id FROM f WHERE table_id = 99",
    "UPDATE stats SET record_count = record_count + 1000, file_size_bytes = file_size_bytes + 65536, next_row_id = next_row_id + 1000 WHERE table_id = 11",
    "UPDATE f SET end_snapshot = 7 WHERE end_snapshot IS NULL AND data_file_id IN (1, 4)",
    "UPDATE f SET path = upper(path), n = n * 2 WHERE table_id = '11'",
    "UPDATE stats SET record_count = NULL",
    // DuckLake's own form: the statistics set to literals.
    "UPDATE stats SET record_count=1005, file_size_bytes=-3, next_row_id='7' WHERE table_id=11",
    "UPDATE f SET size = CAST('2.5' AS DOUBLE PRECISION), ok = NULL, path = 'z' WHERE data_file_id = 3",
    "DELETE FROM f WHERE data_file_id = 2",
    "DELETE FROM s2.kv WHERE k = 'nope'",
    "SELECT * FROM stats ORDER BY table_id",
    "SELECT * FROM f ORDER BY data_file_id",
    // The latest row by a maximum, as DuckLake asks for its latest snapshot: alone, in the
    // derived table DuckDB's postgres extension wraps it in, by another table's maximum, and
    // by the maximum of an empty table (no rows).
    "SELECT path, data_file_id FROM f WHERE data_file_id = (SELECT MAX(data_file_id) FROM f)",
    "SELECT \"path\", \"table_id\" FROM (SELECT data_file_id, table_id, path\n\t FROM \"public\".f WHERE data_file_id = (\n\t SELECT MAX(data_file_id) FROM \"public\".f\n\t )) AS __unnamed_subquery ",
    "SELECT path FROM f WHERE table_id = (SELECT max(table_id) FROM stats) ORDER BY path",
    "SELECT path FROM f WHERE data_file_id = (SELECT MAX(id) FROM e)",
    // No FROM: DuckDB's check of a pooled connection, and other constants.
    "SELECT 1",
    "SELECT 1 AS one, 'x' AS s, NULL, -2.5, CAST('7' AS BIGINT), true, 1 + 2",
    "SELECT 1, 1",
];

/// Statements that must stay with DataFusion (the direct path is not theirs); run to check
/// they still answer.
const GENERAL: &[&str] = &[
    "SELECT count(*) FROM f",
    "SELECT path FROM f LIMIT 1",
    "SELECT f.path FROM f JOIN stats ON f.table_id = stats.table_id",
    "SELECT data_file_id + 1 FROM f",
    "SELECT path FROM f WHERE table_id IN (SELECT table_id FROM stats)",
    "SELECT path FROM f WHERE data_file_id = (SELECT MIN(data_file_id) FROM f)",
    "SELECT path FROM f WHERE data_file_id = (SELECT MAX(data_file_id) FROM f WHERE table_id = 10)",
    "SELECT path FROM f WHERE size = (SELECT MAX(size) FROM f)",
    "SELECT p FROM (SELECT path AS p FROM f) AS x",
    "SELECT path FROM (SELECT path FROM f) AS x WHERE path = 'a'",
    "SELECT relname FROM pg_class WHERE relname = 'f'",
    "SELECT ctid, path FROM f",
    "WITH t AS (SELECT 1 AS one) SELECT one FROM t",
    "SELECT 1 WHERE false",
    "SELECT DISTINCT 1",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_answers_are_datafusions_on_every_engine() {
    for store in stores() {
        let db = open(&store).await;
        let mut s = Session::new(db.clone());
        s.set_direct_mode(DirectMode::Check);
        q(&mut s, SETUP).await;
        let before = s.direct_runs();
        for sql in DIRECT {
            // `q` fails on an error: a difference between the paths is one (XX000).
            q(&mut s, sql).await;
        }
        let direct = s.direct_runs() - before;
        let before = s.direct_runs();
        for sql in GENERAL {
            q(&mut s, sql).await;
        }
        let general = s.direct_runs() - before;
        println!(
            "{}: {} statements, {direct} on the direct path (each compared with DataFusion's \
             answer); {} others, {general} on it",
            store.name,
            DIRECT.len(),
            GENERAL.len()
        );
        assert_eq!(direct, DIRECT.len() as u64, "{}", store.name);
        assert_eq!(general, 0, "{}", store.name);
        // Every primary-key column named by `=` or `IN`: the primary-key index finds the
        // rows, so only they are read (the table's storage key does not lead with its id).
        s.set_direct_mode(DirectMode::On);
        for (sql, rows) in [
            ("SELECT path FROM f WHERE data_file_id = 3", 1),
            (
                "SELECT path FROM f WHERE data_file_id IN (1, 3, 5, 99, 3) AND table_id > 0",
                3,
            ),
            ("SELECT v FROM s2.kv WHERE k = 'x'", 1),
            ("UPDATE f SET ok = true WHERE data_file_id = '4'", 1),
            // The maximum of a primary key from the end of its index, then that row.
            (
                "SELECT path FROM f WHERE data_file_id = (SELECT MAX(data_file_id) FROM f)",
                2,
            ),
        ] {
            let before = s.rows_read();
            q(&mut s, sql).await;
            assert_eq!(s.rows_read() - before, rows, "{}: {sql}", store.name);
        }
        s.set_direct_mode(DirectMode::Check);
        // Inside a block too: reads see the block's own writes on both paths.
        q(&mut s, "BEGIN").await;
        q(
            &mut s,
            "INSERT INTO f (data_file_id, table_id, begin_snapshot) VALUES (50, 10, 9)",
        )
        .await;
        assert_eq!(
            q(
                &mut s,
                "SELECT data_file_id FROM f WHERE table_id = 10 AND begin_snapshot = 9"
            )
            .await,
            ["50"]
        );
        // The maximum sees the block's own rows, and not those it deleted.
        let latest =
            "SELECT data_file_id FROM f WHERE data_file_id = (SELECT MAX(data_file_id) FROM f)";
        assert_eq!(q(&mut s, latest).await, ["50"]);
        q(&mut s, "DELETE FROM f WHERE data_file_id IN (50, 8)").await;
        assert_eq!(q(&mut s, latest).await, ["7"]);
        q(&mut s, "ROLLBACK").await;
        assert_eq!(q(&mut s, latest).await, ["8"]);
        assert!(
            q(&mut s, "SELECT data_file_id FROM f WHERE data_file_id = 50")
                .await
                .is_empty()
        );
        db.close().await.unwrap();
    }
}

/// The direct path and DataFusion's give the same answers, and errors stay DataFusion's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_and_answers_do_not_depend_on_the_path() {
    let store = stores().remove(0);
    let db = open(&store).await;
    let mut on = Session::new(db.clone());
    let mut off = Session::new(db.clone());
    off.set_direct_mode(DirectMode::Off);
    q(&mut on, SETUP).await;
    for sql in DIRECT.iter().filter(|s| s.starts_with("INSERT")) {
        q(&mut on, sql).await;
    }
    for sql in [
        "SELECT path FROM f WHERE table_id = 'abc'",
        "SELECT nope FROM f",
        "SELECT path FROM missing",
        "UPDATE stats SET record_count = 'x' WHERE table_id = 10",
        "INSERT INTO f (data_file_id, table_id) VALUES (1, 1)",
        "INSERT INTO f (data_file_id, at) VALUES (77, 'not a time')",
    ] {
        let a = on.execute(sql).await;
        let b = off.execute(sql).await;
        let code = |r: &Vec<rocklake_sql::Result<rocklake_sql::Output>>| {
            r.iter()
                .map(|x| match x {
                    Ok(o) => o.tag(),
                    Err(e) => format!("{} {}", e.code, e.message),
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(code(&a), code(&b), "{sql}");
        assert!(
            a.iter().any(|r| r.is_err()),
            "{sql} should fail: {:?}",
            code(&a)
        );
    }
    assert_eq!(off.direct_runs(), 0);
    db.close().await.unwrap();
}

/// DuckLake's update of a table's column statistics on every commit, a `WITH ... AS (VALUES
/// ...) UPDATE ... FROM` join, runs as one single-table UPDATE per VALUES row: each reads only
/// its key range (here one row) instead of the whole table, and writes what DataFusion's join
/// writes (checked in `DirectMode::Check`). Shapes whose meaning the rewrite could change stay
/// with DataFusion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ducklakes_values_join_update_reads_only_its_rows() {
    const STATS: &str = "CREATE TABLE \"public\".\"ducklake_table_column_stats\"(\"table_id\" BIGINT, \"column_id\" BIGINT, \"contains_null\" BOOLEAN, \"contains_nan\" BOOLEAN, \"min_value\" VARCHAR, \"max_value\" VARCHAR, \"extra_stats\" VARCHAR)";
    const UPDATE: &str = "WITH new_values(tid, cid, new_contains_null, new_contains_nan, new_min, new_max, new_extra_stats) AS (
VALUES (7, 1, false, NULL, '0', '6', NULL),(7, 2, true, NULL, 'a', 'w', NULL)
)
UPDATE \"public\".ducklake_table_column_stats
SET contains_null=CAST(new_contains_null AS BOOLEAN), contains_nan=CAST(new_contains_nan AS BOOLEAN), min_value=new_min, max_value=new_max, extra_stats=new_extra_stats
FROM new_values
WHERE table_id=tid AND column_id=cid";
    for store in stores() {
        let db = open(&store).await;
        let mut s = Session::new(db.clone());
        s.set_direct_mode(DirectMode::Check);
        q(&mut s, STATS).await;
        let rows: Vec<String> = (1..=50)
            .flat_map(|t| (1..=4).map(move |c| format!("({t}, {c}, false, NULL, '1', '2', NULL)")))
            .collect();
        q(
            &mut s,
            &format!(
                "INSERT INTO ducklake_table_column_stats VALUES {}",
                rows.join(", ")
            ),
        )
        .await;
        let (runs, read) = (s.direct_runs(), s.rows_read());
        assert_eq!(q(&mut s, UPDATE).await, ["UPDATE 2"], "{}", store.name);
        s.set_direct_mode(DirectMode::On);
        let (runs_on, read_on) = (s.direct_runs(), s.rows_read());
        assert_eq!(q(&mut s, UPDATE).await, ["UPDATE 2"], "{}", store.name);
        // Two UPDATEs on the direct path, one row each; the check mode run before read the
        // whole table once more through DataFusion's join.
        assert_eq!(s.direct_runs() - runs_on, 2, "{}", store.name);
        assert_eq!(s.rows_read() - read_on, 2, "{}", store.name);
        assert!(s.direct_runs() - runs >= 2, "{}", store.name);
        assert!(s.rows_read() - read >= 200, "{}", store.name);
        assert_eq!(
            q(
                &mut s,
                "SELECT table_id, column_id, contains_null, min_value, max_value FROM ducklake_table_column_stats WHERE table_id IN (6, 7) ORDER BY table_id, column_id"
            )
            .await,
            [
                "6|1|false|1|2",
                "6|2|false|1|2",
                "6|3|false|1|2",
                "6|4|false|1|2",
                "7|1|false|0|6",
                "7|2|true|a|w",
                "7|3|false|1|2",
                "7|4|false|1|2"
            ],
            "{}",
            store.name
        );
        s.set_direct_mode(DirectMode::Check);
        for (sql, tag) in [
            // Two rows of the list name one row: PostgreSQL updates it once, so DataFusion's
            // join does it.
            ("WITH v(tid, cid, m) AS (VALUES (8, 1, 'x'), (8, 1, 'y')) UPDATE ducklake_table_column_stats SET min_value = m FROM v WHERE table_id = tid AND column_id = cid", "UPDATE 1"),
            // Values of two kinds in one column: PostgreSQL types the column first.
            ("WITH v(tid, m) AS (VALUES (9, 'x'), ('9', 'x')) UPDATE ducklake_table_column_stats SET min_value = m FROM v WHERE table_id = CAST(tid AS BIGINT)", "UPDATE 4"),
            // Qualified by the CTE's alias.
            ("WITH v(tid, m) AS (VALUES (10, 'q')) UPDATE ducklake_table_column_stats AS s SET max_value = nv.m FROM v AS nv WHERE s.table_id = nv.tid", "UPDATE 4"),
        ] {
            assert_eq!(q(&mut s, sql).await, [tag], "{}: {sql}", store.name);
        }
        // A name of both the table and the CTE is ambiguous, with the direct path on too.
        s.set_direct_mode(DirectMode::On);
        let ambiguous = "WITH v(table_id, m) AS (VALUES (11, 'z')) UPDATE ducklake_table_column_stats SET min_value = m FROM v WHERE table_id = 11";
        let on = s.execute(ambiguous).await;
        assert!(on[0].is_err(), "{}: {ambiguous} should fail", store.name);
        assert_eq!(
            q(
                &mut s,
                "SELECT min_value, max_value FROM ducklake_table_column_stats WHERE table_id IN (8, 9, 10, 11) AND column_id = 1 ORDER BY table_id"
            )
            .await,
            ["x|2", "x|2", "1|q", "1|2"],
            "{}",
            store.name
        );
        db.close().await.unwrap();
    }
}
