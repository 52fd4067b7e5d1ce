//! `rocklake conformance` and the default main job: run the conformance suite and print a table.

use std::process::ExitCode;
use std::sync::Arc;

use conformance::{render_table, run_all, ChildCommand, Opener, Target};
use rocklake::{Error, KeyRange, Order, Pager, WriteBatch};
use serde_json::json;

use crate::progress::Progress;

fn opener() -> Opener {
    Arc::new(|url: String| Box::pin(async move { open_for_suite(&url).await }))
}

/// The suite opens second writers on purpose, to see a SlateDB writer fenced (RocksDB's and
/// sled's refused on their lock), so SlateDB stores are opened as takeovers: a plain open would
/// be refused by the holder record of the writer under test.
async fn open_for_suite(url: &str) -> Result<Arc<dyn rocklake::KvBackend>, Error> {
    if rocklake::engine_of(url)? == "slatedb" {
        rocklake::open_takeover(url).await
    } else {
        rocklake::open(url).await
    }
}

fn child() -> Option<ChildCommand> {
    let exe = std::env::current_exe().ok()?;
    Some(Arc::new(move |url: &str| {
        let mut c = std::process::Command::new(&exe);
        c.arg("crash-child").arg(url);
        c
    }))
}

async fn run_targets(targets: Vec<Target>, json: bool) -> Result<ExitCode, Error> {
    let mut results = Vec::new();
    for target in &targets {
        let progress = Progress::steps(
            &format!("conformance {}", target.name),
            conformance::checks::ALL.len() as u64,
            json,
        );
        let reports = run_all(target, |r| {
            progress.step();
            progress.say(format!("{} {} ({} ms)", r.check, r.outcome, r.millis));
            if r.outcome == "fail" {
                progress.line(format!("  [{}] {}: fail", target.name, r.check));
            }
        })
        .await;
        progress.done();
        results.push((target.name.clone(), reports));
    }
    let failed: Vec<String> = results
        .iter()
        .flat_map(|(t, rs)| {
            rs.iter()
                .filter(|r| r.outcome == "fail")
                .map(move |r| format!("[{t}] {}: {}", r.check, r.detail))
        })
        .collect();
    if json {
        let v: Vec<_> = results
            .iter()
            .map(|(t, rs)| json!({"target": t, "cases": rs}))
            .collect();
        println!("{}", json!({"targets": v, "failed": failed.len()}));
    } else {
        println!("{}", render_table(&results));
        for f in &failed {
            println!("FAIL {f}");
        }
        let cases: usize = results.iter().map(|(_, r)| r.len()).sum();
        let na: usize = results
            .iter()
            .map(|(_, r)| r.iter().filter(|c| c.outcome == "n/a").count())
            .sum();
        println!(
            "conformance: {} passed, {} failed ({na} not applicable)",
            cases - failed.len() - na,
            failed.len()
        );
    }
    Ok(if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(2)
    })
}

/// `rocklake conformance [URL]`.
pub async fn run(
    url: Option<String>,
    crash_rounds: usize,
    clear: bool,
    json: bool,
) -> Result<ExitCode, Error> {
    let Some(url) = url else {
        return qualify_with(crash_rounds, json).await;
    };
    let engine = rocklake::engine_of(&url)?;
    // Refuse a store that holds data unless told it may be cleared.
    let backend = rocklake::open(&url).await?;
    let mut probe = Pager::new(backend.as_ref(), KeyRange::all(), Order::Ascending, 1000);
    let mut keys = Vec::new();
    while let Some(page) = probe.next_page().await? {
        keys.extend(page.into_iter().map(|(k, _)| k));
    }
    if !keys.is_empty() {
        if !clear {
            backend.close().await?;
            return Err(Error::InvalidArgument(format!(
                "{url} holds {} keys; the conformance suite writes below it and would disturb them. Pass --clear to delete them first, or use an empty location",
                keys.len()
            )));
        }
        for chunk in keys.chunks(1000) {
            let mut b = WriteBatch::new();
            for k in chunk {
                b.delete(k.clone());
            }
            backend.write(b, rocklake::Durability::Durable).await?;
        }
        eprintln!("cleared {} keys from {url}", keys.len());
    }
    backend.close().await?;
    let target = Target::at(
        &format!("{engine} {url}"),
        &url,
        opener(),
        child(),
        crash_rounds,
    );
    run_targets(vec![target], json).await
}

/// `rocklake conformance` without a URL: qualify every compiled engine on a local folder and
/// in memory.
async fn qualify_with(crash_rounds: usize, json: bool) -> Result<ExitCode, Error> {
    let mut targets = vec![Target::ephemeral("model", "model://", opener())];
    let engines = rocklake::engines();
    let mut add_dir = |name: &str, scheme: &str| {
        let mut t = Target::in_temp_dir(name, scheme, opener(), child());
        t.crash_rounds = crash_rounds;
        targets.push(t);
    };
    if engines.contains(&"slatedb") {
        add_dir("slatedb-file", "file");
    }
    if engines.contains(&"rocksdb") {
        add_dir("rocksdb", "rocksdb");
    }
    if engines.contains(&"sled") {
        add_dir("sled", "sled");
    }
    if engines.contains(&"slatedb") {
        targets.push(Target::ephemeral("slatedb-memory", "memory://", opener()));
    }
    run_targets(targets, json).await
}

/// `rocklake crash-child URL`: the writer the crash check kills.
pub async fn crash_child(url: &str) -> Result<ExitCode, Error> {
    let cut = conformance::cutstore::wanted();
    if cut {
        conformance::cutstore::listen_for_cut();
    }
    conformance::crash::mark(conformance::crash::OPENING);
    let backend = if cut {
        open_under_cut(url).await?
    } else {
        open_for_suite(url).await?
    };
    conformance::crash::mark(conformance::crash::OPENED);
    conformance::crash::child_main(backend).await
}

/// A SlateDB store whose object store is under the power-cut layer (the `power_cut` check on
/// object storage, [`conformance::cutstore`]). Other engines open as usual; the check then
/// fails, saying that the layer saw nothing.
async fn open_under_cut(url: &str) -> Result<Arc<dyn rocklake::KvBackend>, Error> {
    #[cfg(feature = "slatedb")]
    if rocklake::engine_of(url)? == "slatedb" {
        use rocklake::rocklake_slatedb::{object_store_for, parse_url, SlateEngine};
        let (location, mut options) = parse_url(url)?;
        options.takeover = true;
        let (store, path) = object_store_for(&location)?;
        let store = conformance::cutstore::wrap(store);
        let engine = SlateEngine::open_store(store, path, location, options).await?;
        return Ok(Arc::new(rocklake::EngineBackend::new(engine)));
    }
    open_for_suite(url).await
}
