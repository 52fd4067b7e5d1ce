//! The `rocklake` command (package `rocklake-cli`): create, inspect, verify and exercise
//! RockLake catalogs.
//!
//! Run without a subcommand it does RockLake's main job on the embedded default: it qualifies
//! the engines compiled in (the conformance suite on a local folder and in memory).

use std::io::Write as _;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand};
use rocklake::keys::{self, Key};
use rocklake::keystone::{self, IdSpace};
use rocklake::tags::{self, ColType, TagInfo, ValueKind};
use rocklake::values::{self, Binding, Row, Value};
use rocklake::{Admin, Catalog, Error, KeyChoice, KeyRange, KvBackend, Order, Pager, ReadView};
use serde_json::json;

mod cmd_bench;
mod cmd_conformance;

#[derive(Parser, Debug)]
#[command(
    name = "rocklake",
    version,
    about = "RockLake: a DuckLake catalog on an embedded key-value store"
)]
struct Cli {
    /// Print machine-readable JSON instead of text.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Create a catalog (or open an existing one as the new writer).
    Init { url: String },
    /// Engine, format version, writer epoch, retain-from and keys per table.
    Info { url: String },
    /// Decode keys given in hex, as the tag document's hex-dump guide reads them.
    Inspect {
        /// Keys in hex: `05 00 00 00 00 00 00 00 2a ...` (quote it) or `05000000000000002a...`.
        #[arg(required = true)]
        hex: Vec<String>,
    },
    /// List the rows of one table, keys decoded and values decoded as rows.
    Scan {
        url: String,
        /// Table name, e.g. ducklake_table.
        #[arg(long, conflicts_with = "tag")]
        table: Option<String>,
        /// Tag byte, e.g. 0x05.
        #[arg(long)]
        tag: Option<String>,
        /// Show only row versions visible at this snapshot.
        #[arg(long)]
        at: Option<u64>,
        /// Stop after this many rows.
        #[arg(long)]
        limit: Option<usize>,
    },
    /// DESCRIBE: the mark and budget of one id space, or of all.
    Describe { url: String, space: Option<String> },
    /// SHOW BUDGET: key use of every id space with warnings.
    Budget { url: String },
    /// Insert a row into an id space with a named (--id) or issued key.
    Insert {
        url: String,
        /// Id space: table, schema, snapshot, view, ... (see `describe`).
        #[arg(long)]
        space: String,
        /// Name the key; leave out to have the engine issue one.
        #[arg(long)]
        id: Option<String>,
        /// Parent id for child spaces (column, file, delete-file): the table id.
        #[arg(long)]
        parent: Option<u64>,
        /// Column values, `name=value` (repeatable).
        #[arg(long = "set", value_name = "COLUMN=VALUE")]
        set: Vec<String>,
    },
    /// Delete the row bound to a key (the key stays bound until PURGE).
    Delete {
        url: String,
        #[arg(long)]
        space: String,
        #[arg(long)]
        id: String,
    },
    /// PURGE: free the keys of deleted rows in a range. Needs --admin.
    Purge {
        url: String,
        #[arg(long)]
        space: String,
        /// First key of the range.
        #[arg(long)]
        from: String,
        /// Last key of the range (default: --from).
        #[arg(long)]
        to: Option<String>,
        /// Confirm the admin capability PURGE needs.
        #[arg(long)]
        admin: bool,
        /// Who is purging (recorded in the audit log).
        #[arg(long, default_value = "rocklake-cli")]
        actor: String,
    },
    /// Raise the retain-from floor (the oldest snapshot that may still be read).
    RetainFrom { url: String, snapshot: u64 },
    /// Remove row versions that ended at or before retain-from.
    Gc { url: String },
    /// Walk the whole key space and report what does not decode or contradicts itself.
    Verify { url: String },
    /// Run the conformance suite against a store URL and print a pass/fail table.
    Conformance {
        /// Store URL; without one, qualifies every compiled engine on a temporary folder and in memory.
        url: Option<String>,
        /// Kill-and-reopen rounds of the crash check (needs a persistent store).
        #[arg(long, default_value_t = 20)]
        crash_rounds: usize,
        /// Allow clearing a store that already holds data.
        #[arg(long)]
        clear: bool,
    },
    /// Benchmark every compiled engine side by side (against raw engine calls and SQLite).
    Bench {
        /// Engines to run (slatedb, rocksdb, sled, model); default: every compiled one.
        #[arg(long, value_delimiter = ',')]
        engines: Vec<String>,
        /// A short run (seconds per engine) instead of the full one.
        #[arg(long)]
        quick: bool,
        /// Write bench.json, bench.md and SVG charts into this folder.
        #[arg(long)]
        out: Option<std::path::PathBuf>,
        /// Workload groups to run (codec, point, scan, batch, keystone, mvcc, catalog,
        /// group-commit); default: all.
        #[arg(long, value_delimiter = ',')]
        groups: Vec<String>,
    },
    /// Print the tag registry (as markdown with --markdown).
    Tags {
        #[arg(long)]
        markdown: bool,
    },
    #[command(hide = true)]
    CrashChild { url: String },
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let json = cli.json;
    let result = match cli.command {
        None => main_job(json).await,
        Some(c) => run(c, json).await,
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            if json {
                eprintln!(
                    "{}",
                    json!({"error": e.to_string(), "kind": e.kind(), "sqlstate": e.sqlstate()})
                );
            } else {
                eprintln!("ERR {e}");
                let mut source = std::error::Error::source(&e);
                while let Some(s) = source {
                    eprintln!("  caused by: {s}");
                    source = s.source();
                }
            }
            ExitCode::from(1)
        }
    }
}

type CliResult = Result<ExitCode, Error>;

