//! The API server goes away under a running webhook: on a control plane of its own (the
//! suite's shared one stays up), kube-apiserver is killed, etcd's history is compacted past
//! what the webhook's watches have seen, and kube-apiserver is started again on the same
//! etcd. Meanwhile the webhook answers from its last good caches and `/readyz` stays 200
//! (what it serves is still right: nothing can change while the API server is away); once
//! the API server is back, the watches resume (their resource version compacted away: 410
//! Gone, so they list again) and an Instrumentation changed right then is served within
//! [`CONVERGED_WITHIN`] of its `/readyz` 200 (with, as the baseline of the same run, the
//! time the API server takes to answer a watch of the test's own).

use std::path::Path;
use std::time::{Duration, Instant};

use otel_injector::keys::INJECT_JAVA;
use serde_json::{Value, json};

use crate::harness::*;
use crate::support::api;
use crate::support::controlplane::ControlPlane;
use crate::support::tools::root;
use crate::support::webhook::Webhook;

/// The bound the test holds the webhook to, from the API server's `/readyz` 200. Measured
/// on this machine: about 4.3 s, of which the API server accounts for most. A watch of the
/// custom resource that a client sends while the API server starts is held until the
/// resource's watch cache is set up (about 4 s after `/readyz`), and the webhook's, retried
/// every 0.4–0.8 s (`retry::WATCH_MAX_DELAY`), is sent then; one sent just after `/readyz`
/// (the test's own, the baseline of the same run) is answered in about 1.1 s. The rest is
/// margin for this shared 2-core machine.
const CONVERGED_WITHIN: Duration = Duration::from_secs(8);

/// A pod in `shop` that asks for Java.
fn asking() -> Value {
    pod("app", &[(INJECT_JAVA, "true")])
}

/// The exporter endpoint the webhook's answer gives the pod: its patch applied, the app
/// container's `OTEL_EXPORTER_OTLP_ENDPOINT`.
async fn served_endpoint(w: &Webhook, uid: &str) -> Result<String, String> {
    use base64::Engine as _;
    let review = json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "shop", "operation": "CREATE",
            "userInfo": {"username": "e2e"},
            "object": asking(),
        }
    });
    let (status, body) = w.post_review(&review).await?;
    if status != 200 {
        return Err(format!("HTTP {status}: {body}"));
    }
    let patch = body["response"]["patch"]
        .as_str()
        .ok_or_else(|| format!("no patch: {body}"))?;
    let patch = base64::engine::general_purpose::STANDARD
        .decode(patch)
        .map_err(|e| e.to_string())?;
    let patch: json_patch::Patch = serde_json::from_slice(&patch).map_err(|e| e.to_string())?;
    let mut pod = asking();
    json_patch::patch(&mut pod, &patch).map_err(|e| format!("the patch does not apply: {e}"))?;
    Ok(env_value(&pod, 0, "OTEL_EXPORTER_OTLP_ENDPOINT").to_owned())
}

async fn set_endpoint(client: &kube::Client, endpoint: &str) {
    let r = api::merge_patch(
        client,
        "/apis/opentelemetry.io/v1alpha1/namespaces/shop/instrumentations/java",
        &json!({"spec": {"exporter": {"endpoint": endpoint}}}),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 200, "{}", r.body);
}

/// `store synced` lines of a store in the webhook's log: one per (re)list.
fn lists(log: &str, store: &str) -> usize {
    log.lines()
        .filter(|l| l.contains("store synced") && l.contains(&format!("store=\"{store}\"")))
        .count()
}

