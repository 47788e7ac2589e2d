//! The kustomize components applied over the base: targeted, status, verify-exporter-tls,
//! built-in and cert-manager, each with the rights it grants.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::harness::{CLUSTER_WIDE, cluster};
use crate::support::api::{self, Access};
use crate::support::certmanager;
use crate::support::chart;
use crate::support::identity::NAMESPACE;

use super::{
    BASE_ENV, access, account_may, dry_run_apply, env_of, manifest, object, product_namespace,
};

/// Applies an opt-in component after `base/otel-injector.yaml` (whose Deployment is
/// applied for real as the merge target; nothing runs it here): the base and the component
/// rendered together by `kubectl kustomize`, then the component's RBAC (`rbac.yaml`) for
/// real and the merged Deployment as a dry run. Checks the merged env, that the manifests'
/// ServiceAccount may do `grants` and still not `refused` while the component's bindings
/// exist, then deletes those bindings (holding [`CLUSTER_WIDE`] exclusively meanwhile: the
/// default identity must have the default RBAC only) and waits until the authorizer has
/// dropped them.
pub(super) async fn overlay(
    component: &str,
    env: &[&str],
    grants: &[Access<'_>],
    refused: &[Access<'_>],
) -> Vec<String> {
    let _alone = CLUSTER_WIDE.write().await;
    product_namespace().await;
    let client = cluster().await.client();
    api::server_side_apply(&client, &manifest("base/otel-injector.yaml"), false)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let rbac = api::read_yaml_docs(&manifest(&format!("components/{component}/rbac.yaml")))
        .unwrap_or_else(|e| panic!("{e}"));
    let rbac_ids: Vec<String> = rbac.iter().map(chart::id).collect();
    let rendered = chart::kustomize_components(&[component]).unwrap_or_else(|e| panic!("{e}"));
    let manager = format!("otel-injector-e2e-{component}");
    let mut applied = Vec::new();
    for doc in rendered
        .iter()
        .filter(|d| d["kind"] == "Deployment" || rbac_ids.contains(&chart::id(d)))
    {
        let stored = api::apply_doc(&client, &manager, doc, doc["kind"] == "Deployment")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        applied.push((chart::id(doc), stored));
    }
    let merged = object(&applied, "Deployment/otel-injector");
    // A variable the component sets moves first; the base's others follow.
    let set = |e: &&str| {
        env.iter()
            .any(|c| c.split('=').next() == e.split('=').next())
    };
    let mut want: Vec<&str> = env.to_vec();
    want.extend(BASE_ENV.iter().filter(|e| !set(e)));
    assert_eq!(env_of(merged), want, "{component}: the merged env");
    for a in grants {
        assert!(account_may(*a).await, "{component} grants {a}");
    }
    for a in refused {
        assert!(!account_may(*a).await, "{component} does not grant {a}");
    }
    for doc in rbac.iter().filter(|d| chart::id(d).contains("Binding/")) {
        api::delete_doc(&client, doc)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let t0 = Instant::now();
    for a in grants {
        while account_may(*a).await {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "{component}: {a} still allowed 10 s after its binding was deleted"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    applied.into_iter().map(|(id, _)| id).collect()
}

#[tokio::test]
async fn manifest_targeted_grants_patch_on_namespaces_and_turns_the_labeler_on() {
    let applied = overlay(
        "targeted",
        &["OTEL_INJECTOR_LABEL_NAMESPACES=true"],
        &[access("patch", "", "namespaces", "", "default")],
        &[
            access("update", "", "namespaces", "", "default"),
            access("delete", "", "namespaces", "", "default"),
            access("list", "", "secrets", "", ""),
        ],
    )
    .await;
    assert_eq!(
        applied,
        [
            "ClusterRole/otel-injector-targeted",
            "ClusterRoleBinding/otel-injector-targeted",
            "Deployment/otel-injector"
        ]
    );
}

#[tokio::test]
async fn manifest_status_grants_the_pod_watch_the_status_patch_and_its_lease() {
    let applied = overlay(
        "status",
        &["OTEL_INJECTOR_STATUS=true"],
        &[
            access("list", "", "pods", "", ""),
            access("watch", "", "pods", "", ""),
            access(
                "patch",
                "opentelemetry.io",
                "instrumentations/status",
                "shop",
                "java",
            ),
            access("create", "coordination.k8s.io", "leases", NAMESPACE, ""),
            access(
                "get",
                "coordination.k8s.io",
                "leases",
                NAMESPACE,
                "otel-injector",
            ),
            access(
                "update",
                "coordination.k8s.io",
                "leases",
                NAMESPACE,
                "otel-injector",
            ),
        ],
        &[
            access("get", "", "pods", "default", "any"),
            access("patch", "", "pods", "default", "any"),
            access(
                "patch",
                "opentelemetry.io",
                "instrumentations",
                "shop",
                "java",
            ),
            access(
                "update",
                "opentelemetry.io",
                "instrumentations/status",
                "shop",
                "java",
            ),
            access("get", "coordination.k8s.io", "leases", NAMESPACE, "other"),
            access(
                "update",
                "coordination.k8s.io",
                "leases",
                NAMESPACE,
                "other",
            ),
            access("create", "coordination.k8s.io", "leases", "default", ""),
            access(
                "delete",
                "coordination.k8s.io",
                "leases",
                NAMESPACE,
                "otel-injector",
            ),
        ],
    )
    .await;
    assert_eq!(
        applied,
        [
            "Role/otel-injector-status",
            "ClusterRole/otel-injector-status",
            "RoleBinding/otel-injector-status",
            "ClusterRoleBinding/otel-injector-status",
            "Deployment/otel-injector"
        ]
    );
}

#[tokio::test]
async fn manifest_verify_exporter_tls_grants_list_on_secrets_and_turns_the_check_on() {
    let applied = overlay(
        "verify-exporter-tls",
        &["OTEL_INJECTOR_VERIFY_EXPORTER_TLS=true"],
        &[
            access("list", "", "secrets", "", ""),
            access("watch", "", "secrets", "", ""),
            access("list", "", "configmaps", "", ""),
            access("watch", "", "configmaps", "", ""),
        ],
        &[
            access("get", "", "secrets", "default", "any"),
            access("create", "", "secrets", NAMESPACE, ""),
            access("patch", "", "namespaces", "", "default"),
        ],
    )
    .await;
    assert_eq!(
        applied,
        [
            "ClusterRole/otel-injector-verify-exporter-tls",
            "ClusterRoleBinding/otel-injector-verify-exporter-tls",
            "Deployment/otel-injector"
        ]
    );
}

#[tokio::test]
async fn manifest_built_in_grants_its_secret_and_configuration_only() {
    let applied = overlay(
        "built-in",
        &[
            "OTEL_INJECTOR_CERTIFICATE_SECRET=otel-injector/otel-injector-tls",
            "OTEL_INJECTOR_WEBHOOK_CONFIGURATION=otel-injector",
            "OTEL_INJECTOR_CERTIFICATE_HOSTS=otel-injector.otel-injector.svc,\
             otel-injector.otel-injector.svc.cluster.local",
        ],
        &[
            access("get", "", "secrets", NAMESPACE, "otel-injector-tls"),
            access("update", "", "secrets", NAMESPACE, "otel-injector-tls"),
            access("create", "", "secrets", NAMESPACE, ""),
            access(
                "get",
                "admissionregistration.k8s.io",
                "mutatingwebhookconfigurations",
                "",
                "otel-injector",
            ),
            access(
                "patch",
                "admissionregistration.k8s.io",
                "mutatingwebhookconfigurations",
                "",
                "otel-injector",
            ),
        ],
        &[
            access("get", "", "secrets", NAMESPACE, "another"),
            access("update", "", "secrets", NAMESPACE, "another"),
            access("list", "", "secrets", NAMESPACE, ""),
            access("delete", "", "secrets", NAMESPACE, "otel-injector-tls"),
            access("create", "", "secrets", "default", ""),
            access(
                "patch",
                "admissionregistration.k8s.io",
                "mutatingwebhookconfigurations",
                "",
                "another",
            ),
            access(
                "list",
                "admissionregistration.k8s.io",
                "mutatingwebhookconfigurations",
                "",
                "",
            ),
        ],
    )
    .await;
    assert_eq!(
        applied,
        [
            "Role/otel-injector-self-signed",
            "ClusterRole/otel-injector-self-signed",
            "RoleBinding/otel-injector-self-signed",
            "ClusterRoleBinding/otel-injector-self-signed",
            "Deployment/otel-injector"
        ]
    );
}

#[tokio::test]
async fn manifest_cert_manager_applies_with_server_side_dry_run() {
    product_namespace().await;
    // cert-manager's own CRDs (its chart's), so the objects are checked against their schema.
    let client = cluster().await.client();
    certmanager::install_crds(&client)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let applied = dry_run_apply("components/cert-manager/cert-manager.yaml").await;
    assert_eq!(
        applied,
        [
            "Issuer/otel-injector-selfsigned",
            "Certificate/otel-injector-ca",
            "Issuer/otel-injector-ca",
            "Certificate/otel-injector"
        ]
    );
    // A value of the wrong type is refused: the schemas are the real ones.
    let mut bad = certmanager::mode()
        .unwrap_or_else(|e| panic!("{e}"))
        .serving_certificate()
        .unwrap_or_else(|e| panic!("{e}"))
        .clone();
    bad["spec"]["duration"] = json!(90);
    let err = api::apply_doc(&client, "otel-injector-e2e-cert-manager", &bad, true)
        .await
        .expect_err("a number as duration");
    assert!(
        err.contains(".spec.duration: expected string, got &value.valueUnstructured{Value:90}"),
        "{err}"
    );
}
