//! `COPY`'s formats: which one a statement's options name, with PostgreSQL's defaults and
//! refusals.

use datafusion::sql::sqlparser::ast::{CopyLegacyOption, CopyOption};

use crate::error::{state, Result, SqlError};

/// How a COPY's data is written: PostgreSQL's binary format, its text format with a NULL
/// marker (`\N` unless `NULL '...'`) and a delimiter (tab unless `DELIMITER '...'`), or CSV
/// (`,`, NULL as an unquoted empty field, `"` quotes, optional HEADER line).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CopyFormat {
    /// `FORMAT binary`.
    pub binary: bool,
    /// `FORMAT csv`.
    pub csv: bool,
    /// The text or CSV format's NULL marker (`\N` in text, the empty string in CSV).
    pub null: String,
    /// The text or CSV format's column delimiter (tab in text, `,` in CSV).
    pub delimiter: char,
    /// Text and CSV: the first line holds the column names (written out; skipped on the way
    /// in).
    pub header: bool,
    /// CSV: the quote character (`"`).
    pub quote: char,
    /// CSV: the character that escapes a quote inside a quoted value (the quote itself).
    pub escape: char,
}

impl Default for CopyFormat {
    fn default() -> Self {
        CopyFormat {
            binary: false,
            csv: false,
            null: "\\N".into(),
            delimiter: '\t',
            header: false,
            quote: '"',
            escape: '"',
        }
    }
}

/// The format a COPY statement's options name, with PostgreSQL's defaults for what they do
/// not say, and its refusals of options that do not fit the format.
pub(crate) fn copy_format(
    options: &[CopyOption],
    legacy: &[CopyLegacyOption],
) -> Result<CopyFormat> {
    use datafusion::sql::sqlparser::ast::CopyLegacyCsvOption as Csv;
    let mut f = CopyFormat::default();
    let (mut null, mut delimiter, mut quote, mut escape, mut header) =
        (None, None, None, None, None);
    for o in options {
        match o {
            CopyOption::Format(name) => match name.value.to_ascii_lowercase().as_str() {
                "binary" => (f.binary, f.csv) = (true, false),
                "text" => (f.binary, f.csv) = (false, false),
                "csv" => (f.binary, f.csv) = (false, true),
                other => {
                    return Err(SqlError::new(
                        state::INVALID_PARAMETER,
                        format!("COPY format \"{other}\" not recognized"),
                    ))
                }
            },
            CopyOption::Null(n) => null = Some(n.clone()),
            CopyOption::Delimiter(d) => delimiter = Some(*d),
            CopyOption::Header(h) => header = Some(*h),
            CopyOption::Quote(q) => quote = Some(*q),
            CopyOption::Escape(e) => escape = Some(*e),
            CopyOption::Encoding(e)
                if e.eq_ignore_ascii_case("utf8") || e.eq_ignore_ascii_case("utf-8") => {}
            other => {
                return Err(SqlError::unsupported(format!(
                    "COPY option {other} is not supported"
                )))
            }
        }
    }
    for o in legacy {
        match o {
            CopyLegacyOption::Binary => f.binary = true,
            CopyLegacyOption::Null(n) => null = Some(n.clone()),
            CopyLegacyOption::Delimiter(d) => delimiter = Some(*d),
            CopyLegacyOption::Csv(csv) => {
                f.csv = true;
                for c in csv {
                    match c {
                        Csv::Header => header = Some(true),
                        Csv::Quote(q) => quote = Some(*q),
                        Csv::Escape(e) => escape = Some(*e),
                        other => {
                            return Err(SqlError::unsupported(format!(
                                "COPY option {other} is not supported"
                            )))
                        }
                    }
                }
            }
            other => {
                return Err(SqlError::unsupported(format!(
                    "COPY option {other} is not supported"
                )))
            }
        }
    }
    if f.binary && (null.is_some() || delimiter.is_some()) {
        return Err(SqlError::new(
            state::SYNTAX_ERROR,
            "cannot specify NULL or DELIMITER in BINARY mode",
        ));
    }
    if f.binary && header == Some(true) {
        return Err(SqlError::new(
            state::NOT_SUPPORTED,
            "cannot specify HEADER in BINARY mode",
        ));
    }
    if !f.csv && (quote.is_some() || escape.is_some()) {
        return Err(SqlError::new(
            state::NOT_SUPPORTED,
            "COPY QUOTE and ESCAPE are available only in CSV mode",
        ));
    }
    if f.csv {
        f.delimiter = ',';
        f.null = String::new();
    }
    f.delimiter = delimiter.unwrap_or(f.delimiter);
    f.null = null.unwrap_or(f.null);
    f.header = header.unwrap_or(false);
    f.quote = quote.unwrap_or('"');
    f.escape = escape.unwrap_or(f.quote);
    if f.csv && f.delimiter == f.quote {
        return Err(SqlError::new(
            state::NOT_SUPPORTED,
            "COPY delimiter and quote must be different",
        ));
    }
    Ok(f)
}
