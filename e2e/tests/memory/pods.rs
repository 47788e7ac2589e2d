//! What the search for missed pods costs at 100,000 pods: the pods of 100 namespaces that ask
//! for nothing, none answered by a webhook, one in a hundred asking for Java by annotation
//! alone (so missed). A replica with the status controller and its search (`--status`,
//! `--find-missed`: the defaults) and one with `--find-missed=false`,
//! both started once the pods exist (their initial lists, as after a restart): their resident
//! memory, the pod watches each opens on the API server (its `apiserver_longrunning_requests`),
//! and the bytes the API server sends per watched pod (the metadata of a list page).
//!
//! ```sh
//! E2E_WEBHOOK_BIN=target/release/otel-injector \
//!   cargo test -p otel-injector-e2e --test e2e -- --ignored --nocapture memory::pods
//! ```
//! `E2E_MEMORY_PODS` sets the pods (default 100000).

use std::time::{Duration, Instant};

use otel_injector::keys::INJECT_JAVA;
use serde_json::{Value, json};

use super::{create_all, settled_rss};
use crate::harness::*;
use crate::support::api;
use crate::support::process::mib;
use crate::support::webhook::{Webhook, metric};

const NAMESPACES: usize = 100;

fn pod(i: usize) -> (String, Value) {
    let ns = format!("mpods-{:03}", i % NAMESPACES);
    let mut p = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("app-{i:06}"),
                     "labels": {"app": format!("app-{}", i % 997), "tier": "backend"}},
        // No scheduler has this name: the pods stay Pending, as stored objects only.
        "spec": {"schedulerName": "e2e-nobody",
                 "containers": [{"name": "app", "image": "shop/app:1.0.0"}]}
    });
    if i.is_multiple_of(100) {
        p["metadata"]["annotations"] = json!({INJECT_JAVA: "true"});
    }
    (format!("/api/v1/namespaces/{ns}/pods"), p)
}

/// The pod watches open on the API server now.
async fn pod_watches(client: &kube::Client) -> f64 {
    let (status, text) = api::get_text(client, "/metrics")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(status, 200, "the API server's metrics");
    text.lines()
        .filter(|l| l.starts_with("apiserver_longrunning_requests{"))
        .filter(|l| l.contains("resource=\"pods\"") && l.contains("verb=\"WATCH\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The bytes of the metadata-only list the finder reads, page by page, and the pods in it.
async fn listed_bytes(client: &kube::Client) -> (usize, usize) {
    let selector = "!otel-injector%2Finjected,otel-injector%2Finject!%3Ddisabled";
    let (mut bytes, mut pods, mut next) = (0, 0, String::new());
    loop {
        let token: String = next
            .bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect();
        let uri = format!("/api/v1/pods?labelSelector={selector}&limit=500&continue={token}");
        let req = axum::http::Request::get(uri)
            .header(
                "accept",
                "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
            )
            .body(Vec::new())
            .expect("a request");
        let text = client
            .request_text(req)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        bytes += text.len();
        let page: Value = serde_json::from_str(&text).expect("a list");
        pods += page["items"].as_array().map_or(0, Vec::len);
        match page["metadata"]["continue"].as_str() {
            Some(c) if !c.is_empty() => next = c.to_owned(),
            _ => return (bytes, pods),
        }
    }
}

/// Starts a replica with `args` and waits until its missed-pods gauge reads `missed`
/// (`None`: until ready); returns it with its settled (RSS, peak).
async fn replica(
    kubeconfig: &std::path::Path,
    args: &[&str],
    missed: Option<f64>,
) -> (Webhook, (u64, u64)) {
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    let mut w = Webhook::start_with(&webhook_binary(), kubeconfig, &args)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    w.wait_ready(Duration::from_secs(120))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    if let Some(want) = missed {
        let t0 = Instant::now();
        loop {
            let have = metric(&w.metrics().await, "otel_injector_status_pods_missed");
            if have == Some(want) {
                eprintln!(
                    "[memory] {want} missed pods counted {:?} after start",
                    t0.elapsed()
                );
                break;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(300),
                "missed {have:?}, want {want}\n{}",
                w.log()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let rss = settled_rss(&w).await;
    (w, rss)
}

#[tokio::test]
#[ignore = "a measurement: run alone, see the module docs"]
async fn the_search_for_missed_pods_at_a_hundred_thousand_pods() {
    let n: usize = std::env::var("E2E_MEMORY_PODS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let cp = cluster().await;
    let client = cp.client();
    let id = identity(Rbac::Missed).await;
    create_all(
        &client,
        "namespaces",
        (0..NAMESPACES)
            .map(|i| {
                let ns = json!({"apiVersion": "v1", "kind": "Namespace",
                                "metadata": {"name": format!("mpods-{i:03}")}});
                ("/api/v1/namespaces".to_owned(), ns)
            })
            .collect(),
    )
    .await;
    create_all(&client, "pods", (0..n).map(pod).collect()).await;
    let missed = n.div_ceil(100) as f64;

    let (bytes, listed) = listed_bytes(&client).await;
    eprintln!("[memory] listed {listed} pods' metadata");
    let watches_before = pod_watches(&client).await;
    let (without, rss_without) = replica(
        &id.kubeconfig,
        &["--status=true", "--find-missed=false"],
        None,
    )
    .await;
    let watches_without = pod_watches(&client).await - watches_before;
    let (with, rss_with) = replica(&id.kubeconfig, &["--status=true"], Some(missed)).await;
    let watches_with = pod_watches(&client).await - watches_before - watches_without;
    eprintln!("[memory] binary {}", webhook_binary().display());
    eprintln!(
        "[memory] {n} pods, {listed} without an outcome listed: {bytes} B of metadata ({} B per pod)",
        bytes / listed.max(1)
    );
    eprintln!(
        "[memory] --find-missed=false: RSS {:.1} MiB, peak {:.1} MiB, {watches_without} pod watch(es)",
        mib(rss_without.0),
        mib(rss_without.1)
    );
    eprintln!(
        "[memory] --find-missed (default): RSS {:.1} MiB, peak {:.1} MiB, {watches_with} pod watch(es); {missed} missed",
        mib(rss_with.0),
        mib(rss_with.1)
    );
    assert_eq!(
        watches_with - watches_without,
        1.0,
        "the search adds one pod watch"
    );
    drop((with, without));
}
