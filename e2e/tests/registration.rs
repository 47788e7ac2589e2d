//! The check of the registered webhook configuration (`--check-registration`), through a real
//! API server of its own (the configuration is named `otel-injector`, as installed): with
//! the install's configuration nothing differs and the Instrumentation says `Registered`;
//! its failurePolicy changed, its caBundle replaced by another CA's, then the object deleted,
//! each is named by the gauge and by the condition, with the RBAC of
//! `components/registration-check`.

use std::time::{Duration, Instant};

use axum::http::Method;
use otel_injector::certs;
use serde_json::{Value, json};

use crate::harness::{endpoint_spec, webhook_ready};
use crate::support::api::{self, Registration};
use crate::support::controlplane::ControlPlane;
use crate::support::identity::{self, NAMESPACE};
use crate::support::webhook::{Webhook, metric};

const PATH: &str =
    "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/otel-injector";

/// The drift gauge's aspects at 1, sorted.
async fn drift(webhook: &Webhook) -> Vec<String> {
    let text = webhook.metrics().await;
    let mut on: Vec<String> = ["missing", "rules", "ca_bundle", "failure_policy"]
        .into_iter()
        .filter(|a| {
            metric(
                &text,
                &format!("otel_injector_registration_drift{{aspect=\"{a}\"}}"),
            ) == Some(1.0)
        })
        .map(String::from)
        .collect();
    on.sort();
    on
}

/// The Instrumentation's `Registered` condition: (status, message).
async fn registered(cp: &ControlPlane) -> Option<(String, String)> {
    let inst = api::get_instrumentation(&cp.client(), "shop", "java").await;
    inst["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Registered")
        .map(|c| {
            (
                c["status"].as_str().unwrap_or("").to_owned(),
                c["message"].as_str().unwrap_or("").to_owned(),
            )
        })
}

/// Waits until the gauge names `aspects` and the condition has `status` with a message
/// containing `says`.
async fn until(cp: &ControlPlane, webhook: &Webhook, aspects: &[&str], status: &str, says: &str) {
    let t0 = Instant::now();
    loop {
        let (d, c) = (drift(webhook).await, registered(cp).await);
        if d == aspects
            && c.as_ref()
                .is_some_and(|(s, m)| s == status && m.contains(says))
        {
            return;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "drift {aspects:?} and Registered={status} ({says}) within 30 s; have {d:?}, {c:?}\n{}",
            webhook.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn patch(cp: &ControlPlane, body: &Value) {
    let r = api::send(&cp.client(), Method::GET, PATH, None)
        .await
        .unwrap();
    let mut config = r.body;
    for entry in config["webhooks"].as_array_mut().expect("webhooks") {
        for (k, v) in body.as_object().unwrap() {
            if k == "caBundle" {
                entry["clientConfig"]["caBundle"] = v.clone();
            } else {
                entry[k] = v.clone();
            }
        }
    }
    let r = api::send(&cp.client(), Method::PUT, PATH, Some(&config))
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
}

#[tokio::test]
async fn a_changed_or_deleted_webhook_configuration_is_named_by_the_gauge_and_the_condition() {
    let cp = ControlPlane::with_crd(&[]).await;
    let client = cp.client();
    let id = identity::issue(
        &cp,
        "e2e-registration",
        &[
            "base/otel-injector.yaml",
            "components/status/rbac.yaml",
            "components/registration-check/rbac.yaml",
        ],
        &cp.dir.join("identities"),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let mut webhook = webhook_ready(
        &id.kubeconfig,
        &[
            "--status=true",
            "--events=false",
            "--check-registration=true",
            "--registration-failure-policy=Ignore",
            "--registration-check-interval=500ms",
            "--lease-name=otel-injector",
            &format!("--lease-namespace={NAMESPACE}"),
            "--lease-identity=registration-a",
            "--lease-duration=3s",
        ]
        .map(String::from),
    )
    .await;
    api::create_namespace(&client, "shop", &[], &[])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let inst = json!({"apiVersion": "opentelemetry.io/v1alpha1", "kind": "Instrumentation",
        "metadata": {"name": "java", "namespace": "shop"}, "spec": endpoint_spec("http://c:4318")});
    let r = api::create_instrumentation(&client, "shop", &inst)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 201, "{}", r.body);
    // Not registered yet.
    until(&cp, &webhook, &["missing"], "False", "it does not exist").await;

    // As installed: the default entry, this webhook's URL and CA.
    let config = api::webhook_configuration(&Registration {
        manifest: &api::webhook_manifest_path(),
        name: "otel-injector",
        url: &webhook.url(),
        ca_pem: &webhook.certs.ca_cert,
        failure_policy: "Ignore",
        timeout_seconds: 5,
        scope: None,
    })
    .unwrap_or_else(|e| panic!("{e}"));
    api::create_webhook_configuration(&client, &config)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    until(&cp, &webhook, &[], "True", "as the replicas expect").await;

    // Changed by hand, one aspect after another.
    patch(&cp, &json!({"failurePolicy": "Fail"})).await;
    until(
        &cp,
        &webhook,
        &["failure_policy"],
        "False",
        "its failurePolicy is not the one expected",
    )
    .await;
    let other = certs::generate("another CA", &["127.0.0.1".to_owned()]).unwrap();
    patch(
        &cp,
        &json!({"failurePolicy": "Ignore", "caBundle": api::base64_of(other.ca_cert.as_bytes())}),
    )
    .await;
    until(
        &cp,
        &webhook,
        &["ca_bundle"],
        "False",
        "its caBundle does not verify the certificate served now",
    )
    .await;
    let r = api::send(&client, Method::DELETE, PATH, None)
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    until(&cp, &webhook, &["missing"], "False", "it does not exist").await;
    webhook.stop();
}
