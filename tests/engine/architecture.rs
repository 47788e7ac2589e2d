//! The dependency picture of `src/`: every module uses only modules of lower layers, so no
//! arrow runs back up (see docs/architecture.md). Read from the sources as text, so the test
//! fails as soon as a `use crate::…` crosses a layer the wrong way.

use std::collections::BTreeMap;
use std::path::Path;

/// Top-level modules from the bottom up; a module may use any module of a lower layer.
const LAYERS: &[&[&str]] = &[
    &[
        "warnings",
        "duration",
        "retry",
        "telemetry",
        "build_info",
        "keys",
    ],
    &["crd"],
    &["pod"],
    &["agents"],
    &["engine"],
    &["admission", "metrics"],
    &["cluster", "certs"],
    &["server", "offline"],
    &["cli"],
    &["app"],
];

fn layer(module: &str) -> usize {
    LAYERS
        .iter()
        .position(|l| l.contains(&module))
        .unwrap_or_else(|| panic!("module {module} is in no layer of tests/engine/architecture.rs"))
}

/// `crate::x` names in a source file, test modules left out.
fn uses(text: &str) -> Vec<String> {
    let text = text.split("#[cfg(test)]\nmod tests").next().unwrap_or(text);
    let mut out = Vec::new();
    for (i, _) in text.match_indices("crate::") {
        let before = text[..i].chars().last();
        if before.is_some_and(|c| c == '$' || c.is_alphanumeric() || c == '_') {
            continue; // `$crate::` in macros names the crate, and `foo_crate::` is another path
        }
        let rest = &text[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let group = &group[..group.find('}').unwrap_or(group.len())];
            for item in group.split(',') {
                let name: String = item
                    .trim()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                out.push(name);
            }
        } else {
            out.push(
                rest.chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect(),
            );
        }
    }
    out.retain(|n| !n.is_empty() && n.chars().next().is_some_and(char::is_lowercase));
    out
}

fn sources(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_module_uses_a_module_above_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut edges: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for file in files {
        let rel = file.strip_prefix(&src).unwrap();
        let top = rel
            .iter()
            .next()
            .unwrap()
            .to_str()
            .unwrap()
            .trim_end_matches(".rs");
        if top == "lib" || top == "main" {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        for used in uses(&text) {
            if used != top {
                edges.entry(top.to_owned()).or_default().push(used);
            }
        }
    }
    assert!(edges.contains_key("engine"), "no edges read: {edges:?}");
    let mut wrong = Vec::new();
    for (from, to) in &edges {
        for used in to {
            if layer(used) >= layer(from) {
                wrong.push(format!("{from} -> {used}"));
            }
        }
    }
    wrong.sort();
    wrong.dedup();
    assert!(
        wrong.is_empty(),
        "arrows that run up or sideways: {wrong:?}"
    );
}

#[test]
fn the_reader_sees_grouped_and_macro_paths() {
    assert_eq!(
        uses("use crate::{agents::Language, engine};\nlet x = $crate::crd::Foo; crate::pod::x"),
        ["agents", "engine", "pod"]
    );
}
