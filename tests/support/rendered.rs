//! Reading rendered Kubernetes documents (Helm's and kustomize's output, `manifests/`), for
//! `tests/tools/chart.rs` and `tests/tools/kustomize.rs`: objects named `Kind/name`.

use std::path::PathBuf;

use serde_json::Value;

/// The documents of a file under `manifests/`.
pub fn manifest(path: &str) -> Vec<Value> {
    let file = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("manifests")
        .join(path);
    let text = std::fs::read_to_string(file).expect(path);
    serde_saphyr::from_multiple::<Value>(&text)
        .expect(path)
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}

/// Every document as `Kind/name`, in order.
pub fn ids(docs: &[Value]) -> Vec<String> {
    docs.iter()
        .map(|d| {
            format!(
                "{}/{}",
                d["kind"].as_str().unwrap_or(""),
                d["metadata"]["name"].as_str().unwrap_or("")
            )
        })
        .collect()
}

/// The document `Kind/name`; panics with what there is when it is missing.
pub fn find<'a>(docs: &'a [Value], id: &str) -> &'a Value {
    let i = ids(docs)
        .iter()
        .position(|i| i == id)
        .unwrap_or_else(|| panic!("{id} not rendered: {:?}", ids(docs)));
    &docs[i]
}
