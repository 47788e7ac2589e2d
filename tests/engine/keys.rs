//! Every key in `src/keys.rs`, used by its own name: no module re-exports one
//! (`pub use crate::keys…`), nothing imports one under another name (`KEY as OTHER`), and no
//! file of the repository but `src/keys.rs` spells a key (a string starting with one of our
//! prefixes: `otel-injector/`, `otel-injector.opentelemetry.io/`,
//! `instrumentation.opentelemetry.io/`, `resource.opentelemetry.io/`) as a `const` or
//! `static`. Read from the sources as text, like `architecture.rs`.

use std::path::{Path, PathBuf};

use otel_injector::keys::{
    ANNOTATION_PREFIX, RESOURCE_ANNOTATION_PREFIX, SERVING_HOSTS, STATUS_ANNOTATION,
};

/// The folders of the repository that hold Rust sources.
const FOLDERS: [&str; 6] = ["src", "tests", "e2e", "benches", "examples", "fuzz"];

/// The prefixes of our keys, read from `keys.rs` itself (so this file spells none).
fn prefixes() -> Vec<String> {
    let ours = |key: &str| format!("{}/", key.split_once('/').unwrap().0);
    vec![
        ANNOTATION_PREFIX.to_owned(),
        RESOURCE_ANNOTATION_PREFIX.to_owned(),
        ours(STATUS_ANNOTATION),
        ours(SERVING_HOSTS),
    ]
}

pub(super) fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries {
        let path = entry.unwrap().path();
        if path.is_dir() {
            if !path.ends_with("target") {
                rust_files(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// A file's text without its comment lines.
pub(super) fn code_of(text: &str) -> String {
    text.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// What breaks the rule in one file's text, one line each.
fn violations(text: &str, prefixes: &[String]) -> Vec<String> {
    let code = code_of(text);
    let mut found = Vec::new();
    // `use` items of the keys module: no re-export, no other name.
    for (at, _) in code.match_indices("use ") {
        let item = &code[at..];
        let item = &item[..item.find(';').unwrap_or(item.len())];
        let path = item["use ".len()..].trim_start();
        if !(path.starts_with("crate::keys") || path.starts_with("otel_injector::keys")) {
            continue;
        }
        let before = code[..at].trim_end();
        let visibility = before.rsplit(['\n', ';', '{', '}']).next().unwrap_or("");
        if visibility.trim().starts_with("pub") {
            found.push(format!("re-export: {} {item}", visibility.trim()));
        }
        if item.contains(" as ") {
            found.push(format!("another name: {item}"));
        }
    }
    // `const` and `static` items whose value holds a string that starts with our prefix.
    for keyword in ["const ", "static "] {
        for (at, _) in code.match_indices(keyword) {
            if at > 0 && code[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_') {
                continue;
            }
            let item = &code[at..];
            let Some(eq) = item.find('=') else { continue };
            let value = &item[eq..];
            let value = &value[..value.find(";\n").unwrap_or(value.len())];
            let spelled = literals(value)
                .iter()
                .any(|l| prefixes.iter().any(|p| l.starts_with(p.as_str())));
            if spelled {
                found.push(format!("key spelled: {}", item.lines().next().unwrap()));
            }
        }
    }
    found
}

/// The contents of the string literals (`"…"`, `r#"…"#`) in a piece of code.
fn literals(code: &str) -> Vec<&str> {
    let mut found = Vec::new();
    let mut rest = code;
    while let Some(q) = rest.find('"') {
        let hashes = rest[..q].len() - rest[..q].trim_end_matches('#').len();
        let raw = rest[..q - hashes].ends_with('r');
        let body = &rest[q + 1..];
        let end = if raw {
            body.find(&format!("\"{}", "#".repeat(hashes)))
        } else {
            let mut escaped = false;
            body.char_indices()
                .find(|&(_, c)| {
                    let closes = c == '"' && !escaped;
                    escaped = c == '\\' && !escaped;
                    closes
                })
                .map(|(i, _)| i)
        };
        let Some(end) = end else { break };
        found.push(&body[..end]);
        rest = &body[end + 1..];
    }
    found
}

#[test]
fn every_key_is_spelled_in_keys_rs_and_used_by_its_own_name() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let prefixes = prefixes();
    let mut files = Vec::new();
    for folder in FOLDERS {
        rust_files(&root.join(folder), &mut files);
    }
    assert!(files.len() > 100, "sources read: {}", files.len());
    let keys = root.join("src/keys.rs");
    // This file's test inputs spell keys on purpose.
    let this = root.join(file!());
    assert!(
        !violations(&std::fs::read_to_string(&keys).unwrap(), &prefixes).is_empty(),
        "keys.rs spells the keys"
    );
    let broken: Vec<String> = files
        .iter()
        .filter(|f| **f != keys && **f != this)
        .flat_map(|f| {
            let text = std::fs::read_to_string(f).unwrap();
            let name = f.strip_prefix(root).unwrap().display().to_string();
            violations(&text, &prefixes)
                .into_iter()
                .map(move |v| format!("{name}: {v}"))
        })
        .collect();
    assert!(
        broken.is_empty(),
        "keys belong in src/keys.rs and are used by their own name \
         (`use crate::keys::NAME`):\n{}",
        broken.join("\n")
    );
}

#[test]
fn re_exports_other_names_and_spelled_keys_are_seen() {
    let prefixes = prefixes();
    let seen = |text: &str| violations(text, &prefixes).len();
    assert_eq!(seen("pub use crate::keys::STATUS_ANNOTATION;"), 1);
    assert_eq!(seen("pub(crate) use crate::keys::{A, B};"), 1);
    assert_eq!(seen("use crate::keys::OPT_OUT as DISABLED;"), 1);
    assert_eq!(seen("use otel_injector::keys::{A, B as C};"), 1);
    assert_eq!(seen("const S: &str = \"otel-injector/status\";"), 1);
    assert_eq!(
        seen("pub const K: (&str, &str) =\n    (\"resource.opentelemetry.io/x\", \"y\");"),
        1
    );
    assert_eq!(
        seen("static P: [&str; 1] = [\"instrumentation.opentelemetry.io/inject-go\"];"),
        1
    );
    assert_eq!(
        seen("const N: &str = \"otel-injector.opentelemetry.io/serving-hosts\";"),
        1
    );
    // Allowed: imports by name, keys inside other text, other prefixes, literals in code.
    assert_eq!(
        seen("use crate::keys::{self, OPT_OUT, STATUS_ANNOTATION};"),
        0
    );
    assert_eq!(
        seen("const YAML: &str = \"a: {instrumentation.opentelemetry.io/x: y}\";"),
        0
    );
    assert_eq!(seen("const L: &str = \"e2e.otel-injector.io/env\";"), 0);
    assert_eq!(seen("const NAME: &str = \"otel-injector\";"), 0);
    assert_eq!(seen("let k = \"otel-injector/status\";"), 0);
    assert_eq!(seen("// const S: &str = \"otel-injector/status\";"), 0);
    let json = "const POD: &str = r#\"{\"metadata\": {\"otel-injector/status\": \"\"}}\"#;";
    assert_eq!(seen(json), 0);
    assert_eq!(
        literals(r##"("a\"b", r#"c"d"#, "otel-injector/x")"##),
        [r#"a\"b"#, r#"c"d"#, "otel-injector/x"]
    );
}
