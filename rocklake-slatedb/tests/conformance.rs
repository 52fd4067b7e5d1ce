//! The whole conformance suite on SlateDB: in memory, on local folders, and on a real
//! S3-compatible server on loopback (the crash check's child is this test binary, run again).

use std::sync::Arc;

use conformance::{suite, Opener, Target};
use rocklake_core::KvBackend;

/// Opened as takeovers: the suite opens second writers on purpose to see the first fenced,
/// which a plain open refuses while the first one's holder record is live.
fn opener() -> Opener {
    Arc::new(|url: String| {
        Box::pin(async move {
            Ok(rocklake_slatedb::open_url_with(&url, true).await? as Arc<dyn KvBackend>)
        })
    })
}

/// SlateDB on a real S3-compatible server on loopback (`.ci/run` starts `moto_server` and sets
/// `ROCKLAKE_TEST_S3_URL`). Without it the S3 cases fail in CI and say so elsewhere.
fn s3() -> Option<Target> {
    match std::env::var("ROCKLAKE_TEST_S3_URL") {
        Ok(url) => Some(Target::at(
            "slatedb-s3",
            &url,
            opener(),
            None,
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

suite!(
    slatedb_memory,
    Target::ephemeral("slatedb-memory", "memory://", opener())
);
suite!(
    slatedb_file,
    Target::in_temp_dir("slatedb-file", "file", opener(), None)
);
suite!(slatedb_s3, optional s3());
