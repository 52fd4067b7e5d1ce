//! `rocklake retain-from`: raise the retain-from floor (the oldest snapshot that may still be
//! read).

use std::process::ExitCode;

use serde_json::json;

use crate::{print, writer, CliResult};

pub(crate) async fn run(url: String, snapshot: u64, json: bool) -> CliResult {
    let cat = writer(&url).await?;
    let r = cat.set_retain_from(snapshot).await;
    cat.close().await?;
    r?;
    print(json, json!({"retain_from": snapshot}), || {
        format!("retain-from={snapshot}")
    });
    Ok(ExitCode::SUCCESS)
}
