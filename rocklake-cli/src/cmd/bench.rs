//! `rocklake bench`: every workload on every compiled engine in one process, one table.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use benches::{render_markdown, render_svg, Budget, RawEngine, Subject};
use rocklake::{Error, KvBackend};

use benches::Opened;

fn subject(
    name: &str,
    f: impl Fn(PathBuf) -> futures::future::BoxFuture<'static, rocklake::Result<Opened>>
        + Send
        + Sync
        + 'static,
) -> Subject {
    Subject {
        name: name.into(),
        open: Arc::new(move |p: &Path| f(p.to_path_buf())),
    }
}

/// The subjects for the engines asked for (all compiled ones when `engines` is empty).
pub fn subjects(engines: &[String]) -> Result<Vec<Subject>, Error> {
    let want = |e: &str| engines.is_empty() || engines.iter().any(|x| x == e);
    let mut out = Vec::new();
    for e in engines {
        if !rocklake::engines().contains(&e.as_str()) && e != "slatedb-memory" {
            return Err(Error::Unsupported(format!(
                "engine {e} is not compiled in; compiled: {:?}",
                rocklake::engines()
            )));
        }
    }
    #[cfg(feature = "slatedb")]
    if want("slatedb") {
        out.push(subject("slatedb-file", |dir| {
            Box::pin(async move {
                let b = rocklake::rocklake_slatedb::open_url(&format!("file://{}", dir.display()))
                    .await?;
                let raw: Arc<dyn RawEngine> = Arc::new(benches::raw::RawSlate(b.clone()));
                let backend: Arc<dyn KvBackend> = b;
                Ok((backend, Some(raw)))
            })
        }));
    }
    #[cfg(feature = "rocksdb")]
    if want("rocksdb") {
        out.push(subject("rocksdb", |dir| {
            Box::pin(async move {
                let b = rocklake::rocklake_rocksdb::open(&dir).await?;
                let raw = b
                    .engine_ref()
                    .raw_db()
                    .map(|db| Arc::new(benches::raw::RawRocks(db)) as Arc<dyn RawEngine>);
                let backend: Arc<dyn KvBackend> = b;
                Ok((backend, raw))
            })
        }));
    }
    #[cfg(feature = "sled")]
    if want("sled") {
        out.push(subject("sled", |dir| {
            Box::pin(async move {
                let b = rocklake::rocklake_sled::open(&dir).await?;
                let raw = b
                    .engine_ref()
                    .raw_db()
                    .map(|db| Arc::new(benches::raw::RawSled(db)) as Arc<dyn RawEngine>);
                let backend: Arc<dyn KvBackend> = b;
                Ok((backend, raw))
            })
        }));
    }
    if want("model") {
        out.push(subject("model", |_| {
            Box::pin(async move {
                Ok((
                    Arc::new(rocklake::MemoryBackend::default()) as Arc<dyn KvBackend>,
                    None,
                ))
            })
        }));
    }
    let _ = want;
    Ok(out)
}

/// A subject on the stores a URL names (`--store-url`): each workload group opens a new store
/// under it, at `<url>/<this subject of this run>/<n>` with the URL's options kept.
pub fn url_subject(url: &str) -> Result<Subject, Error> {
    let (base, options) = match url.split_once('?') {
        Some((b, o)) => (b.trim_end_matches('/').to_string(), format!("?{o}")),
        None => (url.trim_end_matches('/').to_string(), String::new()),
    };
    if !base.contains("://") {
        return Err(Error::InvalidArgument(format!(
            "--store-url {url:?} is not a store URL (file:///path, s3://bucket/prefix, sled:///path, ...)"
        )));
    }
    // Two subjects may name one place (with different options): each has its own folder.
    static SUBJECTS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let run = format!(
        "bench-{}-{}-{}",
        SUBJECTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or_default()
    );
    let opened = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    Ok(subject(url, move |_| {
        let n = opened.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let at = format!("{base}/{run}/{n}{options}");
        Box::pin(async move { Ok((rocklake::open(&at).await?, None)) })
    }))
}

/// `--profile`: `operations` of one `sql` group operation on the model engine, or on the
/// store `url` names (a fresh one), untimed (the set-up is not part of what a profiler
/// collecting inside `benches::sql::profiled_operations` counts).
pub async fn profile(
    op: benches::sql::Operation,
    operations: usize,
    url: Option<String>,
) -> Result<ExitCode, Error> {
    let (backend, on): (Arc<dyn KvBackend>, String) = match url {
        None => (
            Arc::new(rocklake::MemoryBackend::default()),
            "the model engine".into(),
        ),
        Some(url) => (rocklake::open(&url).await?, url),
    };
    let split = benches::sql::profile(backend, op, operations).await?;
    println!("{operations} × {op:?} on {on}; the session's phases per operation: {split}");
    Ok(ExitCode::SUCCESS)
}

/// Run, print the markdown table, write JSON and SVG charts into `out_dir`.
pub async fn run(
    engines: Vec<String>,
    store_urls: Vec<String>,
    groups: Vec<String>,
    quick: bool,
    out_dir: Option<PathBuf>,
    json: bool,
) -> Result<ExitCode, Error> {
    let mut subjects = subjects(&engines)?;
    for url in &store_urls {
        subjects.push(url_subject(url)?);
    }
    let budget = if quick {
        Budget::quick()
    } else {
        Budget::full()
    };
    for g in &groups {
        if !benches::GROUPS.contains(&g.as_str()) {
            return Err(Error::InvalidArgument(format!(
                "unknown workload group {g:?}; the groups are {:?}",
                benches::GROUPS
            )));
        }
    }
    let progress = crate::progress::Progress::spinner("bench", json);
    let rows = benches::run(&subjects, budget, &groups, |what| {
        progress.say(what.to_string())
    })
    .await?;
    progress.done();
    let machine = machine();
    if json {
        println!("{}", serde_json::json!({"machine": machine, "rows": rows}));
    } else {
        println!("Machine: {machine}. Durable rows: fsync/synced WAL/flushed WAL object per commit; buffered rows: none.\n");
        println!("{}", render_markdown(&rows));
    }
    if let Some(dir) = out_dir {
        std::fs::create_dir_all(&dir)
            .map_err(|e| Error::engine("bench", format!("creating {}", dir.display()), e))?;
        let write = |name: &str, text: String| {
            std::fs::write(dir.join(name), text)
                .map_err(|e| Error::engine("bench", format!("writing {name}"), e))
        };
        write(
            "bench.json",
            serde_json::to_string_pretty(&serde_json::json!({"machine": machine, "rows": rows}))
                .unwrap_or_default(),
        )?;
        write(
            "bench.md",
            format!("Machine: {machine}\n\n{}", render_markdown(&rows)),
        )?;
        let mut groups: Vec<&str> = rows.iter().map(|r| r.group.as_str()).collect();
        groups.dedup();
        for g in groups {
            write(&format!("bench-{g}.svg"), render_svg(&rows, g))?;
        }
        eprintln!(
            "bench: wrote bench.json, bench.md and one SVG per group to {}",
            dir.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn machine() -> String {
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    format!(
        "{cpus} cores ({model}), {} build, {}",
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
        std::env::consts::OS
    )
}