/// The main job on the embedded default: qualify the compiled engines, then a quick benchmark.
async fn main_job(json: bool) -> CliResult {
    let code = cmd_conformance::qualify(json).await?;
    if code != ExitCode::SUCCESS {
        return Ok(code);
    }
    cmd_bench::run(vec![], vec![], true, None, json).await
}

fn print(json: bool, value: serde_json::Value, text: impl FnOnce() -> String) {
    if json {
        println!("{value}");
    } else {
        println!("{}", text());
    }
}

async fn writer(url: &str) -> Result<Catalog, Error> {
    Catalog::open(rocklake::open(url).await?).await
}

async fn reader(url: &str) -> Result<Catalog, Error> {
    Catalog::open_read_only(rocklake::open(url).await?).await
}

async fn run(command: Command, json: bool) -> CliResult {
    match command {
        Command::Init { url } => {
            let cat = writer(&url).await?;
            let info = cat.info().await?;
            cat.close().await?;
            print(
                json,
                json!({"url": url, "engine": info.engine, "writer_epoch": info.writer_epoch, "format_version": info.format_version}),
                || {
                    format!(
                        "initialised {url} engine={} format_version={} writer_epoch={}",
                        info.engine, info.format_version, info.writer_epoch
                    )
                },
            );
        }
        Command::Info { url } => {
            let backend = rocklake::open(&url).await?;
            let info =
                rocklake::catalog::info_with_progress(backend.as_ref(), backend.engine(), |n| {
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
                    info.engine, info.format_version, info.writer_epoch, info.retain_from, info.current_snapshot
                );
                    for (table, n) in &info.counts {
                        s.push_str(&format!("{table} {n}\n"));
                    }
                    s.trim_end().to_string()
                },
            );
        }
        Command::Inspect { hex } => {
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
        }
        Command::Scan {
            url,
            table,
            tag,
            at,
            limit,
        } => {
            let info = match (table, tag) {
                (Some(name), _) => tags::by_name(&name).ok_or_else(|| {
                    Error::NotFound(format!("no table named {name:?}; see `rocklake tags`"))
                })?,
                (None, Some(t)) => {
                    let byte =
                        u8::from_str_radix(t.trim_start_matches("0x").trim_start_matches("0X"), 16)
                            .map_err(|_| {
                                Error::InvalidArgument(format!(
                                    "--tag {t:?} is not a hex byte like 0x05"
                                ))
                            })?;
                    tags::lookup(byte).ok_or_else(|| {
                        Error::NotFound(format!("tag {byte:#04x} is not allocated"))
                    })?
                }
                (None, None) => {
                    return Err(Error::InvalidArgument(
                        "give --table NAME or --tag 0xNN".into(),
                    ))
                }
            };
            scan(&url, info, at, limit, json).await?;
        }
        Command::Describe { url, space } => {
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
        }
        Command::Budget { url } => {
            let cat = reader(&url).await?;
            let b = cat.budget().await?;
            cat.close().await?;
            print(json, serde_json::to_value(&b).unwrap_or_default(), || {
                b.to_string().trim_end().to_string()
            });
        }
        Command::Insert {
            url,
            space,
            id,
            parent,
            set,
        } => {
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
        }
        Command::Delete { url, space, id } => {
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
        }
        Command::Purge {
            url,
            space,
            from,
            to,
            admin,
            actor,
        } => {
            if !admin {
                return Err(Error::PermissionDenied(
                    "PURGE needs the admin capability: add --admin".into(),
                ));
            }
            let space = keystone::space(&space)?;
            let first = space.parse_id(&from)?;
            let last = match to {
                Some(t) => space.parse_id(&t)?,
                None => first,
            };
            let cat = writer(&url).await?;
            let result = cat.purge(space, first..=last, &Admin::grant(actor)).await;
            cat.close().await?;
            let r = result?;
            print(json, serde_json::to_value(&r).unwrap_or_default(), || {
                format!(
                    "PURGED {} freed={:?} rows_removed={}{}",
                    r.freed.len(),
                    r.freed,
                    r.rows_removed,
                    r.audit_key
                        .as_ref()
                        .map(|k| format!(" audit=[{k}]"))
                        .unwrap_or_default()
                )
            });
        }
        Command::RetainFrom { url, snapshot } => {
            let cat = writer(&url).await?;
            let r = cat.set_retain_from(snapshot).await;
            cat.close().await?;
            r?;
            print(json, json!({"retain_from": snapshot}), || {
                format!("retain-from={snapshot}")
            });
        }
        Command::Gc { url } => {
            let cat = writer(&url).await?;
            let r = cat.gc().await;
            cat.close().await?;
            let n = r?;
            print(json, json!({"versions_removed": n}), || {
                format!("GC removed {n} versions")
            });
        }
        Command::Verify { url } => {
            let backend = rocklake::open(&url).await?;
            let findings = verify(backend.as_ref(), json).await;
            backend.close().await?;
            let findings = findings?;
            if !findings.is_empty() {
                return Ok(ExitCode::from(2));
            }
        }
        Command::Conformance {
            url,
            crash_rounds,
            clear,
        } => {
            return cmd_conformance::run(url, crash_rounds, clear, json).await;
        }
        Command::Bench {
            engines,
            quick,
            out,
            groups,
        } => {
            return cmd_bench::run(engines, groups, quick, out, json).await;
        }
        Command::Tags { markdown } => {
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
        }
        Command::CrashChild { url } => {
            return cmd_conformance::crash_child(&url).await;
        }
    }
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

async fn scan(
    url: &str,
    info: &'static TagInfo,
    at: Option<u64>,
    limit: Option<usize>,
    json: bool,
) -> Result<(), Error> {
    let backend = rocklake::open(url).await?;
    let view = backend.view().await?;
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
