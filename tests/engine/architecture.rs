//! The dependency picture of `src/` and `e2e/`: every top-level module of `src/` uses only
//! modules of lower layers, no two sibling modules anywhere use each other (directly or
//! around a circle), and the end-to-end suite's helpers use neither its harness nor its
//! tests (see docs/architecture.md). Read from the sources as text, so the test fails as
//! soon as a path crosses a layer the wrong way or closes a circle.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

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
    &["metrics"],
    &["crd"],
    &["pod"],
    &["agents"],
    &["engine"],
    &["admission", "census"],
    &["cluster", "certs"],
    &["server", "policy"],
    &["offline"],
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
    let files = rust_files(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    let arrows: Vec<(String, String)> = sibling_arrows(&files)
        .into_iter()
        .filter(|(parent, _, _)| parent.is_empty())
        .map(|(_, from, to)| (from, to))
        .collect();
    assert!(
        arrows.iter().any(|(from, _)| from == "engine"),
        "no arrows read: {arrows:?}"
    );
    let wrong: Vec<String> = arrows
        .iter()
        .filter(|(from, to)| layer(to) >= layer(from))
        .map(|(from, to)| format!("{from} -> {to}"))
        .collect();
    assert!(
        wrong.is_empty(),
        "arrows that run up or sideways: {wrong:?}"
    );
}

#[test]
fn the_reader_sees_grouped_and_macro_paths() {
    assert_eq!(
        paths(
            "use crate::{agents::Language, engine};\nlet x = $crate::crd::Foo; crate::pod::x",
            &[]
        ),
        [vec!["agents"], vec!["engine"], vec!["pod", "x"]]
    );
}

/// Every module path a file's text names: `crate::a::b`, `super::a`, `self::a` and the
/// members of a group (`crate::{a, b::c}`), resolved against the file's own module path
/// `here` (the part of a file after `#[cfg(test)] mod tests` is left out).
fn paths(text: &str, here: &[String]) -> Vec<Vec<String>> {
    let text = text.split("#[cfg(test)]\nmod tests").next().unwrap_or(text);
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let mut out = Vec::new();
    for (i, _) in text.match_indices(['c', 's']) {
        let rest = &text[i..];
        let before = text[..i].chars().last();
        if before.is_some_and(|c| c == '$' || c == ':' || c.is_alphanumeric() || c == '_') {
            continue;
        }
        let (mut base, mut rest) = if let Some(r) = rest.strip_prefix("crate::") {
            (Vec::new(), r)
        } else if let Some(r) = rest.strip_prefix("self::") {
            (here.to_vec(), r)
        } else if rest.starts_with("super::") {
            let mut base = here.to_vec();
            let mut r = rest;
            while let Some(next) = r.strip_prefix("super::") {
                base.pop();
                r = next;
            }
            (base, r)
        } else {
            continue;
        };
        let mut names = Vec::new();
        loop {
            let name = ident(rest);
            if name.is_empty() || !name.chars().next().is_some_and(char::is_lowercase) {
                break;
            }
            rest = &rest[name.len()..];
            names.push(name);
            match rest.strip_prefix("::") {
                Some(r) => rest = r,
                None => break,
            }
        }
        if let Some(group) = rest.strip_prefix('{') {
            let group = &group[..group.find('}').unwrap_or(group.len())];
            for item in group.split(',') {
                let name = ident(item.trim());
                if name.chars().next().is_some_and(char::is_lowercase) && name != "self" {
                    let mut p = base.clone();
                    p.extend(names.iter().cloned());
                    p.push(name);
                    out.push(p);
                }
            }
        }
        base.extend(names);
        if !base.is_empty() {
            out.push(base);
        }
    }
    out
}

/// A source file's module path below its crate root (`src/server/conns/mod.rs`:
/// `server::conns`), or `None` for the root itself.
fn module_of(root: &Path, file: &Path) -> Option<Vec<String>> {
    let rel = file.strip_prefix(root).ok()?.with_extension("");
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    if parts.is_empty() || parts == ["lib"] || parts == ["main"] {
        return None;
    }
    Some(parts)
}

/// Arrows between sibling modules: `(parent, from, to)` for each path from a module into
/// another child of a common parent, for `files` whose module paths are given.
fn sibling_arrows(files: &[(Vec<String>, PathBuf)]) -> BTreeSet<(String, String, String)> {
    let known: BTreeSet<&Vec<String>> = files.iter().map(|(m, _)| m).collect();
    let mut arrows = BTreeSet::new();
    for (module, file) in files {
        let text = std::fs::read_to_string(file).unwrap();
        for mut target in paths(&text, module) {
            while !target.is_empty() && !known.contains(&target) {
                target.pop();
            }
            let common = module
                .iter()
                .zip(&target)
                .take_while(|(a, b)| a == b)
                .count();
            if common < module.len() && common < target.len() {
                arrows.insert((
                    module[..common].join("::"),
                    module[common].clone(),
                    target[common].clone(),
                ));
            }
        }
    }
    arrows
}

