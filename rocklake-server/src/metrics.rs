//! What the server counts, in Prometheus' text format (through `prometheus-client`), and the
//! HTTP listener `rocklake serve --metrics-listen` serves it on, with `/healthz` and `/readyz`.
//!
//! Counted as it happens: statements by command (the first word of the completion tag) and
//! SQLSTATE (`00000` for success), commits refused by a conflict (`23505`, `40001`), each
//! message's time and its split into the SQL layer's phases, connections accepted and
//! refused. Read at each scrape: open sessions, open transactions and the age of the oldest,
//! the key space's commits and group-commit flushes, and the engine's own figures
//! (`rocklake_engine_*`: RocksDB's properties, SlateDB's metrics, sled's sizes).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeLabelSet, EncodeMetric, MetricEncoder, NoLabelSet,
};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};
use rocklake_core::{EngineStat, StatValue};
use rocklake_sql::phases::PHASES;
use rocklake_sql::{Database, PhaseSnapshot, SqlError};

/// Seconds: 50 µs to 10 s, for messages and their phases.
const LATENCY_BUCKETS: [f64; 16] = [
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5, 10.0,
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatementLabels {
    command: String,
    sqlstate: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SqlstateLabels {
    sqlstate: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabels {
    phase: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

/// The server's metrics; one per server, shared by its connections.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    statements: Family<StatementLabels, Counter>,
    conflicts: Family<SqlstateLabels, Counter>,
    message_seconds: Histogram,
    phase_seconds: Family<PhaseLabels, Histogram>,
    accepted: Counter,
    refused: Family<ReasonLabels, Counter>,
    live: Arc<Live>,
}

/// What is read at each scrape.
#[derive(Debug)]
struct Live {
    /// The database served (a standby's changes when it becomes the writer), or the
    /// databases.
    db: Mutex<crate::Served>,
    sessions: Gauge,
    /// Connection id → when its open transaction began.
    transactions: Mutex<HashMap<u64, Instant>>,
    next_connection: AtomicU64,
    /// The server accepts connections (set by `Server::run`, cleared when it stops).
    ready: AtomicBool,
}

impl Metrics {
    /// Report on `db` from now on (see `Server::switch`).
    pub(crate) fn switch(&self, db: Arc<Database>) {
        *self.live.db.lock().unwrap_or_else(|p| p.into_inner()) = crate::Served::One(db);
    }

    /// Metrics for a server of `db`.
    pub fn new(db: Arc<Database>) -> Arc<Metrics> {
        Metrics::serving(crate::Served::One(db))
    }

    /// Metrics for a server of several databases: the store's figures of each carry a
    /// `database` label.
    pub fn of_databases(databases: Arc<dyn rocklake_sql::Databases>) -> Arc<Metrics> {
        Metrics::serving(crate::Served::Many(databases))
    }

    pub(crate) fn serving(db: crate::Served) -> Arc<Metrics> {
        let mut registry = Registry::with_prefix("rocklake");
        let statements = Family::<StatementLabels, Counter>::default();
        registry.register(
            "statements",
            "Statements run, by command (the completion tag's first word) and SQLSTATE (00000: \
             success)",
            statements.clone(),
        );
        let conflicts = Family::<SqlstateLabels, Counter>::default();
        registry.register(
            "conflicts",
            "Statements refused by a conflict with another transaction (23505 unique key, 40001 \
             serialization)",
            conflicts.clone(),
        );
        let message_seconds = Histogram::new(LATENCY_BUCKETS);
        registry.register_with_unit(
            "message",
            "Time from a query message (or an Execute) to its last answer",
            Unit::Seconds,
            message_seconds.clone(),
        );
        let phase_seconds = Family::<PhaseLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(LATENCY_BUCKETS)
        });
        registry.register_with_unit(
            "phase",
            "A message's time in each phase of the SQL layer (parse, plan, optimize, storage, \
             execute, commit: the commit's batch and durable flush); phases a message did not \
             use are not observed",
            Unit::Seconds,
            phase_seconds.clone(),
        );
        let accepted = Counter::default();
        registry.register(
            "connections_accepted",
            "Sessions let in (past the connection limit; cancel requests are not counted)",
            accepted.clone(),
        );
        let refused = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "connections_refused",
            "Connections refused before a session began, by reason",
            refused.clone(),
        );
        let live = Arc::new(Live {
            db: Mutex::new(db),
            sessions: Gauge::default(),
            transactions: Mutex::new(HashMap::new()),
            next_connection: AtomicU64::new(1),
            ready: AtomicBool::new(false),
        });
        registry.register_collector(Box::new(live.clone()));
        Arc::new(Metrics {
            registry,
            statements,
            conflicts,
            message_seconds,
            phase_seconds,
            accepted,
            refused,
            live,
        })
    }

    /// The text a scrape gets (Prometheus' / OpenMetrics' text format).
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String does not fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// Whether the server accepts connections (`/readyz`).
    pub fn ready(&self) -> bool {
        self.live.ready.load(Ordering::Acquire)
    }

    pub(crate) fn set_ready(&self, ready: bool) {
        self.live.ready.store(ready, Ordering::Release);
    }

    /// A statement ended: `Ok(tag)` with its completion tag, or its error.
    pub(crate) fn statement(&self, outcome: Result<&str, &SqlError>) {
        let (command, sqlstate) = match outcome {
            Ok(tag) => (tag.split(' ').next().unwrap_or(""), "00000"),
            Err(e) => ("", e.code),
        };
        if let Err(e) = outcome {
            if e.code == "23505" || e.code == "40001" {
                self.conflicts
                    .get_or_create(&SqlstateLabels {
                        sqlstate: e.code.to_string(),
                    })
                    .inc();
            }
        }
        self.statements
            .get_or_create(&StatementLabels {
                command: command.to_string(),
                sqlstate: sqlstate.to_string(),
            })
            .inc();
    }

    /// A statement ended with this result.
    pub(crate) fn outcome(&self, r: &Result<rocklake_sql::Output, SqlError>) {
        match r {
            Ok(out) => self.statement(Ok(&out.tag())),
            Err(e) => self.statement(Err(e)),
        }
    }

    /// A message was answered after `took`, its SQL-layer phases `phases`.
    pub(crate) fn message(&self, took: Duration, phases: &PhaseSnapshot) {
        self.message_seconds.observe(took.as_secs_f64());
        for (phase, nanos) in PHASES.iter().zip(phases.nanos) {
            if nanos > 0 {
                self.phase_seconds
                    .get_or_create(&PhaseLabels {
                        phase: phase.name(),
                    })
                    .observe(nanos as f64 / 1e9);
            }
        }
    }

    /// A session began; it counts as open until the guard drops.
    pub(crate) fn session(self: &Arc<Self>) -> SessionGuard {
        self.accepted.inc();
        self.live.sessions.inc();
        SessionGuard(self.clone())
    }

    /// A connection was refused before its session began.
    pub(crate) fn refused(&self, reason: &'static str) {
        self.refused.get_or_create(&ReasonLabels { reason }).inc();
    }

    /// A new connection's id, for [`Metrics::transaction`].
    pub(crate) fn connection_id(&self) -> u64 {
        self.live.next_connection.fetch_add(1, Ordering::Relaxed)
    }

    /// Connection `id` has a transaction open (`true`) or none (`false`) after a message.
    pub(crate) fn transaction(&self, id: u64, open: bool) {
        let mut t = self
            .live
            .transactions
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if open {
            t.entry(id).or_insert_with(Instant::now);
        } else {
            t.remove(&id);
        }
    }
}

