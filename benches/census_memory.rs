//! What the status controller's pod watch keeps per pod, against what a store of the same
//! pods' metadata would keep (kube-runtime's reflector over the metadata-only watch, the
//! usual way to follow pods), in the same run: resident memory added by 100,000 injected
//! pods in each form, as the process's RSS grows (the allocator's overhead included).
//!
//! ```sh
//! cargo bench --bench census_memory            # E2E-free; BENCH_PODS sets the pods
//! ```
//!
//! The pods look like a Deployment's as the API server lists them without managed fields:
//! generated name, UID, resource version, creation time, the ReplicaSet owner, the
//! `pod-template-hash` and app labels, the webhook's label and two annotations. 1,000
//! namespaces, 10 Deployments each.

use std::collections::HashMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use otel_injector::census::{Interner, PodRecord};

#[path = "support/rss.rs"]
mod rss;
use rss::rss;

fn pod(i: usize) -> ObjectMeta {
    let ns = format!("team-{:04}", i % 1000);
    let deployment = format!("checkout-{}", (i / 1000) % 10);
    let hash = format!("{:010x}", (i / 1000) % 10 * 7919 + 1_000_000_000);
    let name = format!("{deployment}-{hash}-{:05x}", i % 0xfffff);
    let uid = format!("{:08x}-4b71-4d7e-9a51-{:012x}", i, i * 31);
    let labels = [
        ("app".to_owned(), deployment.clone()),
        ("pod-template-hash".to_owned(), hash.clone()),
        ("otel-injector/injected".to_owned(), "true".to_owned()),
    ]
    .into();
    let annotations = [
        ("otel-injector/injected".to_owned(), "java".to_owned()),
        (
            "otel-injector/status".to_owned(),
            format!("java=injected {ns}/java 01020304"),
        ),
    ]
    .into();
    ObjectMeta {
        name: Some(name),
        generate_name: Some(format!("{deployment}-{hash}-")),
        namespace: Some(ns),
        uid: Some(uid),
        resource_version: Some(format!("{}", 100_000 + i)),
        creation_timestamp: Some(Time(
            k8s_openapi::jiff::Timestamp::from_second(1_780_000_000).unwrap(),
        )),
        labels: Some(labels),
        annotations: Some(annotations),
        owner_references: Some(vec![OwnerReference {
            api_version: "apps/v1".into(),
            kind: "ReplicaSet".into(),
            name: format!("{deployment}-{hash}"),
            uid: format!("{:08x}-0000-4000-8000-000000000000", i / 1000),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }]),
        ..ObjectMeta::default()
    }
}

fn main() {
    let n: usize = std::env::var("BENCH_PODS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    // The pods' metadata is made one at a time and dropped, as the watch's events are.
    let r0 = rss();
    let mut names = Interner::default();
    let mut records: HashMap<u128, PodRecord> = HashMap::new();
    for i in 0..n {
        let meta = pod(i);
        let key = PodRecord::key(&meta);
        let record = PodRecord::from_meta(&meta, &mut names).expect("a readable status");
        records.insert(key, record);
    }
    let r1 = rss();
    // The same pods as a metadata store keeps them.
    let store: Vec<ObjectMeta> = (0..n).map(pod).collect();
    let r2 = rss();
    let ours = (r1 - r0) as f64 / n as f64;
    let store_bytes = (r2 - r1) as f64 / n as f64;
    println!(
        "census_memory: {n} pods; the pod watch's records: {ours:.0} B per pod ({:.1} MiB); \
         their metadata as a store keeps it: {store_bytes:.0} B per pod ({:.1} MiB); \
         ratio {:.3}; {} shared names",
        (r1 - r0) as f64 / 1048576.0,
        (r2 - r1) as f64 / 1048576.0,
        ours / store_bytes,
        names.len()
    );
    assert_eq!(records.len(), n);
    assert_eq!(store.len(), n);
}
