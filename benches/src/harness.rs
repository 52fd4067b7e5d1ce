//! The harness: subjects, timing samples, statistics, budgets and measurements.

use super::*;

/// A backend and, when available, the raw engine handle under it.
pub type Opened = (Arc<dyn KvBackend>, Option<Arc<dyn RawEngine>>);

/// Opens a fresh store of one engine in a folder.
pub type OpenFn = Arc<
    dyn Fn(&std::path::Path) -> futures::future::BoxFuture<'static, Result<Opened>> + Send + Sync,
>;

/// One engine under test: the RockLake backend and, when available, its raw handle.
pub struct Subject {
    /// Display name (`slatedb-file`, `rocksdb`, `sled`, `model`).
    pub name: String,
    /// Opens a fresh store of this engine in `dir` (a new sub-folder per call).
    pub open: OpenFn,
}

/// One measured row of the report.
#[derive(Clone, Debug, Serialize)]
pub struct Measurement {
    /// Workload group (`codec`, `point`, `scan`, `batch`, `keystone`, `mvcc`, `catalog`, `group-commit`).
    pub group: String,
    /// Workload name.
    pub workload: String,
    /// Engine (or `sqlite`, `none` for codec).
    pub engine: String,
    /// Durability of the writes measured (`durable`, `buffered`, `n/a` for reads).
    pub durability: String,
    /// Median time of one operation, nanoseconds.
    pub median_ns: f64,
    /// 99th percentile, nanoseconds.
    pub p99_ns: f64,
    /// Samples taken.
    pub samples: usize,
    /// Median of the raw engine call on the same bytes, when measured.
    pub raw_median_ns: Option<f64>,
    /// Median of SQLite doing the same, when measured.
    pub sqlite_median_ns: Option<f64>,
    /// Throughput, when the workload reports one (operations per second).
    pub ops_per_sec: Option<f64>,
    /// Where the time of one operation went, for the SQL layer's workloads (its phase split,
    /// averaged over the samples: `parse 3.1µs plan 40.2µs ...`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phases: Option<String>,
}

impl Measurement {
    /// Core overhead over the raw engine call.
    pub fn raw_ratio(&self) -> Option<f64> {
        self.raw_median_ns.map(|r| self.median_ns / r)
    }

    /// SQLite time over RockLake time (above 1: RockLake is faster).
    pub fn sqlite_speedup(&self) -> Option<f64> {
        self.sqlite_median_ns.map(|s| s / self.median_ns)
    }
}

/// Sample statistics.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    /// Sorted samples in nanoseconds.
    pub ns: Vec<f64>,
}

impl Stats {
    /// From durations.
    pub fn from(mut d: Vec<Duration>) -> Stats {
        d.sort_unstable();
        Stats {
            ns: d.into_iter().map(|d| d.as_nanos() as f64).collect(),
        }
    }

    /// Median.
    pub fn median(&self) -> f64 {
        percentile(&self.ns, 0.5)
    }

    /// 99th percentile.
    pub fn p99(&self) -> f64 {
        percentile(&self.ns, 0.99)
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// How much to measure.
#[derive(Clone, Copy, Debug)]
pub struct Budget {
    /// Samples per workload (upper bound).
    pub samples: usize,
    /// Time per workload (upper bound).
    pub time: Duration,
    /// Largest table sizes (100k rows) are measured.
    pub large: bool,
}

impl Budget {
    /// A quick run: a few minutes for every engine.
    pub fn quick() -> Budget {
        Budget {
            samples: 200,
            time: Duration::from_millis(600),
            large: false,
        }
    }

    /// A fuller run.
    pub fn full() -> Budget {
        Budget {
            samples: 2000,
            time: Duration::from_secs(3),
            large: true,
        }
    }
}

/// Time `f` repeatedly within the budget; each sample is one call.
pub async fn sample<F, Fut>(budget: Budget, mut f: F) -> Result<Stats>
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    // One warm-up call.
    f(0).await?;
    let start = Instant::now();
    let mut out = Vec::with_capacity(budget.samples);
    let mut i = 1;
    while out.len() < budget.samples && (start.elapsed() < budget.time || out.len() < 5) {
        let t = Instant::now();
        f(i).await?;
        out.push(t.elapsed());
        i += 1;
    }
    Ok(Stats::from(out))
}

/// Time `f` and, when given, the raw-engine call `g` the same way, alternating one call of each
/// per sample, so that both see the same engine state (background flushes, compactions, cache)
/// and the ratio between them is not skewed by drift between two separate runs.
pub async fn sample_pair<F, Fut, G, Gut>(
    budget: Budget,
    mut f: F,
    mut g: Option<G>,
) -> Result<(Stats, Option<Stats>)>
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
    G: FnMut(usize) -> Gut,
    Gut: std::future::Future<Output = Result<()>>,
{
    f(0).await?;
    if let Some(g) = &mut g {
        g(0).await?;
    }
    let start = Instant::now();
    let mut fs = Vec::with_capacity(budget.samples);
    let mut gs = Vec::with_capacity(budget.samples);
    let mut i = 1;
    while fs.len() < budget.samples && (start.elapsed() < budget.time || fs.len() < 5) {
        let t = Instant::now();
        f(i).await?;
        fs.push(t.elapsed());
        if let Some(g) = &mut g {
            let t = Instant::now();
            g(i).await?;
            gs.push(t.elapsed());
        }
        i += 1;
    }
    let raw = g.map(|_| Stats::from(gs));
    Ok((Stats::from(fs), raw))
}

pub(crate) fn m(
    group: &str,
    workload: impl Into<String>,
    engine: &str,
    durability: &str,
    s: &Stats,
) -> Measurement {
    Measurement {
        group: group.into(),
        workload: workload.into(),
        engine: engine.into(),
        durability: durability.into(),
        median_ns: s.median(),
        p99_ns: s.p99(),
        samples: s.ns.len(),
        raw_median_ns: None,
        sqlite_median_ns: None,
        ops_per_sec: None,
        phases: None,
    }
}
