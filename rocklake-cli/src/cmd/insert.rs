//! `rocklake insert`: insert a row into an id space with a named (--id) or issued key.

use std::process::ExitCode;

use rocklake::keys;
use rocklake::keystone;
use rocklake::values;
use rocklake::{Error, KeyChoice};
use serde_json::json;

use crate::{print, writer, CliResult};

pub(crate) async fn run(
    url: String,
    space: String,
    id: Option<String>,
    parent: Option<u64>,
    set: Vec<String>,
    json: bool,
) -> CliResult {
    let space = keystone::space(&space)?;
    let choice = match id {
        Some(text) => KeyChoice::Named(space.parse_id(&text)?),
        None => KeyChoice::Issued,
    };
    let table = space
        .table
        .info()
        .ok_or_else(|| Error::NotFound("table".into()))?;
    let cells = values::parse_cells(table, &set)?;
    let cat = writer(&url).await?;
    let result = async {
        let mut t = cat.begin().await?;
        let placed = match parent {
            Some(p) => t.insert_child(space, p, choice, cells).await?,
            None => t.insert(space, choice, cells).await?,
        };
        t.commit().await?;
        Ok::<_, Error>(placed)
    }
    .await;
    cat.close().await?;
    let placed = result?;
    print(
        json,
        json!({"inserted": placed.id, "space": space.name, "key": keys::render(&placed.row_key), "snapshot": placed.snapshot}),
        || placed.to_string(),
    );
    Ok(ExitCode::SUCCESS)
}
