//! The e2e test harness.
//!
//! One control plane (etcd + kube-apiserver) is shared by all tests of this process; it is
//! started by the first test that needs it, with `manifests/crd.yaml` installed. Each test
//! gets its own [`Env`]: its own `otel-injector serve` process and its own
//! MutatingWebhookConfiguration (built from `manifests/webhook.yaml`), whose
//! `namespaceSelector` only matches namespaces labeled `e2e.otel-injector.io/env=<id>`, and
//! the test creates its namespaces with that label. So tests running side by side never see
//! each other's webhooks, pods or counters. The shared servers die with the test process
//! (see `support/process.rs`), also when it is killed.

use std::path::Path;
use std::time::{Duration, Instant};

use kube::Client;
use serde_json::{Value, json};
use tokio::sync::OnceCell;

use crate::support::api::{self, Registration, Response};
use crate::support::controlplane::{ControlPlane, root};
use crate::support::webhook::{Requests, Webhook};

pub const SCOPE_LABEL: &str = "e2e.otel-injector.io/env";
pub const INJECT_JAVA: &str = "instrumentation.opentelemetry.io/inject-java";
pub const INJECTED: &str = otel_injector::inject::INJECTED_ANNOTATION;
pub const JAVA_INIT: &str = "opentelemetry-auto-instrumentation-java";

static SHARED: OnceCell<Result<ControlPlane, String>> = OnceCell::const_new();

/// The control plane shared by this test process (started on first use).
pub async fn cluster() -> &'static ControlPlane {
    let r = SHARED
        .get_or_init(|| async {
            let t0 = Instant::now();
            let cp = ControlPlane::start().await?;
            let client = cp.client();
            api::install_crds(&client, &root().join("manifests/crd.yaml")).await?;
            eprintln!(
                "[e2e] control plane at {} ready in {:?} (binaries found in {:?}), CRD \
                 established after {:?}; dir {}",
                cp.url,
                cp.timings.ready,
                cp.timings.binaries,
                t0.elapsed(),
                cp.dir.display()
            );
            Ok(cp)
        })
        .await;
    match r {
        Ok(cp) => {
            if let Err(e) = cp.check_alive() {
                panic!("the shared control plane died: {e}");
            }
            cp
        }
        Err(e) => panic!("the e2e control plane could not start: {e}"),
    }
}

/// One test's webhook process, its webhook configuration and its namespaces.
pub struct Env {
    pub id: String,
    pub client: Client,
    pub webhook: Webhook,
}

impl Env {
    /// A webhook registered with `failurePolicy: Ignore`.
    pub async fn start(id: &str) -> Env {
        Self::with_failure_policy(id, "Ignore").await
    }

    /// Starts `otel-injector serve` (waits for `/readyz`: caches synced) and registers it as
    /// `e2e-<id>-a-otel-injector`, scoped to namespaces labeled with `id`.
    pub async fn with_failure_policy(id: &str, failure_policy: &str) -> Env {
        let cp = cluster().await;
        let client = cp.client();
        let mut webhook = Webhook::start(
            Path::new(env!("CARGO_BIN_EXE_otel-injector")),
            &cp.kubeconfig,
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        webhook
            .wait_ready(Duration::from_secs(30))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let config = api::webhook_configuration(&Registration {
            name: &format!("e2e-{id}-a-otel-injector"),
            url: &webhook.url(),
            ca_pem: &webhook.certs.ca_cert,
            failure_policy,
            timeout_seconds: 5,
            scope: Some((SCOPE_LABEL, id)),
        })
        .unwrap_or_else(|e| panic!("{e}"));
        api::create_webhook_configuration(&client, &config)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        Env {
            id: id.to_owned(),
            client,
            webhook,
        }
    }

    /// Creates namespace `<id>-<suffix>` in this test's scope.
    pub async fn namespace(&self, suffix: &str, annotations: &[(&str, &str)]) -> String {
        let name = format!("{}-{suffix}", self.id);
        api::create_namespace(&self.client, &name, &[(SCOPE_LABEL, &self.id)], annotations)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        name
    }

    /// Webhook configurations take effect asynchronously: creates (dry run) a marker pod
    /// that asks for injection until the webhook's request counter moves.
    pub async fn await_webhook(&self, ns: &str) {
        let before = self.webhook.requests().await.total();
        let marker = pod("marker", &[(INJECT_JAVA, "e2e-marker")]);
        let t0 = Instant::now();
        loop {
            let r = api::create_pod(&self.client, ns, &marker, true)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(r.status, 201, "marker pod: {}", r.body);
            if self.webhook.requests().await.total() > before {
                return;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "the webhook configuration for {ns} did not take effect within 30 s"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Creates an Instrumentation (must succeed).
    pub async fn instrumentation(&self, ns: &str, name: &str, spec: Value) {
        let inst = json!({
            "apiVersion": "opentelemetry.io/v1alpha1", "kind": "Instrumentation",
            "metadata": {"name": name, "namespace": ns}, "spec": spec
        });
        let r = api::create_instrumentation(&self.client, ns, &inst)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            r.status, 201,
            "create Instrumentation {ns}/{name}: {}",
            r.body
        );
    }

    /// Creates a pod for real; it must be accepted.
    pub async fn create(&self, ns: &str, pod: &Value) -> Response {
        let r = api::create_pod(&self.client, ns, pod, false)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.status, 201, "create pod in {ns}: {}", r.body);
        r
    }

    /// Creates a pod with `dryRun=All`; it must be accepted.
    pub async fn dry_run(&self, ns: &str, pod: &Value) -> Response {
        let r = api::create_pod(&self.client, ns, pod, true)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.status, 201, "dry-run pod in {ns}: {}", r.body);
        r
    }

    /// The pod as stored (GET); it must exist.
    pub async fn stored(&self, ns: &str, name: &str) -> Value {
        api::get_pod(&self.client, ns, name)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .unwrap_or_else(|| panic!("pod {ns}/{name} is not stored"))
    }

    /// The webhook's caches fill from watches: dry-runs `pod` until `ready` holds for the
    /// answer (bounded), so that the real case that follows sees a settled cache.
    pub async fn until_dry_run(
        &self,
        ns: &str,
        pod: &Value,
        what: &str,
        ready: impl Fn(&Response) -> bool,
    ) -> Response {
        let t0 = Instant::now();
        let calls_before = self.webhook.requests().await.total();
        loop {
            let r = self.dry_run(ns, pod).await;
            if ready(&r) {
                return r;
            }
            if t0.elapsed() > Duration::from_secs(20) {
                let calls = self.webhook.requests().await.total() - calls_before;
                panic!(
                    "{what}: not seen within 20 s in namespace {ns}; the webhook was called \
                     {calls} times for these dry-runs (0 means the apiserver never sent the \
                     pod: check the matchConditions of {}). Last answer: warnings {:?}, \
                     object {}",
                    api::webhook_manifest_path().display(),
                    r.warnings,
                    r.body
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub async fn requests(&self) -> Requests {
        self.webhook.requests().await
    }
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

/// True when the returned or stored pod carries the injection marker.
pub fn is_injected(pod: &Value) -> bool {
    pod["metadata"]["annotations"][INJECTED].is_string()
}

/// Asserts that `stored` is `sent` as far as injection goes: same annotations, no init
/// containers or volumes added, each container's env and mounts as sent.
pub fn assert_unchanged(stored: &Value, sent: &Value) {
    let norm = |v: &Value| if v.is_null() { json!({}) } else { v.clone() };
    assert_eq!(
        norm(&stored["metadata"]["annotations"]),
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
