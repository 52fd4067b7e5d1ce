//! `rocklake delete`: delete the row bound to a key (the key stays bound until PURGE).

use std::process::ExitCode;

use rocklake::keystone;
use rocklake::Error;
use serde_json::json;

use crate::{print, writer, CliResult};

pub(crate) async fn run(url: String, space: String, id: String, json: bool) -> CliResult {
    let space = keystone::space(&space)?;
    let id = space.parse_id(&id)?;
    let cat = writer(&url).await?;
    let result = async {
        let mut t = cat.begin().await?;
        let deleted = t.delete(space, id).await?;
        t.commit().await?;
        Ok::<_, Error>(deleted)
    }
    .await;
    cat.close().await?;
    let n = u8::from(result?);
    print(
        json,
        json!({"deleted": n, "space": space.name, "id": id}),
        || format!("DELETED {n}"),
    );
    Ok(ExitCode::SUCCESS)
}
