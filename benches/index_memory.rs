//! What the webhook's index of Instrumentations keeps at 10,000 namespaces, one
//! Instrumentation each: written out whole (today's way to share settings: a copy per
//! namespace), against each namespace's standing on one shared base (`otel-injector/base`)
//! with its own endpoint and attribute. Resident memory added, as the process's RSS grows
//! (the allocator's overhead included), and the time the index took to build. Then the
//! namespace cache at 10,000 namespaces, as the webhook keeps them since selectors read
//! every label: namespaces with two labels of their own (`team`, `env`) against namespaces
//! with none (which all share one empty entry).
//!
//! ```sh
//! cargo bench --bench index_memory            # BENCH_NAMESPACES sets the namespaces
//! ```

use std::time::Instant;

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use otel_injector::cluster::watch::NamespaceEntry;
use otel_injector::crd::parse_instrumentations;
use otel_injector::engine::{Instrumentations, NAMESPACE_NAME_LABEL, NamespaceInfo};

const INSTRUMENTATION: &str = include_str!("../tests/data/instrumentations/java-load.yaml");

#[path = "support/rss.rs"]
mod rss;
use rss::rss;

/// The YAML of `n` namespaces' Instrumentations, one document each: whole copies, or each on
/// the shared base.
fn yaml(n: usize, based: bool) -> Vec<String> {
    let mut docs = Vec::new();
    if based {
        docs.push(INSTRUMENTATION.replace("namespace: shop", "namespace: platform"));
    }
    for i in 0..n {
        let ns = format!("team-{i:05}");
        let own = format!(
            "  exporter: {{endpoint: \"http://collector.{ns}:4318\"}}\n  resource: {{resourceAttributes: {{team: {ns}}}}}\n"
        );
        let mut out = String::new();
        if based {
            out.push_str(&format!(
                "apiVersion: opentelemetry.io/v1alpha1\nkind: Instrumentation\nmetadata:\n  name: java\n  namespace: {ns}\n  annotations: {{otel-injector/base: platform/java}}\nspec:\n{own}"
            ));
        } else {
            let whole = INSTRUMENTATION
                .replace("namespace: shop", &format!("namespace: {ns}"))
                .replace(
                    "http://otel-collector.observability.svc:4318",
                    &format!("http://collector.{ns}:4318"),
                );
            out.push_str(&whole);
            out.push_str(&format!(
                "  resource: {{resourceAttributes: {{team: {ns}}}}}\n"
            ));
        }
        docs.push(out);
    }
    docs
}

/// Builds the index of the documents' objects (parsed first): bytes added, seconds.
fn measure(docs: &[String]) -> (Instrumentations, u64, f64) {
    let objects: Vec<_> = docs
        .iter()
        .flat_map(|d| parse_instrumentations(d).expect("YAML"))
        .collect();
    let before = rss();
    let t0 = Instant::now();
    let index: Instrumentations = objects.into_iter().collect();
    let took = t0.elapsed().as_secs_f64();
    (index, rss().saturating_sub(before), took)
}

/// The namespace cache's entries of `n` namespaces, with or without two labels of their
/// own: bytes added.
fn namespaces(n: usize, labeled: bool) -> (Vec<(String, NamespaceEntry)>, u64) {
    let empty = Arc::new(NamespaceInfo::default());
    let before = rss();
    let entries: Vec<_> = (0..n)
        .map(|i| {
            let name = format!("team-{i:05}");
            let mut labels = BTreeMap::from([(NAMESPACE_NAME_LABEL.to_owned(), name.clone())]);
            if labeled {
                labels.insert("team".into(), name.clone());
                labels.insert("env".into(), "prod".into());
            }
            let meta = ObjectMeta {
                name: Some(name),
                labels: Some(labels),
                ..ObjectMeta::default()
            };
            NamespaceEntry::of(meta, &empty)
        })
        .collect();
    (entries, rss().saturating_sub(before))
}

fn main() {
    let n: usize = std::env::var("BENCH_NAMESPACES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    // The namespaces first: memory freed by what follows would hide what they take.
    let (bare, bare_bytes) = namespaces(n, false);
    let (labeled, labeled_bytes) = namespaces(n, true);
    assert_eq!(bare.len() + labeled.len(), 2 * n);
    let (whole, whole_bytes, whole_s) = measure(&yaml(n, false));
    let (based, based_bytes, based_s) = measure(&yaml(n, true));
    assert_eq!(whole.readable_len(), n);
    assert_eq!(based.readable_len(), n + 1, "every one resolved");
    let per = |b: u64| b as f64 / n as f64;
    println!(
        "index_memory: {n} namespaces; whole copies: {:.0} B per Instrumentation ({:.1} MiB), built in {:.1} ms; \
         on a shared base: {:.0} B per Instrumentation ({:.1} MiB), built in {:.1} ms; ratio {:.2} (memory), {:.2} (build)",
        per(whole_bytes),
        whole_bytes as f64 / 1048576.0,
        whole_s * 1e3,
        per(based_bytes),
        based_bytes as f64 / 1048576.0,
        based_s * 1e3,
        per(based_bytes) / per(whole_bytes),
        based_s / whole_s,
    );
    println!(
        "index_memory: the namespace cache at {n} namespaces: without labels of their own {:.0} B each ({:.1} MiB); \
         with two (kept for selectors) {:.0} B each ({:.1} MiB)",
        per(bare_bytes),
        bare_bytes as f64 / 1048576.0,
        per(labeled_bytes),
        labeled_bytes as f64 / 1048576.0,
    );
}
