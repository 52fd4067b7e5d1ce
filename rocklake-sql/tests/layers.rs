//! The SQL layer stays layered: `src/lib.rs` lists its modules in groups, lowest layer first,
//! and this test holds every module to them. A module may use modules of its own group or of
//! groups listed before it, never of a group listed after it, and the uses form no ring (two
//! modules of one group that use each other, or a longer cycle).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The groups of `mod` lines in `lib.rs` (a blank or comment line ends a group).
fn groups(lib: &str) -> Vec<Vec<String>> {
    let mut out: Vec<Vec<String>> = vec![vec![]];
    for line in lib.lines() {
        let line = line.trim();
        let declared = line.strip_prefix("pub ").unwrap_or(line);
        match declared
            .strip_prefix("mod ")
            .and_then(|m| m.strip_suffix(';'))
        {
            Some(name) => out.last_mut().unwrap().push(name.to_string()),
            None if out.last().is_some_and(|g| !g.is_empty()) => out.push(vec![]),
            None => {}
        }
    }
    out.retain(|g| !g.is_empty());
    out
}

/// The source files of module `name`: `name.rs` and everything under `name/`.
fn sources(src: &Path, name: &str) -> Vec<std::path::PathBuf> {
    let mut files = vec![];
    let file = src.join(format!("{name}.rs"));
    if file.exists() {
        files.push(file);
    }
    let mut dirs = vec![src.join(name)];
    while let Some(d) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                files.push(p);
            }
        }
    }
    assert!(
        !files.is_empty(),
        "no source of module {name} under {}",
        src.display()
    );
    files
}

/// The crate's modules that `text` names as `crate::<module>` (comments left out).
fn uses(text: &str, modules: &BTreeSet<String>) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or("");
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            rest = &rest[at + "crate::".len()..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if modules.contains(&name) {
                out.insert(name);
            }
        }
    }
    out
}

/// The modules of `graph` on a cycle, if any (a depth-first search).
fn cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        m: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| p == m) {
            let mut ring = path[at..].to_vec();
            ring.push(m.to_string());
            return Some(ring);
        }
        if done.contains(m) {
            return None;
        }
        path.push(m.to_string());
        for next in graph.get(m).into_iter().flatten() {
            if let Some(ring) = visit(next, graph, path, done) {
                return Some(ring);
            }
        }
        path.pop();
        done.insert(m.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|m| visit(m, graph, &mut vec![], &mut done))
}

#[test]
fn modules_use_only_their_own_layer_and_those_below() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    let groups = groups(&lib);
    let layer: BTreeMap<String, usize> = groups
        .iter()
        .enumerate()
        .flat_map(|(i, g)| g.iter().map(move |m| (m.clone(), i)))
        .collect();
    assert!(
        layer.len() >= 10,
        "lib.rs lists too few modules: {groups:?}"
    );
    let modules: BTreeSet<String> = layer.keys().cloned().collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut wrong = vec![];
    for (m, l) in &layer {
        let mut used = BTreeSet::new();
        for f in sources(&src, m) {
            used.extend(uses(&std::fs::read_to_string(&f).unwrap(), &modules));
        }
        used.remove(m);
        for u in &used {
            if layer[u] > *l {
                wrong.push(format!("{m} (group {l}) uses {u} (group {})", layer[u]));
            }
        }
        graph.insert(m.clone(), used);
    }
    println!("{} modules in {} groups", layer.len(), groups.len());
    assert!(
        wrong.is_empty(),
        "modules that use a group listed after their own: {wrong:#?}"
    );
    if let Some(ring) = cycle(&graph) {
        panic!("modules that use each other: {}", ring.join(" -> "));
    }
}

#[test]
fn no_source_file_passes_a_thousand_lines_of_code() {
    // ~1,000 lines per file, tests in a file of their own where a module's code and its tests
    // together pass that.
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut dirs = vec![src];
    let mut long = vec![];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let n = std::fs::read_to_string(&p).unwrap().lines().count();
                if n > 1_100 {
                    long.push(format!("{}: {n} lines", p.display()));
                }
            }
        }
    }
    assert!(long.is_empty(), "files past ~1,000 lines: {long:#?}");
}
