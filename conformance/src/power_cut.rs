//! The power-cut check on a real engine: its files on a [`CutFs`](crate::cutfs) that keeps only
//! what was synced.
//!
//! Each run mounts the store's last image, starts the crash check's child on it (the same
//! committers and maintaining task as [`crate::crash`]; the child appends each acknowledgement
//! to the mount's observer file as well, so acknowledgements and the engine's writes reach the
//! file system in one order), and takes images of the disk as power cuts at random moments
//! would leave it: [`OPENING_CUTS`] of them at random requests before the child's first
//! acknowledgement (while it opens and recovers the last run's image), the others at random
//! moments after; half of them torn (a random part of the unsynced writes kept). The run ends
//! with a last cut that freezes the file system (every request then fails with `EIO`) before
//! the child is killed. Each image is then written to a plain folder,
//! opened with the engine and checked as the crash check checks a store: every commit
//! acknowledged before the cut is there, none is half there, no acknowledged delete came
//! back, no id space's mark went back or below an issued id, no id was issued twice. The next
//! run starts from the last run's frozen image, as the machine would after the power returns;
//! every [`RUNS_PER_STORE`] runs a new store starts.
//!
//! The cut timing comes from a seed the report prints (`ROCKLAKE_POWER_CUT_SEED` replays it;
//! the child's own pace still varies from run to run).

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rocklake_core::Keyspace;

use crate::crash::{self, Acks};
use crate::cutfs::{self, CutImage, Mounted};
use crate::Target;

/// Cuts per run of the child (the last one freezes the file system).
pub const CUTS_PER_RUN: usize = 20;

/// Cuts per run at random requests before the first acknowledgement (while the engine opens
/// and recovers).
pub const OPENING_CUTS: usize = 4;

/// Runs on one store before the next starts from a new one: each run leaves the store larger
/// (SlateDB a few hundred WAL objects more), and opening an image to check it costs with its
/// size; a new store every few runs keeps a thousand cuts within minutes.
pub const RUNS_PER_STORE: usize = 3;

