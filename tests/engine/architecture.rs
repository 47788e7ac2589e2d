//! The dependency picture of `src/` and `e2e/`: every top-level module of `src/` uses only
//! modules of lower layers, no two sibling modules anywhere use each other (directly or
//! around a circle), the siblings kept apart ([`APART`]) use each other in neither direction,
//! and the end-to-end suite's helpers use neither its harness nor its
//! tests (see docs/architecture.md). Read from the sources as text, so the test fails as
//! soon as a path crosses a layer the wrong way or closes a circle. Also: no module names an
//! item through an ancestor that only re-exports it, and no source file of `src/`, `tests/` or
//! `e2e/` is over 500 lines.

mod graph;
mod paths;
mod size;

use std::collections::BTreeSet;
use std::path::Path;

use graph::{circles, sibling_arrows, through_reexports};
use paths::{e2e_modules, paths, reexports, rust_files};
use size::{MAX_LINES, hand_written, too_long};

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

/// Every arrow between sibling modules of `src/`: (parent, from, to); at least one known
/// arrow between submodules is among them, or the reader is broken.
fn src_arrows() -> BTreeSet<(String, String, String)> {
    let arrows = sibling_arrows(&rust_files(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
    ));
    let known = ("cluster", "status", "workloads");
    assert!(
        arrows
            .iter()
            .any(|(p, from, to)| (p.as_str(), from.as_str(), to.as_str()) == known),
        "the arrow {known:?} is not read: {arrows:?}"
    );
    arrows
}

fn layer(module: &str) -> usize {
    LAYERS
        .iter()
        .position(|l| l.contains(&module))
        .unwrap_or_else(|| panic!("module {module} is in no layer of tests/engine/architecture.rs"))
}

#[test]
fn no_module_uses_a_module_above_it() {
    let arrows: Vec<(String, String)> = src_arrows()
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

/// Sibling modules that must not use each other either way: (parent, one, other). The
/// status controller (and its rollback) and the rollout act on workloads only through
/// `cluster::workloads`, never through each other's internals.
const APART: &[(&str, &str, &str)] = &[("cluster", "status", "rollout")];

#[test]
fn modules_kept_apart_do_not_use_each_other() {
    let crossing: Vec<String> = src_arrows()
        .iter()
        .filter(|(p, from, to)| {
            APART.iter().any(|(parent, a, b)| {
                p == parent && ((from == a && to == b) || (from == b && to == a))
            })
        })
        .map(|(p, from, to)| format!("{p}::{from} -> {p}::{to}"))
        .collect();
    assert!(
        crossing.is_empty(),
        "modules kept apart use each other: {crossing:?}"
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

#[test]
fn a_test_module_declared_before_the_code_hides_none_of_it() {
    // `mod tests;` at the top (the test module in a file of its own) leaves the code after it
    // read; an inline `mod tests { ... }` is left out.
    let text = "#[cfg(test)]\nmod tests;\n\nuse super::rollout::Rollout;\n\n#[cfg(test)]\nmod tests {\n    use super::hidden::X;\n}\n";
    let here = ["cluster".to_owned(), "status".to_owned()];
    assert_eq!(paths(text, &here), [vec!["cluster", "rollout"]]);
}

#[test]
fn no_circle_among_the_modules_of_src() {
    assert_eq!(circles(&src_arrows()), Vec::<String>::new());
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

#[test]
fn no_source_file_is_over_500_lines() {
    let files = hand_written(&["src", "tests", "e2e"]);
    assert!(
        files.iter().any(|f| f.ends_with("e2e/demo.rs")) && files.len() > 100,
        "too few files read: {}",
        files.len()
    );
    assert_eq!(
        too_long(&files, MAX_LINES),
        Vec::<String>::new(),
        "files over {MAX_LINES} lines: split each along its jobs"
    );
}

#[test]
fn the_size_check_sees_a_long_file() {
    let files = hand_written(&["tests/engine"]);
    let this = files
        .iter()
        .find(|f| f.ends_with("architecture.rs"))
        .unwrap();
    let lines = std::fs::read_to_string(this).unwrap().lines().count();
    assert_eq!(
        too_long(std::slice::from_ref(this), lines - 1),
        [format!("tests/engine/architecture.rs: {lines}")]
    );
    assert!(too_long(std::slice::from_ref(this), lines).is_empty());
}

#[test]
fn no_module_of_src_imports_what_its_parent_reexports() {
    let files = rust_files(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    assert_eq!(through_reexports(&files), Vec::<String>::new());
}

#[test]
fn no_e2e_module_imports_what_its_parent_reexports() {
    assert_eq!(through_reexports(&e2e_modules()), Vec::<String>::new());
}

#[test]
fn an_import_through_a_parent_reexport_is_seen() {
    assert_eq!(
        reexports("pub use a::B;\npub(crate) use c::{d::E as F, G, self};\nlet pub_use = 1;"),
        ["B", "F", "G"].map(str::to_owned).into()
    );
    // A macro defined in the file and brought into path scope is not a re-export.
    assert_eq!(
        reexports("macro_rules! m {\n    () => {};\n}\npub(super) use m;\npub use x::n;\n"),
        ["n"].map(str::to_owned).into()
    );
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    let files = vec![
        (
            vec!["p".to_owned()],
            write("p.rs", "mod a;\nmod b;\npub use a::Thing;\n"),
        ),
        (
            vec!["p".to_owned(), "a".to_owned()],
            write("a.rs", "pub struct Thing;\n"),
        ),
        (
            vec!["p".to_owned(), "b".to_owned()],
            write("b.rs", "use super::Thing;\nuse crate::p::a::Thing as T;\n"),
        ),
    ];
    assert_eq!(through_reexports(&files), ["p::b uses p::Thing"]);
}
