//! `rocklake scan`: list the rows of one table, keys decoded and values decoded as rows.

use std::io::Write as _;
use std::process::ExitCode;

use rocklake::keys;
use rocklake::tags::{self, TagInfo, ValueKind};
use rocklake::values::{self, Row};
use rocklake::{Error, KeyRange, Order, Pager};
use serde_json::json;

use crate::CliResult;

pub(crate) async fn run(
    url: String,
    table: Option<String>,
    tag: Option<String>,
    at: Option<u64>,
    limit: Option<usize>,
    json: bool,
) -> CliResult {
    let info = match (table, tag) {
        (Some(name), _) => tags::by_name(&name).ok_or_else(|| {
            Error::NotFound(format!("no table named {name:?}; see `rocklake tags`"))
        })?,
        (None, Some(t)) => {
            let byte = u8::from_str_radix(t.trim_start_matches("0x").trim_start_matches("0X"), 16)
                .map_err(|_| {
                    Error::InvalidArgument(format!("--tag {t:?} is not a hex byte like 0x05"))
                })?;
            tags::lookup(byte)
                .ok_or_else(|| Error::NotFound(format!("tag {byte:#04x} is not allocated")))?
        }
        (None, None) => {
            return Err(Error::InvalidArgument(
                "give --table NAME or --tag 0xNN".into(),
            ))
        }
    };
    scan(&url, info, at, limit, json).await?;
    Ok(ExitCode::SUCCESS)
}

async fn scan(
    url: &str,
    info: &'static TagInfo,
    at: Option<u64>,
    limit: Option<usize>,
    json: bool,
) -> Result<(), Error> {
    crate::require_store(url)?;
    let backend = crate::open_writer(url).await?;
    let view = backend.view().await?;
    if let Some(s) = at {
        // Below retain-from, GC may have removed versions a reader at `s` would see.
        if let Err(e) = rocklake::keyspace::check_readable_at(view.as_ref(), s).await {
            drop(view);
            backend.close().await?;
            return Err(e);
        }
    }
    let mut pager = Pager::new(
        view.as_ref(),
        KeyRange::prefix(&[info.tag.0]),
        Order::Ascending,
        1024,
    );
    if let Some(l) = limit {
        pager = pager.limit(if at.is_some() { usize::MAX } else { l });
    }
    let mut shown = 0usize;
    let out = std::io::stdout();
    let mut out = out.lock();
    'walk: while let Some(page) = pager.next_page().await? {
        for (k, v) in page {
            let key = keys::render(&k);
            let value = match (info.value, at) {
                (ValueKind::Row, Some(s)) => {
                    let row = Row::decode(&k, &v)?;
                    if !row.version().visible_at(s) {
                        continue;
                    }
                    row.render(Some(info))
                }
                _ => values::render_value(&k, &v).unwrap_or_else(|e| format!("ERR {e}")),
            };
            if json {
                let _ = writeln!(out, "{}", json!({"key": key, "value": value}));
            } else {
                let _ = writeln!(out, "{key}  →  {value}");
            }
            shown += 1;
            if limit.is_some_and(|l| shown >= l) {
                break 'walk;
            }
        }
    }
    drop(out);
    backend.close().await
}
