//! `rocklake purge` (PURGE): free the keys of deleted rows in a range. Needs --admin.

use std::process::ExitCode;

use rocklake::keystone;
use rocklake::{Admin, Error};

use crate::{print, writer, CliResult};

pub(crate) async fn run(
    url: String,
    space: String,
    from: String,
    to: Option<String>,
    admin: bool,
    actor: String,
    json: bool,
) -> CliResult {
    if !admin {
        return Err(Error::PermissionDenied(
            "PURGE needs the admin capability: add --admin".into(),
        ));
    }
    let space = keystone::space(&space)?;
    let first = space.parse_id(&from)?;
    let last = match to {
        Some(t) => space.parse_id(&t)?,
        None => first,
    };
    let cat = writer(&url).await?;
    let result = cat.purge(space, first..=last, &Admin::grant(actor)).await;
    cat.close().await?;
    let r = result?;
    print(json, serde_json::to_value(&r).unwrap_or_default(), || {
        format!(
            "PURGED {} freed={:?} rows_removed={}{}",
            r.freed.len(),
            r.freed,
            r.rows_removed,
            r.audit_key
                .as_ref()
                .map(|k| format!(" audit=[{k}]"))
                .unwrap_or_default()
        )
    });
    Ok(ExitCode::SUCCESS)
}
