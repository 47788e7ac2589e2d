//! `--agent-delivery auto` against real API servers: the shared 1.37 one (the `ImageVolume`
//! gate is GA and on), read through `/metrics` with the permission of
//! `manifests/components/agent-delivery-auto` or, without it, by the version rule; and a second
//! API server of the same binary that emulates 1.35 (`--emulated-version=1.35`, where the
//! gate can still be turned off) with `--feature-gates=ImageVolume=false`, where `auto` must
//! fall back to init containers and the pods be accepted.

use otel_injector::keys::INJECT_JAVA;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::harness::{Env, JAVA_INIT, Options, Rbac, SCOPE_LABEL, endpoint_spec, is_injected, pod};
use crate::support::api::{self, Registration};
use crate::support::controlplane::ControlPlane;
use crate::support::identity;
use crate::support::tools::root;
use crate::support::webhook::Webhook;

/// The series of the webhook's `/metrics` that says what `auto` decided, and from which
/// signal.
fn auto_series(metrics: &str) -> Vec<&str> {
    metrics
        .lines()
        .filter(|l| l.starts_with("otel_injector_apiserver_image_volumes{"))
        .collect()
}

/// Asserts the stored pod got the Java agent as an image volume (true) or by an init
/// container (false).
fn assert_delivery(stored: &Value, image_volume: bool) {
    assert!(is_injected(stored), "{stored}");
    let volume = stored["spec"]["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|v| v["name"] == JAVA_INIT)
        .unwrap_or_else(|| panic!("no volume {JAVA_INIT}: {stored}"));
    if image_volume {
        assert!(stored["spec"]["initContainers"].is_null(), "{stored}");
        assert!(volume["image"]["reference"].is_string(), "{volume}");
    } else {
        let inits: Vec<&Value> = stored["spec"]["initContainers"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| &c["name"])
            .collect();
        assert_eq!(inits, [JAVA_INIT], "{stored}");
        assert!(volume["emptyDir"].is_object(), "{volume}");
        assert!(volume.get("image").is_none(), "{volume}");
    }
}

/// A Java pod created for real in an Env's namespace (once its dry run is injected).
async fn created_java_pod(env: &Env, ns: &str, name: &str) -> Value {
    let p = pod(name, &[(INJECT_JAVA, "true")]);
    env.until_dry_run(ns, &p, "injection", |r| is_injected(&r.body))
        .await;
    env.create(ns, &p).await;
    env.stored(ns, name).await
}

#[tokio::test]
async fn auto_reads_the_gate_from_the_api_servers_metrics_and_uses_image_volumes() {
    let env = Env::start_with(
        "auto-gate",
        Options {
            rbac: Rbac::AgentDeliveryAuto,
            args: vec!["--agent-delivery=auto".into()],
            ..Options::default()
        },
    )
    .await;
    assert_eq!(
        auto_series(&env.webhook.metrics().await),
        ["otel_injector_apiserver_image_volumes{source=\"feature_gate\"} 1"]
    );
    let ns = env.namespace("shop", &[]).await;
    env.await_webhook(&ns).await;
    env.instrumentation(&ns, "java", endpoint_spec("http://c:4318"))
        .await;
    let stored = created_java_pod(&env, &ns, "gate-on").await;
    assert_delivery(&stored, true);
}

#[tokio::test]
async fn auto_without_the_metrics_permission_follows_the_version() {
    let env = Env::start_with(
        "auto-version",
        Options {
            args: vec!["--agent-delivery=auto".into()],
            ..Options::default()
        },
    )
    .await;
    assert_eq!(
        auto_series(&env.webhook.metrics().await),
        ["otel_injector_apiserver_image_volumes{source=\"version\"} 1"]
    );
    let refused = "the API server refused GET /metrics (HTTP 403): grant get on the non-resource \
                   URL /metrics (manifests/components/agent-delivery-auto)";
    let log = env.webhook.log_with(refused, Duration::from_secs(5)).await;
    assert!(log.contains(refused), "{log}");
    let ns = env.namespace("shop", &[]).await;
    env.await_webhook(&ns).await;
    env.instrumentation(&ns, "java", endpoint_spec("http://c:4318"))
        .await;
    let stored = created_java_pod(&env, &ns, "version-rule").await;
    assert_delivery(&stored, true);
}

#[tokio::test]
async fn auto_falls_back_to_init_containers_where_the_gate_is_off() {
    // ImageVolume is GA and locked on from 1.36: only an API server that emulates an
    // older release can turn it off.
    let cp = ControlPlane::start_with(&[
        "--emulated-version=1.35",
        "--feature-gates=ImageVolume=false",
    ])
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let client = cp.client();
    let version = api::send(&client, axum::http::Method::GET, "/version", None)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        (&version.body["minor"], &version.body["emulationMinor"]),
        (&json!("37"), &json!("35")),
        "{}",
        version.body
    );
    api::install_crds(&client, &root().join("manifests/crd.yaml"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));

    // The gate is really off: a pod that brings its own image volume is stored without it
    // and without its mount (an agent delivered so would simply be missing).
    let own = json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "own-image-volume"},
        "spec": {"containers": [{"name": "app", "image": "shop/app:1",
                                 "volumeMounts": [{"name": "agent", "mountPath": "/agent"}]}],
                 "volumes": [{"name": "agent", "image": {"reference": "shop/agent:1"}}]}
    });
    let r = api::create_pod(&client, "default", &own, true)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 201, "{}", r.body);
    assert!(r.body["spec"]["volumes"].is_null(), "{}", r.body);
    assert!(
        r.body["spec"]["containers"][0]["volumeMounts"].is_null(),
        "{}",
        r.body
    );

    let id = identity::issue(
        &cp,
        "e2e-agent-delivery-auto",
        &[
            "base/otel-injector.yaml",
            "components/agent-delivery-auto/rbac.yaml",
        ],
        &cp.dir.join("identities"),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let mut webhook = Webhook::start_with(
        Path::new(env!("CARGO_BIN_EXE_e2e-otel-injector")),
        &id.kubeconfig,
        &["--agent-delivery=auto".into()],
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    webhook
        .wait_ready(Duration::from_secs(30))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        auto_series(&webhook.metrics().await),
        ["otel_injector_apiserver_image_volumes{source=\"feature_gate\"} 0"]
    );
    let scope = "auto-gate-off";
    let config = api::webhook_configuration(&Registration {
        manifest: &api::webhook_manifest_path(),
        name: "e2e-auto-gate-off",
        url: &webhook.url(),
        ca_pem: &webhook.certs.ca_cert,
        // The pod must not be created without the webhook's answer.
        failure_policy: "Fail",
        timeout_seconds: 5,
        scope: Some((SCOPE_LABEL, scope)),
    })
    .unwrap_or_else(|e| panic!("{e}"));
    api::create_webhook_configuration(&client, &config)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let ns = "shop";
    api::create_namespace(&client, ns, &[(SCOPE_LABEL, scope)], &[])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let inst = json!({
        "apiVersion": "opentelemetry.io/v1alpha1", "kind": "Instrumentation",
        "metadata": {"name": "java", "namespace": ns}, "spec": endpoint_spec("http://c:4318")
    });
    let r = api::create_instrumentation(&client, ns, &inst)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 201, "{}", r.body);

    // The configuration and the webhook's cache settle: dry runs until one is injected.
    let p = pod("gate-off", &[(INJECT_JAVA, "true")]);
    let t0 = Instant::now();
    loop {
        let r = api::create_pod(&client, ns, &p, true)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        if r.status == 201 && is_injected(&r.body) {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "no injected dry run in 30 s: HTTP {} {}\n{}",
            r.status,
            r.body,
            webhook.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let r = api::create_pod(&client, ns, &p, false)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 201, "{}", r.body);
    assert!(r.warnings.is_empty(), "{:?}", r.warnings);
    let stored = api::get_pod(&client, ns, "gate-off")
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .expect("stored");
    assert_delivery(&stored, false);
}
