//! What a replica holds in cluster mode: its resident memory with 10,000 namespaces (every
//! tenth annotated for injection) and 1,000 Instrumentations in the real API server. A
//! measurement, so `#[ignore]`d; run it alone (it leaves the objects in the suite's control
//! plane), in release for the product's numbers:
//!
//! ```sh
//! cargo test --release -p otel-injector-e2e --test e2e -- --ignored --nocapture memory
//! ```
//! `E2E_MEMORY_NAMESPACES` sets the namespaces (default 10000; one Instrumentation in every
//! tenth), `E2E_WEBHOOK_BIN` the `otel-injector` binary measured (default: this build's).
//!
//! One webhook is started first and follows the objects as they are created (watch events);
//! a second is started once they all exist (the initial list, as after a restart). The
//! objects look as `kubectl apply` leaves them: a `last-applied-configuration` annotation
//! and managed fields, plus a few labels and annotations of their own. `pods.rs`: the search
//! for missed pods at 100,000 pods.

mod pods;

use std::time::{Duration, Instant};

use futures::StreamExt as _;
use otel_injector::keys::INJECT_JAVA;
use serde_json::{Value, json};

use crate::harness::*;
use crate::support::api;
use crate::support::process::{mib, usage};
use crate::support::webhook::Webhook;

/// The object as `kubectl apply` stores it: with its own last-applied copy.
pub(crate) fn applied(mut object: Value) -> Value {
    let copy = object.to_string();
    object["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] =
        json!(copy);
    object
}

fn namespace(i: usize) -> Value {
    let name = format!("mem-{i:05}");
    let mut annotations = json!({"owner": format!("team-{}@example.com", i % 97)});
    if i.is_multiple_of(10) {
        annotations[INJECT_JAVA] = json!("true");
    }
    applied(json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {
            "name": name,
            "labels": {"team": format!("team-{}", i % 97), "tier": "apps"},
            "annotations": annotations,
        }
    }))
}

pub(crate) fn instrumentation(ns: &str) -> Value {
    applied(json!({
        "apiVersion": "opentelemetry.io/v1alpha1", "kind": "Instrumentation",
        "metadata": {"name": "default", "namespace": ns},
        "spec": {
            "exporter": {"endpoint": "http://otel-collector.observability.svc:4318"},
            "propagators": ["tracecontext", "baggage"],
            "sampler": {"type": "parentbased_traceidratio", "argument": "0.25"},
            "env": [{"name": "OTEL_LOGS_EXPORTER", "value": "otlp"}],
            "resource": {"addK8sUIDAttributes": true},
            "java": {"image": "ghcr.io/open-telemetry/opentelemetry-operator/autoinstrumentation-java:2.30.0"},
            "python": {"image": "ghcr.io/open-telemetry/opentelemetry-operator/autoinstrumentation-python:0.59b0"},
            "nodejs": {"image": "ghcr.io/open-telemetry/opentelemetry-operator/autoinstrumentation-nodejs:0.67.0"}
        }
    }))
}

