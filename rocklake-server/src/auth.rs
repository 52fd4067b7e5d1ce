//! Who may connect: SCRAM-SHA-256 with one password (from an environment variable or a
//! file), or — only on a loopback address — `trust`, as PostgreSQL's `pg_hba.conf` would say.

use std::fmt::Debug;
use std::sync::Arc;

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

/// The one password clients present, salted once when the server starts.
#[derive(Debug)]
pub struct PasswordSource {
    salt: Vec<u8>,
    salted: Vec<u8>,
}

impl PasswordSource {
    /// Salt `password` for SCRAM.
    pub fn new(password: &str) -> PasswordSource {
        let salt: [u8; 16] = rand::random();
        let salted = gen_salted_password(password, &salt, ITERATIONS);
        PasswordSource {
            salt: salt.to_vec(),
            salted,
        }
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
        match &self.scram {
            Some(s) => s.on_startup(client, message).await?,
            None => self.trust.on_startup(client, message).await?,
        }
        if matches!(client.state(), PgWireConnectionState::ReadyForQuery) && !*self.login.borrow() {
            self.conn.logged_in(client);
            self.login.send_replace(true);
        }
        Ok(())
    }
}
