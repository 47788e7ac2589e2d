//! A burst of pod creations through the real control plane, with two webhook replicas behind
//! one Service-like address (the rig of `rolling.rs`), in one run: N pods (default 2,000)
//! created by 32 concurrent clients in a namespace the webhook configuration does not match
//! (the baseline: no webhook in the path), then N that ask for Java in one it matches, then a
//! Deployment of the same pods scaled from 0 to N (its ReplicaSet controller creates them).
//! Reports pods/s and the create latency p50/p99/max of each, and the API server's own
//! `apiserver_admission_webhook_admission_duration_seconds` for the webhook. Every pod that
//! asked is stored injected; no create fails. A measurement, so `#[ignore]`d:
//!
//! ```sh
//! scripts/just burst           # E2E_BURST_PODS=2000, release binary
//! ```

use std::time::{Duration, Instant};

use futures::StreamExt as _;
use otel_injector::keys::INJECT_JAVA;
use serde_json::json;

use crate::harness::*;
use crate::rolling::{Created, Rig, create};
use crate::support::api;
use crate::support::webhook::{admission_time, metric_sum};

const CLIENTS: usize = 32;

/// `n` creates from [`CLIENTS`] clients; their results and the wall time.
async fn burst(
    client: &kube::Client,
    ns: &str,
    prefix: &str,
    n: usize,
) -> (Vec<Created>, Duration) {
    let t0 = Instant::now();
    let created: Vec<Created> = futures::stream::iter(0..n)
        .map(|i| {
            let (client, name) = (client.clone(), format!("{prefix}-{i:05}"));
            async move { create(&client, ns, &name).await }
        })
        .buffer_unordered(CLIENTS)
        .collect()
        .await;
    (created, t0.elapsed())
}

fn report(what: &str, created: &[Created], took: Duration) {
    let mut times: Vec<Duration> = created.iter().map(|c| c.took).collect();
    times.sort();
    eprintln!(
        "[burst] {what:<44} {} pods in {took:.1?}: {:.0} pods/s; create p50 {:.1} ms, p99 {:.1} \
         ms, max {:.1} ms",
        created.len(),
        created.len() as f64 / took.as_secs_f64(),
        percentile(&times, 50),
        percentile(&times, 99),
        percentile(&times, 100),
    );
}

/// `(sum, count)` of the API server's admission-duration histogram for our entry.
async fn admission_duration(client: &kube::Client) -> (f64, f64) {
    let (_, text) = api::get_text(client, "/metrics")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let labels = ["otel-injector", "operation=\"CREATE\""];
    let series = |suffix| {
        metric_sum(
            &text,
            &format!("apiserver_admission_webhook_admission_duration_seconds_{suffix}"),
            &labels,
        )
    };
    (series("sum"), series("count"))
}

