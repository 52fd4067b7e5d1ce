//! `rocklake budget` (SHOW BUDGET): key use of every id space with warnings.

use std::process::ExitCode;

use crate::{print, reader, CliResult};

pub(crate) async fn run(url: String, json: bool) -> CliResult {
    let cat = reader(&url).await?;
    let b = cat.budget().await?;
    cat.close().await?;
    print(json, serde_json::to_value(&b).unwrap_or_default(), || {
        b.to_string().trim_end().to_string()
    });
    Ok(ExitCode::SUCCESS)
}