/// An open session, counted until dropped.
pub(crate) struct SessionGuard(Arc<Metrics>);

impl Drop for SessionGuard {
    fn drop(&mut self) {
        self.0.live.sessions.dec();
    }
}

impl Collector for Live {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let gauge = |encoder: &mut DescriptorEncoder,
                     name: &str,
                     help: &str,
                     unit: Option<&Unit>,
                     v: f64| {
            let g = ConstGauge::new(v);
            let m = encoder.encode_descriptor(name, help, unit, g.metric_type())?;
            g.encode(m)
        };
        let sessions = self.sessions.get();
        gauge(
            &mut encoder,
            "sessions",
            "Sessions open",
            None,
            sessions as f64,
        )?;
        let (open, oldest) = {
            let t = self.transactions.lock().unwrap_or_else(|e| e.into_inner());
            (t.len(), t.values().min().map(|s| s.elapsed().as_secs_f64()))
        };
        gauge(
            &mut encoder,
            "open_transactions",
            "Sessions inside a transaction block (BEGIN without its COMMIT or ROLLBACK yet)",
            None,
            open as f64,
        )?;
        gauge(
            &mut encoder,
            "oldest_transaction_age",
            "How long the oldest open transaction block has been open (0 when none is)",
            Some(&Unit::Seconds),
            oldest.unwrap_or(0.0),
        )?;
        gauge(
            &mut encoder,
            "ready",
            "1 while the server accepts connections",
            None,
            if self.ready.load(Ordering::Acquire) {
                1.0
            } else {
                0.0
            },
        )?;
        // Each database served, with its label on a server of several.
        let served = self.db.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let stores: Vec<(Option<String>, Arc<Database>)> = match served {
            crate::Served::One(db) => vec![(None, db)],
            crate::Served::Many(d) => d
                .names()
                .into_iter()
                .filter_map(|n| d.get(&n).map(|db| (Some(n), db)))
                .collect(),
        };
        let labels = |name: &Option<String>| -> Vec<(String, String)> {
            name.iter()
                .map(|n| ("database".to_string(), n.clone()))
                .collect()
        };
        let stats: Vec<_> = stores
            .iter()
            .map(|(_, db)| db.keyspace().commit_stats())
            .collect();
        for (name, help, value) in [
            (
                "commits",
                "Commits that wrote to the store (applied; durable or about to be)",
                &(|s: &rocklake_core::CommitStats| s.applied) as &dyn Fn(_) -> u64,
            ),
            (
                "durable_commits",
                "Commits the store has made durable",
                &|s: &rocklake_core::CommitStats| s.durable,
            ),
        ] {
            let mut m = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
            if let [(None, _)] = stores.as_slice() {
                ConstCounter::new(value(&stats[0])).encode(m)?;
                continue;
            }
            for ((db_name, _), s) in stores.iter().zip(&stats) {
                ConstCounter::new(value(s)).encode(m.encode_family(&labels(db_name))?)?;
            }
        }
        // The group commit: how many commits each durable flush covered.
        let mut m = encoder.encode_descriptor(
            "group_commit_size",
            "Commits covered by each durable flush of the store (one fsync or WAL write)",
            None,
            MetricType::Histogram,
        )?;
        let single = matches!(stores.as_slice(), [(None, _)]);
        for ((db_name, _), s) in stores.iter().zip(&stats) {
            let f = &s.flushes;
            // The encoder adds the buckets up itself: each gets only its own flushes.
            let bounds = rocklake_core::group_commit::FLUSH_SIZE_BOUNDS;
            let mut below = 0;
            let mut buckets: Vec<(f64, u64)> = Vec::with_capacity(bounds.len() + 1);
            for (bound, upto) in bounds.iter().zip(f.covering) {
                buckets.push((*bound as f64, upto - below));
                below = upto;
            }
            // `f64::MAX` is what the encoder writes as `+Inf`.
            buckets.push((f64::MAX, f.flushes - below));
            if single {
                m.encode_histogram::<NoLabelSet>(f.batches as f64, f.flushes, &buckets, None)?;
                break;
            }
            m.encode_family(&labels(db_name))?
                .encode_histogram::<NoLabelSet>(f.batches as f64, f.flushes, &buckets, None)?;
        }
        let mut m = encoder.encode_descriptor(
            "store",
            "The store the server serves (its engine; read_only for a reader; database on a \
             server of several)",
            None,
            MetricType::Gauge,
        )?;
        let mut engine_stats = Vec::new();
        for (db_name, db) in &stores {
            let ks = db.keyspace();
            let mut info = labels(db_name);
            info.push(("engine".into(), ks.backend().engine().to_string()));
            info.push(("read_only".into(), ks.epoch().is_none().to_string()));
            ConstGauge::new(1i64).encode(m.encode_family(&info)?)?;
            for mut stat in ks.backend().engine_stats() {
                stat.labels.splice(0..0, labels(db_name));
                engine_stats.push(stat);
            }
        }
        encode_engine_stats(&mut encoder, engine_stats)
    }
}

