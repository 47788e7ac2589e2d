//! One meaning per type name: no two type definitions (struct, enum, type alias, trait) in
//! `src/` share a name, test modules left out, but for the pairs of [`ALLOWED`]. Read from
//! the sources as text, so the test fails as soon as a second definition of a name lands.

use std::collections::BTreeMap;
use std::path::Path;

/// Names defined more than once on purpose or pending other work, each with the exact
/// files (relative to `src/`) that define it. A third definition, or one of these left
/// alone, fails; so does an entry that is no longer a duplicate.
const ALLOWED: &[(&str, &[&str])] = &[
    // One meaning: each component's own metric families (`server::Metrics`,
    // `cluster::lease::Metrics`, ...), each registering its own series, named by its module.
    (
        "Metrics",
        &[
            "certs/metrics.rs",
            "cluster/apiserver.rs",
            "cluster/events.rs",
            "cluster/lease.rs",
            "cluster/metrics.rs",
            "cluster/missed.rs",
            "cluster/registration.rs",
            "cluster/status/metrics.rs",
            "cluster/watch/metrics.rs",
            "server/metrics.rs",
        ],
    ),
];

/// The type definitions of one file's text: (name, line number), test modules and
/// associated types left out.
fn definitions(text: &str) -> Vec<(String, usize)> {
    let mut out = Vec::new();
    // Set by `#[cfg(test)]` until the item it applies to.
    let mut test_item = false;
    // The closing line of the test module being skipped.
    let mut skip_until: Option<String> = None;
    for (i, line) in text.lines().enumerate() {
        if let Some(end) = &skip_until {
            if line == end {
                skip_until = None;
            }
            continue;
        }
        let trimmed = line.trim_start();
        let indent = &line[..line.len() - trimmed.len()];
        if trimmed.starts_with("//") {
            continue;
        }
        if trimmed.starts_with("#[cfg(test)]") {
            test_item = true;
            continue;
        }
        if trimmed.starts_with("#[") {
            continue;
        }
        let (visible, rest) = strip_visibility(trimmed);
        if test_item {
            test_item = false;
            if rest.starts_with("mod ") && rest.ends_with('{') {
                skip_until = Some(format!("{indent}}}"));
            }
            continue;
        }
        let Some(name) = ["struct ", "open struct ", "enum ", "trait ", "type "]
            .iter()
            .find_map(|kw| rest.strip_prefix(kw).map(|n| (*kw, n)))
            .filter(|(kw, _)| *kw != "type " || visible || indent.is_empty())
            .map(|(_, n)| {
                n.chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect::<String>()
            })
        else {
            continue;
        };
        if name.starts_with(|c: char| c.is_ascii_uppercase()) {
            out.push((name, i + 1));
        }
    }
    out
}

/// Whether `line` starts with a visibility (`pub`, `pub(crate)`, ...), and the rest.
fn strip_visibility(line: &str) -> (bool, &str) {
    if let Some(rest) = line.strip_prefix("pub ") {
        return (true, rest);
    }
    if let Some(rest) = line.strip_prefix("pub(")
        && let Some(close) = rest.find(") ")
    {
        return (true, &rest[close + 2..]);
    }
    (false, line)
}

/// The `.rs` files under `dir`, relative to `root`, test files (`tests.rs`, `tests/`) left out.
fn files(root: &Path, dir: &Path, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            if name != "tests" {
                files(root, &path, out);
            }
        } else if name.ends_with(".rs") && name != "tests.rs" {
            let relative = path.strip_prefix(root).unwrap();
            out.push(relative.to_string_lossy().replace('\\', "/"));
        }
    }
}

/// Every type name of `src/` and where it is defined (`file:line`).
fn names() -> BTreeMap<String, Vec<(String, usize)>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut paths = Vec::new();
    files(&src, &src, &mut paths);
    let mut out: BTreeMap<String, Vec<(String, usize)>> = BTreeMap::new();
    for path in paths {
        let text = std::fs::read_to_string(src.join(&path)).unwrap();
        for (name, line) in definitions(&text) {
            out.entry(name).or_default().push((path.clone(), line));
        }
    }
    out
}

#[test]
fn no_two_types_share_a_name() {
    let names = names();
    assert!(
        names.contains_key("Language") && names.contains_key("Decision"),
        "no definitions read: {names:?}"
    );
    let mut wrong = Vec::new();
    for (name, places) in &names {
        if places.len() < 2 {
            continue;
        }
        let mut files: Vec<&str> = places.iter().map(|(f, _)| f.as_str()).collect();
        files.sort_unstable();
        let allowed = ALLOWED.iter().any(|(n, fs)| {
            let mut fs = fs.to_vec();
            fs.sort_unstable();
            n == name && fs == files
        });
        if !allowed {
            let at: Vec<String> = places.iter().map(|(f, l)| format!("{f}:{l}")).collect();
            wrong.push(format!("{name}: {}", at.join(", ")));
        }
    }
    assert!(
        wrong.is_empty(),
        "type names defined more than once (rename one by what it is):\n{}",
        wrong.join("\n")
    );
}

#[test]
fn every_allowed_pair_is_still_one() {
    let names = names();
    let stale: Vec<&str> = ALLOWED
        .iter()
        .filter(|(name, _)| names.get(*name).is_none_or(|p| p.len() < 2))
        .map(|(name, _)| *name)
        .collect();
    assert!(
        stale.is_empty(),
        "allowed duplicates no longer defined twice (take them out of ALLOWED): {stale:?}"
    );
}

#[test]
fn the_reader_leaves_out_tests_and_associated_types() {
    let text = "\
pub struct Kept;
pub(crate) enum AlsoKept { A }
    pub struct InAMacro {
    pub open struct InASchemaMacro {
type Alias = u8;
pub(super) trait Seen {
    type Assoc;
}
impl std::str::FromStr for Kept {
    type Err = ();
}
// struct Commented;
macro_rules! m { () => { struct $name; } }
#[cfg(test)]
struct TestOnly;
#[cfg(test)]
mod tests {
    struct Inner;
    mod deeper {
    }
    enum AlsoInner {}
}
struct After;
";
    let found: Vec<String> = definitions(text).into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        found,
        [
            "Kept",
            "AlsoKept",
            "InAMacro",
            "InASchemaMacro",
            "Alias",
            "Seen",
            "After"
        ]
    );
}
