//! A registration nobody can remove through the API, on the 1.37 control plane: `otel-injector
//! static-webhook` renders the webhook configuration in the API server's manifest form into
//! the directory its admission configuration names (`staticManifestsDir`). The webhook runs
//! first (from an Instrumentation file: it serves before any API server exists), then the API
//! server starts: the first pod it admits is injected, the configuration is no API object,
//! the API refuses to create one under its name, and after every API-registered webhook
//! configuration is deleted pods are still injected.

use axum::http::Method;
use otel_injector::keys::INJECT_JAVA;
use serde_json::json;

use crate::harness::{is_injected, pod, webhook_ready};
use crate::support::api;
use crate::support::controlplane::{ControlPlane, admission_configuration};

const NAME: &str = "otel-injector.static.k8s.io";
const CONFIGS: &str = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations";

#[tokio::test]
async fn a_static_registration_injects_from_the_first_request_and_cannot_be_removed() {
    let dir = tempfile::tempdir().unwrap();
    let insts = dir.path().join("instrumentations.yaml");
    std::fs::write(
        &insts,
        "apiVersion: opentelemetry.io/v1alpha1\nkind: Instrumentation\n\
         metadata: {name: java, namespace: shop}\n\
         spec: {exporter: {endpoint: \"http://collector:4318\"}}\n",
    )
    .unwrap();
    // No cluster yet: the kubeconfig names nothing reachable, and nothing needs it.
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters: [{name: none, cluster: {server: \"https://127.0.0.1:1\"}}]\n\
         contexts: [{name: none, context: {cluster: none}}]\ncurrent-context: none\n",
    )
    .unwrap();
    let mut webhook = webhook_ready(
        &kubeconfig,
        &[
            "--instrumentation-file".to_owned(),
            insts.display().to_string(),
            "--events=false".to_owned(),
        ],
    )
    .await;

    // The manifest, rendered by the CLI into the API server's directory.
    let ca = dir.path().join("webhook-ca.crt");
    std::fs::write(&ca, &webhook.certs.ca_cert).unwrap();
    let manifests = dir.path().join("static");
    std::fs::create_dir_all(&manifests).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_e2e-otel-injector"))
        .args(["static-webhook", "--url", &webhook.url(), "--ca-file"])
        .arg(&ca)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(manifests.join("otel-injector.yaml"), &out.stdout).unwrap();
    let admission = admission_configuration(
        &dir.path().join("admission.yaml"),
        &[(
            "MutatingAdmissionWebhook",
            "WebhookAdmissionConfiguration",
            vec![
                ("kubeConfigFile", String::new()),
                ("staticManifestsDir", manifests.display().to_string()),
            ],
        )],
    );

    let cp = ControlPlane::start_with(&[
        "--admission-control-config-file",
        admission.to_str().unwrap(),
    ])
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let client = cp.client();
    api::create_namespace(&client, "shop", &[], &[])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // The API server's first pod: injected.
    let first = pod("first", &[(INJECT_JAVA, "true")]);
    let r = api::create_pod(&client, "shop", &first, false)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 201, "{}", r.body);
    assert!(
        is_injected(&r.body),
        "{}\n{}",
        r.body["metadata"],
        webhook.log()
    );

    // Not an API object, and the API will not make one under its name.
    let path = format!("{CONFIGS}/{NAME}");
    let r = api::send(&client, Method::GET, &path, None).await.unwrap();
    assert_eq!(r.status, 404, "{}", r.body);
    let r = api::send(&client, Method::DELETE, &path, None)
        .await
        .unwrap();
    assert_eq!(r.status, 404, "{}", r.body);
    let impostor = json!({"apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration", "metadata": {"name": NAME}, "webhooks": []});
    let r = api::send(&client, Method::POST, CONFIGS, Some(&impostor))
        .await
        .unwrap();
    assert!(
        r.status == 422 && r.message().contains("reserved for static manifest"),
        "HTTP {}: {}",
        r.status,
        r.body
    );
    // Every API-registered configuration deleted: pods are still injected.
    let r = api::send(&client, Method::DELETE, CONFIGS, None)
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    let second = pod("second", &[(INJECT_JAVA, "true")]);
    let r = api::create_pod(&client, "shop", &second, false)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(is_injected(&r.body), "{}", r.body["metadata"]);
    webhook.stop();
}
