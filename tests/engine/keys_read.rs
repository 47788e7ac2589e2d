//! The engine's list of the keys it reads (`engine::keys_read`, what the policy corpus is
//! generated from) holds every key of `src/keys.rs` that the engine, the agents and the pod
//! model name, but those they only write and those the registry lists per language. Read
//! from the sources as text, like `keys.rs`.

use std::path::Path;

/// Keys named there that the list does not hold, and why.
const NOT_LISTED: [(&str, &str); 15] = [
    ("STATUS_ANNOTATION", "written; its size is bound"),
    ("SELECTED_BY_ANNOTATION", "written; its size is bound"),
    ("CONFIG_FILE_ANNOTATION", "written; its size is bound"),
    ("INJECTED_LABEL", "written"),
    (
        "ANNOTATION_PREFIX",
        "a prefix: the keys under it are listed",
    ),
    ("INJECT_PREFIX", "a prefix: the keys under it are listed"),
    ("INJECT_JAVA", "listed per language from the registry"),
    ("INJECT_NODEJS", "listed per language from the registry"),
    ("INJECT_PYTHON", "listed per language from the registry"),
    ("INJECT_DOTNET", "listed per language from the registry"),
    ("INJECT_GO", "listed per language from the registry"),
    (
        "INJECT_APACHE_HTTPD",
        "listed per language from the registry",
    ),
    ("INJECT_NGINX", "listed per language from the registry"),
    ("INJECT_SDK", "listed per language from the registry"),
    (
        "NGINX_CONTAINER_NAMES",
        "listed per language from the registry",
    ),
];

/// The upper-case names a file's code takes from the keys module.
fn keys_named(text: &str) -> Vec<String> {
    let code = super::keys::code_of(text);
    let mut names = Vec::new();
    for (at, _) in code.match_indices("keys::") {
        let rest = &code[at + "keys::".len()..];
        let group = match rest.strip_prefix('{') {
            Some(inner) => &inner[..inner.find('}').unwrap_or(inner.len())],
            None => {
                let end = rest
                    .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .unwrap_or(rest.len());
                &rest[..end]
            }
        };
        for name in group.split(',').map(str::trim) {
            let is_const = !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c == '_' || c.is_ascii_digit());
            if is_const && !names.iter().any(|n| n == name) {
                names.push(name.to_owned());
            }
        }
    }
    names
}

/// The keys named under `dirs` that neither `list` (the list's source) nor [`NOT_LISTED`]
/// holds.
fn unlisted(files: &[(String, String)], list: &str) -> Vec<String> {
    let listed = keys_named(list);
    let mut found = Vec::new();
    for (path, text) in files {
        for name in keys_named(text) {
            if !listed.contains(&name) && !NOT_LISTED.iter().any(|(n, _)| *n == name) {
                found.push(format!("{path}: {name}"));
            }
        }
    }
    found
}

#[test]
fn the_engines_key_list_holds_every_key_it_reads() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let list = root.join("src/engine/keys_read.rs");
    let mut paths = Vec::new();
    for dir in ["src/engine", "src/agents", "src/pod"] {
        super::keys::rust_files(&root.join(dir), &mut paths);
    }
    let files: Vec<(String, String)> = paths
        .iter()
        .filter(|p| **p != list)
        .map(|p| {
            (
                p.strip_prefix(root).unwrap().display().to_string(),
                std::fs::read_to_string(p).unwrap(),
            )
        })
        .collect();
    assert!(files.len() > 20, "the sources were read");
    let missing = unlisted(&files, &std::fs::read_to_string(&list).unwrap());
    assert!(
        missing.is_empty(),
        "keys read but not in engine::keys_read (add them there, and their cases to \
         e2e/tests/policy/keys.rs): {missing:?}"
    );
}

#[test]
fn the_check_sees_a_key_the_list_does_not_hold() {
    let list = "use crate::keys::{APP_NAME, MIRROR_ANNOTATION};";
    let file = (
        "src/engine/new.rs".to_owned(),
        "use crate::keys::{APP_NAME, STATUS_ANNOTATION};\nfn f() { let _ = crate::keys::LAST_APPLIED; }\n"
            .to_owned(),
    );
    assert_eq!(unlisted(&[file], list), ["src/engine/new.rs: LAST_APPLIED"]);
}
