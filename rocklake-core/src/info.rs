//! `rocklake info`: engine, format, epoch, floor and keys per table.

use std::collections::BTreeMap;

use crate::backend::{visit_all, KeyRange, ReadView};
use crate::error::Result;
use crate::keyspace::{current_snapshot_in, epoch_key, read_u64, sys_key, Keyspace};
use crate::tags::{self, system};

/// Summary of a catalog for `rocklake info`.
#[derive(Clone, Debug, serde::Serialize)]
pub struct CatalogInfo {
    /// Engine name.
    pub engine: &'static str,
    /// Stored format version (0 when not initialised).
    pub format_version: u64,
    /// Current writer epoch.
    pub writer_epoch: u64,
    /// The retain-from floor.
    pub retain_from: u64,
    /// Highest snapshot id.
    pub current_snapshot: u64,
    /// Keys per table name.
    pub counts: BTreeMap<String, u64>,
}

impl Keyspace {
    /// Engine, format, epoch, floor and keys per table.
    pub async fn info(&self) -> Result<CatalogInfo> {
        info_of(self.inner.backend.as_ref(), self.inner.backend.engine()).await
    }
}

/// Catalog summary straight from a backend (works on stores that were never opened as a
/// catalog too).
pub async fn info_of(view: &dyn ReadView, engine: &'static str) -> Result<CatalogInfo> {
    info_with_progress(view, engine, |_| {}).await
}

/// How often [`info_with_progress`] reports: every this many keys.
pub const INFO_PROGRESS_EVERY: u64 = 100_000;

/// [`info_of`], calling `progress` with the number of keys counted so far every
/// [`INFO_PROGRESS_EVERY`] keys (a large catalog takes a while to walk).
pub async fn info_with_progress(
    view: &dyn ReadView,
    engine: &'static str,
    mut progress: impl FnMut(u64) + Send,
) -> Result<CatalogInfo> {
    // Counted per tag byte while walking (no allocation per key), named at the end.
    let mut per_byte = [0u64; 256];
    let mut walked = 0u64;
    visit_all(view, KeyRange::all(), 1024, &mut |k, _| {
        if let Some(b) = k.first() {
            per_byte[*b as usize] += 1;
        }
        walked += 1;
        if walked.is_multiple_of(INFO_PROGRESS_EVERY) {
            progress(walked);
        }
        true
    })
    .await?;
    let mut counts = BTreeMap::new();
    for (b, n) in per_byte.iter().enumerate() {
        if *n == 0 {
            continue;
        }
        let name = match tags::lookup(b as u8) {
            Some(info) => info.name.to_string(),
            None => format!("unknown_{b:#04x}"),
        };
        counts.insert(name, *n);
    }
    Ok(CatalogInfo {
        engine,
        format_version: read_u64(view, &sys_key(system::FORMAT_VERSION))
            .await?
            .unwrap_or(0),
        writer_epoch: read_u64(view, &epoch_key()).await?.unwrap_or(0),
        retain_from: read_u64(view, &sys_key(system::RETAIN_FROM))
            .await?
            .unwrap_or(0),
        current_snapshot: current_snapshot_in(view).await?,
        counts,
    })
}
