//! Many pods: a thousand converge within seconds; the memory of three thousand.

use std::time::Duration;

use axum::http::Method;
use futures::StreamExt as _;
use serde_json::json;

use crate::harness::Env;
use crate::support::api;
use crate::support::process::usage;

use super::{await_status, await_watched, spec_hash, start_with, want};
use otel_injector::keys::{INJECTED_LABEL, STATUS_ANNOTATION};

/// Creates `n` bare pods (unscheduled: they do not tolerate the kwok node) carrying the
/// outcome, 32 at a time; returns when the last was created.
pub(super) async fn bare_pods(env: &Env, ns: &str, n: usize, outcome: &str) {
    let pods = futures::stream::iter(0..n).map(|i| {
        let body = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("p-{i:05}"),
                         "labels": {INJECTED_LABEL: "true"},
                         "annotations": {STATUS_ANNOTATION: outcome}},
            "spec": {"containers": [{"name": "app", "image": "shop/app:1"}]}});
        let client = env.client.clone();
        let path = format!("/api/v1/namespaces/{ns}/pods");
        async move {
            let r = api::send(&client, Method::POST, &path, Some(&body))
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(r.status, 201, "{}", r.body);
        }
    });
    pods.buffer_unordered(32).collect::<Vec<()>>().await;
}

/// 1,000 pods (and, ignored by default, 3,000): the time from the last pod's creation to the
/// status counting them all, and the webhook's resident memory before and after.
/// Creates `n` injected pods and waits for the status to count them; returns the webhook's
/// RSS growth per pod and how long the count took after the last pod was created.
pub(super) async fn many_pods(id: &str, n: usize, extra: &[&str]) -> (u64, Duration) {
    let env = start_with(id, extra).await;
    let ns = env.namespace("load", &[]).await;
    env.instrumentation(
        &ns,
        "java",
        json!({"exporter": {"endpoint": "http://collector.example:4318"}}),
    )
    .await;
    let hash = spec_hash(&env, &ns, "java").await;
    await_status(
        &env,
        &ns,
        "java",
        want(0, 0, json!([]), json!([])),
        Duration::from_secs(30),
    )
    .await;
    let pid = env.webhook.pid().expect("running");
    let before = usage(pid).rss;
    bare_pods(&env, &ns, n, &format!("java=injected {ns}/java {hash}")).await;
    let n64 = u64::try_from(n).unwrap();
    let (_, took) = await_status(
        &env,
        &ns,
        "java",
        want(n64, 0, json!([]), json!([])),
        Duration::from_secs(30),
    )
    .await;
    let after = usage(pid).rss;
    let per_pod = after.saturating_sub(before) / n64;
    eprintln!(
        "[e2e] status of {n} pods ({extra:?}) converged {took:?} after the last pod was created; \
         webhook VmRSS {before} -> {after} bytes: {per_pod} bytes per pod, {} KiB per 1,000 pods",
        per_pod * 1000 / 1024
    );
    assert!(took < Duration::from_secs(30));
    await_watched(&env.client, &env.webhook).await;
    // Delete the namespace's pods at once, so that later tests do not wait for them.
    let _ = api::send(
        &env.client,
        Method::DELETE,
        &format!("/api/v1/namespaces/{ns}/pods?gracePeriodSeconds=0"),
        None,
    )
    .await;
    (per_pod, took)
}

#[tokio::test]
async fn a_thousand_pods_converge_within_seconds() {
    many_pods("status-1k", 1000, &[]).await;
}

#[tokio::test]
#[ignore = "a measurement: cargo test -p otel-injector-e2e --test e2e -- --ignored status_memory"]
async fn status_memory_of_three_thousand_pods() {
    many_pods("status-3k", 3000, &[]).await;
}

/// The safety net's cost: the same 3,000 pods watched as metadata, then whole
/// (`--detect-failures`), in one run.
#[tokio::test]
#[ignore = "a measurement: cargo test -p otel-injector-e2e --test e2e -- --ignored status_memory"]
async fn status_memory_with_and_without_failure_detection() {
    let (meta, meta_took) = many_pods("status-3k-meta", 3000, &[]).await;
    let (whole, whole_took) = many_pods("status-3k-whole", 3000, &["--detect-failures=true"]).await;
    eprintln!(
        "[e2e] --detect-failures: {whole} vs {meta} bytes per pod ({:.2}x), converged {whole_took:?} vs {meta_took:?}",
        whole as f64 / meta.max(1) as f64
    );
}
