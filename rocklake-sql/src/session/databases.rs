//! `CREATE DATABASE`, on a server that serves several databases (see [`Databases`]).

use datafusion::sql::sqlparser::ast::{ObjectName, ObjectNamePart, Statement};

use super::{Output, Session, Status};
use crate::catalog::fold;
use crate::db::Databases;
use crate::error::{state, Result, SqlError};

impl Session {
    /// `CREATE DATABASE name` (no options: PostgreSQL's own would ask for templates,
    /// encodings and owners this server does not have).
    pub(super) async fn create_database(&mut self, stmt: Statement) -> Result<Output> {
        let Statement::CreateDatabase {
            db_name,
            if_not_exists,
            location,
            managed_location,
            or_replace,
            transient,
            clone,
            ..
        } = &stmt
        else {
            return Err(SqlError::internal(
                "create_database given another statement",
            ));
        };
        if *if_not_exists
            || *or_replace
            || *transient
            || location.is_some()
            || managed_location.is_some()
            || clone.is_some()
        {
            return Err(SqlError::new(
                state::SYNTAX_ERROR,
                "syntax error: CREATE DATABASE takes a name alone (PostgreSQL has no IF NOT \
                 EXISTS, OR REPLACE, LOCATION or CLONE for it)",
            ));
        }
        let name = database_name(db_name)?;
        let databases = self.databases("CREATE DATABASE")?;
        databases.create(&name).await?;
        Ok(Output::Command("CREATE DATABASE".into()))
    }

    /// `DROP DATABASE`: refused, saying why.
    pub(super) fn drop_database(&self) -> Result<Output> {
        self.databases("DROP DATABASE")?;
        Err(SqlError::unsupported(
            "DROP DATABASE is not supported: stop the server, then remove the database's \
             store (the folder or prefix of its name under the server's URL)",
        ))
    }

    /// The server's databases, for `what`: refused inside a transaction block (as
    /// PostgreSQL refuses it) and on a server of one database.
    fn databases(&self, what: &str) -> Result<std::sync::Arc<dyn Databases>> {
        if self.status != Status::Idle {
            return Err(SqlError::new(
                state::ACTIVE_SQL_TRANSACTION,
                format!("{what} cannot run inside a transaction block"),
            ));
        }
        self.db.databases().ok_or_else(|| {
            SqlError::unsupported(format!(
                "{what}: this server serves one database; one that serves several (rocklake \
                 serve --lakes URL) keeps each in a store of its own"
            ))
        })
    }
}

/// A database's name as PostgreSQL reads it: one identifier, folded.
fn database_name(name: &ObjectName) -> Result<String> {
    match name.0.as_slice() {
        [ObjectNamePart::Identifier(i)] => Ok(fold(i)),
        _ => Err(SqlError::new(
            state::SYNTAX_ERROR,
            format!("a database name is one identifier, not {name}"),
        )),
    }
}
