//! The status controller's pod watch at cluster scale: the resident memory of a replica with
//! `--status` while the real API server holds 100,000 injected pods, followed as they are
//! created (watch events) and, by a second replica started once they all exist, listed (as
//! after a restart). A measurement, so `#[ignore]`d; run it alone (it takes minutes and
//! loads the suite's control plane), in release for the product's numbers:
//!
//! ```sh
//! scripts/just scale            # E2E_SCALE_PODS=100000, the release binary
//! ```
//! `E2E_SCALE_PODS` sets the pods (default 100,000, in 100 namespaces), `E2E_WEBHOOK_BIN`
//! the `otel-injector` binary measured (default: this build's).
//!
//! The pods are bare (never scheduled: no kwok node tolerates them) and carry what the
//! webhook writes on an injected pod: the `otel-injector/injected` label, the outcome
//! annotations, and the app's own labels. They have no owner: the garbage collector deletes
//! pods whose owner does not exist.

use otel_injector::keys::{INJECTED_ANNOTATION, INJECTED_LABEL, STATUS_ANNOTATION};
use std::time::{Duration, Instant};

use axum::http::Method;
use futures::StreamExt as _;
use serde_json::json;

use crate::harness::*;
use crate::support::api;
use crate::support::identity::NAMESPACE;
use crate::support::process::{Usage, mib, usage};
use crate::support::webhook::{Webhook, metric};

/// What a replica may hold at 100,000 pods (the issue's bound; the chart's limit is above).
const MAX_RSS: u64 = 64 * 1024 * 1024;
const NAMESPACES: usize = 100;

/// Waits until the replica's pod watch holds at least `n` pods; returns how long it took.
async fn await_watched(w: &Webhook, n: usize, limit: Duration) -> Duration {
    let t0 = Instant::now();
    loop {
        let watched =
            metric(&w.metrics().await, "otel_injector_status_pods_watched").unwrap_or(0.0);
        if watched >= n as f64 {
            return t0.elapsed();
        }
        assert!(
            t0.elapsed() < limit,
            "the pod watch holds {watched} of {n} pods after {limit:?}\n{}",
            w.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn replica(binary: &std::path::Path, kubeconfig: &std::path::Path, name: &str) -> Webhook {
    let args: Vec<String> = vec![
        "--status=true".into(),
        format!("--lease-identity={name}"),
        format!("--lease-namespace={NAMESPACE}"),
        "--lease-name=otel-injector".into(),
        "--lease-duration=3s".into(),
    ];
    let mut w = Webhook::start_with(binary, kubeconfig, &args)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    w.wait_ready(Duration::from_secs(60))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    w
}

#[tokio::test]
#[ignore = "a measurement of minutes: scripts/just scale"]
async fn the_pod_watch_of_a_hundred_thousand_pods_fits_in_64_mib() {
    let n: usize = std::env::var("E2E_SCALE_PODS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let binary = webhook_binary();
    let _alone = CLUSTER_WIDE.write().await;
    let cp = cluster().await;
    let client = cp.client();
    let id = identity(Rbac::Status).await;
    let namespaces: Vec<String> = (0..NAMESPACES).map(|k| format!("scale-{k:03}")).collect();
    for ns in &namespaces {
        api::create_namespace(&client, ns, &[], &[])
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let a = replica(&binary, &id.kubeconfig, "scale-a").await;
    let pid = a.pid().expect("running");
    let log = a
        .log_with("status controller: pods listed", Duration::from_secs(30))
        .await;
    assert!(log.contains("status controller: pods listed"), "{log}");
    let before = usage(pid).rss;

    let t0 = Instant::now();
    let created = futures::stream::iter(0..n)
        .map(|i| {
            let ns = &namespaces[i % NAMESPACES];
            let app = format!("app-{}", (i / NAMESPACES) % 20);
            let body = json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("{app}-{i:06}"),
                             "labels": {INJECTED_LABEL: "true", "app": app},
                             "annotations": {
                                 STATUS_ANNOTATION: format!("java=injected {ns}/java 01020304"),
                                 INJECTED_ANNOTATION: "java"}},
                "spec": {"containers": [{"name": "app", "image": "shop/app:1"}]}});
            let client = client.clone();
            let path = format!("/api/v1/namespaces/{ns}/pods");
            async move {
                let r = api::send(&client, Method::POST, &path, Some(&body))
                    .await
                    .unwrap_or_else(|e| panic!("{e}"));
                assert_eq!(r.status, 201, "{}", r.body);
            }
        })
        .buffer_unordered(64)
        .count()
        .await;
    let creating = t0.elapsed();
    let lag = await_watched(&a, n, Duration::from_secs(300)).await;
    let Usage {
        rss: followed,
        peak: followed_peak,
        ..
    } = usage(pid);

    // A replica that starts with every pod present lists them.
    let t1 = Instant::now();
    let b = replica(&binary, &id.kubeconfig, "scale-b").await;
    await_watched(&b, n, Duration::from_secs(300)).await;
    let listed_after = t1.elapsed();
    let Usage {
        rss: listed,
        peak: listed_peak,
        ..
    } = usage(b.pid().expect("running"));
    let per_pod = followed.saturating_sub(before) as f64 / n as f64;
    eprintln!(
        "[scale] {created} pods created in {creating:.1?} ({:.0}/s); the watch held them all \
         {lag:.1?} after the last; replica following them: VmRSS {:.1} -> {:.1} MiB (peak \
         {:.1}), {per_pod:.0} B per pod; replica started with them present: {:.1} MiB (peak \
         {:.1}) once it had listed them, {listed_after:.1?} after its start; binary {}",
        created as f64 / creating.as_secs_f64(),
        mib(before),
        mib(followed),
        mib(followed_peak),
        mib(listed),
        mib(listed_peak),
        binary.display()
    );
    drop((a, b));
    for ns in &namespaces {
        let _ = api::send(
            &client,
            Method::DELETE,
            &format!("/api/v1/namespaces/{ns}"),
            None,
        )
        .await;
    }
    assert!(
        followed <= MAX_RSS && listed <= MAX_RSS,
        "over {} MiB: {:.1} MiB following, {:.1} MiB listed",
        mib(MAX_RSS),
        mib(followed),
        mib(listed)
    );
}
