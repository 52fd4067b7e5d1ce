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
suite!(slatedb_s3, optional slatedb_targets::s3());

#[cfg(feature = "rocksdb")]
suite!(
    rocksdb,
    Target::in_temp_dir("rocksdb", "rocksdb", opener(), child())
);

#[cfg(feature = "sled")]
suite!(sled, Target::in_temp_dir("sled", "sled", opener(), child()));
