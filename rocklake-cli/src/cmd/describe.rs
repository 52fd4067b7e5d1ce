//! `rocklake describe` (DESCRIBE): the mark and budget of one id space, or of all.

use std::process::ExitCode;

use rocklake::keystone::{self, IdSpace};

use crate::{print, reader, CliResult};

pub(crate) async fn run(url: String, space: Option<String>, json: bool) -> CliResult {
    let cat = reader(&url).await?;
    let spaces: Vec<&'static IdSpace> = match space {
        Some(s) => vec![keystone::space(&s)?],
        None => keystone::SPACES.to_vec(),
    };
    for s in spaces {
        let d = cat.describe(s).await?;
        print(json, serde_json::to_value(&d).unwrap_or_default(), || {
            d.to_string()
        });
    }
    cat.close().await?;
    Ok(ExitCode::SUCCESS)
}
