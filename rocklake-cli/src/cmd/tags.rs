//! `rocklake tags`: print the tag registry (as markdown with --markdown).

use std::process::ExitCode;

use rocklake::tags;
use serde_json::json;

use crate::{print, CliResult};

pub(crate) async fn run(markdown: bool, json: bool) -> CliResult {
    if markdown {
        print!("{}", tags::render_markdown());
    } else {
        for t in tags::REGISTRY {
            print(
                json,
                json!({"tag": format!("{}", t.tag), "name": t.name, "range": t.range.as_str(), "versioned": t.versioned, "key_fields": t.key_fields}),
                || {
                    format!(
                        "{} {:<40} {:<8} versioned={:<5} key: {}",
                        t.tag,
                        t.name,
                        t.range.as_str(),
                        t.versioned,
                        t.key_fields.join(" | ")
                    )
                },
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
