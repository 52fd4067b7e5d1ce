//! `rocklake serve --standby`: one server of a pair (or more) on one SlateDB store. It serves
//! reads while another server holds the store, takes the store over once that writer's lease
//! has run out (see `rocklake_slatedb::holder`'s "Lease"), and goes back to serving reads if
//! it loses the lease itself. The listening socket stays open throughout; sessions open when
//! the server changes role are closed (their open transactions roll back), and clients that
//! connect meanwhile wait in the socket's queue.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use rocklake::Error;
use rocklake_server::Server;
use rocklake_sql::Database;
use tokio::sync::watch;

use super::{open_database, ServeArgs};

/// What open sessions get to finish when the server is stopped (as `rocklake serve` without
/// `--standby`); a change of role gives them nothing.
const GRACE: Duration = Duration::from_secs(5);

/// How long closing the old database may take at a change of role (a writer cut off from its
/// store may not be able to flush) before it is dropped.
const CLOSE_WITHIN: Duration = Duration::from_secs(10);

/// Whether a writer holds the store now.
pub(super) async fn held(url: &str) -> Result<bool, Error> {
    #[cfg(feature = "slatedb")]
    {
        Ok(rocklake::rocklake_slatedb::holder_of(url).await?.is_some())
    }
    #[cfg(not(feature = "slatedb"))]
    {
        Err(Error::Unsupported(format!(
            "{url:?}: --standby needs SlateDB, which this binary was built without"
        )))
    }
}

/// The store opened as writer by a standby whose writer's lease ran out: a takeover that
/// reads its claim back first, so two standbys do not both open it.
pub(super) async fn takeover_backend(url: &str) -> Result<Arc<dyn rocklake::KvBackend>, Error> {
    #[cfg(feature = "slatedb")]
    {
        let b: Arc<dyn rocklake::KvBackend> =
            rocklake::rocklake_slatedb::open_url_as_standby(url).await?;
        Ok(b)
    }
    #[cfg(not(feature = "slatedb"))]
    {
        Err(Error::Unsupported(format!(
            "{url:?}: --standby needs SlateDB, which this binary was built without"
        )))
    }
}

/// Until the writer of `url` is gone.
async fn vacancy(url: &str) -> Result<(), Error> {
    #[cfg(feature = "slatedb")]
    {
        rocklake::rocklake_slatedb::await_vacancy(url)
            .await
            .map(drop)
    }
    #[cfg(not(feature = "slatedb"))]
    {
        held(url).await.map(drop)
    }
}

/// Serve `db` on `server` as writer or standby, changing role as the lease says, until
/// `shutdown`; returns the database open at the end, for the caller to close.
pub(super) async fn serve(
    server: &mut Server,
    args: &ServeArgs,
    mut db: Arc<Database>,
    mut reading: bool,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<Arc<Database>, Error> {
    let (stop, stopped) = watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop.send(true);
    });
    let stopping = || {
        let mut stopped = stopped.clone();
        async move {
            let _ = stopped.wait_for(|s| *s).await;
        }
    };
    loop {
        if reading {
            tracing::info!("standby: serving reads until the writer's lease runs out");
            let mut vacant = None;
            phase(server, async {
                tokio::select! {
                    found = vacancy(&args.url) => {
                        vacant = Some(found);
                        Duration::ZERO
                    }
                    () = stopping() => GRACE,
                }
            })
            .await?;
            let Some(found) = vacant else {
                return Ok(db);
            };
            found?;
            close(db).await;
            match open_database(args, false, true).await {
                Ok(writer) => {
                    tracing::warn!("took the store over: serving as its writer");
                    db = writer;
                    reading = false;
                }
                Err(e) => {
                    tracing::error!(error = %e, "could not take the store over; serving reads again");
                    db = reopen_reader(args, &stopped).await?;
                }
            }
            server.switch(db.clone(), reading);
        } else {
            let lease = db.keyspace().lease().cloned();
            let mut lapsed = false;
            phase(server, async {
                let lapse = async {
                    match &lease {
                        Some(lease) => lease.lapsed().await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    () = lapse => {
                        lapsed = true;
                        Duration::ZERO
                    }
                    () = stopping() => GRACE,
                }
            })
            .await?;
            if !lapsed {
                return Ok(db);
            }
            let why = lease
                .and_then(|l| l.check().err())
                .map(|e| e.to_string())
                .unwrap_or_default();
            tracing::warn!(%why, "no longer the store's writer: its sessions are closed; serving reads as a standby");
            close(db).await;
            db = reopen_reader(args, &stopped).await?;
            reading = true;
            server.switch(db.clone(), reading);
        }
    }
}

async fn phase(server: &mut Server, stop: impl Future<Output = Duration>) -> Result<(), Error> {
    server
        .serve_phase(stop)
        .await
        .map_err(|e| Error::InvalidArgument(format!("server failed: {e}")))
}

/// Close a database the server no longer serves; a writer cut off from its store may not
/// manage to, and is then dropped.
async fn close(db: Arc<Database>) {
    match tokio::time::timeout(CLOSE_WITHIN, db.close()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            tracing::info!(error = %e, "closing the database this server no longer serves")
        }
        Err(_) => tracing::warn!(
            "the database this server no longer serves did not close within {} s; dropped",
            CLOSE_WITHIN.as_secs()
        ),
    }
}

/// A reader of the store, tried again every second while the store cannot be reached (a
/// writer cut off from it), until it opens or the server is stopped.
async fn reopen_reader(
    args: &ServeArgs,
    stopped: &watch::Receiver<bool>,
) -> Result<Arc<Database>, Error> {
    loop {
        match tokio::time::timeout(CLOSE_WITHIN, open_database(args, true, false)).await {
            Ok(Ok(db)) => return Ok(db),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "could not open a reader of the store; trying again")
            }
            Err(_) => tracing::warn!("opening a reader of the store timed out; trying again"),
        }
        if *stopped.borrow() {
            return Err(Error::InvalidArgument(
                "stopped while the store could not be reached".into(),
            ));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
