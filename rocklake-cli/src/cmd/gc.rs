//! `rocklake gc`: remove row versions that ended at or before retain-from.

use std::process::ExitCode;

use serde_json::json;

use crate::progress::Progress;
use crate::{print, writer, CliResult};

pub(crate) async fn run(url: String, json: bool) -> CliResult {
    let cat = writer(&url).await?;
    let progress = Progress::spinner("gc", json);
    progress.say("removing row versions that ended at or before retain-from");
    let r = cat.gc().await;
    progress.say("closing the store");
    cat.close().await?;
    progress.done();
    let n = r?;
    print(json, json!({"versions_removed": n}), || {
        format!("GC removed {n} versions")
    });
    Ok(ExitCode::SUCCESS)
}