#[tokio::test]
#[ignore = "a measurement: scripts/just burst"]
async fn a_burst_of_pods_is_all_injected_at_a_measured_cost() {
    let n: usize = std::env::var("E2E_BURST_PODS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    let _alone = CLUSTER_WIDE.write().await;
    let rig = Rig::start("burst").await;
    let client = rig.client.clone();
    let unmatched = "burst-unmatched";
    api::create_namespace(&client, unmatched, &[], &[])
        .await
        .unwrap_or_else(|e| panic!("{e}"));

    let (without, without_took) = burst(&client, unmatched, "plain", n).await;
    let before = admission_duration(&client).await;
    let (with, with_took) = burst(&client, &rig.ns, "asks", n).await;
    let after = admission_duration(&client).await;

    // A Deployment of the same pods, 0 → n.
    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "burst"},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "burst"}},
            "template": {
                "metadata": {"labels": {"app": "burst"}, "annotations": {INJECT_JAVA: "true"}},
                "spec": {
                    "schedulingGates": [{"name": "e2e.otel-injector.io/hold"}],
                    "containers": [{"name": "app", "image": "shop/checkout:1.4.2"}]}}}
    });
    let path = format!("/apis/apps/v1/namespaces/{}/deployments", rig.ns);
    let r = api::send(&client, axum::http::Method::POST, &path, Some(&deployment))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 201, "{}", r.body);
    let t0 = Instant::now();
    let r = api::merge_patch(
        &client,
        &format!("{path}/burst/scale"),
        &json!({"spec": {"replicas": n}}),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 200, "{}", r.body);
    let (scaled, scaled_took) = loop {
        let r = api::send(
            &client,
            axum::http::Method::GET,
            &format!(
                "/api/v1/namespaces/{}/pods?labelSelector=app%3Dburst",
                rig.ns
            ),
            None,
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        let items = r.body["items"].as_array().cloned().unwrap_or_default();
        if items.len() >= n {
            break (items, t0.elapsed());
        }
        assert!(
            t0.elapsed() < Duration::from_secs(600),
            "{} of {n} pods after 10 minutes",
            items.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };

    eprintln!("[burst] {n} pods per series, {CLIENTS} clients, two replicas behind one address");
    report(
        "no webhook in the path (namespace not matched)",
        &without,
        without_took,
    );
    report("asking for Java, injected by the webhook", &with, with_took);
    eprintln!(
        "[burst] {:<44} {n} pods created by its ReplicaSet {scaled_took:.1?} after the scale: \
         {:.0} pods/s",
        "Deployment scaled 0 -> N",
        n as f64 / scaled_took.as_secs_f64()
    );
    let (sum, count) = (after.0 - before.0, after.1 - before.1);
    eprintln!(
        "[burst] the API server's admission_duration for the webhook over the injected series: \
         {count} calls, mean {:.2} ms",
        sum / count.max(1.0) * 1e3
    );
    let mut answered = Vec::new();
    let (mut own_sum, mut own_count) = (0.0, 0.0);
    for (_, w) in &rig.replicas {
        let (sum, count) = admission_time(&w.metrics().await);
        answered.push(w.requests().await.total());
        own_sum += sum;
        own_count += count;
    }
    eprintln!(
        "[burst] reviews answered per replica: {answered:?}; the webhook's own time per review \
         (otel_injector_admission_duration_seconds): mean {:.3} ms; the rest of the API \
         server's figure is the call: TLS, the Service stand-in (in the test process) and \
         waiting for a core, which the API server, etcd, both replicas and the clients share",
        own_sum / own_count.max(1.0) * 1e3
    );

    for (what, created) in [("without", &without), ("with", &with)] {
        let failed: Vec<&Created> = created.iter().filter(|c| c.status != 201).collect();
        assert!(
            failed.is_empty(),
            "{what}: {} creates failed, e.g. {}",
            failed.len(),
            failed[0].body
        );
    }
    let uninjected = with.iter().filter(|c| !c.injected).count();
    assert_eq!(uninjected, 0, "pods that asked stored without the agent");
    let scaled_uninjected = scaled.iter().filter(|p| !is_injected(p)).count();
    assert_eq!(
        scaled_uninjected, 0,
        "Deployment pods stored without the agent"
    );
    assert!(without.iter().all(|c| !c.injected));

    // The Deployment and its ReplicaSet go first, or the ReplicaSet would make the pods
    // that the rig deletes again. Both are deleted here, not left to the garbage
    // collector, which works through the pods first at the controller manager's 20/s.
    let replica_sets = format!("/apis/apps/v1/namespaces/{}/replicasets", rig.ns);
    for doomed in [format!("{path}/burst"), replica_sets.clone()] {
        let r = api::send(
            &client,
            axum::http::Method::DELETE,
            &format!("{doomed}?propagationPolicy=Background"),
            None,
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.status, 200, "DELETE {doomed}: {}", r.body);
    }
    let t0 = Instant::now();
    while !api::send(&client, axum::http::Method::GET, &replica_sets, None)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .body["items"]
        .as_array()
        .is_some_and(Vec::is_empty)
    {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "ReplicaSet not deleted"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    rig.delete().await;
    let _ = api::send(
        &client,
        axum::http::Method::DELETE,
        &format!("/api/v1/namespaces/{unmatched}"),
        None,
    )
    .await;
}