#[tokio::test]
async fn the_webhook_serves_through_an_api_server_restart_and_converges_after_it() {
    // Its own control plane, but not while a test that measures under load runs alone.
    let _shared = CLUSTER_WIDE.read().await;
    let cp = ControlPlane::start()
        .await
        .unwrap_or_else(|e| panic!("control plane: {e}"));
    let client = cp.client();
    api::install_crds(&client, &root().join("manifests/crd.yaml"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    api::create_namespace(&client, "shop", &[], &[])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let inst = json!({
        "apiVersion": "opentelemetry.io/v1alpha1", "kind": "Instrumentation",
        "metadata": {"name": "java", "namespace": "shop"},
        "spec": {"exporter": {"endpoint": "http://before.example:4318"}}
    });
    let r = api::create_instrumentation(&client, "shop", &inst)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 201, "{}", r.body);
    let mut w = Webhook::start_with(
        Path::new(env!("CARGO_BIN_EXE_e2e-otel-injector")),
        &cp.kubeconfig,
        &["--events=false".to_owned()],
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    w.wait_ready(Duration::from_secs(30))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        served_endpoint(&w, "before").await.unwrap(),
        "http://before.example:4318"
    );
    // Lines are batched, up to about 20 ms late: wait for the list's.
    let log = w
        .log_with("store=\"instrumentations\"", Duration::from_secs(10))
        .await;
    let listed = lists(&log, "instrumentations");
    assert_eq!(listed, 1, "{}", w.log());

    // Writes the webhook does not watch move etcd's revision past what its watches have
    // seen; then the API server goes, and the history is compacted.
    for i in 0..5 {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("noise-{i}"), "namespace": "shop"}});
        let r = api::send(
            &client,
            axum::http::Method::POST,
            "/api/v1/namespaces/shop/configmaps",
            Some(&cm),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.status, 201, "{}", r.body);
    }
    cp.kill_apiserver();
    let revision = cp.compact_etcd().await.unwrap_or_else(|e| panic!("{e}"));

    // Away for 4 s: answered from the caches, and ready (nothing it serves can change).
    let away = Instant::now();
    let mut answers = 0;
    while away.elapsed() < Duration::from_secs(4) {
        assert_eq!(
            served_endpoint(&w, &format!("away-{answers}"))
                .await
                .unwrap(),
            "http://before.example:4318"
        );
        let (status, text) = crate::support::webhook::http_get(w.admin, "/readyz")
            .await
            .unwrap();
        assert_eq!(status, 200, "/readyz while the API server is away: {text}");
        answers += 1;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let started_in = cp
        .restart_apiserver()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let back = Instant::now();
    let away_for = away.elapsed();
    // When the API server answers an Instrumentation watch from a compacted resource
    // version sent now (410 Gone, as an ERROR event): the baseline of the same run.
    let baseline = tokio::spawn({
        let client = client.clone();
        async move {
            let r = api::send(
                &client,
                axum::http::Method::GET,
                "/apis/opentelemetry.io/v1alpha1/namespaces/shop/instrumentations?watch=true&resourceVersion=2&timeoutSeconds=30",
                None,
            )
            .await;
            (back.elapsed(), r.map(|r| r.body.to_string()))
        }
    });
    set_endpoint(&client, "http://after.example:4318").await;
    let changed = back.elapsed();
    let mut polls = 0;
    let served = loop {
        polls += 1;
        let endpoint = served_endpoint(&w, &format!("back-{polls}")).await.unwrap();
        if endpoint == "http://after.example:4318" {
            break back.elapsed();
        }
        assert_eq!(endpoint, "http://before.example:4318");
        assert!(
            back.elapsed() < Duration::from_secs(30),
            "the change was not served within 30 s:\n{}",
            w.log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let (expired_after, expired) = baseline.await.unwrap();
    let expired = expired.unwrap_or_else(|e| panic!("{e}"));
    assert!(
        expired.contains("410") || expired.contains("Expired"),
        "a watch from a compacted resource version: {expired}"
    );
    // Lines are batched, up to about 20 ms late.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let log = w.log();
    let relisted = lists(&log, "instrumentations");
    eprintln!(
        "[faults] API server away {:.1?} (etcd compacted at revision {revision}), {answers} \
         reviews answered from the caches meanwhile, /readyz 200 throughout; restarted and \
         ready in {started_in:.1?}; the Instrumentation changed {changed:.0?} after that, and \
         served {} ms after the API server was back; the API server answered a watch from a \
         compacted version sent then (410) {} ms after it was back; instrumentations listed \
         {relisted} times in all",
        away_for,
        served.as_millis(),
        expired_after.as_millis(),
    );
    assert!(
        served <= CONVERGED_WITHIN,
        "the change was served {served:?} after the API server was back (its answer to a \
         fresh watch came after {expired_after:?}):\n{log}"
    );
    // A watch that only lost its connection resumes from its resource version; listing
    // again is what the compaction (410 Gone) makes it do.
    assert!(
        relisted >= 2,
        "the watch did not list again after its history was compacted:\n{log}"
    );
}
