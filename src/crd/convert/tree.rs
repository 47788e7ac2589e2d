//! Leaves and paths of a JSON tree: the walk [`super::MOVES`] is applied over, and the setter
//! that builds the other version's spec (keys escaped as in a JSON pointer).

use serde_json::{Map, Value};

/// Every leaf of `tree` with its path: scalars, arrays and empty objects.
pub(super) fn leaves(tree: &Map<String, Value>) -> Vec<(String, &Value)> {
    leaves_until(tree, &|_| false)
}

/// [`leaves`], stopping also at the paths `stop` accepts (their whole value is one leaf).
pub(super) fn leaves_until<'v>(
    tree: &'v Map<String, Value>,
    stop: &dyn Fn(&str) -> bool,
) -> Vec<(String, &'v Value)> {
    fn walk<'v>(
        prefix: &str,
        tree: &'v Map<String, Value>,
        stop: &dyn Fn(&str) -> bool,
        out: &mut Vec<(String, &'v Value)>,
    ) {
        for (key, value) in tree {
            let key = key.replace('~', "~0").replace('/', "~1");
            let path = if prefix.is_empty() {
                key
            } else {
                format!("{prefix}/{key}")
            };
            match value {
                Value::Object(children) if !children.is_empty() && !stop(&path) => {
                    walk(&path, children, stop, out)
                }
                _ => out.push((path, value)),
            }
        }
    }
    let mut out = Vec::new();
    walk("", tree, stop, &mut out);
    out
}

/// Sets `value` at `path` in `tree`, creating the objects on the way (a non-object on the
/// way is replaced: paths come from one spec, so they never cross a leaf). Keys in a path
/// are escaped as in a JSON pointer (`~1` for `/`, `~0` for `~`).
pub(super) fn set(tree: &mut Map<String, Value>, path: &str, value: Value) {
    put(tree, path, value, Set::Replace)
}

/// How [`put`] treats a value already at the path.
#[derive(Clone, Copy)]
pub(super) enum Set {
    Replace,
    /// A carried field never replaces a field of the object's own version: after an edit in
    /// that version, the edit wins (a carried `{}`, `useLabelsForResourceAttributes: false`).
    Carried,
}

/// [`set`] with a choice of what happens to a value already there.
pub(super) fn put(tree: &mut Map<String, Value>, path: &str, value: Value, mode: Set) {
    let mut node = tree;
    let mut parts = path
        .split('/')
        .map(|k| k.replace("~1", "/").replace("~0", "~"))
        .peekable();
    while let Some(key) = parts.next() {
        if parts.peek().is_none() {
            match mode {
                Set::Replace => {
                    node.insert(key, value);
                }
                Set::Carried => {
                    node.entry(key).or_insert(value);
                }
            }
            return;
        }
        let child = node.entry(key).or_insert_with(|| Value::Object(Map::new()));
        if !child.is_object() {
            *child = Value::Object(Map::new());
        }
        node = match child {
            Value::Object(map) => map,
            _ => return,
        };
    }
}
