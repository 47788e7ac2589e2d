//! Install and uninstall as the README says (Helm, and the kustomize overlays in two steps):
//! the webhook configuration deleted first.

use std::fmt::Debug;
use std::time::{Duration, Instant};

use futures::TryStreamExt as _;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, WatchEvent, WatchParams};
use kube::{Client, Resource, ResourceExt as _};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::support::api;
use crate::support::chart::{self, id};
use crate::support::identity::NAMESPACE;
use crate::support::tools::root;

use super::{INSTALL, install_cluster, ok};

/// The resourceVersion at which the object `name` is deleted, from a watch started now (the
/// API server's resourceVersions are etcd revisions, ordered across kinds).
pub(super) async fn deletion<K>(
    api: Api<K>,
    name: &str,
) -> tokio::task::JoinHandle<Result<u64, String>>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let from = api
        .get(name)
        .await
        .unwrap_or_else(|e| panic!("get {name}: {e}"))
        .resource_version()
        .expect("a resourceVersion");
    let params = WatchParams::default()
        .fields(&format!("metadata.name={name}"))
        .timeout(60);
    let stream = api
        .watch(&params, &from)
        .await
        .unwrap_or_else(|e| panic!("watch {name}: {e}"));
    let name = name.to_owned();
    tokio::spawn(async move {
        let mut stream = Box::pin(stream);
        while let Some(event) = stream.try_next().await.map_err(|e| e.to_string())? {
            if let WatchEvent::Deleted(obj) = event {
                let rv = obj.resource_version().unwrap_or_default();
                return rv.parse().map_err(|e| format!("resourceVersion {rv}: {e}"));
            }
        }
        Err(format!("{name}: the watch ended without a deletion"))
    })
}

/// Watches for the deletion of the webhook configuration and the Deployment, runs
/// `uninstall`, and asserts that the configuration went first.
pub(super) async fn assert_configuration_deleted_first(client: &Client, uninstall: impl FnOnce()) {
    let configuration = deletion(
        Api::<MutatingWebhookConfiguration>::all(client.clone()),
        "otel-injector",
    )
    .await;
    let deployment = deletion(
        Api::<Deployment>::namespaced(client.clone(), NAMESPACE),
        "otel-injector",
    )
    .await;
    uninstall();
    let configuration = configuration
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("{e}"));
    let deployment = deployment.await.unwrap().unwrap_or_else(|e| panic!("{e}"));
    assert!(
        configuration < deployment,
        "the webhook configuration was deleted at {configuration}, the Deployment at \
         {deployment}"
    );
}

#[tokio::test]
async fn helm_install_and_uninstall_as_the_readme_says() {
    let _one = INSTALL.lock().await;
    let cp = install_cluster().await;
    let client = cp.client();
    let state = tempfile::tempdir().unwrap();
    // The README's command; cert-manager's CRDs are the prerequisite (stand-ins here).
    let out = ok(
        "helm install",
        chart::helm(
            Some(cp),
            state.path(),
            &[
                "install",
                "otel-injector",
                "charts/otel-injector",
                "--namespace",
                "otel-injector",
                "--create-namespace",
            ],
        ),
    );
    assert!(
        out.contains(
            "otel-injector 0.1.0 is installed in namespace otel-injector (2 replicas, image \
             ghcr.io/otel-injector/otel-injector:0.1.0)."
        ),
        "{out}"
    );
    // Helm installed the CRD from crds/ and every rendered object.
    let crd = api::send(
        &client,
        axum::http::Method::GET,
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/instrumentations.opentelemetry.io",
        None,
    )
    .await
    .unwrap();
    assert_eq!(crd.status, 200, "{}", crd.body);
    let rendered = chart::render(&[]).unwrap_or_else(|e| panic!("{e}"));
    for doc in &rendered {
        let api = api::dynamic_api(&client, doc)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let name = doc["metadata"]["name"].as_str().unwrap();
        assert!(
            api.get_opt(name).await.unwrap().is_some(),
            "{} not installed",
            id(doc)
        );
    }
    let listed = ok(
        "helm list",
        chart::helm(
            Some(cp),
            state.path(),
            &["list", "-n", "otel-injector", "-o", "json"],
        ),
    );
    let listed: Value = serde_json::from_str(&listed).unwrap();
    assert_eq!(listed[0]["status"], "deployed");
    assert_eq!(listed[0]["app_version"], "0.1.0");

    assert_configuration_deleted_first(&client, || {
        ok(
            "helm uninstall",
            chart::helm(
                Some(cp),
                state.path(),
                &["uninstall", "otel-injector", "--namespace", "otel-injector"],
            ),
        );
    })
    .await;
    for doc in &rendered {
        let api = api::dynamic_api(&client, doc).await.unwrap();
        let name = doc["metadata"]["name"].as_str().unwrap();
        assert!(
            api.get_opt(name).await.unwrap().is_none(),
            "{} left behind",
            id(doc)
        );
    }
    // The CRD, and so every Instrumentation, stays.
    let crd = api::send(
        &client,
        axum::http::Method::GET,
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/instrumentations.opentelemetry.io",
        None,
    )
    .await
    .unwrap();
    assert_eq!(crd.status, 200);
}

