//! `rocklake inspect`: decode keys given in hex, as the tag document's hex-dump guide reads them.

use std::process::ExitCode;

use rocklake::keys::{self, Key};
use rocklake::Error;
use serde_json::json;

use crate::{print, CliResult};

pub(crate) async fn run(hex: Vec<String>, json: bool) -> CliResult {
    let mut failed = false;
    for h in hex {
        let bytes = keys::parse_hex(&h).map_err(Error::InvalidArgument)?;
        match Key::decode(&bytes) {
            Ok(k) => print(
                json,
                json!({"hex": keys::hex(&bytes), "key": k.to_string()}),
                || format!("{}  →  {k}", keys::hex(&bytes)),
            ),
            Err(e) => {
                failed = true;
                print(
                    json,
                    json!({"hex": keys::hex(&bytes), "error": e.to_string()}),
                    || format!("{}  →  ERR {e}", keys::hex(&bytes)),
                );
            }
        }
    }
    if failed {
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}
