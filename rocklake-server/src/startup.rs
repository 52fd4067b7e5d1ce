//! What a client asks for in its startup packet beyond who it is: settings in `options`.

/// The `-c name=value` and `--name=value` settings of a startup `options` string (spaces
/// inside a value escaped with a backslash, as libpq's PGOPTIONS writes them).
pub(crate) fn options(options: Option<&str>) -> Vec<(String, String)> {
    let Some(options) = options else {
        return Vec::new();
    };
    let mut words = Vec::new();
    let mut word = String::new();
    let mut chars = options.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => word.extend(chars.next()),
            c if c.is_whitespace() => {
                if !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
            }
            c => word.push(c),
        }
    }
    if !word.is_empty() {
        words.push(word);
    }
    let mut out = Vec::new();
    let mut it = words.into_iter();
    while let Some(w) = it.next() {
        let setting = if w == "-c" {
            it.next()
        } else if let Some(rest) = w.strip_prefix("-c") {
            Some(rest.to_string())
        } else {
            w.strip_prefix("--").map(str::to_string)
        };
        if let Some((name, value)) = setting.as_deref().and_then(|s| s.split_once('=')) {
            out.push((name.replace('-', "_"), value.to_string()));
        }
    }
    out
}

/// The settings a startup packet's parameters ask for, as PostgreSQL reads them: each
/// `-c name=value` of `options`, then every parameter that is not one of the packet's own
/// (`user`, `database`, `options`, `replication`, `_pq_.` protocol options).
pub(crate) fn settings<'a>(
    params: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Vec<(String, String)> {
    let mut options_text = None;
    let mut direct = Vec::new();
    for (name, value) in params {
        match name {
            "options" => options_text = Some(value),
            "user" | "database" | "replication" => {}
            n if n.starts_with("_pq_.") => {}
            n => direct.push((n.to_string(), value.to_string())),
        }
    }
    let mut out = options(options_text);
    out.extend(direct);
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn startup_options_are_read_as_postgresql_reads_them() {
        let got = super::options(Some(
            "-c statement_timeout=5s --work-mem=4MB -capplication_name=a\\ b",
        ));
        assert_eq!(
            got,
            vec![
                ("statement_timeout".to_string(), "5s".to_string()),
                ("work_mem".to_string(), "4MB".to_string()),
                ("application_name".to_string(), "a b".to_string()),
            ]
        );
        assert!(super::options(None).is_empty());
    }
}