#[tokio::test]
async fn kustomize_overlays_apply_server_side_and_uninstall_in_two_steps() {
    let _one = INSTALL.lock().await;
    let cp = install_cluster().await;
    let client = cp.client();
    // The README's commands.
    ok(
        "kubectl apply crd.yaml",
        chart::kubectl(cp, &["apply", "--server-side", "-f", "manifests/crd.yaml"]),
    );
    let out = ok(
        "kubectl apply -k cert-manager",
        chart::kubectl(
            cp,
            &[
                "apply",
                "--server-side",
                "-k",
                "manifests/overlays/cert-manager",
            ],
        ),
    );
    let rendered = chart::kustomize(&root().join("manifests/overlays/cert-manager"))
        .unwrap_or_else(|e| panic!("{e}"));
    let mut applied_lines: Vec<&str> = out.lines().collect();
    applied_lines.sort();
    assert_eq!(applied_lines.len(), rendered.len(), "{out}");
    for doc in &rendered {
        let api = api::dynamic_api(&client, doc)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let name = doc["metadata"]["name"].as_str().unwrap();
        let stored = api
            .get_opt(name)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("{} not applied", id(doc)));
        let stored = serde_json::to_value(stored).unwrap();
        for field in ["rules", "subjects", "webhooks"] {
            assert_eq!(stored[field], doc[field], "{} {field}", id(doc));
        }
    }
    // The other overlays apply too (server-side dry run: one install at a time).
    for overlay in ["built-in", "targeted"] {
        ok(
            &format!("kubectl apply -k {overlay}"),
            chart::kubectl(
                cp,
                &[
                    "apply",
                    "--server-side",
                    "--dry-run=server",
                    "-k",
                    &format!("manifests/overlays/{overlay}"),
                ],
            ),
        );
    }

    // The README's uninstall: the webhook configuration first, then the rest.
    assert_configuration_deleted_first(&client, || {
        ok(
            "kubectl delete mutatingwebhookconfiguration",
            chart::kubectl(
                cp,
                &["delete", "mutatingwebhookconfiguration", "otel-injector"],
            ),
        );
        ok(
            "kubectl delete -k",
            chart::kubectl(
                cp,
                &[
                    "delete",
                    "-k",
                    "manifests/overlays/cert-manager",
                    "--ignore-not-found",
                ],
            ),
        );
    })
    .await;
    // The namespace (and so the Deployment's pods) goes with the controllers' help.
    let t0 = Instant::now();
    while api::get_namespace(&client, NAMESPACE)
        .await
        .unwrap()
        .is_some()
    {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "namespace {NAMESPACE} still there 60 s after the uninstall"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for doc in rendered
        .iter()
        .filter(|d| d["metadata"]["namespace"].is_null())
    {
        let api = api::dynamic_api(&client, doc).await.unwrap();
        let name = doc["metadata"]["name"].as_str().unwrap();
        assert!(
            api.get_opt(name).await.unwrap().is_none(),
            "{} left behind",
            id(doc)
        );
    }
}
