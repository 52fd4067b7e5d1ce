//! `rocklake info`: engine, format version, writer epoch, retain-from and keys per table.

use std::process::ExitCode;

use crate::{print, CliResult};

pub(crate) async fn run(url: String, json: bool) -> CliResult {
    crate::require_store(&url)?;
    let backend = crate::open_writer(&url).await?;
    let info = rocklake::info::info_with_progress(backend.as_ref(), backend.engine(), |n| {
        eprintln!("info: {n} keys counted")
    })
    .await?;
    backend.close().await?;
    print(
        json,
        serde_json::to_value(&info).unwrap_or_default(),
        || {
            let mut s = format!(
                "engine={} format_version={} writer_epoch={} retain_from={} current_snapshot={}\n",
                info.engine,
                info.format_version,
                info.writer_epoch,
                info.retain_from,
                info.current_snapshot
            );
            for (table, n) in &info.counts {
                s.push_str(&format!("{table} {n}\n"));
            }
            s.trim_end().to_string()
        },
    );
    Ok(ExitCode::SUCCESS)
}
