//! The live PostgreSQL 15 the comparison tests run against (`ROCKLAKE_TEST_PG`, started by
//! `.ci/services.sh`).

use tokio_postgres::{Client, NoTls};

/// The server's connection string; `None` (and a NOT RUN line) outside CI without one, a
/// failure in CI.
pub fn url() -> Option<String> {
    match std::env::var("ROCKLAKE_TEST_PG") {
        Ok(u) => Some(u),
        Err(_) if std::env::var_os("CI").is_some() => {
            panic!(
                "CI must provide ROCKLAKE_TEST_PG (PostgreSQL 15 on loopback, see .ci/services.sh)"
            )
        }
        Err(_) => {
            eprintln!(
                "NOT RUN: the PostgreSQL comparison needs ROCKLAKE_TEST_PG (see .ci/services.sh)"
            );
            None
        }
    }
}

/// A connection, its driver running in the background.
pub async fn connect(url: &str) -> Client {
    let (client, conn) = tokio_postgres::connect(url, NoTls).await.unwrap();
    tokio::spawn(async move {
        let _ = conn.await;
    });
    client
}

/// A new, empty database `name` on the server (dropped first if a run left it), with the
/// connection that made it (to drop it at the end) and the connection string to it.
pub async fn fresh_db(url: &str, name: &str) -> (Client, String) {
    let admin = connect(url).await;
    admin
        .batch_execute(&format!("DROP DATABASE IF EXISTS {name}"))
        .await
        .unwrap();
    admin
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .unwrap();
    (admin, format!("{url} dbname={name}"))
}
