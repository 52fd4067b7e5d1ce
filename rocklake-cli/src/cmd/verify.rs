//! `rocklake verify`: walk the whole key space and report what does not decode or contradicts
//! itself.

use std::process::ExitCode;
use std::sync::Arc;

use rocklake::verify::Report;
use rocklake::{Error, KvBackend, ReadView};
use serde_json::json;

use crate::progress::Progress;
use crate::{print, CliResult};

pub(crate) async fn run(url: String, json: bool) -> CliResult {
    crate::require_store(&url)?;
    let backend = crate::open_writer(&url).await?;
    let report = verify(backend.as_ref(), json).await;
    backend.close().await?;
    if !report?.is_clean() {
        return Ok(ExitCode::from(2));
    }
    Ok(ExitCode::SUCCESS)
}

/// Walk the store with the core's verification, then print its findings and a summary.
async fn verify(backend: &dyn KvBackend, json: bool) -> Result<Report, Error> {
    let view: Arc<dyn ReadView> = backend.view().await?;
    let progress = Progress::spinner("verify", json);
    let report = rocklake::verify::verify(view.as_ref(), |walked, findings| {
        progress.say(format!("{walked} keys walked, {findings} findings so far"))
    })
    .await?;
    progress.done();
    let (walked, findings) = (report.keys, &report.findings);
    for f in findings {
        if json {
            println!("{}", json!({"finding": f.to_string()}));
        } else {
            println!("FINDING {f}");
        }
    }
    print(
        json,
        json!({"keys": walked, "findings": findings.len(), "clean": findings.is_empty()}),
        || {
            format!(
                "verified {walked} keys: {} {}",
                findings.len(),
                if findings.is_empty() {
                    "findings, clean"
                } else {
                    "findings"
                }
            )
        },
    );
    Ok(report)
}
