//! Authenticated callers through the real API server (1.37): a control plane of its own whose
//! admission configuration (`--admission-control-config-file`) gives the webhook client a
//! kubeconfig user for every webhook host (`*`) with a client certificate and a token. A
//! webhook that asks for the certificate (`--webhook-client-ca-file`), then one that asks for
//! the token (`--webhook-token-file`), injects every pod the API server sends, while a
//! direct caller without credentials is answered 401 (no patch, nothing learnt) from
//! `/mutate-v1-pod`, and one with another CA's certificate is refused in the handshake. The
//! CRD's conversion, which the API server calls without credentials, keeps working. Then
//! KEP-6060's webhook-bound tokens, as 1.37 issues them (`bound.rs`).

mod bound;

use std::path::Path;
use std::time::{Duration, Instant};

use axum::http::Method;
use otel_injector::certs::{self, DevCerts};
use otel_injector::keys::INJECT_JAVA;
use serde_json::{Value, json};

use crate::harness::{SCOPE_LABEL, endpoint_spec, is_injected, pod, webhook_ready};
use crate::support::api::{self, Registration};
use crate::support::controlplane::ControlPlane;
use crate::support::identity::{self, Identity};
use crate::support::webhook::{Webhook, metric};

/// The token the API server presents.
const TOKEN: &str = "apiserver-webhook-token";

/// Writes the admission configuration and its kubeconfig into `dir`: the user `*` (every
/// webhook host) with the client certificate of `callers` and [`TOKEN`]. Returns the
/// configuration's path.
fn admission_configuration(dir: &Path, callers: &DevCerts) -> std::path::PathBuf {
    let (cert, key) = callers.client("kube-apiserver").unwrap();
    std::fs::write(dir.join("client.crt"), cert).unwrap();
    std::fs::write(dir.join("client.key"), key).unwrap();
    let kubeconfig = dir.join("webhook-kubeconfig.yaml");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nusers:\n- name: \"*\"\n  user:\n    \
             client-certificate: {}\n    client-key: {}\n    token: {TOKEN}\n",
            dir.join("client.crt").display(),
            dir.join("client.key").display()
        ),
    )
    .unwrap();
    let plugin = |name| {
        let fields = vec![("kubeConfigFile", kubeconfig.display().to_string())];
        (name, "WebhookAdmissionConfiguration", fields)
    };
    crate::support::controlplane::admission_configuration(
        &dir.join("admission.yaml"),
        &[
            plugin("MutatingAdmissionWebhook"),
            plugin("ValidatingAdmissionWebhook"),
        ],
    )
}

/// Starts a webhook with `args`, registers it for namespace `ns` (failure policy `Fail`:
/// no pod without its answer) with an Instrumentation there, and waits for an injected dry
/// run. Returns the webhook.
async fn registered(cp: &ControlPlane, id: &Identity, ns: &str, args: &[String]) -> Webhook {
    let client = cp.client();
    let webhook = webhook_ready(&id.kubeconfig, args).await;
    let config = api::webhook_configuration(&Registration {
        manifest: &api::webhook_manifest_path(),
        name: &format!("e2e-callers-{ns}"),
        url: &webhook.url(),
        ca_pem: &webhook.certs.ca_cert,
        failure_policy: "Fail",
        timeout_seconds: 5,
        scope: Some((SCOPE_LABEL, ns)),
    })
    .unwrap_or_else(|e| panic!("{e}"));
    api::create_webhook_configuration(&client, &config)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    namespace_with_java(&client, ns, &[(SCOPE_LABEL, ns)]).await;
    let p = pod("settle", &[(INJECT_JAVA, "true")]);
    let t0 = Instant::now();
    loop {
        let r = api::create_pod(&client, ns, &p, true)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        if r.status == 201 && is_injected(&r.body) {
            return webhook;
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
}

/// Creates namespace `ns` with these labels and the Instrumentation `java` in it.
async fn namespace_with_java(client: &kube::Client, ns: &str, labels: &[(&str, &str)]) {
    api::create_namespace(client, ns, labels, &[])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let inst = json!({
        "apiVersion": "opentelemetry.io/v1alpha1", "kind": "Instrumentation",
        "metadata": {"name": "java", "namespace": ns},
        "spec": endpoint_spec("http://collector:4318")
    });
    let r = api::create_instrumentation(client, ns, &inst)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 201, "{}", r.body);
}

/// A review of a pod of `ns` asking for Java, as an attacker would send it.
fn forged(ns: &str) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "forged", "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": ns, "operation": "CREATE",
            "object": pod("forged", &[(INJECT_JAVA, "true")])
        }
    })
}

