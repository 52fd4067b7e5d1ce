//! Who may connect: SCRAM-SHA-256 with one password (from an environment variable or a
//! file), or — only on a loopback address — `trust`, as PostgreSQL's `pg_hba.conf` would say.

use std::collections::HashMap;
use std::fmt::Debug;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures::Sink;
use pgwire::api::auth::sasl::scram::gen_salted_password;
use pgwire::api::auth::sasl::SASLAuthStartupHandler;
use pgwire::api::auth::{AuthSource, LoginInfo, Password, StartupHandler};
use pgwire::api::{ClientInfo, PgWireConnectionState};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};

use crate::handler::{Params, TrustStartup};

/// SCRAM iterations, PostgreSQL's default.
pub(crate) const ITERATIONS: usize = 4096;

/// A failed login's answer waits this long, doubled for each earlier failure from the same
/// address within [`FAILURE_MEMORY`], up to [`MAX_DELAY`] (what PostgreSQL's `auth_delay`
/// does, growing): guessing the password over many connections gets slow, a user who
/// mistypes it once hardly waits.
const FIRST_DELAY: Duration = Duration::from_millis(250);
/// The longest a failed login's answer waits.
const MAX_DELAY: Duration = Duration::from_secs(8);
/// How long a failure counts against its address.
const FAILURE_MEMORY: Duration = Duration::from_secs(60);
/// Addresses remembered at most (the oldest forgotten first).
const MAX_REMEMBERED: usize = 10_000;

/// The one password clients present, salted once when the server starts, and the recent
/// failed logins per client address.
#[derive(Debug)]
pub struct PasswordSource {
    salt: Vec<u8>,
    salted: Vec<u8>,
    failures: Mutex<HashMap<IpAddr, (u32, Instant)>>,
}

impl PasswordSource {
    /// Salt `password` for SCRAM.
    pub fn new(password: &str) -> PasswordSource {
        let salt: [u8; 16] = rand::random();
        let salted = gen_salted_password(password, &salt, ITERATIONS);
        PasswordSource {
            salt: salt.to_vec(),
            salted,
            failures: Mutex::new(HashMap::new()),
        }
    }

    /// Count a failed login from `ip`; how long its answer waits.
    fn failed(&self, ip: IpAddr) -> Duration {
        let now = Instant::now();
        let mut f = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        if f.len() >= MAX_REMEMBERED {
            f.retain(|_, (_, at)| now.duration_since(*at) < FAILURE_MEMORY);
            if f.len() >= MAX_REMEMBERED {
                if let Some(oldest) = f.iter().min_by_key(|(_, (_, at))| *at).map(|(k, _)| *k) {
                    f.remove(&oldest);
                }
            }
        }
        let entry = f.entry(ip).or_insert((0, now));
        if now.duration_since(entry.1) >= FAILURE_MEMORY {
            entry.0 = 0;
        }
        entry.0 = entry.0.saturating_add(1);
        entry.1 = now;
        FIRST_DELAY
            .saturating_mul(1u32 << (entry.0 - 1).min(16))
            .min(MAX_DELAY)
    }

    /// A login from `ip` succeeded: its earlier failures no longer count.
    fn succeeded(&self, ip: IpAddr) {
        self.failures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&ip);
    }
}

#[async_trait]
impl AuthSource for PasswordSource {
    async fn get_password(&self, _login: &LoginInfo) -> PgWireResult<Password> {
        Ok(Password::new(Some(self.salt.clone()), self.salted.clone()))
    }
}

/// Startup by SCRAM when a password is configured, else by trust.
pub(crate) struct Startup {
    pub(crate) trust: TrustStartup,
    pub(crate) scram: Option<SASLAuthStartupHandler<Params>>,
    /// Set once the client is logged in.
    pub(crate) login: Arc<tokio::sync::watch::Sender<bool>>,
    /// The connection: told the client's startup settings once it is in.
    pub(crate) conn: Arc<crate::handler::Conn>,
    /// The password and the failures it counts, with SCRAM.
    pub(crate) password: Option<Arc<PasswordSource>>,
}

#[async_trait]
impl StartupHandler for Startup {
    async fn on_startup<C>(
        &self,
        client: &mut C,
        message: PgWireFrontendMessage,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        match (&self.scram, &self.password) {
            (Some(s), Some(p)) => {
                let ip = self.conn.peer().ip();
                if let Err(e) = s.on_startup(client, message).await {
                    let wait = p.failed(ip);
                    tracing::info!(peer = %self.conn.peer(), wait_ms = wait.as_millis() as u64, error = %e, "login failed");
                    tokio::time::sleep(wait).await;
                    return Err(e);
                }
                if matches!(client.state(), PgWireConnectionState::ReadyForQuery) {
                    p.succeeded(ip);
                }
            }
            _ => self.trust.on_startup(client, message).await?,
        }
        if matches!(client.state(), PgWireConnectionState::ReadyForQuery) && !*self.login.borrow() {
            self.conn.logged_in(client);
            self.login.send_replace(true);
        }
        Ok(())
    }
}
