//! The shipped manifests and the CRD's validation, through the real apiserver.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::Api;
use serde_json::json;

use crate::harness::cluster;
use crate::support::api;
use crate::support::controlplane::root;

/// Server-side apply with `dryRun=All` of every document of `manifests/<file>`.
async fn dry_run_apply(file: &str) -> Vec<String> {
    let client = cluster().await.client();
    api::server_side_apply(&client, &root().join("manifests").join(file), true)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// The namespaced manifests live in `otel-injector`; a dry run does not create it, so it
/// is created for real first.
async fn product_namespace() {
    let client = cluster().await.client();
    api::create_namespace(&client, "otel-injector", &[], &[])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
}

#[tokio::test]
async fn manifest_crd_applies_with_server_side_dry_run() {
    let applied = dry_run_apply("crd.yaml").await;
    assert_eq!(
        applied,
        ["CustomResourceDefinition/instrumentations.opentelemetry.io"]
    );
}

#[tokio::test]
async fn manifest_otel_injector_applies_with_server_side_dry_run() {
    product_namespace().await;
    let applied = dry_run_apply("otel-injector.yaml").await;
    for kind in [
        "Namespace/",
        "ServiceAccount/",
        "ClusterRole/",
        "ClusterRoleBinding/",
        "Deployment/",
        "Service/",
        "PodDisruptionBudget/",
    ] {
        assert!(applied.iter().any(|a| a.starts_with(kind)), "{applied:?}");
    }
}

#[tokio::test]
async fn manifest_webhook_applies_with_server_side_dry_run() {
    let applied = dry_run_apply("webhook.yaml").await;
    assert_eq!(applied, ["MutatingWebhookConfiguration/otel-injector"]);
}

#[tokio::test]
async fn manifest_cert_manager_applies_with_server_side_dry_run() {
    product_namespace().await;
    // Stand-ins for cert-manager's CRDs: the kinds exist, any content is accepted.
    let client = cluster().await.client();
    let crds: Api<CustomResourceDefinition> = Api::all(client);
    for (kind, plural) in [("Issuer", "issuers"), ("Certificate", "certificates")] {
        let crd: CustomResourceDefinition = serde_json::from_value(json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("{plural}.cert-manager.io")},
            "spec": {
                "group": "cert-manager.io",
                "scope": "Namespaced",
                "names": {"kind": kind, "plural": plural, "singular": kind.to_lowercase(),
                          "listKind": format!("{kind}List")},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object",
                        "x-kubernetes-preserve-unknown-fields": true}}}]
            }
        }))
        .unwrap();
        api::install_crd(&crds, &crd)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let applied = dry_run_apply("cert-manager.yaml").await;
    assert!(
        applied.iter().any(|a| a.starts_with("Issuer/")),
        "{applied:?}"
    );
    assert!(
        applied.iter().any(|a| a.starts_with("Certificate/")),
        "{applied:?}"
    );
}

/// Creates an Instrumentation with this sampler in a fresh namespace; returns the response.
async fn create_with_sampler(ns: &str, sampler: serde_json::Value) -> api::Response {
    let client = cluster().await.client();
    api::create_namespace(&client, ns, &[], &[])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let inst = json!({
        "apiVersion": "opentelemetry.io/v1alpha1", "kind": "Instrumentation",
        "metadata": {"name": "bad", "namespace": ns},
        "spec": {"exporter": {"endpoint": "http://collector.example:4318"}, "sampler": sampler}
    });
    let r = api::create_instrumentation(&client, ns, &inst)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let get = api::send(
        &client,
        axum::http::Method::GET,
        &format!("/apis/opentelemetry.io/v1alpha1/namespaces/{ns}/instrumentations/bad"),
        None,
    )
    .await
    .unwrap();
    assert_eq!(get.status, 404, "a rejected Instrumentation is not stored");
    r
}

#[tokio::test]
async fn instrumentation_with_an_unknown_sampler_type_is_rejected() {
    let r = create_with_sampler("invalid-type", json!({"type": "not_a_sampler"})).await;
    assert_eq!(r.status, 422, "{}", r.body);
    let msg = r.message();
    assert!(
        msg.starts_with("Instrumentation.opentelemetry.io \"bad\" is invalid: "),
        "{msg}"
    );
    assert!(
        msg.contains("spec.sampler.type: Unsupported value: \"not_a_sampler\": supported values: "),
        "{msg}"
    );
    assert!(msg.contains("\"parentbased_traceidratio\""), "{msg}");
}

#[tokio::test]
async fn instrumentation_with_a_ratio_above_one_is_rejected() {
    let r = create_with_sampler(
        "invalid-ratio",
        json!({"type": "traceidratio", "argument": "2"}),
    )
    .await;
    assert_eq!(r.status, 422, "{}", r.body);
    let msg = r.message();
    assert!(
        msg.starts_with("Instrumentation.opentelemetry.io \"bad\" is invalid: "),
        "{msg}"
    );
    assert!(
        msg.contains(
            "spec.sampler.argument: Invalid value: sampler.argument must be a number between \
             0 and 1 for traceidratio samplers"
        ),
        "{msg}"
    );
}

#[tokio::test]
async fn manifest_self_signed_applies_over_the_deployment_with_server_side_dry_run() {
    product_namespace().await;
    // The overlay is a partial Deployment merged into the one of otel-injector.yaml, so
    // that one is applied for real first (no controller runs it here: nothing starts).
    let client = cluster().await.client();
    api::server_side_apply(&client, &root().join("manifests/otel-injector.yaml"), false)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let applied = dry_run_apply("self-signed.yaml").await;
    for kind in [
        "Role/",
        "RoleBinding/",
        "ClusterRole/",
        "ClusterRoleBinding/",
        "Deployment/",
    ] {
        assert!(applied.iter().any(|a| a.starts_with(kind)), "{applied:?}");
    }
}
