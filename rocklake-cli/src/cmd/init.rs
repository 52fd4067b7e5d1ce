//! `rocklake init`: create a catalog (or open an existing one as the new writer).

use std::process::ExitCode;

use serde_json::json;

use crate::{print, writer, CliResult};

pub(crate) async fn run(url: String, json: bool) -> CliResult {
    let cat = writer(&url).await?;
    let info = cat.info().await?;
    cat.close().await?;
    print(
        json,
        json!({"url": url, "engine": info.engine, "writer_epoch": info.writer_epoch, "format_version": info.format_version}),
        || {
            format!(
                "initialised {url} engine={} format_version={} writer_epoch={}",
                info.engine, info.format_version, info.writer_epoch
            )
        },
    );
    Ok(ExitCode::SUCCESS)
}
