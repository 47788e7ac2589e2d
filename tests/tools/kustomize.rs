//! The kustomize layout of `manifests/`: the base, the components and the overlays
//! `cert-manager`, `built-in` and `targeted`, each rendered with `kubectl kustomize` (the
//! kubectl of the machine image) and checked object by object. The e2e suite applies them to
//! a real API server (`e2e/tests/install.rs`).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use crate::rendered::{find, ids, manifest};

mod opt_in;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `kubectl kustomize DIR` as documents.
fn kustomize(dir: &Path) -> Vec<Value> {
    let out = Command::new("kubectl")
        .arg("kustomize")
        .arg(dir)
        .stdin(Stdio::null())
        .output()
        .expect("run kubectl (the machine image's kubectl 1.32)");
    assert!(
        out.status.success(),
        "kubectl kustomize {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(&String::from_utf8_lossy(&out.stdout)).expect("YAML");
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

fn overlay(name: &str) -> Vec<Value> {
    kustomize(&root().join("manifests/overlays").join(name))
}

/// A kustomization in a temp dir: the base plus these components (what a user writes to
/// combine them).
fn combined(components: &[&str]) -> Vec<Value> {
    let dir = tempfile::tempdir().unwrap();
    let manifests = relative_to(dir.path(), &root().join("manifests"));
    let mut text = format!(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - {}\ncomponents:\n",
        manifests.join("base").display()
    );
    for c in components {
        text.push_str(&format!(
            "  - {}\n",
            manifests.join("components").join(c).display()
        ));
    }
    std::fs::write(dir.path().join("kustomization.yaml"), text).unwrap();
    kustomize(dir.path())
}

/// `target` as a path relative to `dir` (kustomize refuses absolute ones); both absolute.
fn relative_to(dir: &Path, target: &Path) -> PathBuf {
    let up = dir.components().count() - 1;
    let mut out: PathBuf = std::iter::repeat_n("..", up).collect();
    out.push(target.strip_prefix("/").expect("an absolute path"));
    out
}

/// The env of the Deployment's one container, as `NAME=value`.
fn env(docs: &[Value]) -> Vec<String> {
    find(docs, "Deployment/otel-injector")["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .expect("env")
        .iter()
        .map(|e| {
            format!(
                "{}={}",
                e["name"].as_str().unwrap(),
                e["value"].as_str().unwrap()
            )
        })
        .collect()
}

/// The base's objects in kustomize's output order (by kind: namespaces, RBAC, Services,
/// workloads, kinds it does not know by name, webhook configurations last).
const BASE: [&str; 9] = [
    "Namespace/otel-injector",
    "ServiceAccount/otel-injector",
    "ClusterRole/otel-injector",
    "ClusterRoleBinding/otel-injector",
    "Service/otel-injector",
    "Service/otel-injector-metrics",
    "Deployment/otel-injector",
    "PodDisruptionBudget/otel-injector",
    "MutatingWebhookConfiguration/otel-injector",
];

/// The env of an overlay (every one includes the status component): the base's, with the
/// status controller on (kustomize moves the patched variable first), then `before` (the
/// other components' variables).
fn overlay_env(before: &[&'static str]) -> Vec<&'static str> {
    let mut env = vec!["OTEL_INJECTOR_STATUS=true"];
    env.extend(before);
    env.extend(&BASE_ENV[1..]);
    env
}

/// What the status component adds to every overlay, by kind, as kustomize orders them.
const STATUS_RBAC: [&str; 4] = [
    "Role/otel-injector-status",
    "ClusterRole/otel-injector-status",
    "RoleBinding/otel-injector-status",
    "ClusterRoleBinding/otel-injector-status",
];

/// Asserts the status component's RBAC is rendered as the file has it, and is exactly: the
/// pod watch and the status patch cluster-wide, the Lease by name in the webhook's namespace.
fn assert_status_rbac(docs: &[Value]) {
    assert_eq!(
        find(docs, "ClusterRole/otel-injector-status")["rules"],
        json!([
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]},
            {"apiGroups": ["opentelemetry.io"], "resources": ["instrumentations/status"],
             "verbs": ["patch"]}
        ])
    );
    let role = find(docs, "Role/otel-injector-status");
    assert_eq!(role["metadata"]["namespace"], "otel-injector");
    assert_eq!(
        role["rules"],
        json!([
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
             "resourceNames": ["otel-injector"], "verbs": ["get", "update"]},
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]}
        ])
    );
    let rbac = manifest("components/status/rbac.yaml");
    assert_eq!(ids(&rbac).len(), STATUS_RBAC.len());
    for doc in &rbac {
        let id = &ids(std::slice::from_ref(doc))[0];
        assert!(STATUS_RBAC.contains(&id.as_str()), "{id}");
        assert_eq!(find(docs, id), doc, "{id}");
    }
}

