//! The conformance suite, stamped out once per engine compiled into this build: one test per
//! check per engine. `cargo test` runs the default engines; `cargo test --all-features` all.

use std::sync::Arc;

use conformance::{suite, ChildCommand, Opener, Target};

fn opener() -> Opener {
    Arc::new(|url: String| Box::pin(async move { rocklake::open(&url).await }))
}

fn child() -> Option<ChildCommand> {
    Some(Arc::new(|url: &str| {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_rocklake"));
        c.arg("crash-child").arg(url);
        c
    }))
}

fn model() -> Target {
    Target::ephemeral("model", "model://", opener())
}

suite!(model_reference, model());

#[cfg(feature = "slatedb")]
mod slatedb_targets {
    use super::*;

    pub fn memory() -> Target {
        Target::ephemeral("slatedb-memory", "memory://", opener())
    }

    pub fn file() -> Target {
        Target::in_temp_dir("slatedb-file", "file", opener(), child())
    }

    /// SlateDB on a real S3-compatible server on loopback (`.ci/run` starts `moto_server` and
    /// sets `ROCKLAKE_TEST_S3_URL`). Without it the S3 cases fail in CI and say so elsewhere.
    pub fn s3() -> Option<Target> {
        match std::env::var("ROCKLAKE_TEST_S3_URL") {
            Ok(url) => Some(Target::at(
                "slatedb-s3",
                &url,
                opener(),
                child(),
                conformance::crash_rounds_from_env(5),
            )),
            Err(_) if std::env::var_os("CI").is_some() => {
                panic!("CI must provide ROCKLAKE_TEST_S3_URL (an S3-compatible server on loopback)")
            }
            Err(_) => {
                eprintln!("NOT RUN: slatedb-s3 needs ROCKLAKE_TEST_S3_URL (see .ci/services.sh)");
                None
            }
        }
    }
}

#[cfg(feature = "slatedb")]
suite!(slatedb_memory, slatedb_targets::memory());
#[cfg(feature = "slatedb")]
suite!(slatedb_file, slatedb_targets::file());

#[cfg(feature = "slatedb")]
mod slatedb_s3 {
    use super::*;
    macro_rules! s3_cases {
        ($($check:ident),*) => {$(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $check() {
                let Some(target) = slatedb_targets::s3() else { return };
                let r = conformance::run_case(&target, stringify!($check), |t| Box::pin(conformance::checks::$check(t))).await;
                assert!(r.outcome != "fail", "[slatedb-s3] {} failed: {}", stringify!($check), r.detail);
                eprintln!("[slatedb-s3] {}: {} {}", stringify!($check), r.outcome, r.detail);
            }
        )*};
    }
    s3_cases!(
        ordering,
        prefix_isolation,
        atomic_batches,
        faults_leave_nothing_half_written,
        read_views,
        durability_across_reopen,
        crash_durability,
        mvcc_visibility,
        gc_keeps_what_readers_see,
        keystone_examples,
        keystone_refusals,
        keystone_delete_keeps_key,
        keystone_purge_waits_for_readers,
        keystone_eight_draws,
        keystone_concurrent_issue,
        keystone_never_reissued,
        keystone_rollback_cycles,
        fencing,
        model_based,
        bad_bytes
    );
}

#[cfg(feature = "rocksdb")]
suite!(
    rocksdb,
    Target::in_temp_dir("rocksdb", "rocksdb", opener(), child())
);

#[cfg(feature = "sled")]
suite!(sled, Target::in_temp_dir("sled", "sled", opener(), child()));