/// The circles among `arrows`, each as the modules around it.
fn circles(arrows: &BTreeSet<(String, String, String)>) -> Vec<String> {
    let mut by_parent: BTreeMap<&str, BTreeMap<&str, Vec<&str>>> = BTreeMap::new();
    for (parent, from, to) in arrows {
        by_parent
            .entry(parent)
            .or_default()
            .entry(from)
            .or_default()
            .push(to);
    }
    let mut found = Vec::new();
    for (parent, graph) in &by_parent {
        // Depth first; a node on the current path that is reached again closes a circle.
        fn visit<'a>(
            node: &'a str,
            graph: &BTreeMap<&'a str, Vec<&'a str>>,
            path: &mut Vec<&'a str>,
            done: &mut BTreeSet<&'a str>,
            found: &mut Vec<Vec<&'a str>>,
        ) {
            if let Some(at) = path.iter().position(|n| *n == node) {
                let mut circle = path[at..].to_vec();
                circle.push(node);
                found.push(circle);
                return;
            }
            if !done.insert(node) {
                return;
            }
            path.push(node);
            for next in graph.get(node).into_iter().flatten() {
                visit(next, graph, path, done, found);
            }
            path.pop();
        }
        let mut done = BTreeSet::new();
        let mut local = Vec::new();
        for node in graph.keys() {
            visit(node, graph, &mut Vec::new(), &mut done, &mut local);
        }
        for circle in local {
            found.push(format!("{parent}: {}", circle.join(" -> ")));
        }
    }
    found
}

fn rust_files(root: &Path) -> Vec<(Vec<String>, PathBuf)> {
    let mut files = Vec::new();
    sources(root, &mut files);
    files
        .into_iter()
        .filter_map(|f| module_of(root, &f).map(|m| (m, f)))
        .collect()
}

#[test]
fn no_circle_among_the_modules_of_src() {
    let files = rust_files(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    let arrows = sibling_arrows(&files);
    assert!(
        arrows
            .iter()
            .any(|(p, _, _)| p == "server::conns" || p == "cluster::status"),
        "no arrows between submodules read: {arrows:?}"
    );
    assert_eq!(circles(&arrows), Vec::<String>::new());
}

/// The end-to-end crate: `tests/main.rs` is its root, `support/` a module of it. Helpers
/// (`support::*`) use only other helpers, the harness uses no test, and nothing closes a
/// circle.
#[test]
fn e2e_helpers_use_no_test_and_nothing_closes_a_circle() {
    let e2e = Path::new(env!("CARGO_MANIFEST_DIR")).join("e2e");
    let mut files = rust_files(&e2e.join("tests"));
    files.extend(
        rust_files(&e2e.join("support"))
            .into_iter()
            .map(|(m, f)| ([vec!["support".to_owned()], m].concat(), f)),
    );
    let arrows = sibling_arrows(&files);
    assert!(
        arrows.contains(&("".into(), "rolling".into(), "harness".into())),
        "no arrows read: {arrows:?}"
    );
    let back: Vec<_> = arrows
        .iter()
        .filter(|(parent, from, to)| {
            (parent.is_empty() && from == "support")
                || (parent.is_empty() && from == "harness" && to != "support")
        })
        .collect();
    assert!(back.is_empty(), "arrows that run back up: {back:?}");
    assert_eq!(circles(&arrows), Vec::<String>::new());
}

#[test]
fn circles_and_resolved_paths_are_seen() {
    let here = ["server".to_owned(), "listener".to_owned()];
    assert_eq!(
        paths(
            "use super::conns::{Tracker, limits};\nlet x = crate::metrics::Metrics;",
            &here
        ),
        [
            vec!["server", "conns", "limits"],
            vec!["server", "conns"],
            vec!["metrics"],
        ]
    );
    let arrows: BTreeSet<_> = [
        ("p", "a", "b"),
        ("p", "b", "c"),
        ("p", "c", "a"),
        ("q", "a", "b"),
    ]
    .iter()
    .map(|(p, a, b)| (p.to_string(), a.to_string(), b.to_string()))
    .collect();
    assert_eq!(circles(&arrows), ["p: a -> b -> c -> a"]);
}
