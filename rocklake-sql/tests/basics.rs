//! Plain SQL on every engine: tables, primary keys, transactions, errors.

mod common;

use common::{err, open, q, q_pg, stores};
use rocklake_sql::{Session, Status};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_go_in_and_come_back_out_on_every_engine() {
    for store in stores() {
        let db = open(&store).await;
        let mut s = Session::new(db.clone());
        q(&mut s, "CREATE TABLE t (id BIGINT PRIMARY KEY, name VARCHAR, score DOUBLE PRECISION, ok BOOLEAN)").await;
        assert_eq!(q(&mut s, "INSERT INTO t VALUES (1, 'a', 0.5, true), (2, 'b', NULL, false), (3, NULL, 2, NULL)").await, ["INSERT 0 3"]);
        assert_eq!(
            q(&mut s, "SELECT id, name, score, ok FROM t ORDER BY id").await,
            ["1|a|0.5|true", "2|b|NULL|false", "3|NULL|2.0|NULL"],
            "{}",
            store.name
        );
        assert_eq!(
            q(&mut s, "UPDATE t SET name = 'z' WHERE id >= '2'").await,
            ["UPDATE 2"]
        );
        assert_eq!(
            q(&mut s, "DELETE FROM t WHERE name = 'a'").await,
            ["DELETE 1"]
        );
        assert_eq!(
            q(&mut s, "SELECT id, name FROM t ORDER BY id").await,
            ["2|z", "3|z"]
        );
        let (code, msg) = err(&mut s, "INSERT INTO t VALUES (2, 'dup', 1, true)").await;
        assert_eq!(code, "23505", "{msg}");
        assert_eq!(
            msg,
            "duplicate key value violates unique constraint \"t_pkey\""
        );
        // A deleted key is free again, as in PostgreSQL.
        q(&mut s, "INSERT INTO t (id, name) VALUES (1, 'again')").await;
        assert_eq!(q(&mut s, "SELECT count(*) FROM t").await, ["3"]);
        db.close().await.unwrap();
        // Everything committed is there after a reopen.
        if store.name != "model" {
            let db = open(&store).await;
            let mut s = Session::new(db.clone());
            assert_eq!(
                q(&mut s, "SELECT id, name FROM t ORDER BY id").await,
                ["1|again", "2|z", "3|z"],
                "{}",
                store.name
            );
            db.close().await.unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_follow_postgresql() {
    for store in stores() {
        let db = open(&store).await;
        let mut a = Session::new(db.clone());
        let mut b = Session::new(db.clone());
        q(&mut a, "CREATE TABLE t (id BIGINT PRIMARY KEY, v VARCHAR)").await;
        q(&mut a, "BEGIN TRANSACTION ISOLATION LEVEL REPEATABLE READ").await;
        assert_eq!(a.status(), Status::InBlock);
        q(&mut a, "INSERT INTO t VALUES (1, 'x')").await;
        // Own writes are visible inside; nothing is visible outside before COMMIT.
        assert_eq!(q(&mut a, "SELECT v FROM t").await, ["x"]);
        assert!(q(&mut b, "SELECT v FROM t").await.is_empty());
        q(&mut a, "COMMIT").await;
        assert_eq!(q(&mut b, "SELECT v FROM t").await, ["x"]);
        // ROLLBACK lands nothing.
        q(&mut a, "BEGIN; INSERT INTO t VALUES (2, 'y')").await;
        q(&mut a, "ROLLBACK").await;
        assert_eq!(q(&mut b, "SELECT count(*) FROM t").await, ["1"]);
        // An error aborts the block until ROLLBACK; COMMIT of it rolls back.
        q(&mut a, "BEGIN").await;
        q(&mut a, "INSERT INTO t VALUES (3, 'z')").await;
        let (code, _) = err(&mut a, "INSERT INTO t VALUES (1, 'dup')").await;
        assert_eq!(code, "23505");
        assert_eq!(a.status(), Status::Failed);
        let (code, _) = err(&mut a, "SELECT 1").await;
        assert_eq!(code, "25P02");
        assert_eq!(q(&mut a, "COMMIT").await, ["ROLLBACK"]);
        assert_eq!(a.status(), Status::Idle);
        assert_eq!(
            q(&mut b, "SELECT count(*) FROM t").await,
            ["1"],
            "{}",
            store.name
        );
        // A multi-statement text outside a block is one implicit transaction.
        let out = a
            .execute("INSERT INTO t VALUES (4, 'w'); INSERT INTO t VALUES (1, 'dup')")
            .await;
        assert!(out[0].is_ok() && out[1].as_ref().unwrap_err().code == "23505");
        assert_eq!(
            q(&mut b, "SELECT count(*) FROM t").await,
            ["1"],
            "{}",
            store.name
        );
        // A session dropped with a block open lands nothing.
        {
            let mut c = Session::new(db.clone());
            q(&mut c, "BEGIN; INSERT INTO t VALUES (5, 'gone')").await;
        }
        assert_eq!(q(&mut b, "SELECT count(*) FROM t").await, ["1"]);
        db.close().await.unwrap();
    }
}

/// RockLake runs transactions under snapshot isolation: a request for SERIALIZABLE is refused
/// with `0A000` (and starts nothing), never silently run weaker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serializable_is_refused_rather_than_weakened() {
    let store = &stores()[0];
    let db = open(store).await;
    let mut a = Session::new(db.clone());
    q(&mut a, "CREATE TABLE t (id BIGINT PRIMARY KEY, v VARCHAR)").await;
    for sql in [
        "BEGIN ISOLATION LEVEL SERIALIZABLE",
        "START TRANSACTION READ WRITE, ISOLATION LEVEL SERIALIZABLE",
        "SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL SERIALIZABLE",
        "SET default_transaction_isolation = 'serializable'",
        "SET transaction_isolation TO SERIALIZABLE",
    ] {
        let (code, msg) = err(&mut a, sql).await;
        assert_eq!(code, "0A000", "{sql}: {msg}");
        assert!(msg.contains("SERIALIZABLE"), "{sql}: {msg}");
        assert_eq!(a.status(), Status::Idle, "{sql} started a block");
    }
    // Inside a block the refusal fails the block, as any error does; nothing of it lands.
    q(&mut a, "BEGIN; INSERT INTO t VALUES (1, 'x')").await;
    let (code, _) = err(&mut a, "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE").await;
    assert_eq!(code, "0A000");
    assert_eq!(a.status(), Status::Failed);
    assert_eq!(q(&mut a, "COMMIT").await, ["ROLLBACK"]);
    assert_eq!(q(&mut a, "SELECT count(*) FROM t").await, ["0"]);
    // The levels RockLake does give (or a stronger one) are accepted.
    for sql in [
        "BEGIN ISOLATION LEVEL REPEATABLE READ; COMMIT",
        "BEGIN ISOLATION LEVEL READ COMMITTED; COMMIT",
        "SET default_transaction_isolation = 'repeatable read'",
    ] {
        q(&mut a, sql).await;
    }
    let (code, _) = err_startup(&mut a, "default_transaction_isolation", "serializable");
    assert_eq!(code, "0A000");
    db.close().await.unwrap();
}

fn err_startup(s: &mut Session, name: &str, value: &str) -> (String, String) {
    let e = s
        .startup_setting(name, value)
        .expect_err("a startup setting of SERIALIZABLE is refused");
    (e.code.to_string(), e.message.to_string())
}

/// Runs `sql` on `s` in a task, checks it is still waiting 200 ms later, then runs `then`
/// (which must let it finish) and gives back the session and the statement's result.
async fn pending_until(
    mut s: Session,
    sql: &'static str,
    then: impl std::future::Future<Output = ()>,
) -> (Session, rocklake_sql::Result<rocklake_sql::Output>) {
    let task = tokio::spawn(async move {
        let r = Box::pin(s.run(sql)).await;
        (s, r)
    });
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert!(
        !task.is_finished(),
        "{sql} should wait for the other transaction"
    );
    then.await;
    task.await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sessions_committing_the_same_key_exactly_one_wins() {
    for store in stores() {
        let db = open(&store).await;
        let mut a = Session::new(db.clone());
        let mut b = Session::new(db.clone());
        q(
            &mut a,
            "CREATE TABLE s (snapshot_id BIGINT PRIMARY KEY, note VARCHAR)",
        )
        .await;
        q(&mut a, "BEGIN").await;
        q(&mut b, "BEGIN").await;
        q(&mut a, "INSERT INTO s VALUES (7, 'a')").await;
        // As on PostgreSQL, b's INSERT of the key a added waits for a's transaction, and gets
        // 23505 at once when a commits (not at its own COMMIT, after the rest of its work).
        let (b_back, r) = pending_until(b, "INSERT INTO s VALUES (7, 'b')", async {
            q(&mut a, "COMMIT").await;
        })
        .await;
        b = b_back;
        let e = r.expect_err("b's INSERT of a committed key");
        assert_eq!(e.code, "23505", "{}: {}", store.name, e.message);
        assert_eq!(
            e.message,
            "duplicate key value violates unique constraint \"s_pkey\""
        );
        q(&mut b, "ROLLBACK").await;
        assert_eq!(q(&mut a, "SELECT note FROM s").await, ["a"]);

        // When a rolls back instead, b's INSERT goes on and b's commit lands.
        q(&mut a, "BEGIN; INSERT INTO s VALUES (8, 'a')").await;
        q(&mut b, "BEGIN").await;
        let (b_back, r) = pending_until(b, "INSERT INTO s VALUES (8, 'b')", async {
            q(&mut a, "ROLLBACK").await;
        })
        .await;
        b = b_back;
        r.expect("b's INSERT after a rolled back");
        q(&mut b, "COMMIT").await;
        assert_eq!(
            q(&mut a, "SELECT note FROM s WHERE snapshot_id = 8").await,
            ["b"]
        );

        // Two transactions each waiting for the other's key: one gets 40P01, the other goes on.
        q(&mut a, "BEGIN; INSERT INTO s VALUES (10, 'a')").await;
        q(&mut b, "BEGIN; INSERT INTO s VALUES (11, 'b')").await;
        let (a_back, r) = pending_until(a, "INSERT INTO s VALUES (11, 'a')", async {
            let (code, msg) = err(&mut b, "INSERT INTO s VALUES (10, 'b')").await;
            assert_eq!(code, "40P01", "{}: {msg}", store.name);
            q(&mut b, "ROLLBACK").await;
        })
        .await;
        a = a_back;
        r.expect("a's INSERT once b rolled back");
        q(&mut a, "COMMIT").await;
        assert_eq!(
            q(
                &mut a,
                "SELECT snapshot_id, note FROM s WHERE snapshot_id >= 10 ORDER BY 1"
            )
            .await,
            ["10|a", "11|a"]
        );
        db.close().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_statements_get_postgresql_errors_and_change_nothing() {
    let store = &stores()[0];
    let db = open(store).await;
    let mut s = Session::new(db.clone());
    q(&mut s, "CREATE TABLE t (id BIGINT, name VARCHAR NOT NULL)").await;
    for (sql, code) in [
        ("SELEC 1", "42601"),
        ("SELECT * FROM nope", "42P01"),
        ("SELECT nope FROM t", "42703"),
        ("INSERT INTO t VALUES (1, NULL)", "23502"),
        ("INSERT INTO t VALUES ('x', 'a')", "22P02"),
        ("INSERT INTO t (id, nope) VALUES (1, 'a')", "42703"),
        ("CREATE TABLE t (id BIGINT)", "42P07"),
        ("CREATE TABLE nope.t (id BIGINT)", "3F000"),
        ("DROP TABLE nope", "42P01"),
        ("CREATE TABLE g (x GEOMETRY)", "0A000"),
        ("SELECT nope(1)", "42883"),
        ("SELECT 1 / 0", "22012"),
        ("SELECT CAST('x' AS BIGINT)", "22P02"),
        ("INSERT INTO t VALUES (1, 'a') RETURNING id", "0A000"),
        // A VALUES list mixing strings and numbers: each value is read as its column's type.
        ("INSERT INTO t VALUES (1, 'a'), ('x', 'b')", "22P02"),
        ("INSERT INTO t VALUES ('1 2', 'a'), (2, 'b')", "22P02"),
        (
            "INSERT INTO t VALUES (1, 'a'), ('9223372036854775808', 'b')",
            "22003",
        ),
    ] {
        let (got, msg) = err(&mut s, sql).await;
        assert_eq!(got, code, "{sql}: {msg}");
    }
    let (_, msg) = err(&mut s, "INSERT INTO t VALUES (1, 'a'), ('x', 'b')").await;
    assert_eq!(msg, "invalid input syntax for type bigint: \"x\"");
    assert_eq!(q(&mut s, "SELECT count(*) FROM t").await, ["0"]);
    // What PostgreSQL stores for the same lists.
    q(
        &mut s,
        "INSERT INTO t VALUES ('7', 'a'), (8, 9), (' -3 ', 'x'), ('+4', 007), (5, 1.50)",
    )
    .await;
    assert_eq!(
        q(&mut s, "SELECT id, name FROM t ORDER BY id").await,
        ["-3|x", "4|7", "5|1.50", "7|a", "8|9"]
    );
    db.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_filters_read_only_their_key_ranges() {
    for store in stores() {
        let db = open(&store).await;
        let mut s = Session::new(db.clone());
        // DuckLake's data-file table lands under its registry tag, keyed
        // table_id | data_file_id | begin_snapshot.
        q(&mut s, "CREATE TABLE ducklake_data_file (data_file_id BIGINT PRIMARY KEY, table_id BIGINT, begin_snapshot BIGINT, end_snapshot BIGINT, path VARCHAR)").await;
        let mut values = Vec::new();
        for t in 1..=10 {
            for f in 0..20 {
                values.push(format!(
                    "({}, {t}, {}, NULL, 'f{t}_{f}')",
                    t * 100 + f,
                    f % 5
                ));
            }
        }
        q(
            &mut s,
            &format!(
                "INSERT INTO ducklake_data_file VALUES {}",
                values.join(", ")
            ),
        )
        .await;
        let reads = |s: &Session, before: u64| s.rows_read() - before;
        for (sql, want_rows, want_read) in [
            ("SELECT count(*) FROM ducklake_data_file WHERE table_id = 3 AND begin_snapshot <= '2'", "12", 20),
            ("SELECT count(*) FROM ducklake_data_file WHERE table_id IN (3, 7)", "40", 40),
            ("SELECT count(*) FROM ducklake_data_file WHERE table_id = '4' AND data_file_id >= 410", "10", 10),
            ("SELECT count(*) FROM ducklake_data_file WHERE table_id > 8", "40", 40),
            ("SELECT count(*) FROM ducklake_data_file WHERE table_id IS NULL", "0", 0),
            // No key column in the filter: the whole table is read, DataFusion filters it.
            ("SELECT count(*) FROM ducklake_data_file WHERE path = 'f3_1'", "1", 200),
        ] {
            let before = s.rows_read();
            assert_eq!(q(&mut s, sql).await, [want_rows], "{}: {sql}", store.name);
            assert_eq!(reads(&s, before), want_read, "{}: {sql} read more than its key range", store.name);
        }
        db.close().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_table_frees_its_keys_and_is_audited_and_a_new_catalog_starts_clean() {
    for store in stores() {
        let db = open(&store).await;
        let mut s = Session::new(db.clone());
        q(&mut s, "CREATE TABLE ducklake_snapshot (snapshot_id BIGINT PRIMARY KEY, snapshot_time TIMESTAMP WITH TIME ZONE, schema_version BIGINT, next_catalog_id BIGINT, next_file_id BIGINT)").await;
        q(
            &mut s,
            "INSERT INTO ducklake_snapshot VALUES (0, NOW(), 0, 1, 0), (1, NOW(), 1, 2, 0)",
        )
        .await;
        // DROP inside a block that rolls back changes nothing.
        q(&mut s, "BEGIN; DROP TABLE ducklake_snapshot").await;
        q(&mut s, "ROLLBACK").await;
        assert_eq!(
            q(&mut s, "SELECT count(*) FROM ducklake_snapshot").await,
            ["2"]
        );
        // DuckLake's test setup: drop the schema with everything in it, then start again.
        let (code, _) = err(&mut s, "DROP SCHEMA public").await;
        assert_eq!(code, "2BP01");
        q(&mut s, "DROP SCHEMA public CASCADE; CREATE SCHEMA public").await;
        q(&mut s, "CREATE TABLE ducklake_snapshot (snapshot_id BIGINT PRIMARY KEY, snapshot_time TIMESTAMP WITH TIME ZONE, schema_version BIGINT, next_catalog_id BIGINT, next_file_id BIGINT)").await;
        assert_eq!(
            q(&mut s, "SELECT count(*) FROM ducklake_snapshot").await,
            ["0"],
            "{}",
            store.name
        );
        // The same snapshot ids are free again.
        q(
            &mut s,
            "INSERT INTO ducklake_snapshot VALUES (0, NOW(), 0, 1, 0)",
        )
        .await;
        // Nothing of the dropped table is left but its audit entry.
        let view = db.keyspace().backend().view().await.unwrap();
        let audit = view
            .scan(
                &rocklake_core::backend::KeyRange::prefix(&[0x81]),
                rocklake_core::backend::Order::Ascending,
                100,
            )
            .await
            .unwrap();
        assert_eq!(audit.len(), 1, "{}: one DROP TABLE was audited", store.name);
        let snapshots = view
            .scan(
                &rocklake_core::backend::KeyRange::prefix(&[0x02]),
                rocklake_core::backend::Order::Ascending,
                100,
            )
            .await
            .unwrap();
        assert_eq!(
            snapshots.len(),
            1,
            "{}: only the new table's row is under 0x02",
            store.name
        );
        let report = rocklake_core::verify::verify(view.as_ref(), |_, _| {})
            .await
            .unwrap();
        assert!(report.is_clean(), "{}: {:?}", store.name, report.findings);
        drop(view);
        db.close().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_writers_under_load_each_snapshot_id_is_won_once() {
    for store in stores() {
        let db = open(&store).await;
        let mut s = Session::new(db.clone());
        q(&mut s, "CREATE TABLE ducklake_snapshot (snapshot_id BIGINT PRIMARY KEY, snapshot_time TIMESTAMP WITH TIME ZONE, schema_version BIGINT, next_catalog_id BIGINT, next_file_id BIGINT)").await;
        q(&mut s, "CREATE TABLE ducklake_snapshot_changes (snapshot_id BIGINT PRIMARY KEY, changes_made VARCHAR, author VARCHAR, commit_message VARCHAR, commit_extra_info VARCHAR)").await;
        q(
            &mut s,
            "INSERT INTO ducklake_snapshot VALUES (0, NOW(), 0, 1, 0)",
        )
        .await;
        // Eight writers, as DuckLake's: read the latest snapshot, commit the next one, and on
        // 23505 read again and retry.
        let mut tasks = Vec::new();
        for w in 0..8 {
            let db = db.clone();
            tasks.push(tokio::spawn(async move {
                let mut s = Session::new(db);
                let (mut won, mut lost) = (0u32, 0u32);
                while won < 10 {
                    let latest = s.run("SELECT max(snapshot_id) FROM ducklake_snapshot").await.unwrap();
                    let next: i64 = common::lines(&latest)[0].parse::<i64>().unwrap() + 1;
                    let text = format!(
                        "BEGIN TRANSACTION ISOLATION LEVEL REPEATABLE READ; \
                         INSERT INTO ducklake_snapshot VALUES ({next}, NOW(), 0, 1, 0); \
                         INSERT INTO ducklake_snapshot_changes VALUES ({next}, 'w{w}', NULL, NULL, NULL)"
                    );
                    let began = s.execute(&text).await;
                    let refused = began.iter().any(|r| matches!(r, Err(e) if e.code == "23505"));
                    let committed = if refused {
                        s.run("ROLLBACK").await.unwrap();
                        false
                    } else {
                        match s.run("COMMIT").await {
                            Ok(_) => true,
                            Err(e) if e.code == "23505" => false,
                            Err(e) => panic!("writer {w}: {e}"),
                        }
                    };
                    if committed { won += 1 } else { lost += 1 }
                }
                (won, lost)
            }));
        }
        let (mut won, mut lost) = (0, 0);
        for t in tasks {
            let (w, l) = t.await.unwrap();
            won += w;
            lost += l;
        }
        assert_eq!(won, 80);
        // Every won commit is there whole, each id exactly once, with no gap.
        assert_eq!(q(&mut s, "SELECT count(*), count(DISTINCT snapshot_id), max(snapshot_id) FROM ducklake_snapshot").await, ["81|81|80"], "{}", store.name);
        assert_eq!(
            q(&mut s, "SELECT count(*) FROM ducklake_snapshot s JOIN ducklake_snapshot_changes c ON s.snapshot_id = c.snapshot_id").await,
            ["80"],
            "{}: each snapshot row has its changes row",
            store.name
        );
        println!(
            "{}: 8 writers, 80 snapshots committed, {lost} commits refused 23505 and retried",
            store.name
        );
        db.close().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_from_stdin_takes_typed_rows_whole_or_not_at_all() {
    use rocklake_core::values::Value;
    use rocklake_sql::Output;
    for store in stores() {
        let db = open(&store).await;
        let mut s = Session::new(db.clone());
        q(&mut s, "CREATE TABLE ducklake_metadata (key VARCHAR NOT NULL, value VARCHAR NOT NULL, scope VARCHAR, scope_id BIGINT)").await;
        let out = s.run("COPY \"public\".\"ducklake_metadata\" (\"key\", \"value\") FROM STDIN (FORMAT BINARY)").await.unwrap();
        let Output::CopyIn { columns, .. } = out else {
            panic!("{out:?}")
        };
        assert_eq!(
            columns.iter().map(|c| c.0.as_str()).collect::<Vec<_>>(),
            ["key", "value"]
        );
        let out = s
            .copy_in(vec![
                vec![Value::Text("version".into()), Value::Text("1.0".into())],
                vec![Value::Text("encrypted".into()), Value::Text("false".into())],
            ])
            .await
            .unwrap();
        assert_eq!(out.tag(), "COPY 2");
        assert_eq!(
            q(
                &mut s,
                "SELECT key, value, scope FROM ducklake_metadata ORDER BY key"
            )
            .await,
            ["encrypted|false|NULL", "version|1.0|NULL"]
        );
        // A bad row refuses the whole COPY; a NULL in a NOT NULL column too.
        s.run("COPY ducklake_metadata FROM STDIN").await.unwrap();
        let e = s
            .copy_in(vec![
                vec![
                    Value::Text("a".into()),
                    Value::Text("b".into()),
                    Value::Null,
                    Value::Null,
                ],
                vec![Value::Text("short".into())],
            ])
            .await
            .unwrap_err();
        assert_eq!(e.code, "22P04", "{e}");
        s.run("COPY ducklake_metadata FROM STDIN").await.unwrap();
        let e = s
            .copy_in(vec![vec![
                Value::Text("k".into()),
                Value::Null,
                Value::Null,
                Value::Null,
            ]])
            .await
            .unwrap_err();
        assert_eq!(e.code, "23502", "{e}");
        // Inside a block, a failed COPY aborts the block.
        q(&mut s, "BEGIN").await;
        s.run("COPY ducklake_metadata FROM STDIN").await.unwrap();
        let e = s.copy_fail("client gave up").await;
        assert_eq!(e.code, "57014");
        assert_eq!(s.status(), rocklake_sql::Status::Failed);
        q(&mut s, "ROLLBACK").await;
        assert_eq!(
            q(&mut s, "SELECT count(*) FROM ducklake_metadata").await,
            ["2"],
            "{}",
            store.name
        );
        // Rows need a COPY waiting for them.
        s.run("COPY ducklake_metadata (key, value) FROM STDIN")
            .await
            .unwrap();
        s.copy_in(vec![vec![Value::Text("x".into()), Value::Text("y".into())]])
            .await
            .unwrap();
        assert_eq!(s.copy_in(vec![]).await.unwrap_err().code, "08P01");
        assert_eq!(
            q(&mut s, "SELECT count(*) FROM ducklake_metadata").await,
            ["3"]
        );
        db.close().await.unwrap();
    }
}

/// `interval` and `time with time zone` take PostgreSQL's input forms and print PostgreSQL's
/// output forms; numeric literals are exact; each VALUES row converts to the column's type on
/// its own, so rows that DataFusion alone could not unify still insert.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn intervals_timetz_and_exact_numeric_literals_as_postgresql() {
    for store in stores() {
        let db = open(&store).await;
        let mut s = Session::new(db.clone());
        q(
            &mut s,
            "CREATE TABLE k (id BIGINT PRIMARY KEY, iv INTERVAL, tz TIME WITH TIME ZONE, \
                   n NUMERIC(38,10), d DOUBLE PRECISION, v VARCHAR)",
        )
        .await;
        assert_eq!(
            q(
                &mut s,
                "INSERT INTO k VALUES \
                (1, '1 year 2 months 3 days 04:05:06.7', '12:34:56+02', 1234567890123.0123456789, \
                 CAST('inf' AS DOUBLE PRECISION), 170141183460469231731687303715884105727), \
                (2, CAST('-1 day 2 hours' AS INTERVAL), '01:02:03-0530', 0.1, 3.4e+38, NULL), \
                (3, NULL, NULL, NULL, NULL, NULL)"
            )
            .await,
            ["INSERT 0 3"],
            "{}",
            store.name
        );
        // The values as PostgreSQL 15 prints them (checked with psql).
        assert_eq!(
            q_pg(&mut s, "SELECT id, iv, tz, n, d, v FROM k ORDER BY id").await,
            [
                "1|1 year 2 mons 3 days 04:05:06.7|12:34:56+02|1234567890123.0123456789|Infinity|170141183460469231731687303715884105727",
                "2|-1 days +02:00:00|01:02:03-05:30|0.1000000000|3.4e+38|NULL",
                "3|NULL|NULL|NULL|NULL|NULL",
            ],
            "{}",
            store.name
        );
        assert_eq!(
            q(
                &mut s,
                "UPDATE k SET iv = '@ 1 min ago', tz = '23:59:59.5+00' WHERE id = 1"
            )
            .await,
            ["UPDATE 1"]
        );
        assert_eq!(
            q_pg(&mut s, "SELECT iv, tz FROM k WHERE id = 1").await,
            ["-00:01:00|23:59:59.5+00"]
        );
        // Bad input is refused with PostgreSQL's SQLSTATE and changes nothing.
        for bad in [
            "INSERT INTO k (id, iv) VALUES (9, '1 fortnight')",
            "INSERT INTO k (id, tz) VALUES (9, '25:00:00+01')",
            "INSERT INTO k (id, tz) VALUES (9, '12:00:00+16')",
        ] {
            let (code, msg) = err(&mut s, bad).await;
            assert_eq!(code, "22007", "{bad}: {msg}");
        }
        let (code, msg) = err(&mut s, "INSERT INTO k (id, n) VALUES (9, 1e40)").await;
        assert_eq!(code, "22003", "{msg}");
        assert_eq!(q(&mut s, "SELECT count(*) FROM k").await, ["3"]);
        db.close().await.unwrap();
        if store.name != "model" {
            let db = open(&store).await;
            let mut s = Session::new(db.clone());
            assert_eq!(
                q_pg(&mut s, "SELECT iv, tz FROM k ORDER BY id").await,
                [
                    "-00:01:00|23:59:59.5+00",
                    "-1 days +02:00:00|01:02:03-05:30",
                    "NULL|NULL"
                ],
                "{}: after a reopen",
                store.name
            );
            db.close().await.unwrap();
        }
    }
}

/// A text literal cast to `uuid`, `time with time zone` or `interval` means what PostgreSQL
/// means: any accepted spelling finds the stored value, and a bad one is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn casts_of_literals_to_uuid_timetz_and_interval_as_postgresql() {
    for store in stores() {
        let db = open(&store).await;
        let mut s = Session::new(db.clone());
        q(
            &mut s,
            "CREATE TABLE c (id BIGINT PRIMARY KEY, u UUID, tz TIMETZ, iv INTERVAL)",
        )
        .await;
        q(
            &mut s,
            "INSERT INTO c VALUES (1, 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', \
                   '12:00:00+02', '1 day'), (2, NULL, NULL, NULL)",
        )
        .await;
        for (sql, want) in [
            (
                "SELECT id FROM c WHERE u = '{A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11}'::uuid",
                "1",
            ),
            (
                "SELECT id FROM c WHERE u = CAST('A0EEBC999C0B4EF8BB6D6BB9BD380A11' AS UUID)",
                "1",
            ),
            ("SELECT id FROM c WHERE tz = '12:00:00+0200'::timetz", "1"),
            ("SELECT id FROM c WHERE iv = '@ 1 day'::interval", "1"),
        ] {
            assert_eq!(q(&mut s, sql).await, [want], "{}: {sql}", store.name);
        }
        for (sql, code) in [
            ("SELECT id FROM c WHERE u = 'nope'::uuid", "22P02"),
            ("SELECT id FROM c WHERE tz = '25:00:00+01'::timetz", "22007"),
            (
                "SELECT id FROM c WHERE iv = '1 fortnight'::interval",
                "22007",
            ),
        ] {
            assert_eq!(err(&mut s, sql).await.0, code, "{}: {sql}", store.name);
        }
        db.close().await.unwrap();
    }
}

/// The catalog as the store holds it, read whole.
async fn stored_catalog(db: &rocklake_sql::Database) -> rocklake_sql::catalog::Catalog {
    rocklake_sql::db::load_catalog(db.keyspace().backend().as_ref())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ddl_commit_installs_its_own_catalog_unless_another_landed_first() {
    for store in stores() {
        let db = open(&store).await;
        let mut s = Session::new(db.clone());
        let loads = db.catalog_loads();
        // Each DDL commit below began from the shared catalog: what it committed becomes the
        // shared catalog as it is, with no read of every definition again, and it is what the
        // store holds.
        for sql in [
            "CREATE TABLE t (id BIGINT PRIMARY KEY, name VARCHAR)",
            "CREATE SCHEMA s2",
            "CREATE TABLE s2.u (k VARCHAR PRIMARY KEY, v DOUBLE PRECISION[], at TIMESTAMP WITH TIME ZONE)",
            "CREATE TABLE ducklake_data_file (data_file_id BIGINT PRIMARY KEY, table_id BIGINT, begin_snapshot BIGINT, end_snapshot BIGINT, path VARCHAR)",
            "BEGIN; CREATE TEMPORARY TABLE tmp (a INTEGER) ON COMMIT DROP; CREATE TABLE kept (a INTEGER); COMMIT",
            "DROP TABLE t",
            "DROP SCHEMA s2 CASCADE",
        ] {
            q(&mut s, sql).await;
            assert_eq!(db.catalog_loads(), loads, "{}: {sql} read the catalog again", store.name);
            assert_eq!(*db.catalog(), stored_catalog(&db).await, "{}: after {sql}", store.name);
        }
        // Another session's DDL lands while this block is open: this block's catalog lacks
        // it, so its commit reads the catalog again, and both tables are there.
        let mut other = Session::new(db.clone());
        q(&mut s, "BEGIN; CREATE TABLE mine (a INTEGER)").await;
        q(&mut other, "CREATE TABLE theirs (b INTEGER)").await;
        assert_eq!(db.catalog_loads(), loads, "{}", store.name);
        q(&mut s, "COMMIT").await;
        assert_eq!(db.catalog_loads(), loads + 1, "{}", store.name);
        let cat = db.catalog();
        for t in ["mine", "theirs", "kept", "ducklake_data_file"] {
            assert!(
                cat.table("public", t).is_ok(),
                "{}: {t} missing",
                store.name
            );
        }
        assert!(cat.table("public", "tmp").is_err(), "{}", store.name);
        assert_eq!(*cat, stored_catalog(&db).await, "{}", store.name);
        // And both sessions see both.
        assert_eq!(q(&mut other, "SELECT count(*) FROM mine").await, ["0"]);
        assert_eq!(q(&mut s, "SELECT count(*) FROM theirs").await, ["0"]);
        db.close().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn result_columns_may_repeat_an_expression_as_in_postgresql() {
    // PostgreSQL allows `SELECT NULL, NULL` and `INSERT ... SELECT 1000, 1000`; DataFusion
    // refuses a projection of two expressions of one name unless each gets an alias.
    let store = &stores()[0];
    let db = open(store).await;
    let mut s = Session::new(db.clone());
    let names = |o: &rocklake_sql::Output| match o {
        rocklake_sql::Output::Rows { schema, .. } => schema
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect::<Vec<_>>(),
        _ => vec![],
    };
    let out = s
        .run("SELECT NULL, NULL, 1, 1, 'a' || 'b', 'a' || 'b'")
        .await
        .unwrap();
    assert_eq!(names(&out), ["?column?"; 6]);
    assert_eq!(common::lines(&out), ["NULL|NULL|1|1|ab|ab"]);
    q(
        &mut s,
        "CREATE TABLE t (a BIGINT, b BIGINT, c VARCHAR, d VARCHAR)",
    )
    .await;
    q(&mut s, "INSERT INTO t SELECT 7, 7, NULL, NULL").await;
    q(
        &mut s,
        "INSERT INTO t (a, b) SELECT 1 + 1, 1 + 1 UNION ALL SELECT 3, 3",
    )
    .await;
    assert_eq!(
        q(&mut s, "SELECT a, b, c, d FROM t ORDER BY a").await,
        ["2|2|NULL|NULL", "3|3|NULL|NULL", "7|7|NULL|NULL"]
    );
    let out = s.run("SELECT a, a FROM t WHERE a = 7").await.unwrap();
    assert_eq!(names(&out), ["a", "a"]);
    db.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn system_catalog_answers_are_kept_until_the_catalog_changes() {
    for store in stores() {
        let db = open(&store).await;
        let mut s = Session::new(db.clone());
        let mut other = Session::new(db.clone());
        const Q: &str = "SELECT relname FROM pg_class JOIN pg_namespace ON relnamespace = pg_namespace.oid WHERE nspname = 'public' ORDER BY relname";
        q(&mut s, "CREATE TABLE t (a INTEGER)").await;
        assert_eq!(q(&mut s, Q).await, ["t"], "{}", store.name);
        assert_eq!(s.system_answers_reused(), 0);
        // Another session asks the same: the kept answer.
        assert_eq!(q(&mut other, Q).await, ["t"], "{}", store.name);
        assert_eq!(other.system_answers_reused(), 1, "{}", store.name);
        // A new table: a new catalog, so the question is answered again.
        q(&mut s, "CREATE TABLE u (b INTEGER)").await;
        assert_eq!(q(&mut other, Q).await, ["t", "u"], "{}", store.name);
        assert_eq!(other.system_answers_reused(), 1, "{}", store.name);
        // Inside a block that creates a table, the block's own catalog answers; after its
        // ROLLBACK the shared one does again.
        q(&mut s, "BEGIN; CREATE TABLE w (c INTEGER)").await;
        assert_eq!(q(&mut s, Q).await, ["t", "u", "w"], "{}", store.name);
        q(&mut s, "ROLLBACK").await;
        assert_eq!(q(&mut s, Q).await, ["t", "u"], "{}", store.name);
        assert_eq!(q(&mut s, Q).await, ["t", "u"], "{}", store.name);
        // (The block's answer took the place of the shared catalog's, so the first of these
        // two was answered again.)
        assert_eq!(s.system_answers_reused(), 1, "{}", store.name);
        // A query that calls a function, or reads a table of its own, is answered every time.
        for sql in [
            "SELECT relname, current_database() FROM pg_class WHERE relname = 't'",
            "SELECT relname FROM pg_class JOIN t ON true",
        ] {
            let before = s.system_answers_reused();
            q(&mut s, sql).await;
            q(&mut s, sql).await;
            assert_eq!(s.system_answers_reused(), before, "{}: {sql}", store.name);
        }
        db.close().await.unwrap();
    }
}

const SNAPSHOT_TABLE: &str = "CREATE TABLE ducklake_snapshot (snapshot_id BIGINT PRIMARY KEY, snapshot_time TIMESTAMP WITH TIME ZONE, schema_version BIGINT, next_catalog_id BIGINT, next_file_id BIGINT)";

/// Whether `task` is still waiting after a while.
async fn still_waiting<T>(task: &tokio::task::JoinHandle<T>) -> bool {
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    !task.is_finished()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ddl_racing_other_sessions_ends_as_postgresql_s_does() {
    for store in stores() {
        let name = store.name;
        let db = open(&store).await;
        let mut a = Session::new(db.clone());
        let mut b = Session::new(db.clone());

        // Two sessions create one name: the second to commit is refused, and only one
        // table of that name exists, before and after DROP.
        q(&mut a, "BEGIN; CREATE TABLE t (id BIGINT PRIMARY KEY)").await;
        q(
            &mut b,
            "BEGIN; CREATE TABLE t (id BIGINT PRIMARY KEY, note VARCHAR)",
        )
        .await;
        q(&mut a, "COMMIT").await;
        let e = err(&mut b, "COMMIT").await;
        assert_eq!(
            e,
            ("42P07".into(), "relation \"t\" already exists".into()),
            "{name}"
        );
        q(&mut a, "DROP TABLE t").await;
        assert_eq!(err(&mut b, "SELECT * FROM t").await.0, "42P01", "{name}");
        assert!(
            !stored_catalog(&db)
                .await
                .tables
                .keys()
                .any(|(_, t)| t == "t"),
            "{name}"
        );
        q(&mut a, "BEGIN; CREATE SCHEMA s").await;
        q(&mut b, "BEGIN; CREATE SCHEMA s").await;
        q(&mut a, "COMMIT").await;
        let e = err(&mut b, "COMMIT").await;
        assert_eq!(
            e,
            ("42P06".into(), "schema \"s\" already exists".into()),
            "{name}"
        );

        // A DROP waits for a transaction writing the table; the rows that transaction
        // commits go with the table, and a table created again under the name is empty.
        q(&mut a, SNAPSHOT_TABLE).await;
        q(
            &mut a,
            "BEGIN; INSERT INTO ducklake_snapshot VALUES (5, NOW(), 0, 1, 0)",
        )
        .await;
        let dropper = tokio::spawn(async move {
            let r = Box::pin(b.run("DROP TABLE ducklake_snapshot"))
                .await
                .map(|o| o.tag());
            (b, r)
        });
        assert!(
            still_waiting(&dropper).await,
            "{name}: DROP did not wait for the writer"
        );
        q(&mut a, "COMMIT").await;
        let (mut b, r) = dropper.await.unwrap();
        assert_eq!(r.unwrap(), "DROP TABLE", "{name}");
        q(&mut a, SNAPSHOT_TABLE).await;
        assert_eq!(
            q(&mut a, "SELECT count(*) FROM ducklake_snapshot").await,
            ["0"],
            "{name}"
        );

        // A writer waits for a transaction dropping its table, and is told it is gone.
        q(&mut b, "BEGIN; DROP TABLE ducklake_snapshot").await;
        let writer = tokio::spawn(async move {
            let r =
                Box::pin(a.run("INSERT INTO ducklake_snapshot VALUES (6, NOW(), 0, 1, 0)")).await;
            (a, r.map(|o| o.tag()))
        });
        assert!(
            still_waiting(&writer).await,
            "{name}: INSERT did not wait for the DROP"
        );
        q(&mut b, "COMMIT").await;
        let (mut a, r) = writer.await.unwrap();
        assert_eq!(r.unwrap_err().code, "42P01", "{name}");
        // ... and when the drop rolls back, the writer goes on.
        q(&mut a, SNAPSHOT_TABLE).await;
        q(&mut b, "BEGIN; DROP TABLE ducklake_snapshot").await;
        let writer = tokio::spawn(async move {
            let r =
                Box::pin(a.run("INSERT INTO ducklake_snapshot VALUES (7, NOW(), 0, 1, 0)")).await;
            (a, r.map(|o| o.tag()))
        });
        assert!(still_waiting(&writer).await, "{name}");
        q(&mut b, "ROLLBACK").await;
        let (mut a, r) = writer.await.unwrap();
        assert_eq!(r.unwrap(), "INSERT 0 1", "{name}");

        // Two transactions each writing one table and dropping the other's: the second to
        // wait closes the cycle and is refused (40P01); the first then goes on.
        q(&mut a, "CREATE TABLE u (id BIGINT)").await;
        q(&mut a, "BEGIN; INSERT INTO u VALUES (1)").await;
        q(
            &mut b,
            "BEGIN; INSERT INTO ducklake_snapshot VALUES (8, NOW(), 0, 1, 0)",
        )
        .await;
        let first = tokio::spawn(async move {
            let r = Box::pin(a.run("DROP TABLE ducklake_snapshot"))
                .await
                .map(|o| o.tag());
            (a, r)
        });
        assert!(still_waiting(&first).await, "{name}");
        let e = err(&mut b, "DROP TABLE u").await;
        assert_eq!(e.0, "40P01", "{name}: {}", e.1);
        q(&mut b, "ROLLBACK").await;
        let (mut a, r) = first.await.unwrap();
        assert_eq!(r.unwrap(), "DROP TABLE", "{name}");
        q(&mut a, "COMMIT").await;

        // DROP SCHEMA ... CASCADE waits for a transaction creating a table in the schema, and
        // the table goes with the schema; a CREATE TABLE waits for a transaction dropping its
        // schema, and is told the schema is gone (as PostgreSQL's lock on the schema orders
        // the two).
        q(&mut a, "CREATE SCHEMA s3; CREATE TABLE s3.old (a INTEGER)").await;
        q(&mut a, "BEGIN; CREATE TABLE s3.fresh (a INTEGER)").await;
        let dropper = tokio::spawn(async move {
            let r = Box::pin(b.run("DROP SCHEMA s3 CASCADE"))
                .await
                .map(|o| o.tag());
            (b, r)
        });
        assert!(
            still_waiting(&dropper).await,
            "{name}: DROP SCHEMA did not wait for the CREATE TABLE in it"
        );
        q(&mut a, "INSERT INTO s3.fresh VALUES (1); COMMIT").await;
        let (mut b, r) = dropper.await.unwrap();
        assert_eq!(r.unwrap(), "DROP SCHEMA", "{name}");
        let left: Vec<String> = stored_catalog(&db)
            .await
            .tables
            .keys()
            .filter(|(s, _)| s == "s3")
            .map(|(_, t)| t.clone())
            .collect();
        assert!(
            left.is_empty(),
            "{name}: tables left in a dropped schema: {left:?}"
        );
        assert_eq!(
            err(&mut a, "SELECT * FROM s3.fresh").await.0,
            "42P01",
            "{name}"
        );
        q(&mut a, "CREATE SCHEMA s3").await;
        q(&mut b, "BEGIN; DROP SCHEMA s3").await;
        let creator = tokio::spawn(async move {
            let r = Box::pin(a.run("CREATE TABLE s3.late (a INTEGER)"))
                .await
                .map(|o| o.tag());
            (a, r)
        });
        assert!(
            still_waiting(&creator).await,
            "{name}: CREATE TABLE did not wait for the DROP SCHEMA"
        );
        q(&mut b, "COMMIT").await;
        let (mut a, r) = creator.await.unwrap();
        let e = r.unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            ("3F000", "schema \"s3\" does not exist"),
            "{name}"
        );

        // A wait ends at statement_timeout as any statement does.
        q(&mut b, "BEGIN; INSERT INTO u VALUES (2)").await;
        q(&mut a, "SET statement_timeout = 200").await;
        let e = err(&mut a, "DROP TABLE u").await;
        assert_eq!(
            e,
            (
                "57014".into(),
                "canceling statement due to statement timeout".into()
            )
        );
        q(&mut b, "COMMIT").await;
        q(&mut a, "DROP TABLE u").await;

        let view = db.keyspace().backend().view().await.unwrap();
        let report = rocklake_core::verify::verify(view.as_ref(), |_, _| {})
            .await
            .unwrap();
        assert!(report.is_clean(), "{name}: {:?}", report.findings);
        drop(view);
        db.close().await.unwrap();
    }
}

/// On an engine whose views are undo overlays (sled's kind), a transaction left open while
/// another session writes more than all views may hold is let go: its next read fails with
/// `72000` (snapshot too old) and aborts its block, and after ROLLBACK it reads the new rows.
/// Before the bound, such a view kept every old value for as long as it stayed open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_view_past_the_overlay_bound_is_snapshot_too_old() {
    use rocklake_core::{EngineBackend, Keyspace, MemoryEngine};
    let backend = std::sync::Arc::new(EngineBackend::new(MemoryEngine::without_snapshots()));
    backend.limit_view_memory(256 << 10);
    let ks = Keyspace::open(backend.clone()).await.unwrap();
    let db = rocklake_sql::Database::open(ks).await.unwrap();
    let (mut a, mut b) = (Session::new(db.clone()), Session::new(db.clone()));
    b.run("CREATE TABLE t (i bigint, s text)").await.unwrap();
    a.run("BEGIN").await.unwrap();
    assert_eq!(q(&mut a, "SELECT count(*) FROM t").await, ["0"]);
    // About 5,000 new keys: more than 256 KiB of overlay entries in `a`'s view.
    b.run("INSERT INTO t SELECT value, repeat('x', 100) FROM generate_series(1, 5000)")
        .await
        .unwrap();
    assert!(
        backend.view_memory() <= 256 << 10,
        "the views hold {} bytes",
        backend.view_memory()
    );
    let (code, message) = err(&mut a, "SELECT count(*) FROM t").await;
    assert_eq!(code, "72000", "{message}");
    assert!(message.contains("snapshot too old"), "{message}");
    assert_eq!(a.status(), Status::Failed);
    a.run("ROLLBACK").await.unwrap();
    assert_eq!(q(&mut a, "SELECT count(*) FROM t").await, ["5000"]);
    assert_eq!(q(&mut b, "SELECT count(*) FROM t").await, ["5000"]);
}

/// A scan of one of DuckLake's tables reads each row's cells straight from its bytes into the
/// columns. It must give the rows in heap order (an updated row last, as PostgreSQL's heap
/// does, the number kept in the row or, for a row written without it, in the tuple index),
/// take a row only the full decoder reads (an unknown protobuf group, which `prost`
/// skips) without doubling the cells read before it, and report a damaged row as `XX001`
/// naming it, through DataFusion and the direct path alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whole_table_scans_read_rows_in_heap_order_and_hand_unusual_ones_to_the_full_decoder() {
    use rocklake_core::backend::{KeyRange, Order, WriteBatch};
    use rocklake_core::Durability;
    for store in stores() {
        let name = store.name;
        let db = open(&store).await;
        let mut s = Session::new(db.clone());
        q(&mut s, "CREATE TABLE ducklake_data_file(data_file_id BIGINT PRIMARY KEY, table_id BIGINT, begin_snapshot BIGINT, end_snapshot BIGINT, file_order BIGINT, path VARCHAR, path_is_relative BOOLEAN, file_format VARCHAR, record_count BIGINT, file_size_bytes BIGINT, footer_size BIGINT, row_id_start BIGINT, partition_id BIGINT, encryption_key VARCHAR, mapping_id BIGINT, partial_max BIGINT)").await;
        for i in 1..=4 {
            q(&mut s, &format!("INSERT INTO ducklake_data_file VALUES ({i}, 7, {i}, NULL, NULL, 'f{i}.parquet', true, 'parquet', {i}00, 1000, 10, 0, NULL, NULL, NULL, NULL)")).await;
        }
        q(
            &mut s,
            "UPDATE ducklake_data_file SET end_snapshot = 9 WHERE data_file_id = 1",
        )
        .await;
        let all = "SELECT data_file_id, begin_snapshot, end_snapshot, path, record_count FROM ducklake_data_file";
        let filtered = "SELECT data_file_id, path FROM ducklake_data_file WHERE table_id = 7";
        let joined = "SELECT f.data_file_id, f.path FROM ducklake_data_file f JOIN ducklake_data_file g ON f.data_file_id = g.data_file_id";
        let want = [
            "2|2|NULL|f2.parquet|200",
            "3|3|NULL|f3.parquet|300",
            "4|4|NULL|f4.parquet|400",
            "1|1|9|f1.parquet|100",
        ];
        assert_eq!(q(&mut s, all).await, want, "{name}: heap order");
        let order = [
            "2|f2.parquet",
            "3|f3.parquet",
            "4|f4.parquet",
            "1|f1.parquet",
        ];
        assert_eq!(q(&mut s, filtered).await, order, "{name}");
        let mut sorted = q(&mut s, joined).await;
        sorted.sort();
        assert_eq!(sorted.len(), 4, "{name}");

        let rows = db
            .keyspace()
            .backend()
            .view()
            .await
            .unwrap()
            .scan(&KeyRange::prefix(&[0x07]), Order::Ascending, 10)
            .await
            .unwrap();
        assert_eq!(
            rows.len(),
            4,
            "{name}: the four rows under the data-file tag"
        );
        let put = |key: bytes::Bytes, value: Vec<u8>| {
            let db = db.clone();
            async move {
                let mut b = WriteBatch::new();
                b.put(key, value);
                db.keyspace()
                    .backend()
                    .write(b, Durability::Buffered)
                    .await
                    .unwrap();
            }
        };
        let ctids = "SELECT ctid, data_file_id FROM ducklake_data_file";
        let numbered = ["(0,2)|2", "(0,3)|3", "(0,4)|4", "(0,5)|1"];
        assert_eq!(q(&mut s, ctids).await, numbered, "{name}");
        // Row 2 as a build that kept the tuple number only in the tuple index wrote it: the
        // scan takes its number from there (without it, row 2 would sort last).
        let (k2, v2) = rows[1].clone();
        let mut old = rocklake_core::values::Row::decode(&k2, &v2).unwrap();
        assert_eq!(old.tuple, Some(2), "{name}: the row keeps its tuple number");
        old.tuple = None;
        put(k2, old.encode_unchecked()).await;
        assert_eq!(
            q(&mut s, all).await,
            want,
            "{name}: a row without its number"
        );
        assert_eq!(
            q(&mut s, filtered).await,
            order,
            "{name}: a row without its number"
        );
        assert_eq!(
            q(&mut s, ctids).await,
            numbered,
            "{name}: a row without its number"
        );
        // Row 3 (read after row 2's cells are in the columns) gets an unknown group at its
        // end: the same row to prost, one the direct decoder leaves to it.
        let (k3, v3) = rows[2].clone();
        let mut grouped = v3.to_vec();
        grouped.extend_from_slice(&[0x7b, 0x08, 0x01, 0x7c]);
        put(k3.clone(), grouped).await;
        assert_eq!(q(&mut s, all).await, want, "{name}: a row with a group");
        assert_eq!(
            q(&mut s, filtered).await,
            order,
            "{name}: a row with a group"
        );
        // Damaged: the scan fails naming the row, on both paths.
        put(k3.clone(), vec![0x08, 0x02, 0x22, 0x7f]).await;
        for sql in [all, filtered, joined] {
            let (code, msg) = err(&mut s, sql).await;
            assert_eq!(code, "XX001", "{name}: {sql}: {msg}");
            assert!(
                msg.contains(&rocklake_core::keys::render(&k3)),
                "{name}: {sql}: {msg}"
            );
        }
        put(k3, v3.to_vec()).await;
        assert_eq!(q(&mut s, all).await, want, "{name}: restored");
        db.close().await.unwrap();
    }
}

/// DuckLake writes rows that share a storage key (its `ducklake_add_data_files` gives every
/// partition value of a file the same `partition_key_index`), and PostgreSQL keeps each of them.
/// So does RockLake: the second and later rows go to the table's overflow, and every read,
/// write and drop of the table sees them as PostgreSQL's heap would (answers as PostgreSQL 15
/// gave them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_sharing_a_storage_key_are_all_kept_as_postgresql_keeps_them() {
    use rocklake_core::backend::{KeyRange, Order};
    for store in stores() {
        let name = store.name;
        let db = open(&store).await;
        let mut s = Session::new(db.clone());
        q(&mut s, "CREATE TABLE ducklake_file_partition_value(data_file_id BIGINT, table_id BIGINT, partition_key_index BIGINT, partition_value VARCHAR)").await;
        q(&mut s, "CREATE TABLE ducklake_inlined_data_6_1(row_id BIGINT, begin_snapshot BIGINT, end_snapshot BIGINT, v VARCHAR)").await;
        q(
            &mut s,
            "INSERT INTO ducklake_file_partition_value VALUES (12, 6, 0, '2024'), (12, 6, 1, '1')",
        )
        .await;
        assert_eq!(
            q(&mut s, "INSERT INTO ducklake_file_partition_value VALUES (16, 6, 2, '2024'), (16, 6, 2, '2'), (16, 6, 2, '10')").await,
            ["INSERT 0 3"],
            "{name}"
        );
        let all = "SELECT ctid, data_file_id, table_id, partition_key_index, partition_value FROM ducklake_file_partition_value";
        assert_eq!(
            q(&mut s, all).await,
            [
                "(0,1)|12|6|0|2024",
                "(0,2)|12|6|1|1",
                "(0,3)|16|6|2|2024",
                "(0,4)|16|6|2|2",
                "(0,5)|16|6|2|10"
            ],
            "{name}"
        );
        let overflow = |db: std::sync::Arc<rocklake_sql::Database>| async move {
            db.keyspace()
                .backend()
                .view()
                .await
                .unwrap()
                .scan(&KeyRange::prefix(&[0x83]), Order::Ascending, 100)
                .await
                .unwrap()
                .len()
        };
        assert_eq!(overflow(db.clone()).await, 2, "{name}: two rows overflow");
        // A key range reads the overflow rows whose key falls in it, and only those.
        let key = "SELECT partition_value FROM ducklake_file_partition_value WHERE data_file_id = 16 AND partition_key_index = 2";
        assert_eq!(q(&mut s, key).await, ["2024", "2", "10"], "{name}");
        let before = s.rows_read();
        assert_eq!(
            q(
                &mut s,
                "SELECT partition_value FROM ducklake_file_partition_value WHERE data_file_id = 12"
            )
            .await,
            ["2024", "1"],
            "{name}"
        );
        assert_eq!(s.rows_read() - before, 2, "{name}: rows read for file 12");
        // DataFusion's plans read them too.
        let grouped = "SELECT data_file_id, count(*) FROM ducklake_file_partition_value GROUP BY data_file_id ORDER BY 1";
        assert_eq!(q(&mut s, grouped).await, ["12|2", "16|3"], "{name}");
        // An overflow row updated in place, then the row holding the key moved off it.
        assert_eq!(
            q(&mut s, "UPDATE ducklake_file_partition_value SET partition_value = 'y' WHERE partition_value = '2'").await,
            ["UPDATE 1"],
            "{name}"
        );
        assert_eq!(
            q(&mut s, "UPDATE ducklake_file_partition_value SET partition_key_index = 3 WHERE data_file_id = 16 AND partition_value = '2024'").await,
            ["UPDATE 1"],
            "{name}"
        );
        let after = [
            "(0,1)|12|6|0|2024",
            "(0,2)|12|6|1|1",
            "(0,5)|16|6|2|10",
            "(0,6)|16|6|2|y",
            "(0,7)|16|6|3|2024",
        ];
        assert_eq!(q(&mut s, all).await, after, "{name}");
        assert_eq!(
            q(&mut s, "SELECT count(*) FROM ducklake_file_partition_value WHERE data_file_id = 16 AND partition_key_index = 2").await,
            ["2"],
            "{name}"
        );
        assert_eq!(
            q(&mut s, "DELETE FROM ducklake_file_partition_value WHERE data_file_id = 16 AND partition_value = '10'").await,
            ["DELETE 1"],
            "{name}"
        );
        // An inlined table's rows of one row id and snapshot (its key) are kept too.
        q(
            &mut s,
            "INSERT INTO ducklake_inlined_data_6_1 VALUES (0, 1, NULL, 'a'), (0, 1, NULL, 'b')",
        )
        .await;
        assert_eq!(
            q(
                &mut s,
                "SELECT ctid, v FROM ducklake_inlined_data_6_1 WHERE row_id = 0"
            )
            .await,
            ["(0,1)|a", "(0,2)|b"],
            "{name}"
        );
        let kept = [
            "(0,1)|12|6|0|2024",
            "(0,2)|12|6|1|1",
            "(0,6)|16|6|2|y",
            "(0,7)|16|6|3|2024",
        ];
        assert_eq!(q(&mut s, all).await, kept, "{name}");
        let db = if name == "model" {
            db
        } else {
            // After a reopen the rows are there, and new ones take new tuple numbers.
            db.close().await.unwrap();
            let db = open(&store).await;
            let mut s = Session::new(db.clone());
            assert_eq!(q(&mut s, all).await, kept, "{name}: after a reopen");
            q(
                &mut s,
                "INSERT INTO ducklake_file_partition_value VALUES (16, 6, 2, 'z')",
            )
            .await;
            q(
                &mut s,
                "INSERT INTO ducklake_inlined_data_6_1 VALUES (0, 1, NULL, 'c')",
            )
            .await;
            assert_eq!(
                q(&mut s, "SELECT ctid, partition_value FROM ducklake_file_partition_value WHERE data_file_id = 16").await,
                ["(0,6)|y", "(0,7)|2024", "(0,8)|z"],
                "{name}: after a reopen"
            );
            assert_eq!(
                q(&mut s, "SELECT ctid, v FROM ducklake_inlined_data_6_1").await,
                ["(0,1)|a", "(0,2)|b", "(0,3)|c"],
                "{name}: after a reopen"
            );
            db
        };
        // DROP TABLE takes the overflow rows with the table.
        let mut s = Session::new(db.clone());
        q(&mut s, "DROP TABLE ducklake_file_partition_value").await;
        q(&mut s, "DROP TABLE ducklake_inlined_data_6_1").await;
        assert_eq!(overflow(db.clone()).await, 0, "{name}: dropped");
        db.close().await.unwrap();
    }
}

/// `*` leaves `ctid` out, as in PostgreSQL, also when the statement names `ctid` (which makes
/// every table expose it to DataFusion). Column names and rows as PostgreSQL 15 gave them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wildcard_never_includes_ctid() {
    for store in stores() {
        let name = store.name;
        let db = open(&store).await;
        let mut s = Session::new(db.clone());
        q(&mut s, "CREATE TABLE wt(a BIGINT, b VARCHAR)").await;
        q(&mut s, "INSERT INTO wt VALUES (1, 'x'), (2, 'y')").await;
        let cases: [(&str, &[&str], &[&str]); 6] = [
            (
                "SELECT ctid, * FROM wt",
                &["ctid", "a", "b"],
                &["(0,1)|1|x", "(0,2)|2|y"],
            ),
            (
                "SELECT *, ctid FROM wt WHERE a = 2",
                &["a", "b", "ctid"],
                &["2|y|(0,2)"],
            ),
            (
                "SELECT wt.*, ctid FROM wt WHERE a = 1",
                &["a", "b", "ctid"],
                &["1|x|(0,1)"],
            ),
            // A derived table's or a CTE's own ctid column is a column like any other.
            (
                "SELECT * FROM (SELECT ctid, a FROM wt) s",
                &["ctid", "a"],
                &["(0,1)|1", "(0,2)|2"],
            ),
            (
                "WITH x AS (SELECT ctid, a FROM wt) SELECT * FROM x",
                &["ctid", "a"],
                &["(0,1)|1", "(0,2)|2"],
            ),
            (
                "SELECT ctid, * FROM wt UNION ALL SELECT ctid, * FROM wt WHERE a = 1",
                &["ctid", "a", "b"],
                &["(0,1)|1|x", "(0,1)|1|x", "(0,2)|2|y"],
            ),
        ];
        for (sql, columns, rows) in cases {
            let out = s
                .run(sql)
                .await
                .unwrap_or_else(|e| panic!("{name}: {sql}: {e}"));
            let rocklake_sql::Output::Rows { schema, .. } = &out else {
                panic!("{name}: {sql}: no rows");
            };
            let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
            assert_eq!(names, columns, "{name}: {sql}");
            // (The branches of a UNION ALL come in no set order, here as in PostgreSQL.)
            let mut got = q(&mut s, sql).await;
            if sql.contains("UNION") {
                got.sort();
            }
            assert_eq!(got, rows, "{name}: {sql}");
        }
        // A subquery's `*` has no ctid to give.
        let (code, msg) = err(&mut s, "SELECT ctid FROM (SELECT * FROM wt) s").await;
        assert_eq!(code, "42703", "{name}: {msg}");
        db.close().await.unwrap();
    }
}

/// `rocklake_store_pairs()` (what `rocklake backup` reads from a running server) gives every
/// pair of the store's committed view, in key order, from one view however long it is read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_pairs_are_the_committed_view_on_every_engine() {
    use rocklake_core::backend::{visit_all, KeyRange};
    for store in stores() {
        let db = open(&store).await;
        let mut s = Session::new(db.clone());
        q(&mut s, "CREATE TABLE t (id BIGINT PRIMARY KEY, v VARCHAR)").await;
        q(
            &mut s,
            "INSERT INTO t SELECT value, repeat('x', 50) FROM generate_series(1, 3000)",
        )
        .await;
        let view = db.keyspace().committed_view().await.unwrap();
        let mut expected = Vec::new();
        visit_all(view.as_ref(), KeyRange::all(), 512, &mut |k, v| {
            expected.push(format!("{}|{}", hex(k), hex(v)));
            true
        })
        .await
        .unwrap();
        assert!(expected.len() > 6000, "{}", expected.len());

        // Streamed in pages of 4,096 pairs, more than one here.
        let mut stream = s
            .run("SELECT key, value FROM rocklake_store_pairs()")
            .await
            .unwrap();
        let got: Vec<String> = common::lines(&stream)
            .into_iter()
            .map(|l| l.replace("\\x", ""))
            .collect();
        assert_eq!(got.len(), expected.len(), "{}", store.name);
        assert_eq!(got, expected, "{}", store.name);
        stream = s
            .run("SELECT count(*) FROM rocklake_store_pairs()")
            .await
            .unwrap();
        assert_eq!(common::lines(&stream), [expected.len().to_string()]);
        let (_, msg) = err(&mut s, "SELECT * FROM rocklake_store_pairs(1)").await;
        assert!(msg.contains("takes no arguments"), "{msg}");
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The in-memory engine (`V` = `MemoryEngine`) or one of its snapshots, counting the point
/// reads it answers.
struct Counting<V: ?Sized> {
    inner: std::sync::Arc<V>,
    gets: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl std::fmt::Debug for Counting<rocklake_core::MemoryEngine> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Counting(memory)")
    }
}

#[async_trait::async_trait]
impl<V: rocklake_core::ReadView + ?Sized> rocklake_core::ReadView for Counting<V> {
    async fn get(&self, key: &[u8]) -> rocklake_core::Result<Option<bytes::Bytes>> {
        self.gets.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.inner.get(key).await
    }

    async fn scan(
        &self,
        range: &rocklake_core::KeyRange,
        order: rocklake_core::Order,
        limit: usize,
    ) -> rocklake_core::Result<Vec<rocklake_core::KvPair>> {
        self.inner.scan(range, order, limit).await
    }
}

#[async_trait::async_trait]
impl rocklake_core::Engine for Counting<rocklake_core::MemoryEngine> {
    fn name(&self) -> &'static str {
        "memory"
    }
    fn capabilities(&self) -> rocklake_core::Capabilities {
        self.inner.capabilities()
    }
    async fn apply(&self, ops: Vec<rocklake_core::backend::BatchOp>) -> rocklake_core::Result<()> {
        self.inner.apply(ops).await
    }
    async fn sync(&self) -> rocklake_core::Result<()> {
        self.inner.sync().await
    }
    async fn snapshot(
        &self,
    ) -> rocklake_core::Result<Option<std::sync::Arc<dyn rocklake_core::ReadView>>> {
        let inner = self
            .inner
            .snapshot()
            .await?
            .expect("the memory engine has snapshots");
        let gets = self.gets.clone();
        Ok(Some(std::sync::Arc::new(Counting { inner, gets })))
    }
    async fn close(&self) -> rocklake_core::Result<()> {
        self.inner.close().await
    }
}

/// An INSERT reads each new row's keys once (its storage key and its primary-key entry, from
/// the view, which is also the precondition of their writes), and a commit with no other
/// commit since its transaction began reads none of its preconditions again: the store still
/// holds what its view read. After another commit, every precondition is checked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_insert_reads_each_key_once_and_a_commit_rereads_only_after_another() {
    use std::sync::atomic::Ordering;
    let gets = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let engine = Counting {
        inner: std::sync::Arc::new(rocklake_core::MemoryEngine::new()),
        gets: gets.clone(),
    };
    let backend = std::sync::Arc::new(rocklake_core::EngineBackend::new(engine));
    let ks = rocklake_core::Keyspace::open(backend).await.unwrap();
    let db = rocklake_sql::Database::open(ks).await.unwrap();
    let mut s = Session::new(db.clone());
    let mut other = Session::new(db.clone());
    // DuckLake's data-file table: tagged rows (with a tuple index) and a primary key.
    q(&mut s, "CREATE TABLE ducklake_data_file (data_file_id BIGINT PRIMARY KEY, table_id BIGINT, begin_snapshot BIGINT, end_snapshot BIGINT, path VARCHAR)").await;
    q(
        &mut s,
        "INSERT INTO ducklake_data_file VALUES (0, 1, 1, NULL, 'warm')",
    )
    .await;
    let values = |from: i64, n: i64| {
        (from..from + n)
            .map(|i| format!("({i}, {}, 1, NULL, 'f{i}')", i % 7))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let reads = |before: u64| gets.load(Ordering::Relaxed) - before;

    // One statement, its own transaction: 100 rows.
    let before = gets.load(Ordering::Relaxed);
    q(
        &mut s,
        &format!("INSERT INTO ducklake_data_file VALUES {}", values(1, 100)),
    )
    .await;
    let autocommit = reads(before);
    assert!(
        autocommit <= 2 * 100 + 20,
        "an INSERT of 100 rows with its commit read {autocommit} keys: more than two a row"
    );

    // A block with no other commit meanwhile: its COMMIT reads (next to) nothing.
    q(&mut s, "BEGIN").await;
    q(
        &mut s,
        &format!("INSERT INTO ducklake_data_file VALUES {}", values(1000, 50)),
    )
    .await;
    let before = gets.load(Ordering::Relaxed);
    q(&mut s, "COMMIT").await;
    let quiet = reads(before);
    assert!(
        quiet <= 5,
        "an uncontended COMMIT of 50 rows read {quiet} keys"
    );

    // Another session commits between: every precondition (row, tuple-index and
    // primary-key entries) is read again.
    q(&mut s, "BEGIN").await;
    q(
        &mut s,
        &format!("INSERT INTO ducklake_data_file VALUES {}", values(2000, 50)),
    )
    .await;
    q(
        &mut other,
        &format!("INSERT INTO ducklake_data_file VALUES {}", values(3000, 1)),
    )
    .await;
    let before = gets.load(Ordering::Relaxed);
    q(&mut s, "COMMIT").await;
    let contended = reads(before);
    assert!(
        contended >= 2 * 50,
        "a COMMIT of 50 rows after another commit read only {contended} keys"
    );
    assert_eq!(
        q(&mut s, "SELECT count(*) FROM ducklake_data_file").await,
        ["202"]
    );
    println!("point reads: INSERT of 100 rows {autocommit}, quiet COMMIT {quiet}, COMMIT after another {contended}");
    db.close().await.unwrap();
}
