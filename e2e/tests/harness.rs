//! The e2e test harness.
//!
//! One control plane (etcd + kube-apiserver) is shared by all tests of this process; it is
//! started by the first test that needs it, with `manifests/crd.yaml` installed and its
//! conversion webhook served by one shared `otel-injector serve` process. Each test
//! gets its own [`Env`]: its own `otel-injector serve` process, run as a ServiceAccount
//! with the RBAC of the shipped manifests ([`Rbac`]), and its own
//! MutatingWebhookConfiguration (built from `manifests/base/webhook.yaml` or, for the targeted
//! variant, `manifests/components/targeted/webhook-targeted.yaml`), whose `namespaceSelector` only matches
//! namespaces labeled `e2e.otel-injector.io/env=<id>`, and the test creates its namespaces
//! with that label. So tests running side by side never see each other's webhooks, pods or
//! counters. The shared servers die with the test process (see `support/process.rs`), also
//! when it is killed.

mod controlplane;
mod expected;
mod objects;
mod rbac;
mod webhook;

pub use controlplane::{CLUSTER_WIDE, cluster};
pub use expected::{assert_stored_as_expected, engine_result};
pub use rbac::{Rbac, Variant, identity};
pub use webhook::{Options, webhook_binary, webhook_ready};

use std::time::Duration;

use kube::Client;
use serde_json::{Value, json};

use crate::support::identity::Identity;
use crate::support::webhook::Webhook;
use otel_injector::keys::{INJECTED_ANNOTATION, INJECTED_LABEL, OPT_OUT_LABEL, STATUS_ANNOTATION};

pub const SCOPE_LABEL: &str = "e2e.otel-injector.io/env";

/// The stored pod's annotations less `otel-injector/status`, after checking that the status
/// starts with `status_prefix` and the `otel-injector/injected` label is `label`.
pub fn annotations_less_status(stored: &Value, status_prefix: &str, label: &str) -> Value {
    let mut annotations = stored["metadata"]["annotations"].clone();
    let status = annotations
        .as_object_mut()
        .and_then(|a| a.remove(STATUS_ANNOTATION))
        .unwrap_or_default();
    assert!(
        status
            .as_str()
            .is_some_and(|s| s.starts_with(status_prefix)),
        "{STATUS_ANNOTATION}: {status}"
    );
    assert_eq!(stored["metadata"]["labels"][INJECTED_LABEL], label);
    annotations
}
pub const JAVA_INIT: &str = "opentelemetry-auto-instrumentation-java";

/// One test's webhook process, its webhook configuration and its namespaces.
pub struct Env {
    pub id: String,
    pub client: Client,
    pub webhook: Webhook,
    /// The `serve` flags the webhook got beyond the harness's own (see [`Env::engine_config`]).
    pub args: Vec<String>,
    pub variant: Variant,
    /// Who the webhook is to the API server.
    pub identity: Identity,
    /// The name of the registered MutatingWebhookConfiguration.
    pub configuration: String,
    /// Declared after `webhook`: the webhook is killed before the locks are released.
    _labeling: Option<tokio::sync::MutexGuard<'static, ()>>,
    _cluster_wide: ClusterWide,
}

/// [`CLUSTER_WIDE`], shared or exclusive.
enum ClusterWide {
    Shared(#[allow(dead_code)] tokio::sync::RwLockReadGuard<'static, ()>),
    Exclusive(#[allow(dead_code)] tokio::sync::RwLockWriteGuard<'static, ()>),
}

/// The `p`th percentile of `sorted`, in milliseconds.
pub fn percentile(sorted: &[Duration], p: usize) -> f64 {
    sorted[(sorted.len() * p / 100).min(sorted.len() - 1)].as_secs_f64() * 1e3
}

/// A one-container pod (`app`, image `shop/checkout:1.4.2`, env `PORT=8080`) with these
/// annotations (none: no `annotations` key at all).
pub fn pod(name: &str, annotations: &[(&str, &str)]) -> Value {
    let mut p = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "app", "image": "shop/checkout:1.4.2",
                                 "env": [{"name": "PORT", "value": "8080"}]}]}
    });
    if !annotations.is_empty() {
        p["metadata"]["annotations"] = annotations
            .iter()
            .map(|(k, v)| (k.to_string(), json!(v)))
            .collect::<serde_json::Map<_, _>>()
            .into();
    }
    p
}

/// [`pod`] with these labels.
pub fn pod_labeled(name: &str, annotations: &[(&str, &str)], labels: &[(&str, &str)]) -> Value {
    let mut p = pod(name, annotations);
    p["metadata"]["labels"] = labels
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect::<serde_json::Map<_, _>>()
        .into();
    p
}

