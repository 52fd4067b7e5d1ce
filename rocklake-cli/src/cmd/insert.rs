//! `rocklake insert`: insert a row into an id space with a named (--id) or issued key.

use std::process::ExitCode;

use rocklake::keys;
use rocklake::keystone;
use rocklake::tags::{ColType, TagInfo};
use rocklake::values::Value;
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
    let cells = parse_cells(table, &set)?;
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

fn parse_cells(table: &TagInfo, set: &[String]) -> Result<Vec<Value>, Error> {
    let mut cells = vec![Value::Null; table.columns.len()];
    for item in set {
        let (name, text) = item
            .split_once('=')
            .ok_or_else(|| Error::InvalidArgument(format!("--set {item:?} is not COLUMN=VALUE")))?;
        let i = table.column_index(name).ok_or_else(|| {
            let names: Vec<&str> = table.columns.iter().map(|c| c.name).collect();
            Error::InvalidArgument(format!(
                "{} has no column {name:?}; its columns are: {}",
                table.name,
                names.join(", ")
            ))
        })?;
        let col = table.columns[i];
        cells[i] = if text.eq_ignore_ascii_case("null") {
            Value::Null
        } else {
            match col.ty {
                ColType::BigInt | ColType::TimestampTz => {
                    Value::Int(text.parse().map_err(|_| {
                        Error::InvalidArgument(format!(
                            "column {name} is {} but {text:?} is not an integer",
                            col.ty.sql()
                        ))
                    })?)
                }
                ColType::Bool => Value::Bool(match text {
                    "true" | "t" | "1" => true,
                    "false" | "f" | "0" => false,
                    _ => {
                        return Err(Error::InvalidArgument(format!(
                            "column {name} is boolean but {text:?} is neither true nor false"
                        )))
                    }
                }),
                ColType::Text | ColType::Uuid => Value::Text(text.to_string()),
                ColType::Bytes => {
                    Value::Bytes(keys::parse_hex(text).map_err(Error::InvalidArgument)?)
                }
            }
        };
    }
    while cells.last() == Some(&Value::Null) {
        cells.pop();
    }
    Ok(cells)
}
