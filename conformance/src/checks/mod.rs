//! The checks, by topic. Each returns `Ok(Outcome)` or `Err(message naming what failed)`.
//!
//! | module | checks |
//! |---|---|
//! | `store` | the engine: ordering, prefix isolation, atomic batches, faults, views, model, bad bytes |
//! | `durability` | reopen, SIGKILL, fencing |
//! | `mvcc` | visibility, snapshot order, GC |
//! | `identity` | every Keystone rule |

use rocklake_core::ErrorKind;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rocklake_core::backend::{KeyRange, KvBackend, Order, Pager, ReadView, WriteBatch};
use rocklake_core::keys::{self, Key};
use rocklake_core::keyspace::DrawHook;
use rocklake_core::keystone::{self, MAX_ID};
use rocklake_core::tags;
use rocklake_core::values::Row;
use rocklake_core::{Admin, Durability, Error, KeyChoice, Keyspace, KeyspaceOptions, Value};

use crate::rows::{delete_key, issue_key, name_key, table_cells};
use crate::util::{capabilities, dump, load};
use crate::{
    crash, ctx, ensure, CheckFn, CheckResult, FaultyBackend, FaultyHandle, Outcome, Target,
};

mod durability;
mod identity;
mod mvcc;
mod store;

pub use durability::*;
pub use identity::*;
pub use mvcc::*;
pub use store::*;

/// Builds [`ALL`] from the one list of checks (see [`crate::with_checks`]).
#[doc(hidden)]
#[macro_export]
macro_rules! __all_checks {
    (; $($check:ident),*) => {
        /// Every check, in report order: what `rocklake conformance` runs and what
        /// [`crate::suite!`] stamps, both from the one list in [`crate::with_checks`].
        pub static ALL: &[(&str, CheckFn)] = &[
            $((stringify!($check), |t| Box::pin($check(t))),)*
        ];
    };
}

crate::with_checks!(__all_checks);

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn model_scan(
    model: &Model,
    range: &KeyRange,
    order: Order,
    limit: usize,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    let (s, e) = range.as_slices();
    if range.is_empty() {
        return vec![];
    }
    let it = model
        .range::<[u8], _>((s, e))
        .map(|(k, v)| (k.clone(), v.clone()));
    match order {
        Order::Ascending => it.take(limit).collect(),
        Order::Descending => it.rev().take(limit).collect(),
    }
}

fn pairs(v: Vec<(Bytes, Bytes)>) -> Vec<(Vec<u8>, Vec<u8>)> {
    v.into_iter()
        .map(|(k, v)| (k.to_vec(), v.to_vec()))
        .collect()
}

async fn paged(
    view: &dyn ReadView,
    range: KeyRange,
    order: Order,
    page: usize,
) -> Result<Vec<(Vec<u8>, Vec<u8>)>, String> {
    let mut out = Vec::new();
    let mut p = Pager::new(view, range, order, page);
    while let Some(items) = p.next_page().await.map_err(ctx("paging"))? {
        out.extend(pairs(items));
    }
    Ok(out)
}

async fn table_rows(r: &rocklake_core::Reader) -> Result<Vec<(String, Vec<Value>)>, Error> {
    let mut rows = Vec::new();
    r.visible_rows(&[tags::TABLE.0], |k, row| {
        rows.push((k.to_string(), row.cells))
    })
    .await?;
    Ok(rows)
}

async fn writer(t: &Target) -> Result<(Keyspace, String), String> {
    let s = t.fresh().await.map_err(ctx("fresh store"))?;
    let cat = Keyspace::open(s.backend)
        .await
        .map_err(ctx("open catalog"))?;
    Ok((cat, s.url))
}

fn bound_ids(rows: &[(Vec<u8>, Vec<u8>)], space: u8) -> BTreeSet<u64> {
    rows.iter()
        .filter_map(|(k, _)| match Key::decode(k) {
            Ok(Key::Binding { space: s, id }) if s == space => Some(id),
            _ => None,
        })
        .collect()
}
