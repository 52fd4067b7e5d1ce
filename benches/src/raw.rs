//! The raw engine calls each RockLake operation wraps, made the way a direct user of the engine
//! would make them: RocksDB and sled called synchronously on the calling thread, SlateDB through
//! its async API. The report divides RockLake's time by these.

#[cfg(feature = "slatedb")]
use std::sync::Arc;

use async_trait::async_trait;
use rocklake_core::Result;

/// Raw engine operations on the same bytes RockLake stores.
#[async_trait]
pub trait RawEngine: Send + Sync {
    /// Point read.
    async fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>>;
    /// Count the keys of a prefix (up to `limit`), forward or reverse.
    async fn scan_prefix(&self, prefix: &[u8], limit: usize, reverse: bool) -> Result<usize>;
    /// Write pairs in one atomic batch, synced when `durable`.
    async fn write(&self, pairs: Vec<(Vec<u8>, Vec<u8>)>, durable: bool) -> Result<()>;
}

#[cfg(any(feature = "slatedb", feature = "rocksdb"))]
fn upper(prefix: &[u8]) -> Option<Vec<u8>> {
    rocklake_core::backend::prefix_successor(prefix)
}

/// Raw SlateDB.
#[cfg(feature = "slatedb")]
pub struct RawSlate(pub Arc<rocklake_slatedb::SlateBackend>);

#[cfg(feature = "slatedb")]
#[async_trait]
impl RawEngine for RawSlate {
    async fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let v = self
            .0
            .engine_ref()
            .raw_db()
            .get(key)
            .await
            .map_err(|e| rocklake_slatedb::map_err("raw get", e))?;
        Ok(v.map(|b| b.to_vec()))
    }

    async fn scan_prefix(&self, prefix: &[u8], limit: usize, reverse: bool) -> Result<usize> {
        use slatedb::config::ScanOptions;
        let opts = ScanOptions {
            order: if reverse {
                slatedb::IterationOrder::Descending
            } else {
                slatedb::IterationOrder::Ascending
            },
            cache_blocks: true,
            ..ScanOptions::default()
        };
        use std::ops::Bound;
        let range: (Bound<Vec<u8>>, Bound<Vec<u8>>) = (
            Bound::Included(prefix.to_vec()),
            upper(prefix)
                .map(Bound::Excluded)
                .unwrap_or(Bound::Unbounded),
        );
        let mut it = self
            .0
            .engine_ref()
            .raw_db()
            .scan_with_options(range, &opts)
            .await
            .map_err(|e| rocklake_slatedb::map_err("raw scan", e))?;
        let mut n = 0;
        while n < limit {
            match it
                .next()
                .await
                .map_err(|e| rocklake_slatedb::map_err("raw scan", e))?
            {
                Some(kv) => {
                    std::hint::black_box(kv);
                    n += 1;
                }
                None => break,
            }
        }
        Ok(n)
    }

    async fn write(&self, pairs: Vec<(Vec<u8>, Vec<u8>)>, durable: bool) -> Result<()> {
        let mut b = slatedb::WriteBatch::new();
        for (k, v) in pairs {
            b.put(k, v);
        }
        let db = self.0.engine_ref().raw_db();
        db.write(b)
            .await
            .map_err(|e| rocklake_slatedb::map_err("raw write", e))?;
        if durable {
            db.flush()
                .await
                .map_err(|e| rocklake_slatedb::map_err("raw flush", e))?;
        }
        Ok(())
    }
}

/// Raw RocksDB, called synchronously.
#[cfg(feature = "rocksdb")]
pub struct RawRocks(pub rocklake_rocksdb::RawDb);

#[cfg(feature = "rocksdb")]
#[async_trait]
impl RawEngine for RawRocks {
    async fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.0
            .get(key)
            .map_err(|e| rocklake_core::Error::engine("rocksdb", "raw get", e))
    }

    async fn scan_prefix(&self, prefix: &[u8], limit: usize, reverse: bool) -> Result<usize> {
        let mut ro = rocksdb::ReadOptions::default();
        ro.set_iterate_lower_bound(prefix.to_vec());
        if let Some(u) = upper(prefix) {
            ro.set_iterate_upper_bound(u);
        }
        let mut it = self.0.raw_iterator_opt(ro);
        if reverse {
            it.seek_to_last()
        } else {
            it.seek_to_first()
        }
        let mut n = 0;
        while it.valid() && n < limit {
            std::hint::black_box((it.key(), it.value()));
            n += 1;
            if reverse {
                it.prev()
            } else {
                it.next()
            }
        }
        it.status()
            .map_err(|e| rocklake_core::Error::engine("rocksdb", "raw scan", e))?;
        Ok(n)
    }

    async fn write(&self, pairs: Vec<(Vec<u8>, Vec<u8>)>, durable: bool) -> Result<()> {
        let mut b = rocksdb::WriteBatch::default();
        for (k, v) in pairs {
            b.put(k, v);
        }
        let mut wo = rocksdb::WriteOptions::default();
        wo.set_sync(durable);
        self.0
            .write_opt(b, &wo)
            .map_err(|e| rocklake_core::Error::engine("rocksdb", "raw write", e))
    }
}

/// Raw sled, called synchronously.
#[cfg(feature = "sled")]
pub struct RawSled(pub sled::Db);

#[cfg(feature = "sled")]
#[async_trait]
impl RawEngine for RawSled {
    async fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let v = self
            .0
            .get(key)
            .map_err(|e| rocklake_core::Error::engine("sled", "raw get", e))?;
        Ok(v.map(|v| v.to_vec()))
    }

    async fn scan_prefix(&self, prefix: &[u8], limit: usize, reverse: bool) -> Result<usize> {
        let it = self.0.scan_prefix(prefix);
        let mut n = 0;
        if reverse {
            for kv in it.rev().take(limit) {
                std::hint::black_box(
                    kv.map_err(|e| rocklake_core::Error::engine("sled", "raw scan", e))?,
                );
                n += 1;
            }
        } else {
            for kv in it.take(limit) {
                std::hint::black_box(
                    kv.map_err(|e| rocklake_core::Error::engine("sled", "raw scan", e))?,
                );
                n += 1;
            }
        }
        Ok(n)
    }

    async fn write(&self, pairs: Vec<(Vec<u8>, Vec<u8>)>, durable: bool) -> Result<()> {
        let mut b = sled::Batch::default();
        for (k, v) in pairs {
            b.insert(k, v);
        }
        self.0
            .apply_batch(b)
            .map_err(|e| rocklake_core::Error::engine("sled", "raw write", e))?;
        if durable {
            self.0
                .flush()
                .map_err(|e| rocklake_core::Error::engine("sled", "raw flush", e))?;
        }
        Ok(())
    }
}
