//! Reports: a markdown table and one SVG chart per workload group.

use super::*;

/// Human units.
pub fn fmt_ns(ns: f64) -> String {
    if !ns.is_finite() {
        "–".into()
    } else if ns < 1_000.0 {
        format!("{ns:.0} ns")
    } else if ns < 1_000_000.0 {
        format!("{:.1} µs", ns / 1e3)
    } else if ns < 1e9 {
        format!("{:.2} ms", ns / 1e6)
    } else {
        format!("{:.2} s", ns / 1e9)
    }
}

/// The report as one markdown table.
pub fn render_markdown(rows: &[Measurement]) -> String {
    let mut s = String::from("| group | workload | engine | durability | median | p99 | vs raw engine | SQLite / RockLake | throughput |\n|---|---|---|---|---|---|---|---|---|\n");
    for r in rows {
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            r.group,
            r.workload,
            r.engine,
            r.durability,
            fmt_ns(r.median_ns),
            fmt_ns(r.p99_ns),
            r.raw_ratio()
                .map(|x| format!("{x:.2}×"))
                .unwrap_or_else(|| "–".into()),
            r.sqlite_speedup()
                .map(|x| format!(
                    "{x:.2}× (SQLite {})",
                    fmt_ns(r.sqlite_median_ns.unwrap_or(f64::NAN))
                ))
                .unwrap_or_else(|| "–".into()),
            r.ops_per_sec
                .map(|x| format!("{x:.0}/s"))
                .unwrap_or_else(|| "–".into()),
        ));
    }
    let split: Vec<&Measurement> = rows.iter().filter(|r| r.phases.is_some()).collect();
    if !split.is_empty() {
        s.push_str("\nWhere one operation's time goes in the SQL layer (mean per operation over the samples):\n\n| workload | engine | phases |\n|---|---|---|\n");
        for r in split {
            s.push_str(&format!(
                "| {} | {} | {} |\n",
                r.workload,
                r.engine,
                r.phases.as_deref().unwrap_or_default()
            ));
        }
    }
    s
}

/// One SVG bar chart (log scale of the median) per workload group.
pub fn render_svg(rows: &[Measurement], group: &str) -> String {
    let items: Vec<&Measurement> = rows.iter().filter(|r| r.group == group).collect();
    let bar_h = 16.0;
    let height = 40.0 + items.len() as f64 * (bar_h + 6.0) + 20.0;
    let max = items
        .iter()
        .map(|r| r.median_ns.max(r.sqlite_median_ns.unwrap_or(0.0)))
        .fold(1.0f64, f64::max)
        .log10()
        .max(1.0);
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"1000\" height=\"{height}\" font-family=\"sans-serif\" font-size=\"11\">\n<text x=\"10\" y=\"20\" font-size=\"14\">RockLake benchmark: {group} (median, log scale)</text>\n"
    );
    for (i, r) in items.iter().enumerate() {
        let y = 35.0 + i as f64 * (bar_h + 6.0);
        let w = (r.median_ns.max(1.0).log10() / max * 480.0).max(1.0);
        let colour = match r.engine.as_str() {
            e if e.starts_with("slatedb") => "#4e79a7",
            "rocksdb" => "#f28e2b",
            "sled" => "#59a14f",
            "model" => "#9c755f",
            _ => "#bab0ac",
        };
        s.push_str(&format!(
            "<text x=\"10\" y=\"{:.0}\">{} · {} · {}</text><rect x=\"420\" y=\"{:.0}\" width=\"{w:.1}\" height=\"{bar_h}\" fill=\"{colour}\"/><text x=\"{:.0}\" y=\"{:.0}\">{}</text>\n",
            y + 12.0,
            xml(&r.workload),
            xml(&r.engine),
            r.durability,
            y,
            425.0 + w,
            y + 12.0,
            fmt_ns(r.median_ns) + &r.sqlite_median_ns.map(|q| format!(" (SQLite {})", fmt_ns(q))).unwrap_or_default()
        ));
    }
    s.push_str("</svg>\n");
    s
}

fn xml(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
