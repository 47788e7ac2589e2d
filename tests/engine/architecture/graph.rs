//! The arrows between sibling modules, the circles among them, and the imports that go through
//! a parent's re-exports.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use super::paths::{named_items, paths, reexports};

/// Arrows between sibling modules: `(parent, from, to)` for each path from a module into
/// another child of a common parent, for `files` whose module paths are given.
pub(super) fn sibling_arrows(
    files: &[(Vec<String>, PathBuf)],
) -> BTreeSet<(String, String, String)> {
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
pub(super) fn circles(arrows: &BTreeSet<(String, String, String)>) -> Vec<String> {
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

/// `(child, item)` for each module that names, through its parent (or any ancestor), an
/// item that ancestor only re-exports: the child should name the item where it lives. A
/// name that is also one of the ancestor's modules (`generate`, a module and the function it
/// re-exports) is read as the module.
pub(super) fn through_reexports(files: &[(Vec<String>, PathBuf)]) -> Vec<String> {
    let modules: BTreeSet<&Vec<String>> = files.iter().map(|(m, _)| m).collect();
    let reexported: BTreeMap<&Vec<String>, BTreeSet<String>> = files
        .iter()
        .map(|(m, f)| (m, reexports(&std::fs::read_to_string(f).unwrap())))
        .filter(|(_, names)| !names.is_empty())
        .collect();
    let mut found = Vec::new();
    for (module, file) in files {
        let text = std::fs::read_to_string(file).unwrap();
        for path in named_items(&text, module) {
            let Some((item, owner)) = path.split_last() else {
                continue;
            };
            if owner.len() < module.len()
                && module.starts_with(owner)
                && !modules.contains(&path)
                && reexported
                    .get(&owner.to_vec())
                    .is_some_and(|names| names.contains(item))
            {
                found.push(format!("{} uses {}", module.join("::"), path.join("::")));
            }
        }
    }
    found.sort();
    found.dedup();
    found
}
