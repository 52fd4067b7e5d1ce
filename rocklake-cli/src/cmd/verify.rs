//! `rocklake verify`: walk the whole key space and report what does not decode or contradicts
//! itself.

use std::process::ExitCode;
use std::sync::Arc;

use rocklake::keys::{self, Key};
use rocklake::keystone;
use rocklake::tags::ValueKind;
use rocklake::values::{self, Binding, Row};
use rocklake::{Error, KeyRange, KvBackend, Order, Pager, ReadView};
use serde_json::json;

use crate::{print, CliResult};

pub(crate) async fn run(url: String, json: bool) -> CliResult {
    let backend = rocklake::open(&url).await?;
    let findings = verify(backend.as_ref(), json).await;
    backend.close().await?;
    let findings = findings?;
    if !findings.is_empty() {
        return Ok(ExitCode::from(2));
    }
    Ok(ExitCode::SUCCESS)
}

/// Walk every key; report undecodable keys and values, contradictory versions, bindings to
/// missing rows and ids at or above their space's mark.
async fn verify(backend: &dyn KvBackend, json: bool) -> Result<Vec<String>, Error> {
    let view: Arc<dyn ReadView> = backend.view().await?;
    let mut marks = std::collections::HashMap::new();
    for s in keystone::SPACES {
        let stored = match view.get(&s.counter_key()).await? {
            Some(v) => values::decode_u64(&s.counter_key(), &v).ok(),
            None => Some(1),
        };
        marks.insert(s.code(), stored);
    }
    let mut findings = Vec::new();
    let mut walked = 0u64;
    let mut pager = Pager::new(view.as_ref(), KeyRange::all(), Order::Ascending, 4096);
    while let Some(page) = pager.next_page().await? {
        for (k, v) in page {
            walked += 1;
            if walked.is_multiple_of(100_000) {
                eprintln!(
                    "verify: {walked} keys walked, {} findings so far",
                    findings.len()
                );
            }
            let key = match Key::decode(&k) {
                Ok(key) => key,
                Err(e) => {
                    findings.push(format!("key [{}]: {e}", keys::hex(&k)));
                    continue;
                }
            };
            if let Err(e) = check_value(view.as_ref(), &key, &k, &v, &marks).await {
                findings.push(format!("{key}: {e}"));
            }
        }
    }
    for f in &findings {
        if json {
            println!("{}", json!({"finding": f}));
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
    Ok(findings)
}

async fn check_value(
    view: &dyn ReadView,
    key: &Key,
    raw: &[u8],
    value: &[u8],
    marks: &std::collections::HashMap<u8, Option<u64>>,
) -> Result<(), String> {
    let info = keys::tag_of(raw).map_err(|e| e.to_string())?;
    match info.value {
        ValueKind::U64 => {
            values::decode_u64(raw, value).map_err(|e| e.to_string())?;
        }
        ValueKind::Audit => {
            values::render_value(raw, value).map_err(|e| e.to_string())?;
        }
        ValueKind::Row => {
            let row = Row::decode(raw, value).map_err(|e| e.to_string())?;
            if !row.version().is_consistent() {
                return Err(format!(
                    "end_snapshot {:?} is not after begin_snapshot {}",
                    row.end_snapshot, row.begin_snapshot
                ));
            }
            if let Some(begin) = key.begin_snapshot() {
                if begin != row.begin_snapshot {
                    return Err(format!(
                        "key says begin_snapshot={begin} but the row says {}",
                        row.begin_snapshot
                    ));
                }
            }
            if row.cells.len() > info.columns.len() {
                return Err(format!(
                    "{} cells but {} has {} columns (written by a newer RockLake?)",
                    row.cells.len(),
                    info.name,
                    info.columns.len()
                ));
            }
        }
        ValueKind::Index => {
            let Key::Binding { space, id } = key else {
                return Ok(());
            };
            let b = Binding::decode_at(raw, value).map_err(|e| e.to_string())?;
            let Some(s) = keystone::space_by_code(*space) else {
                return Err(format!("binding of an unknown id space {space:#04x}"));
            };
            match marks.get(space).copied().flatten() {
                Some(mark) if *id >= mark => {
                    return Err(format!(
                        "id {id} is at or above the mark next_id={mark} of id space {:?}",
                        s.name
                    ))
                }
                None => {
                    return Err(format!(
                        "the counter of id space {:?} does not decode",
                        s.name
                    ))
                }
                _ => {}
            }
            if view
                .get(&b.row_key)
                .await
                .map_err(|e| e.to_string())?
                .is_none()
            {
                return Err(format!(
                    "binding names row {} which does not exist",
                    keys::render(&b.row_key)
                ));
            }
        }
    }
    Ok(())
}
