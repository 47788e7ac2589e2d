//! The opt-in components, in no overlay: each adds its RBAC and its flag to the base (the
//! automatic rollout, the safety net's rollback, the check of the webhook configuration).

use super::{BASE_ENV, assert_status_rbac, combined, env, ordered, overlay};
use crate::rendered::{find, ids, manifest};

#[test]
fn the_rollout_component_is_in_no_overlay_and_adds_its_rbac_and_env() {
    for name in ["cert-manager", "built-in", "targeted"] {
        let docs = overlay(name);
        assert!(
            ids(&docs).iter().all(|i| !i.contains("rollout")),
            "{name}: {:?}",
            ids(&docs)
        );
        assert!(
            env(&docs)
                .iter()
                .all(|e| !e.starts_with("OTEL_INJECTOR_ROLLOUT")),
            "{name}"
        );
    }
    let docs = combined(&["status", "rollout"]);
    let rbac = manifest("components/rollout/rbac.yaml");
    assert_eq!(
        ids(&rbac),
        ordered(&[
            "ClusterRole/otel-injector-rollout",
            "ClusterRoleBinding/otel-injector-rollout",
            "Role/otel-injector-rollout",
            "RoleBinding/otel-injector-rollout",
        ])
    );
    for doc in &rbac {
        let id = &ids(std::slice::from_ref(doc))[0];
        assert_eq!(find(&docs, id), doc, "{id}");
    }
    assert_status_rbac(&docs);
    // Only what the rollout uses: no list or watch of workloads, no delete, no pod write.
    assert_eq!(
        find(&docs, "ClusterRole/otel-injector-rollout")["rules"],
        serde_json::json!([
            {"apiGroups": ["apps"], "resources": ["deployments", "statefulsets", "daemonsets"],
             "verbs": ["get", "patch"]},
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
            {"apiGroups": ["opentelemetry.io"], "resources": ["instrumentations/status"],
             "verbs": ["patch"]},
            {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]}
        ])
    );
    // kustomize puts each patch's variables before the ones it found.
    let mut want = vec![
        "OTEL_INJECTOR_ROLLOUT=true",
        "OTEL_INJECTOR_ROLLOUT_CONCURRENCY=1",
        "OTEL_INJECTOR_ROLLOUT_TIMEOUT=5m",
        "OTEL_INJECTOR_STATUS=true",
    ];
    want.extend(&BASE_ENV[1..]);
    assert_eq!(env(&docs), want);
}

#[test]
fn the_rollback_component_is_in_no_overlay_and_adds_its_rbac_and_env() {
    for o in ["cert-manager", "built-in", "targeted"] {
        assert!(
            ids(&overlay(o)).iter().all(|i| !i.contains("rollback")),
            "{o}"
        );
    }
    let docs = combined(&["status", "rollback"]);
    for doc in manifest("components/rollback/rbac.yaml") {
        let id = &ids(std::slice::from_ref(&doc))[0];
        assert_eq!(find(&docs, id), &doc, "{id}");
    }
    assert_eq!(env(&docs)[0], "OTEL_INJECTOR_ROLLBACK=true");
}

#[test]
fn the_registration_check_component_is_in_no_overlay_and_adds_its_rbac_and_env() {
    for o in ["cert-manager", "built-in", "targeted"] {
        assert!(
            ids(&overlay(o)).iter().all(|i| !i.contains("registration")),
            "{o}"
        );
    }
    let docs = combined(&["registration-check"]);
    for doc in manifest("components/registration-check/rbac.yaml") {
        let id = &ids(std::slice::from_ref(&doc))[0];
        assert_eq!(find(&docs, id), &doc, "{id}");
    }
    assert_eq!(
        env(&docs)[..2],
        [
            "OTEL_INJECTOR_CHECK_REGISTRATION=true",
            "OTEL_INJECTOR_REGISTRATION_FAILURE_POLICY=Ignore"
        ]
    );
}