/// Creates every object, 32 requests at a time.
pub(crate) async fn create_all(client: &kube::Client, what: &str, items: Vec<(String, Value)>) {
    let t0 = Instant::now();
    let n = items.len();
    let results: Vec<Result<(), String>> = futures::stream::iter(items)
        .map(|(path, body)| async move {
            let r = api::send(client, axum::http::Method::POST, &path, Some(&body)).await?;
            match r.status {
                201 | 409 => Ok(()),
                s => Err(format!("POST {path}: HTTP {s}: {}", r.message())),
            }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    for r in results {
        r.unwrap_or_else(|e| panic!("{e}"));
    }
    eprintln!("[memory] created {n} {what} in {:?}", t0.elapsed());
}

/// Waits until the webhook's store holds at least `want` objects.
async fn await_store(webhook: &Webhook, store: &str, want: usize) {
    let series = format!("otel_injector_store_objects{{store=\"{store}\"}} ");
    let until = Instant::now() + Duration::from_secs(300);
    loop {
        let text = webhook.metrics().await;
        let have: usize = text
            .lines()
            .find_map(|l| l.strip_prefix(&series))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        if have >= want {
            return;
        }
        assert!(
            Instant::now() < until,
            "{store}: {have} of {want} after 300 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// (VmRSS, VmHWM) in bytes once the process has settled (after the allocator returned what
/// it frees).
async fn settled_rss(webhook: &Webhook) -> (u64, u64) {
    tokio::time::sleep(Duration::from_secs(2)).await;
    let u = usage(webhook.pid().expect("webhook running"));
    (u.rss, u.peak)
}

#[tokio::test]
#[ignore = "a measurement: run alone, see the module docs"]
async fn memory_with_many_namespaces_and_instrumentations() {
    let namespaces: usize = std::env::var("E2E_MEMORY_NAMESPACES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let binary = webhook_binary();
    let cp = cluster().await;
    let client = cp.client();
    // The product's defaults: the status controller and its search for missed pods on.
    let id = identity(Rbac::Missed).await;
    let defaults = ["--status=true".to_owned()];

    let mut first = Webhook::start_with(&binary, &id.kubeconfig, &defaults)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    first
        .wait_ready(Duration::from_secs(30))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let base_ns = {
        let text = first.metrics().await;
        text.lines()
            .find_map(|l| l.strip_prefix("otel_injector_store_objects{store=\"namespaces\"} "))
            .and_then(|v| v.trim().parse::<usize>().ok())
            .unwrap_or(0)
    };
    let at_rest = settled_rss(&first).await;

    create_all(
        &client,
        "namespaces",
        (0..namespaces)
            .map(|i| ("/api/v1/namespaces".to_owned(), namespace(i)))
            .collect(),
    )
    .await;
    await_store(&first, "namespaces", base_ns + namespaces).await;
    let with_namespaces = settled_rss(&first).await;

    let insts: Vec<(String, Value)> = (0..namespaces)
        .step_by(10)
        .map(|i| {
            let ns = format!("mem-{i:05}");
            (
                format!("/apis/opentelemetry.io/v1alpha1/namespaces/{ns}/instrumentations"),
                instrumentation(&ns),
            )
        })
        .collect();
    let n_insts = insts.len();
    create_all(&client, "Instrumentations", insts).await;
    await_store(&first, "instrumentations", n_insts).await;
    let with_both = settled_rss(&first).await;

    // A replica (re)started now lists everything at once.
    let started = Instant::now();
    let mut second = Webhook::start_with(&binary, &id.kubeconfig, &defaults)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    second
        .wait_ready(Duration::from_secs(120))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let ready_after = started.elapsed();
    await_store(&second, "namespaces", base_ns + namespaces).await;
    await_store(&second, "instrumentations", n_insts).await;
    let restarted = settled_rss(&second).await;

    let per_ns = with_namespaces.0.saturating_sub(at_rest.0) as f64 / namespaces as f64;
    let per_inst = with_both.0.saturating_sub(with_namespaces.0) as f64 / n_insts as f64;
    eprintln!("[memory] binary {}", binary.display());
    eprintln!(
        "[memory] followed by watch: at rest {:.1} MiB; + {namespaces} namespaces {:.1} MiB ({per_ns:.0} B each); + {n_insts} Instrumentations {:.1} MiB ({per_inst:.0} B each); peak {:.1} MiB",
        mib(at_rest.0),
        mib(with_namespaces.0),
        mib(with_both.0),
        mib(with_both.1)
    );
    eprintln!(
        "[memory] started with everything present: ready after {ready_after:?}; RSS {:.1} MiB, peak {:.1} MiB",
        mib(restarted.0),
        mib(restarted.1)
    );
    // The request path still works on the full caches.
    let review = json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "mem-1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "mem-00010", "operation": "CREATE",
            "object": pod("p", &[])
        }
    });
    let (status, answer) = second
        .post_review(&review)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer["response"]["patchType"], "JSONPatch",
        "a pod in an annotated namespace with an Instrumentation is injected: {answer}"
    );
}