/// The lines of the decision counters (`otel_injector_injections_total`,
/// `otel_injector_not_injected_total`) in a `/metrics` text.
pub fn decision_counters(metrics: &str) -> Vec<String> {
    metrics
        .lines()
        .filter(|l| {
            l.starts_with("otel_injector_injections_total")
                || l.starts_with("otel_injector_not_injected_total")
        })
        .map(str::to_owned)
        .collect()
}

/// True when the returned or stored pod carries the injection marker.
pub fn is_injected(pod: &Value) -> bool {
    pod["metadata"]["annotations"][INJECTED_ANNOTATION].is_string()
}

/// Asserts that `stored` is `sent` as far as injection goes: same annotations (but the
/// `otel-injector/status` of a skipped pod), no init containers or volumes added, each
/// container's env and mounts as sent.
pub fn assert_unchanged(stored: &Value, sent: &Value) {
    let norm = |v: &Value| if v.is_null() { json!({}) } else { v.clone() };
    // A pod that asked and was skipped carries its outcome (e2e/tests/outcome.rs checks it).
    let mut stored_annotations = norm(&stored["metadata"]["annotations"]);
    if let Some(a) = stored_annotations.as_object_mut() {
        a.remove(STATUS_ANNOTATION);
    }
    assert_eq!(
        stored_annotations,
        norm(&sent["metadata"]["annotations"]),
        "annotations changed: {stored}"
    );
    assert!(
        stored["spec"]["initContainers"].is_null(),
        "init containers added: {stored}"
    );
    assert!(
        stored["spec"]["volumes"].is_null(),
        "volumes added: {stored}"
    );
    let sent_cs = sent["spec"]["containers"].as_array().unwrap();
    let stored_cs = stored["spec"]["containers"].as_array().unwrap();
    assert_eq!(stored_cs.len(), sent_cs.len());
    for (s, o) in stored_cs.iter().zip(sent_cs) {
        assert_eq!(s["env"], o["env"], "env of {} changed", o["name"]);
        assert_eq!(
            s["volumeMounts"], o["volumeMounts"],
            "mounts of {} changed",
            o["name"]
        );
    }
}

/// Asserts `actual` equals `expected` except for keys listed in `defaults` that only
/// `actual` has (fields the apiserver defaults on storage, e.g. `imagePullPolicy`).
pub fn assert_eq_but_defaults(actual: &Value, expected: &Value, defaults: &[&str], what: &str) {
    let (Some(a), Some(e)) = (actual.as_object(), expected.as_object()) else {
        panic!("{what}: not objects: {actual} vs {expected}");
    };
    for (k, v) in e {
        assert_eq!(a.get(k), Some(v), "{what}: field {k}");
    }
    for k in a.keys() {
        assert!(
            e.contains_key(k) || defaults.contains(&k.as_str()),
            "{what}: unexpected field {k}: {}",
            a[k]
        );
    }
}

/// The env entries of container `i` with this name.
pub fn env_named<'a>(pod: &'a Value, i: usize, name: &str) -> Vec<&'a Value> {
    pod["spec"]["containers"][i]["env"]
        .as_array()
        .map(|env| env.iter().filter(|e| e["name"] == name).collect())
        .unwrap_or_default()
}

/// The value of env var `name` of container `i` (must be present exactly once).
pub fn env_value<'a>(pod: &'a Value, i: usize, name: &str) -> &'a str {
    let found = env_named(pod, i, name);
    assert_eq!(found.len(), 1, "{name} in {}", pod["spec"]["containers"][i]);
    found[0]["value"].as_str().unwrap_or("")
}

/// An Instrumentation spec with just an exporter endpoint.
pub fn endpoint_spec(endpoint: &str) -> Value {
    json!({"exporter": {"endpoint": endpoint}})
}

/// The label is the webhook's, by server-side apply: the managed fields show field manager
/// `otel-injector` (operation `Apply`) owning it.
pub fn assert_label_applied_by_the_webhook(namespace: &Value) {
    let key = format!("f:{}", OPT_OUT_LABEL);
    let owners: Vec<&Value> = namespace["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["fieldsV1"]["f:metadata"]["f:labels"].get(&key).is_some())
        .collect();
    assert_eq!(owners.len(), 1, "owners of {key}: {owners:?}");
    assert_eq!(owners[0]["manager"], "otel-injector", "{:?}", owners[0]);
    assert_eq!(owners[0]["operation"], "Apply", "{:?}", owners[0]);
}