/// Cuts asked for by `ROCKLAKE_POWER_CUTS`, or `default`.
pub fn cuts_from_env(default: usize) -> usize {
    std::env::var("ROCKLAKE_POWER_CUTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The seed of the cut timing: `ROCKLAKE_POWER_CUT_SEED`, or a new one.
pub fn seed_from_env() -> Result<u64, String> {
    match std::env::var("ROCKLAKE_POWER_CUT_SEED") {
        Ok(v) => v
            .parse()
            .map_err(|_| format!("ROCKLAKE_POWER_CUT_SEED={v:?} is not a whole number")),
        Err(_) => Ok(rand::random::<u32>() as u64),
    }
}

/// What the cuts covered.
#[derive(Debug, Default)]
pub struct PowerCutSummary {
    /// Runs of the child.
    pub runs: usize,
    /// Stores the runs went through ([`RUNS_PER_STORE`] runs each).
    pub stores: usize,
    /// Images checked.
    pub cuts: usize,
    /// Of them, torn (a random part of the unsynced writes kept).
    pub torn: usize,
    /// Of them, taken before the child's first acknowledgement in its run.
    pub before_first_ack: usize,
    /// Acknowledged inserts required by the images, in total (one commit counts in each image
    /// after it).
    pub required: usize,
    /// Acknowledged inserts of the children, in total.
    pub acknowledged: usize,
    /// Synced bytes the last image held.
    pub bytes: u64,
    /// The seed of the cut timing.
    pub seed: u64,
}

/// The URL that opens a store of `target` in the folder `path`, when the target's stores are
/// folders (`dir://`, `file://`).
pub fn folder_url(target: &Target, path: &Path) -> Option<String> {
    let (scheme, _) = target.base.split_once("://")?;
    match scheme {
        "dir" | "file" => Some(format!("{scheme}://{}", path.display())),
        _ => None,
    }
}

/// Run `cuts` power cuts against one store of `target` (a folder target with a crash child).
pub async fn run_cuts(target: &Target, cuts: usize) -> Result<PowerCutSummary, String> {
    cutfs::available()?;
    let child = target.child.clone().ok_or("no child command")?;
    // Each image is written out and read by the engine once: on a memory file system where
    // there is one (on ext4, creating thousands of files a minute spends most of the check's
    // time in the kernel's inode allocation).
    let mut work = tempfile::Builder::new();
    work.prefix("rocklake-power-cut-");
    let shm = Path::new("/dev/shm");
    let work = if shm.is_dir() {
        work.tempdir_in(shm)
    } else {
        work.tempdir()
    }
    .map_err(|e| format!("a temporary folder: {e}"))?;
    let url_at = |path: &Path| {
        folder_url(target, path).ok_or_else(|| format!("{} is not a folder target", target.base))
    };
    let seed = seed_from_env()?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut summary = PowerCutSummary {
        seed,
        ..PowerCutSummary::default()
    };
    let mut chain = Chain::default();
    let mut image = CutImage::default();
    // Requests before a run's first acknowledgement, as the last run measured them.
    let mut open_requests: u64 = 200;
    let mnt = work.path().join("mnt");
    let check_dir = work.path().join("check");
    while summary.cuts < cuts {
        let run = summary.runs;
        let fail = |e: String| {
            format!("run {run} (seed {seed}, replay with ROCKLAKE_POWER_CUT_SEED={seed}): {e}")
        };
        if run.is_multiple_of(RUNS_PER_STORE) {
            image = fresh_image(target, work.path()).await.map_err(fail)?;
            chain = Chain::default();
            summary.stores += 1;
        }
        std::fs::create_dir_all(&mnt).map_err(|e| fail(format!("mount point: {e}")))?;
        // A few cuts at random requests before the one that wrote the last run's first
        // acknowledgement: the engine opening and recovering the last image.
        let opening: Vec<u64> = (0..OPENING_CUTS.min(cuts - summary.cuts))
            .map(|_| rng.random_range(1..=open_requests))
            .collect();
        let mounted = Mounted::mount(&mnt, &image, rng.random(), opening.clone())
            .map_err(|e| fail(format!("mounting the power-cut file system: {e}")))?;
        let mut cmd = tokio::process::Command::from(child(&url_at(&mnt.join("store"))?));
        cmd.env(crash::ACKS_ENV, mnt.join(cutfs::OBSERVED))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .stdin(Stdio::null())
            .kill_on_drop(true);
        let mut proc = cmd
            .spawn()
            .map_err(|e| fail(format!("spawning the child: {e}")))?;
        let wanted = CUTS_PER_RUN.min(cuts - summary.cuts).max(opening.len() + 1);
        let mut images = Vec::with_capacity(wanted);
        // The other cuts 0-30 ms apart.
        while images.len() + opening.len() + 1 < wanted {
            tokio::time::sleep(Duration::from_millis(rng.random_range(0..30))).await;
            images.push(mounted.image(rng.random_bool(0.5)));
        }
        if let Ok(Some(status)) = proc.try_wait() {
            let out = proc.wait_with_output().await.map_err(|e| e.to_string())?;
            return Err(fail(format!(
                "the child ended before the power cut ({status}); its stderr: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        let last_cut = mounted.freeze(rng.random_bool(0.5));
        // A scheduled request the child never reached took no image; the last cut is the last.
        images.extend(mounted.scheduled_images());
        images.sort_by_key(|i| i.requests);
        images.push(last_cut);
        if let Some(n) = mounted.first_observed_request() {
            open_requests = n.max(2);
        }
        let trace = mounted.trace();
        let _ = proc.start_kill();
        let out = proc
            .wait_with_output()
            .await
            .map_err(|e| fail(format!("waiting for the child: {e}")))?;
        mounted
            .unmount()
            .map_err(|e| fail(format!("unmounting: {e}")))?;
        let last = images.len() - 1;
        let mut acked_in_run = 0;
        for (i, cut) in images.iter().enumerate() {
            let acks = acks_of(&cut.observed);
            if acks.inserted.is_empty() && acks.deleted.is_empty() {
                summary.before_first_ack += 1;
            }
            summary.required += acks.inserted.len();
            acked_in_run = acks.inserted.len();
            let _ = std::fs::remove_dir_all(&check_dir);
            cut.write_folder(&check_dir)
                .map_err(|e| fail(format!("writing image {i}: {e}")))?;
            let checked = chain
                .check(target, &url_at(&check_dir.join("store"))?, &acks, i == last)
                .await;
            checked.map_err(|e| {
                let kept = keep_failed_run(&image, &images, i, &trace);
                fail(format!(
                    "cut {i} of {} ({}, after {} requests; {} acknowledged inserts and {} deletes \
                     before it): {e}{kept}; the child's stderr: {}",
                    images.len(),
                    if cut.torn {
                        "torn: part of the unsynced writes kept"
                    } else {
                        "every unsynced write lost"
                    },
                    cut.requests,
                    acks.inserted.len(),
                    acks.deleted.len(),
                    String::from_utf8_lossy(&out.stderr).trim()
                ))
            })?;
            summary.cuts += 1;
            summary.torn += usize::from(cut.torn);
        }
        let _ = std::fs::remove_dir_all(&check_dir);
        if acked_in_run == 0 && summary.runs > 0 && summary.acknowledged == 0 {
            return Err(fail(format!(
                "the child acknowledged nothing in its first two runs; its stderr: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        summary.acknowledged += acked_in_run;
        summary.bytes = images[last].bytes();
        image = images.pop().unwrap_or_default();
        summary.runs += 1;
    }
    Ok(summary)
}

/// The acknowledgements in the observer file's content at a cut: its complete lines only.
/// The kernel splits a write that crosses a page boundary into two requests, and a cut may
/// fall between them: `ACK 1183` cut after `ACK 118` acknowledges nothing yet (read as a
/// line it would acknowledge id 118, issued long before).
fn acks_of(observed: &[u8]) -> Acks {
    let complete = match observed.iter().rposition(|&b| b == b'\n') {
        Some(end) => &observed[..end],
        None => &[],
    };
    let mut acks = Acks::default();
    for line in String::from_utf8_lossy(complete).lines() {
        acks.take(line);
    }
    acks
}

/// With `ROCKLAKE_POWER_CUT_KEEP` set to a folder: write there what a failed run leaves to
/// study (`start`, the image the run began from; `cut-NN` and `cut-NN.acks`, each image of the
/// run and the acknowledgements before it; `trace`, every request that changed the disk), and
/// say so in the report.
fn keep_failed_run(
    start: &CutImage,
    images: &[CutImage],
    failed: usize,
    trace: &[String],
) -> String {
    let Some(dir) = std::env::var_os("ROCKLAKE_POWER_CUT_KEEP") else {
        return " (ROCKLAKE_POWER_CUT_KEEP=<folder> keeps the run's images)".into();
    };
    let dir = Path::new(&dir);
    let kept: std::io::Result<()> = (|| {
        if dir.exists() {
            std::fs::remove_dir_all(dir)?;
        }
        start.write_folder(&dir.join("start"))?;
        for (i, cut) in images.iter().enumerate() {
            cut.write_folder(&dir.join(format!("cut-{i:02}")))?;
            std::fs::write(dir.join(format!("cut-{i:02}.acks")), &cut.observed)?;
        }
        std::fs::write(dir.join("trace"), trace.join("\n"))?;
        Ok(())
    })();
    match kept {
        Ok(()) => format!(
            " (the run's images are in {}, cut-{failed:02} failed)",
            dir.display()
        ),
        Err(e) => format!(
            " (keeping the run's images in {} failed: {e})",
            dir.display()
        ),
    }
}

/// The first image of a store: initialised on a plain folder, like the crash check's.
async fn fresh_image(target: &Target, work: &Path) -> Result<CutImage, String> {
    let init = work.join("init");
    let url = folder_url(target, &init.join("store"))
        .ok_or_else(|| format!("{} is not a folder target", target.base))?;
    let backend = target.open(&url).await.map_err(|e| format!("init: {e}"))?;
    Keyspace::open(backend.clone())
        .await
        .map_err(|e| format!("init: {e}"))?
        .close()
        .await
        .map_err(|e| e.to_string())?;
    drop(backend);
    let image =
        CutImage::read_folder(&init).map_err(|e| format!("reading the first image: {e}"))?;
    let _ = std::fs::remove_dir_all(&init);
    Ok(image)
}

/// What earlier runs left for later ones to check against.
#[derive(Default)]
struct Chain {
    /// Ids acknowledged or found bound so far (no later run may issue them again).
    seen: BTreeSet<u64>,
    deleted: BTreeSet<u64>,
    doomed: BTreeSet<u64>,
    /// The table space's mark in the last run's final image.
    mark: u64,
}

impl Chain {
    /// Check one image (opened at `url`) against what was acknowledged before its cut; the
    /// final image of a run carries the chain on.
    async fn check(
        &mut self,
        target: &Target,
        url: &str,
        acks: &Acks,
        final_image: bool,
    ) -> Result<(), String> {
        for id in &acks.inserted {
            if self.seen.contains(id) {
                return Err(format!(
                    "id {id} was acknowledged as newly issued, but an earlier run had it already"
                ));
            }
        }
        let backend = target
            .open(url)
            .await
            .map_err(|e| format!("the engine cannot open the image: {e}"))?;
        let mut deleted = self.deleted.clone();
        deleted.extend(acks.deleted.iter().copied());
        let mut doomed = self.doomed.clone();
        doomed.extend(acks.doomed.iter().copied());
        let mut seen = self.seen.clone();
        let mut mark = self.mark.max(1);
        let checked = crash::check_store(
            backend.clone(),
            &acks.inserted,
            &doomed,
            &deleted,
            &mut seen,
            &mut mark,
        )
        .await;
        let closed = backend.close().await;
        checked?;
        closed.map_err(|e| format!("closing the engine on the image: {e}"))?;
        if final_image {
            self.seen = seen;
            self.deleted = deleted;
            self.doomed = doomed;
            self.mark = mark;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::acks_of;

    #[test]
    fn a_line_cut_in_two_acknowledges_nothing() {
        let acks = acks_of(b"ACK 7\nACKD 8\nDEL 8\nACK 118");
        assert_eq!(acks.inserted, vec![7, 8]);
        assert_eq!(acks.deleted, vec![8]);
        assert!(acks_of(b"DEL 108").deleted.is_empty());
        assert!(acks_of(b"").inserted.is_empty());
        assert_eq!(acks_of(b"ACK 1183\n").inserted, vec![1183]);
    }
}