/// The engine's own figures as `engine_<its name>` metrics (dots and dashes become `_`), one
/// family per name with the engine's labels; a figure whose kind differs from the first of
/// its name is left out (Prometheus has one type per family).
fn encode_engine_stats(
    encoder: &mut DescriptorEncoder,
    stats: Vec<EngineStat>,
) -> Result<(), std::fmt::Error> {
    let mut families: Vec<(String, Vec<EngineStat>)> = Vec::new();
    for stat in stats {
        let name = metric_name(&stat.name);
        match families.iter_mut().find(|(n, _)| *n == name) {
            Some((_, members)) => members.push(stat),
            None => families.push((name, vec![stat])),
        }
    }
    for (name, members) in families {
        let kind = |v: &StatValue| std::mem::discriminant(v);
        let first = kind(&members[0].value);
        let metric_type = match members[0].value {
            StatValue::Counter(_) => MetricType::Counter,
            StatValue::Gauge(_) => MetricType::Gauge,
            StatValue::Histogram { .. } => MetricType::Histogram,
        };
        let full_name = format!("engine_{name}");
        let mut family =
            encoder.encode_descriptor(&full_name, &members[0].help, None, metric_type)?;
        if members.len() == 1 && members[0].labels.is_empty() {
            encode_stat(family, &members[0].value)?;
            continue;
        }
        for stat in members.iter().filter(|s| kind(&s.value) == first) {
            encode_stat(family.encode_family(&stat.labels)?, &stat.value)?;
        }
    }
    Ok(())
}