/// Owned strings, to compare with [`ids`].
fn ordered(want: &[&str]) -> Vec<String> {
    want.iter().map(|s| s.to_string()).collect()
}

const BASE_ENV: [&str; 4] = [
    "OTEL_INJECTOR_STATUS=false",
    "OTEL_INJECTOR_TLS_CERT_FILE=/tls/tls.crt",
    "OTEL_INJECTOR_TLS_KEY_FILE=/tls/tls.key",
    "OTEL_INJECTOR_LOG_FORMAT=json",
];

#[test]
fn the_base_is_the_files_unchanged() {
    let docs = kustomize(&root().join("manifests/base"));
    let mut want = manifest("base/otel-injector.yaml");
    want.extend(manifest("base/webhook.yaml"));
    assert_eq!(ids(&docs), ordered(&BASE));
    for doc in &want {
        let id = &ids(std::slice::from_ref(doc))[0];
        assert_eq!(find(&docs, id), doc, "{id}");
    }
    assert_eq!(env(&docs), BASE_ENV);
    let webhook = find(&docs, "MutatingWebhookConfiguration/otel-injector");
    assert_eq!(webhook["metadata"]["annotations"], Value::Null);
}

/// Every overlay grants the events component's permission (create and patch on
/// events.k8s.io events), exactly as its file writes it.
fn assert_events_rbac(docs: &[Value]) {
    let rbac = manifest("components/events/rbac.yaml");
    assert_eq!(rbac.len(), 2);
    for doc in &rbac {
        let id = &ids(std::slice::from_ref(doc))[0];
        assert_eq!(find(docs, id), doc, "{id}");
    }
    assert_eq!(
        find(docs, "ClusterRole/otel-injector-events")["rules"],
        json!([{"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]}])
    );
}

#[test]
fn the_cert_manager_overlay_adds_the_certificate_and_the_ca_injection() {
    let docs = overlay("cert-manager");
    assert_eq!(
        ids(&docs),
        ordered(&[
            "Namespace/otel-injector",
            "ServiceAccount/otel-injector",
            "Role/otel-injector-status",
            "ClusterRole/otel-injector",
            "ClusterRole/otel-injector-events",
            "ClusterRole/otel-injector-status",
            "RoleBinding/otel-injector-status",
            "ClusterRoleBinding/otel-injector",
            "ClusterRoleBinding/otel-injector-events",
            "ClusterRoleBinding/otel-injector-status",
            "Service/otel-injector",
            "Service/otel-injector-metrics",
            "Deployment/otel-injector",
            "PodDisruptionBudget/otel-injector",
            "Certificate/otel-injector",
            "Certificate/otel-injector-ca",
            "Issuer/otel-injector-ca",
            "Issuer/otel-injector-selfsigned",
            "MutatingWebhookConfiguration/otel-injector",
        ])
    );
    assert_events_rbac(&docs);
    let component = manifest("components/cert-manager/cert-manager.yaml");
    for id in [
        "Issuer/otel-injector-selfsigned",
        "Certificate/otel-injector-ca",
        "Issuer/otel-injector-ca",
        "Certificate/otel-injector",
    ] {
        assert_eq!(find(&docs, id), find(&component, id), "{id}");
    }
    let webhook = find(&docs, "MutatingWebhookConfiguration/otel-injector");
    assert_eq!(
        webhook["metadata"]["annotations"],
        json!({"cert-manager.io/inject-ca-from": "otel-injector/otel-injector"})
    );
    assert_eq!(
        webhook["webhooks"],
        manifest("base/webhook.yaml")[0]["webhooks"]
    );
    assert_eq!(env(&docs), overlay_env(&[]));
    assert_status_rbac(&docs);
    assert_eq!(
        find(&docs, "Deployment/otel-injector")["spec"]["template"]["spec"]["volumes"],
        json!([{"name": "tls", "secret": {"secretName": "otel-injector-tls"}}])
    );
}

#[test]
fn the_built_in_overlay_adds_its_rbac_and_env_and_an_optional_secret() {
    let docs = overlay("built-in");
    assert_eq!(
        ids(&docs),
        ordered(&[
            "Namespace/otel-injector",
            "ServiceAccount/otel-injector",
            "Role/otel-injector-self-signed",
            "Role/otel-injector-status",
            "ClusterRole/otel-injector",
            "ClusterRole/otel-injector-events",
            "ClusterRole/otel-injector-self-signed",
            "ClusterRole/otel-injector-status",
            "RoleBinding/otel-injector-self-signed",
            "RoleBinding/otel-injector-status",
            "ClusterRoleBinding/otel-injector",
            "ClusterRoleBinding/otel-injector-events",
            "ClusterRoleBinding/otel-injector-self-signed",
            "ClusterRoleBinding/otel-injector-status",
            "Service/otel-injector",
            "Service/otel-injector-metrics",
            "Deployment/otel-injector",
            "PodDisruptionBudget/otel-injector",
            "MutatingWebhookConfiguration/otel-injector",
        ])
    );
    assert_events_rbac(&docs);
    assert_status_rbac(&docs);
    let rbac = manifest("components/built-in/rbac.yaml");
    for doc in &rbac {
        let id = &ids(std::slice::from_ref(doc))[0];
        assert_eq!(find(&docs, id), doc, "{id}");
    }
    let want_env = overlay_env(&[
        "OTEL_INJECTOR_CERTIFICATE_SECRET=otel-injector/otel-injector-tls",
        "OTEL_INJECTOR_WEBHOOK_CONFIGURATION=otel-injector",
        "OTEL_INJECTOR_CERTIFICATE_HOSTS=otel-injector.otel-injector.svc,\
         otel-injector.otel-injector.svc.cluster.local",
    ]);
    assert_eq!(env(&docs), want_env);
    assert_eq!(
        find(&docs, "Deployment/otel-injector")["spec"]["template"]["spec"]["volumes"],
        json!([{"name": "tls", "secret": {"secretName": "otel-injector-tls", "optional": true}}])
    );
    let webhook = find(&docs, "MutatingWebhookConfiguration/otel-injector");
    assert_eq!(webhook["metadata"]["annotations"], Value::Null);
}

#[test]
fn the_targeted_overlay_replaces_the_webhook_entries_and_adds_the_labeler() {
    let docs = overlay("targeted");
    assert_events_rbac(&docs);
    assert_eq!(
        ids(&docs),
        ordered(&[
            "Namespace/otel-injector",
            "ServiceAccount/otel-injector",
            "Role/otel-injector-status",
            "ClusterRole/otel-injector",
            "ClusterRole/otel-injector-events",
            "ClusterRole/otel-injector-status",
            "ClusterRole/otel-injector-targeted",
            "RoleBinding/otel-injector-status",
            "ClusterRoleBinding/otel-injector",
            "ClusterRoleBinding/otel-injector-events",
            "ClusterRoleBinding/otel-injector-status",
            "ClusterRoleBinding/otel-injector-targeted",
            "Service/otel-injector",
            "Service/otel-injector-metrics",
            "Deployment/otel-injector",
            "PodDisruptionBudget/otel-injector",
            "Certificate/otel-injector",
            "Certificate/otel-injector-ca",
            "Issuer/otel-injector-ca",
            "Issuer/otel-injector-selfsigned",
            "MutatingWebhookConfiguration/otel-injector",
        ])
    );
    let webhook = find(&docs, "MutatingWebhookConfiguration/otel-injector");
    assert_eq!(
        webhook["webhooks"],
        manifest("components/targeted/webhook-targeted.yaml")[0]["webhooks"]
    );
    assert_eq!(
        webhook["metadata"]["annotations"],
        json!({"cert-manager.io/inject-ca-from": "otel-injector/otel-injector"})
    );
    assert_eq!(
        env(&docs),
        overlay_env(&["OTEL_INJECTOR_LABEL_NAMESPACES=true"])
    );
    assert_status_rbac(&docs);
    let rbac = manifest("components/targeted/rbac.yaml");
    assert_eq!(
        find(&docs, "ClusterRole/otel-injector-targeted"),
        find(&rbac, "ClusterRole/otel-injector-targeted")
    );
}

#[test]
fn components_combine_built_in_targeted_tls_verification_network_policy_and_auto_delivery() {
    let docs = combined(&[
        "built-in",
        "targeted",
        "verify-exporter-tls",
        "network-policy",
        "agent-delivery-auto",
    ]);
    assert_eq!(
        ids(&docs),
        ordered(&[
            "Namespace/otel-injector",
            "ServiceAccount/otel-injector",
            "Role/otel-injector-self-signed",
            "ClusterRole/otel-injector",
            "ClusterRole/otel-injector-agent-delivery-auto",
            "ClusterRole/otel-injector-self-signed",
            "ClusterRole/otel-injector-targeted",
            "ClusterRole/otel-injector-verify-exporter-tls",
            "RoleBinding/otel-injector-self-signed",
            "ClusterRoleBinding/otel-injector",
            "ClusterRoleBinding/otel-injector-agent-delivery-auto",
            "ClusterRoleBinding/otel-injector-self-signed",
            "ClusterRoleBinding/otel-injector-targeted",
            "ClusterRoleBinding/otel-injector-verify-exporter-tls",
            "Service/otel-injector",
            "Service/otel-injector-metrics",
            "Deployment/otel-injector",
            "PodDisruptionBudget/otel-injector",
            "NetworkPolicy/otel-injector",
            "MutatingWebhookConfiguration/otel-injector",
        ])
    );
    let mut want_env = vec![
        "OTEL_INJECTOR_AGENT_DELIVERY=auto",
        "OTEL_INJECTOR_VERIFY_EXPORTER_TLS=true",
        "OTEL_INJECTOR_LABEL_NAMESPACES=true",
        "OTEL_INJECTOR_CERTIFICATE_SECRET=otel-injector/otel-injector-tls",
        "OTEL_INJECTOR_WEBHOOK_CONFIGURATION=otel-injector",
        "OTEL_INJECTOR_CERTIFICATE_HOSTS=otel-injector.otel-injector.svc,\
         otel-injector.otel-injector.svc.cluster.local",
    ];
    want_env.extend(BASE_ENV);
    assert_eq!(env(&docs), want_env);
    let webhook = find(&docs, "MutatingWebhookConfiguration/otel-injector");
    assert_eq!(webhook["metadata"]["annotations"], Value::Null);
    assert_eq!(
        webhook["webhooks"],
        manifest("components/targeted/webhook-targeted.yaml")[0]["webhooks"]
    );
    assert_eq!(
        find(&docs, "NetworkPolicy/otel-injector"),
        &manifest("components/network-policy/network-policy.yaml")[0]
    );
}

#[test]
fn the_policy_component_removes_the_webhook_configuration_and_what_writes_into_it() {
    let webhook = combined(&["built-in"]);
    let policy = combined(&["built-in", "policy"]);
    let mut want = ids(&webhook);
    want.retain(|id| id != "MutatingWebhookConfiguration/otel-injector");
    assert_eq!(ids(&policy), want);
    // Built-in certificates: the caBundle of the CRD only, as the chart renders it.
    let rules: Value = serde_json::from_str(crate::chart::POLICY_SELF_SIGNED_RULES).unwrap();
    assert_eq!(
        find(&policy, "ClusterRole/otel-injector-self-signed")["rules"],
        rules
    );
    // The patched variable, emptied, moves first (as kustomize merges).
    let mut want_env = env(&webhook);
    want_env.retain(|e| e != "OTEL_INJECTOR_WEBHOOK_CONFIGURATION=otel-injector");
    want_env.insert(0, "OTEL_INJECTOR_WEBHOOK_CONFIGURATION=".into());
    assert_eq!(env(&policy), want_env);
    // With cert-manager: the webhook configuration (and its CA injection) goes; the
    // Certificate stays, for the CRD's conversion.
    let policy = combined(&["cert-manager", "policy"]);
    let ids = ids(&policy);
    assert!(
        !ids.iter()
            .any(|id| id.starts_with("MutatingWebhookConfiguration/")),
        "{ids:?}"
    );
    assert!(
        ids.contains(&"Certificate/otel-injector".to_owned()),
        "{ids:?}"
    );
}
