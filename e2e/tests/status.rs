//! The status controller through the real control plane: Deployments whose pods the real
//! controller manager makes (and the garbage collector deletes) are counted in the
//! Instrumentation's status as injected, outdated, skipped or missed, per workload; `kubectl get
//! otelinst` shows the counts; a missing exporter TLS Secret degrades it; of two replicas one
//! holds the Lease and writes, and the other takes over when it dies; 1,000 pods converge in
//! seconds, and the pod watch's memory is measured.
//!
//! The first test's pods ask for injection and the test's webhook records the outcome on
//! them (`otel-injector/status`, `otel-injector/injected`); the others' pods carry the
//! outcome in their template, as the webhook writes it, so that their counts do not depend on
//! the webhook's choices (and the 1,000 pods measure the status controller alone).

mod counts;
mod leases;
mod scale;

use otel_injector::keys::{INJECTED_LABEL, STATUS_ANNOTATION};
use std::time::{Duration, Instant};

use axum::http::Method;
use otel_injector::crd::{Instrumentation, SpecHash};
use serde_json::{Value, json};

use crate::harness::{Env, Options, Rbac};
use crate::support::api::{self, instrumentation_path};
use crate::support::controllers::toleration;
use crate::support::identity::NAMESPACE;
use crate::support::webhook::{self, Webhook};
use crate::workloads::create;

/// The Lease of every status test (the shipped Role grants this name only).
const LEASE: &str = "otel-injector";
/// Short, so that a Lease left held by an earlier test's killed webhook expires soon.
const LEASE_DURATION: &str = "3s";

fn status_args(identity: &str) -> Vec<String> {
    vec![
        "--status=true".into(),
        format!("--lease-identity={identity}"),
        format!("--lease-namespace={NAMESPACE}"),
        format!("--lease-name={LEASE}"),
        format!("--lease-duration={LEASE_DURATION}"),
        "--verify-exporter-tls=true".into(),
    ]
}

/// A webhook with the status controller, alone in the cluster (no other test's webhook runs
/// meanwhile).
async fn start(id: &str) -> Env {
    start_with(id, &[]).await
}

/// [`start`] with further `serve` flags.
async fn start_with(id: &str, extra: &[&str]) -> Env {
    let mut args = status_args(&format!("{id}-a"));
    args.extend(extra.iter().map(|a| a.to_string()));
    Env::start_with(
        id,
        Options {
            rbac: Rbac::Status,
            exclusive: true,
            args,
            ..Options::default()
        },
    )
    .await
}

/// The spec digest of the Instrumentation as stored (what the webhook records on the pods).
async fn spec_hash(env: &Env, ns: &str, name: &str) -> String {
    let stored = get(env, &instrumentation_path(ns, name)).await;
    let inst: Instrumentation = serde_json::from_value(stored).expect("an Instrumentation");
    SpecHash::of(&inst.spec).to_string()
}

pub async fn get(env: &Env, path: &str) -> Value {
    let r = api::send(&env.client, Method::GET, path, None)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 200, "GET {path}: {}", r.body);
    r.body
}

/// A pod template (tolerating the kwok node) whose pods carry the outcome annotation and
/// label the webhook writes.
fn template(app: &str, outcome: &str, injected: bool) -> Value {
    json!({
        "metadata": {
            "labels": {"app": app, INJECTED_LABEL: injected.to_string()},
            "annotations": {STATUS_ANNOTATION: outcome}
        },
        "spec": {
            "containers": [{"name": "app", "image": format!("shop/{app}:2.1.0")}],
            "tolerations": [toleration()]
        }
    })
}

pub async fn deployment(env: &Env, ns: &str, name: &str, replicas: u32, template: Value) {
    create(
        env,
        &format!("/apis/apps/v1/namespaces/{ns}/deployments"),
        &json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": name},
                "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                         "template": template}}),
    )
    .await;
}

async fn merge_patch(env: &Env, path: &str, patch: Value) {
    let r = api::merge_patch(&env.client, path, &patch)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 200, "PATCH {path}: {}", r.body);
}

async fn scale(env: &Env, ns: &str, name: &str, replicas: u32) {
    scale_with(&env.client, ns, name, replicas).await;
}

