//! `rocklake sql`: run SQL against a catalog without a server, and print the results as tables.
//!
//! With a statement argument it runs that text (one or more statements) and exits; without one
//! it reads statements from standard input, each ending at a `;` that ends a line, and prints
//! each result as it goes (an interactive shell when standard input is a terminal).

use std::io::{BufRead, IsTerminal, Write};
use std::process::ExitCode;

use rocklake::{Error, Keyspace};
use rocklake_sql::datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use rocklake_sql::datafusion::arrow::util::pretty::pretty_format_batches;
use rocklake_sql::{Database, Output, Session, SqlError};
use serde_json::json;

use crate::CliResult;

pub(crate) async fn run(
    url: String,
    sql: Option<String>,
    read_only: bool,
    json: bool,
) -> CliResult {
    // A reader beside the store's writer (a server on the same SlateDB store) never fences it.
    let ks = if read_only {
        Keyspace::open_read_only(crate::open_for_reading(&url).await?).await?
    } else {
        Keyspace::open(crate::open_writer(&url).await?).await?
    };
    let db = Database::open(ks).await.map_err(to_core)?;
    let mut session = Session::new(db.clone());
    let ok = match sql {
        Some(text) => execute(&mut session, &text, json).await,
        None => shell(&mut session, json).await,
    };
    db.close().await.map_err(to_core)?;
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn to_core(e: SqlError) -> Error {
    Error::InvalidArgument(e.to_string())
}

/// Run one text; print every result and the first error. `false` when a statement failed.
async fn execute(session: &mut Session, text: &str, json: bool) -> bool {
    for r in session.execute(text).await {
        let r = match r {
            // The shell has no rows to send: say so, and end the COPY as a client would.
            Ok(Output::CopyIn { .. }) => Err(session
                .copy_fail("rocklake sql does not read COPY data; use INSERT")
                .await),
            other => other,
        };
        match r {
            Ok(out) => print_output(&out.into_rows(), json),
            Err(e) => {
                if json {
                    println!(
                        "{}",
                        json!({"error": e.message, "sqlstate": e.code, "detail": e.detail})
                    );
                } else {
                    eprintln!("ERROR:  {} (SQLSTATE {})", e.message, e.code);
                    if let Some(d) = &e.detail {
                        eprintln!("DETAIL:  {d}");
                    }
                }
                return false;
            }
        }
    }
    true
}

async fn shell(session: &mut Session, json: bool) -> bool {
    let stdin = std::io::stdin();
    let tty = stdin.is_terminal();
    let mut ok = true;
    let mut text = String::new();
    let prompt = |more: bool| {
        if tty {
            print!("{}", if more { "rocklake-> " } else { "rocklake=> " });
            let _ = std::io::stdout().flush();
        }
    };
    prompt(false);
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        text.push_str(&line);
        text.push('\n');
        if line.trim_end().ends_with(';') {
            ok &= execute(session, &text, json).await;
            text.clear();
            prompt(false);
        } else {
            prompt(!text.trim().is_empty());
        }
    }
    if !text.trim().is_empty() {
        ok &= execute(session, &text, json).await;
    }
    ok
}

fn print_output(out: &Output, json: bool) {
    match out {
        Output::Rows {
            schema, batches, ..
        }
        | Output::CopyOut {
            schema, batches, ..
        } => {
            if json {
                let opts = FormatOptions::default();
                let mut rows = Vec::new();
                for b in batches {
                    let cols: Vec<_> = b
                        .columns()
                        .iter()
                        .map(|c| ArrayFormatter::try_new(c.as_ref(), &opts))
                        .collect::<Result<_, _>>()
                        .unwrap_or_default();
                    for r in 0..b.num_rows() {
                        let row: Vec<serde_json::Value> = b
                            .columns()
                            .iter()
                            .zip(&cols)
                            .map(|(c, f)| {
                                if c.is_null(r) {
                                    serde_json::Value::Null
                                } else {
                                    f.value(r).to_string().into()
                                }
                            })
                            .collect();
                        rows.push(row);
                    }
                }
                let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
                println!(
                    "{}",
                    json!({"columns": names, "rows": rows, "tag": out.tag()})
                );
            } else {
                if batches.iter().all(|b| b.num_rows() == 0) {
                    let names: Vec<&str> =
                        schema.fields().iter().map(|f| f.name().as_str()).collect();
                    println!("{}", names.join(" | "));
                } else {
                    match pretty_format_batches(batches) {
                        Ok(t) => println!("{t}"),
                        Err(e) => eprintln!("ERROR:  cannot print the result: {e}"),
                    }
                }
                let n = out.row_count();
                println!("({n} row{})", if n == 1 { "" } else { "s" });
            }
        }
        // The shell gathers every result (`Session::execute`): nothing is ever sent ahead.
        Output::CopyIn { .. } | Output::Show { .. } | Output::Sent { .. } => {}
        Output::Command(tag) => {
            if json {
                println!("{}", json!({"tag": tag}));
            } else {
                println!("{tag}");
            }
        }
    }
}
