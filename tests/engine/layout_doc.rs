//! docs/architecture.md against the tree it describes. The parts table (`## The parts`)
//! names every top-level module of `src/` in its first column, in its form (`foo.rs` for a
//! file module, `foo/` for a folder, `foo.rs` for a `foo.rs` + `foo/` pair), and nothing
//! that is not one. Every file or folder the document names in backticks (a token ending in
//! `.rs` or `/`, without spaces or placeholders) exists: in the parts table under `src/`, in
//! the layout table's rows under the row's own folder (`src/`, `tests/`, `e2e/`), by its path
//! from there or as the end of one (`watch/mod.rs` or `mod.rs` inside the row's folder), or
//! else by its path from the repository's top (`build.rs`, `src/keys.rs` named from `tests/`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn doc() -> String {
    std::fs::read_to_string(root().join("docs/architecture.md")).unwrap()
}

/// The rows of the first Markdown table after `heading`, each as its cells.
fn table(text: &str, heading: &str) -> Vec<Vec<String>> {
    let after = text
        .split_once(heading)
        .unwrap_or_else(|| panic!("docs/architecture.md has no {heading:?}"))
        .1;
    after
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|l| {
            l.trim_matches('|')
                .split(" | ")
                .map(|c| c.trim().to_owned())
                .collect()
        })
        .collect()
}

/// The backticked tokens of `cell` that name a file or folder.
fn paths(cell: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .filter(|t| {
            (t.ends_with(".rs") || t.ends_with('/'))
                && !t.contains([' ', '<', '*', '{', '('])
                && !t.starts_with('.')
        })
        .map(str::to_owned)
        .collect()
}

/// Every file and folder below `dir`, as paths relative to it (folders ending in `/`).
fn tree(dir: &Path) -> BTreeSet<String> {
    fn walk(base: &Path, dir: &Path, out: &mut BTreeSet<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if name.starts_with('.') || name == "target" || name == "node_modules" {
                continue;
            }
            let rel = path
                .strip_prefix(base)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            if path.is_dir() {
                out.insert(format!("{rel}/"));
                walk(base, &path, out);
            } else {
                out.insert(rel);
            }
        }
    }
    let mut out = BTreeSet::new();
    walk(dir, dir, &mut out);
    out
}

/// Whether `token` names something of `tree`: its path, or the end of one.
fn names_something(tree: &BTreeSet<String>, token: &str) -> bool {
    tree.contains(token) || tree.iter().any(|p| p.ends_with(&format!("/{token}")))
}

/// The tokens of `rows` (one cell each) that name nothing below `dir`.
fn dangling(dir: &str, cells: &[&str]) -> Vec<String> {
    let tree = tree(&root().join(dir));
    cells
        .iter()
        .flat_map(|c| paths(c))
        .filter(|t| !names_something(&tree, t) && !root().join(t).exists())
        .map(|t| format!("{dir}{t}"))
        .collect()
}

/// The top-level modules of `src/` in the table's form: `foo.rs` or `foo/`.
fn top_level_modules() -> BTreeSet<String> {
    let src = root().join("src");
    let mut out = BTreeSet::new();
    for entry in std::fs::read_dir(&src).unwrap() {
        let path: PathBuf = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            if !src.join(format!("{name}.rs")).exists() {
                out.insert(format!("{name}/"));
            }
        } else if name.ends_with(".rs") && name != "lib.rs" && name != "main.rs" {
            out.insert(name);
        }
    }
    out
}

#[test]
fn the_parts_table_names_every_top_level_module_and_nothing_else() {
    let rows = table(&doc(), "## The parts");
    let named: BTreeSet<String> = rows.iter().flat_map(|r| paths(&r[0])).collect();
    let modules = top_level_modules();
    let missing: Vec<_> = modules.difference(&named).collect();
    let extra: Vec<_> = named.difference(&modules).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "docs/architecture.md's parts table: modules of src/ it does not name {missing:?}; \
         names that are no module of src/ {extra:?}"
    );
}

#[test]
fn every_path_the_architecture_names_exists() {
    let text = doc();
    let parts = table(&text, "## The parts");
    let mut wrong = dangling(
        "src/",
        &parts.iter().map(|r| r[1].as_str()).collect::<Vec<_>>(),
    );
    for row in table(&text, "## Layout") {
        let first = paths(&row[0]);
        let Some(dir) = first
            .first()
            .filter(|d| ["src/", "tests/", "e2e/"].contains(&d.as_str()))
        else {
            continue;
        };
        wrong.extend(dangling(dir, &[row[1].as_str()]));
    }
    assert!(
        wrong.is_empty(),
        "docs/architecture.md names files or folders that do not exist: {wrong:?}"
    );
}

#[test]
fn the_checks_see_a_stale_name() {
    let tree: BTreeSet<String> = ["cluster/", "cluster/watch/", "cluster/watch/mod.rs"]
        .map(str::to_owned)
        .into();
    assert!(names_something(&tree, "watch/mod.rs"));
    assert!(names_something(&tree, "mod.rs"));
    assert!(names_something(&tree, "watch/"));
    assert!(!names_something(&tree, "watch.rs"));
    assert_eq!(
        paths("`watch.rs` the caches, `x/` and `<lang>.rs`, `a b.rs`, `--flag`"),
        ["watch.rs", "x/"]
    );
}