/// Every pod the API server sends is injected; a caller without credentials gets 401 from
/// both routes and learns nothing.
async fn injected_for_the_api_server_only(cp: &ControlPlane, webhook: &Webhook, ns: &str) {
    let client = cp.client();
    for i in 0..5 {
        let p = pod(&format!("app-{i}"), &[(INJECT_JAVA, "true")]);
        let r = api::create_pod(&client, ns, &p, false)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.status, 201, "{}", r.body);
        assert!(is_injected(&r.body), "{ns}: {}", r.body["metadata"]);
    }
    let (status, answer) = webhook
        .post_as("/mutate-v1-pod?timeout=5s", &forged(ns), None)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(status, 401, "{answer}");
    assert!(
        answer["response"].is_null() && !answer.to_string().contains("OTEL_"),
        "nothing learnt: {answer}"
    );
    // The CRD's conversion, which the API server calls without credentials, still works:
    // a v1beta1 object written and read back through it.
    let client = cp.client();
    api::point_conversion(
        &client,
        &webhook.conversion_url(),
        Some(&webhook.certs.ca_cert),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let beta = json!({"apiVersion": "opentelemetry.io/v1beta1", "kind": "Instrumentation",
        "metadata": {"name": "beta", "namespace": ns},
        "spec": {"exporter": {"endpoint": "http://collector:4318"}}});
    let path = format!("/apis/opentelemetry.io/v1beta1/namespaces/{ns}/instrumentations");
    let t0 = Instant::now();
    let written = loop {
        let r = api::send(&client, Method::POST, &path, Some(&beta))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        // The API server takes the new conversion within a moment.
        if r.status == 201 || t0.elapsed() > Duration::from_secs(30) {
            break r;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(written.status, 201, "{}", written.body);
    let r = api::send(&client, Method::GET, &format!("{path}/beta"), None)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        (r.status, &r.body["apiVersion"]),
        (200, &json!("opentelemetry.io/v1beta1")),
        "{}",
        r.body
    );
    // A direct caller of /convert gets back the object it sent, converted, and nothing of the
    // cluster (the conversion reads nothing): not the Instrumentations of this namespace.
    let review = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
        "request": {"uid": "direct", "desiredAPIVersion": "opentelemetry.io/v1beta1",
            "objects": [{"apiVersion": "opentelemetry.io/v1alpha1", "kind": "Instrumentation",
                "metadata": {"name": "invented", "namespace": ns},
                "spec": {"exporter": {"endpoint": "http://invented:4318"}}}]}});
    let (status, answer) = webhook
        .post_as("/convert", &review, None)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let converted = &answer["response"]["convertedObjects"];
    assert_eq!(
        (status, converted.as_array().map(Vec::len)),
        (200, Some(1)),
        "{answer}"
    );
    assert_eq!(
        (
            &converted[0]["metadata"]["name"],
            &converted[0]["apiVersion"]
        ),
        (&json!("invented"), &json!("opentelemetry.io/v1beta1"))
    );
    assert!(
        !answer.to_string().contains("collector:4318"),
        "nothing of the cluster's Instrumentations: {answer}"
    );
    let text = webhook.metrics().await;
    assert_eq!(
        metric(
            &text,
            "otel_injector_callers_refused_total{reason=\"unauthenticated\"}"
        ),
        Some(1.0),
        "only the direct caller was refused"
    );
    assert!(
        metric(&text, "otel_injector_conversion_objects_total").unwrap_or(0.0) >= 2.0,
        "the API server's conversions were answered"
    );
}

#[tokio::test]
async fn with_authentication_only_the_api_server_is_answered_by_certificate_or_token() {
    let files = tempfile::tempdir().unwrap();
    let callers = certs::generate("e2e callers CA", &["kube-apiserver".to_owned()]).unwrap();
    let config = admission_configuration(files.path(), &callers);
    let cp = ControlPlane::with_crd(&[
        "--admission-control-config-file",
        config.to_str().unwrap(),
        "--feature-gates=APIServerWebhookAuthenticationToken=true",
    ])
    .await;
    let id = identity::issue(
        &cp,
        "e2e-callers",
        &["base/otel-injector.yaml"],
        &cp.dir.join("identities"),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));

    // By client certificate.
    let ca_file = files.path().join("callers-ca.crt");
    std::fs::write(&ca_file, &callers.ca_cert).unwrap();
    let args = vec![
        "--webhook-client-ca-file".to_owned(),
        ca_file.display().to_string(),
    ];
    let mut by_cert = registered(&cp, &id, "by-cert", &args).await;
    injected_for_the_api_server_only(&cp, &by_cert, "by-cert").await;
    // Another CA's certificate: refused in the handshake, no answer.
    let stranger = certs::generate("another CA", &["x".to_owned()]).unwrap();
    let (cert, key) = stranger.client("kube-apiserver").unwrap();
    let r = by_cert
        .post_as(
            "/mutate-v1-pod?timeout=5s",
            &forged("by-cert"),
            Some((&cert, &key)),
        )
        .await;
    assert!(r.is_err(), "another CA's certificate gets no answer: {r:?}");
    // The right one, from a direct client: answered (the certificate is the credential).
    let (cert, key) = callers.client("a-direct-client").unwrap();
    let (status, answer) = by_cert
        .post_as(
            "/mutate-v1-pod?timeout=5s",
            &forged("by-cert"),
            Some((&cert, &key)),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        (status, &answer["response"]["uid"]),
        (200, &json!("forged"))
    );
    by_cert.stop();

    // By token.
    let token_file = files.path().join("tokens");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    let args = vec![
        "--webhook-token-file".to_owned(),
        token_file.display().to_string(),
    ];
    let mut by_token = registered(&cp, &id, "by-token", &args).await;
    injected_for_the_api_server_only(&cp, &by_token, "by-token").await;
    by_token.stop();

    bound::only_tokens_bound_to_this_configuration(&cp, &id).await;
}