async fn scale_with(client: &kube::Client, ns: &str, name: &str, replicas: u32) {
    let path = format!("/apis/apps/v1/namespaces/{ns}/deployments/{name}");
    let r = api::merge_patch(client, &path, &json!({"spec": {"replicas": replicas}}))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 200, "PATCH {path}: {}", r.body);
}

/// What the tests compare of a status: the counts, the reasons and the workloads (times
/// left out).
fn counts(status: &Value) -> Value {
    let workloads: Vec<Value> = status["workloads"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|w| {
            json!([
                w["kind"],
                w["name"],
                w["injected"],
                w["outdated"],
                w["skipped"]
            ])
        })
        .collect();
    json!({
        "injected": status["injected"], "outdated": status["outdated"],
        "skipped": status["skipped"], "skippedReasons": status["skippedReasons"],
        "workloads": workloads,
    })
}

/// Waits (at most `limit`) until the Instrumentation's status shows `want` (see [`counts`]);
/// returns the whole status and how long it took.
async fn await_status(
    env: &Env,
    ns: &str,
    name: &str,
    want: Value,
    limit: Duration,
) -> (Value, Duration) {
    let t0 = Instant::now();
    loop {
        let stored = get(env, &instrumentation_path(ns, name)).await;
        let status = stored["status"].clone();
        if counts(&status) == want {
            return (status, t0.elapsed());
        }
        assert!(
            t0.elapsed() < limit,
            "status of {ns}/{name} within {limit:?}: want {want}, have {}\n{}",
            counts(&status),
            env.webhook.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// [`await_status`] with a client only (also the policy tests': the status counts their pods).
pub async fn await_status_with(
    client: &kube::Client,
    ns: &str,
    name: &str,
    want: Value,
    limit: Duration,
) {
    let t0 = Instant::now();
    let path = instrumentation_path(ns, name);
    loop {
        let r = api::send(client, Method::GET, &path, None)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        if counts(&r.body["status"]) == want {
            return;
        }
        assert!(
            t0.elapsed() < limit,
            "status of {ns}/{name} within {limit:?}: want {want}, have {}",
            counts(&r.body["status"])
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub fn want(injected: u64, outdated: u64, skipped: Value, workloads: Value) -> Value {
    let total: u64 = skipped
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["pods"].as_u64())
        .sum();
    json!({"injected": injected, "outdated": outdated, "skipped": total,
           "skippedReasons": if total == 0 { Value::Null } else { skipped },
           "workloads": workloads})
}

/// The value of one sample of the metrics text (`name{labels} value`), 0 when absent.
fn metric(text: &str, series: &str) -> f64 {
    webhook::metric(text, series).unwrap_or(0.0)
}

/// The pods of the whole cluster (other tests' too) that carry the injected label and are
/// not terminating: what the status controller's watch holds.
async fn labeled_pods(client: &kube::Client) -> f64 {
    let r = api::send(
        client,
        Method::GET,
        &format!("/api/v1/pods?labelSelector={INJECTED_LABEL}"),
        None,
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 200, "{}", r.body);
    r.body["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .count() as f64
}

/// Waits (at most 10 s: the watch may still be taking another test's deletions) until the
/// webhook's watch holds as many pods as the cluster has labeled ones (other tests' too).
async fn await_watched(client: &kube::Client, w: &Webhook) {
    let t0 = Instant::now();
    loop {
        let (watched, labeled) = (
            metric(&w.metrics().await, "otel_injector_status_pods_watched"),
            labeled_pods(client).await,
        );
        if watched == labeled {
            return;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "pods watched {watched}, labeled in the cluster {labeled}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

const WRITES_OK: &str = "otel_injector_status_writes_total{result=\"success\"}";
const LEADER: &str = "otel_injector_leader";

/// The replica's successful status writes, once at least `n`: a write is counted when the
/// API server's answer reaches it, just after the API server stored the status the test
/// already read (reading the counter at once lost that race in a run of the repeated suite).
async fn writes_at_least(w: &Webhook, n: f64) -> f64 {
    let t0 = Instant::now();
    loop {
        let writes = metric(&w.metrics().await, WRITES_OK);
        if writes >= n {
            return writes;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "{writes} status writes counted, not {n}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
