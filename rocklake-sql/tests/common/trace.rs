//! The captured DuckLake workload (`shared/ducklake-wire/wire_trace.jsonl.gz`): its simple-Query
//! messages per connection in captured order, with PostgreSQL's answers (command tags and
//! SQLSTATEs) and the transaction status its ReadyForQuery gave after each.

use std::collections::HashMap;
use std::io::Read;

#[derive(Debug, Clone, PartialEq)]
pub enum Want {
    /// A command tag.
    Tag(String),
    /// An error's SQLSTATE.
    Error(String),
}

#[derive(Debug)]
pub struct Message {
    pub conn: u64,
    pub at_micros: i64,
    pub query: String,
    pub want: Vec<Want>,
    /// PostgreSQL's ReadyForQuery status after the message: `I`, `T` or `E`.
    pub status: char,
}

/// The ReadyForQuery status letter of a session's state.
pub fn status_letter(s: rocklake_sql::Status) -> char {
    match s {
        rocklake_sql::Status::Idle => 'I',
        rocklake_sql::Status::InBlock => 'T',
        rocklake_sql::Status::Failed => 'E',
    }
}

/// Whether `got` is `want` but for row counts (`SELECT 12` and `SELECT 3` agree): how a
/// statement that reads PostgreSQL's own catalog is compared, since that catalog's rows differ.
pub fn command_matches(want: &Want, got: &Want) -> bool {
    match (want, got) {
        (Want::Tag(w), Want::Tag(g)) => {
            let word = |t: &str| t.split(' ').next().unwrap_or("").to_string();
            word(w) == word(g)
        }
        (w, g) => w == g,
    }
}

pub fn shared_dir() -> Option<std::path::PathBuf> {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/ducklake-wire");
    p.join("wire_trace.jsonl.gz").exists().then_some(p)
}

pub fn load_trace() -> Option<Vec<Message>> {
    let dir = match shared_dir() {
        Some(d) => d,
        None if std::env::var_os("CI").is_some() => {
            panic!("CI must have shared/ducklake-wire/wire_trace.jsonl.gz beside the clone")
        }
        None => {
            eprintln!("NOT RUN: shared/ducklake-wire/wire_trace.jsonl.gz is not beside the clone");
            return None;
        }
    };
    let f = std::fs::File::open(dir.join("wire_trace.jsonl.gz")).unwrap();
    let mut text = String::new();
    flate2::read::GzDecoder::new(f)
        .read_to_string(&mut text)
        .unwrap();
    let mut out: Vec<Message> = Vec::new();
    let mut open: HashMap<u64, usize> = HashMap::new();
    for line in text.lines() {
        let m: serde_json::Value = serde_json::from_str(line).unwrap();
        let conn = m["c"].as_u64().unwrap();
        let kind = m["type"].as_str().unwrap_or("");
        match (m["dir"].as_str().unwrap_or(""), kind) {
            ("F", "Query") => {
                open.insert(conn, out.len());
                out.push(Message {
                    conn,
                    at_micros: (m["t"].as_f64().unwrap() * 1e6) as i64,
                    query: m["query"].as_str().unwrap().to_string(),
                    want: Vec::new(),
                    status: '?',
                });
            }
            ("B", "CommandComplete") => {
                if let Some(i) = open.get(&conn) {
                    out[*i]
                        .want
                        .push(Want::Tag(m["tag"].as_str().unwrap().to_string()));
                }
            }
            ("B", "ErrorResponse") => {
                if let Some(i) = open.get(&conn) {
                    out[*i]
                        .want
                        .push(Want::Error(m["sqlstate"].as_str().unwrap().to_string()));
                }
            }
            ("B", "ReadyForQuery") => {
                if let Some(i) = open.remove(&conn) {
                    let status = m["status"].as_str().and_then(|s| s.chars().next());
                    out[i].status = status.expect("a ReadyForQuery without its status");
                }
            }
            _ => {}
        }
    }
    Some(out)
}

/// The rows of the capture's `COPY ... FROM STDIN` loads, as INSERTs (from the final catalog
/// the capture's `schema.txt` shows).
pub fn copy_in_replacement(query: &str, metadata_loads: &mut usize) -> Option<String> {
    if !query.contains("FROM STDIN") {
        return None;
    }
    Some(if query.contains("\"ducklake_snapshot\"") {
        "INSERT INTO \"public\".ducklake_snapshot VALUES (0, NOW(), 0, 1, 0)".into()
    } else if query.contains("\"ducklake_snapshot_changes\"") {
        "INSERT INTO \"public\".ducklake_snapshot_changes VALUES (0, 'created_schema:\"main\"', NULL, NULL, NULL)".into()
    } else if query.contains("\"ducklake_schema\"") {
        "INSERT INTO \"public\".ducklake_schema VALUES (0, '0b0a0f0e-1111-4222-8333-944455556666', 0, NULL, 'main', 'main/', true)".into()
    } else if query.contains("(\"key\", \"value\")") {
        "INSERT INTO \"public\".ducklake_metadata (\"key\", \"value\") VALUES ('version', '1.0'), ('created_by', 'DuckDB d8cdaa33fd'), ('data_path', '/srv/lake/data/'), ('encrypted', 'false')".into()
    } else {
        let rows = [
            "('data_inlining_row_limit', '10', NULL, NULL)",
            "('data_inlining_row_limit', '20', 'table', 4)",
            "('parquet_compression', 'zstd', NULL, NULL)",
            "('target_file_size', '1000000', 'table', 2)",
        ];
        let r = rows[(*metadata_loads).min(rows.len() - 1)];
        *metadata_loads += 1;
        format!("INSERT INTO \"public\".ducklake_metadata VALUES {r}")
    })
}

/// Statements that read PostgreSQL's own catalog: the wire server's (issue 12).
pub fn server_catalog(query: &str) -> bool {
    let q = query.to_ascii_lowercase();
    [
        "pg_catalog",
        "pg_namespace",
        "pg_class",
        "pg_settings",
        "pg_enum",
        "pg_indexes",
        "to_regclass",
        "version()",
    ]
    .iter()
    .any(|w| q.contains(w))
}

pub fn tag_matches(want: &str, got: &str) -> bool {
    if want == got {
        return true;
    }
    // A replaced COPY FROM answers `INSERT 0 n` where PostgreSQL said `COPY n`.
    match (want.strip_prefix("COPY "), got.strip_prefix("INSERT 0 ")) {
        (Some(a), Some(b)) => a == b,
        _ => false,
    }
}
