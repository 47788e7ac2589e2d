//! The stored pod described in words: what the injection added, container by container.

use std::path::Path;

use serde_json::Value;

use crate::support::api;

/// The one document of a YAML file.
pub(super) fn single_doc(path: &Path) -> Result<Value, String> {
    api::read_yaml_docs(path)?
        .into_iter()
        .next()
        .ok_or_else(|| format!("{}: empty", path.display()))
}

/// A readable account of what the webhook did to the pod.
pub(super) fn describe(pod: &Value) -> String {
    let mut out = String::new();
    let mut line = |s: String| {
        out.push_str(&s);
        out.push('\n');
    };
    let meta = &pod["metadata"];
    line(format!(
        "Pod {}/{} as stored by the apiserver",
        meta["namespace"].as_str().unwrap_or(""),
        meta["name"].as_str().unwrap_or("")
    ));
    line("  annotations:".into());
    for (k, v) in meta["annotations"].as_object().into_iter().flatten() {
        line(format!("    {k}: {}", v.as_str().unwrap_or_default()));
    }
    let spec = &pod["spec"];
    line("  init containers:".into());
    for c in spec["initContainers"].as_array().into_iter().flatten() {
        line(format!("    {}", c["name"].as_str().unwrap_or("")));
        line(format!(
            "      image:   {}",
            c["image"].as_str().unwrap_or("")
        ));
        line(format!("      command: {}", words(&c["command"])));
        mounts(&mut line, c, "      ");
    }
    line("  volumes:".into());
    for v in spec["volumes"].as_array().into_iter().flatten() {
        let name = v["name"].as_str().unwrap_or("");
        let source = v
            .as_object()
            .into_iter()
            .flatten()
            .find(|(k, _)| *k != "name")
            .map(|(k, s)| format!("{k} {s}"))
            .unwrap_or_default();
        line(format!("    {name}: {source}"));
    }
    for c in spec["containers"].as_array().into_iter().flatten() {
        line(format!(
            "  container {} ({})",
            c["name"].as_str().unwrap_or(""),
            c["image"].as_str().unwrap_or("")
        ));
        mounts(&mut line, c, "    ");
        line("    env, in order:".into());
        for (i, e) in c["env"].as_array().into_iter().flatten().enumerate() {
            let name = e["name"].as_str().unwrap_or("");
            let text = if let Some(v) = e.get("value") {
                format!("{name}={}", v.as_str().unwrap_or(""))
            } else if let Some(p) = e["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
                format!("{name} from fieldRef {p}")
            } else if e["valueFrom"].is_object() {
                format!("{name} from {}", e["valueFrom"])
            } else {
                format!("{name}=")
            };
            line(format!("      {:>2}. {text}", i + 1));
        }
    }
    out
}

pub(super) fn mounts(line: &mut impl FnMut(String), c: &Value, indent: &str) {
    line(format!("{indent}mounts:"));
    for m in c["volumeMounts"].as_array().into_iter().flatten() {
        line(format!(
            "{indent}  {} -> {}",
            m["name"].as_str().unwrap_or(""),
            m["mountPath"].as_str().unwrap_or("")
        ));
    }
}

pub(super) fn words(v: &Value) -> String {
    v.as_array()
        .map(|a| {
            a.iter()
                .map(|s| s.as_str().unwrap_or("").to_owned())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}
