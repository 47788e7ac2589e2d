//! The module paths a source file names, read as text (`crate::`, `super::`, `self::`, groups),
//! and the module path of each file of a tree.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// `crate::x` names in a source file, test modules left out.
pub(super) fn sources(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// A file's text up to its inline test module (`#[cfg(test)] mod tests { ... }`), which is
/// left out. A test module in a file of its own (`mod tests;`) cuts nothing: the code after
/// the declaration is read.
pub(super) fn without_tests(text: &str) -> &str {
    text.split("#[cfg(test)]\nmod tests {")
        .next()
        .unwrap_or(text)
}

/// Every module path a file's text names: `crate::a::b`, `super::a`, `self::a` and the
/// members of a group (`crate::{a, b::c}`), resolved against the file's own module path
/// `here` (an inline test module is left out: [`without_tests`]).
pub(super) fn paths(text: &str, here: &[String]) -> Vec<Vec<String>> {
    let text = without_tests(text);
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
pub(super) fn module_of(root: &Path, file: &Path) -> Option<Vec<String>> {
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

pub(super) fn rust_files(root: &Path) -> Vec<(Vec<String>, PathBuf)> {
    let mut files = Vec::new();
    sources(root, &mut files);
    files
        .into_iter()
        .filter_map(|f| module_of(root, &f).map(|m| (m, f)))
        .collect()
}

/// The names a file re-exports (`pub use a::B;`, `pub(crate) use a::{B, c::D as E};`): the
/// last segment of each, or its `as` name. A `macro_rules!` macro the file defines and then
/// brings into path scope (`pub(super) use m;`) lives there: it is no re-export.
pub(super) fn reexports(text: &str) -> BTreeSet<String> {
    let text = without_tests(text);
    let mut names = BTreeSet::new();
    for line_start in text.match_indices("pub") {
        let rest = &text[line_start.0..];
        let at_line_start = text[..line_start.0]
            .chars()
            .rev()
            .take_while(|c| *c != '\n')
            .all(char::is_whitespace);
        let Some(after) = ["pub use ", "pub(crate) use ", "pub(super) use "]
            .iter()
            .find_map(|p| rest.strip_prefix(p))
        else {
            continue;
        };
        if !at_line_start {
            continue;
        }
        let stmt = &after[..after.find(';').unwrap_or(after.len())];
        // The leaves of the tree: split at `{`, `}` and `,`, keep each piece's last segment.
        for leaf in stmt.split(['{', '}', ',']) {
            let leaf = leaf.trim();
            if leaf.is_empty() || leaf.ends_with("::") {
                continue;
            }
            let name = match leaf.split_once(" as ") {
                Some((_, alias)) => alias.trim(),
                None => leaf.rsplit("::").next().unwrap_or(leaf).trim(),
            };
            let defined_here = text.contains(&format!("macro_rules! {name} "));
            if name != "self" && name != "*" && name != "_" && !name.is_empty() && !defined_here {
                names.insert(name.to_owned());
            }
        }
    }
    names
}

/// Every path a file names through `super::` or `crate::`, resolved, with its last segment
/// whatever its case (`super::Env` in `harness::run`: `harness::Env`).
pub(super) fn named_items(text: &str, here: &[String]) -> Vec<Vec<String>> {
    let text = without_tests(text);
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let mut out = Vec::new();
    for (i, _) in text.match_indices(['c', 's']) {
        let before = text[..i].chars().last();
        if before.is_some_and(|c| c == '$' || c == ':' || c.is_alphanumeric() || c == '_') {
            continue;
        }
        let (base, mut rest) = if let Some(r) = text[i..].strip_prefix("crate::") {
            (Vec::new(), r)
        } else if text[i..].starts_with("super::") {
            let mut base = here.to_vec();
            let mut r = &text[i..];
            while let Some(next) = r.strip_prefix("super::") {
                base.pop();
                r = next;
            }
            (base, r)
        } else {
            continue;
        };
        let mut names = base;
        loop {
            let name = ident(rest);
            if name.is_empty() {
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
                let mut p = names.clone();
                p.extend(item.trim().split("::").map(ident).filter(|s| !s.is_empty()));
                out.push(p);
            }
        } else {
            out.push(names);
        }
    }
    out
}

/// The modules of the end-to-end crate: `tests/main.rs` is its root, `support/` a module of it.
pub(super) fn e2e_modules() -> Vec<(Vec<String>, PathBuf)> {
    let e2e = Path::new(env!("CARGO_MANIFEST_DIR")).join("e2e");
    let mut files = rust_files(&e2e.join("tests"));
    files.extend(
        rust_files(&e2e.join("support"))
            .into_iter()
            .map(|(m, f)| ([vec!["support".to_owned()], m].concat(), f)),
    );
    files
}