fn encode_stat(mut m: MetricEncoder<'_>, value: &StatValue) -> Result<(), std::fmt::Error> {
    match value {
        StatValue::Counter(v) => ConstCounter::new(*v).encode(m),
        StatValue::Gauge(v) => ConstGauge::new(*v).encode(m),
        StatValue::Histogram {
            count,
            sum,
            bounds,
            counts,
        } => {
            let mut buckets: Vec<(f64, u64)> =
                bounds.iter().copied().zip(counts.iter().copied()).collect();
            // `f64::MAX` is what the encoder writes as `+Inf`.
            buckets.push((f64::MAX, counts.get(bounds.len()).copied().unwrap_or(0)));
            m.encode_histogram::<NoLabelSet>(*sum, *count, &buckets, None)
        }
    }
}

/// A Prometheus metric name from an engine's name for a figure: lower case, every character
/// outside `[a-z0-9_]` as `_`.
fn metric_name(engine_name: &str) -> String {
    engine_name
        .chars()
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9' | '_') => c,
            _ => '_',
        })
        .collect()
}

/// Serve `metrics` over HTTP on `listener` until `shutdown`: `GET /metrics` (Prometheus' text
/// format), `/healthz` (200 while the process answers), `/readyz` (200 while the server accepts
/// connections, else 503); anything else 404.
pub async fn serve_http(
    listener: tokio::net::TcpListener,
    metrics: Arc<Metrics>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    use http_body_util::Full;
    use hyper::body::Bytes;
    use hyper::{Response, StatusCode};

    tokio::pin!(shutdown);
    loop {
        let (socket, _) = tokio::select! {
            _ = &mut shutdown => return,
            a = listener.accept() => match a {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "metrics: accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let metrics = metrics.clone();
        let service =
            hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                let metrics = metrics.clone();
                async move {
                    let (status, ctype, body) = match (req.method(), req.uri().path()) {
                        (&hyper::Method::GET, "/metrics") => (
                            StatusCode::OK,
                            "application/openmetrics-text; version=1.0.0; charset=utf-8",
                            metrics.render(),
                        ),
                        (&hyper::Method::GET, "/healthz") => {
                            (StatusCode::OK, "text/plain", "ok\n".to_string())
                        }
                        (&hyper::Method::GET, "/readyz") if metrics.ready() => {
                            (StatusCode::OK, "text/plain", "ready\n".to_string())
                        }
                        (&hyper::Method::GET, "/readyz") => (
                            StatusCode::SERVICE_UNAVAILABLE,
                            "text/plain",
                            "not accepting connections\n".to_string(),
                        ),
                        _ => (
                            StatusCode::NOT_FOUND,
                            "text/plain",
                            "not found\n".to_string(),
                        ),
                    };
                    Response::builder()
                        .status(status)
                        .header("content-type", ctype)
                        .body(Full::new(Bytes::from(body)))
                }
            });
        tokio::spawn(async move {
            let io = hyper_util::rt::TokioIo::new(socket);
            if let Err(e) = hyper::server::conn::http1::Builder::new()
                .serve_connection(io, service)
                .await
            {
                tracing::debug!(error = %e, "metrics: connection ended with an error");
            }
        });
    }
}
