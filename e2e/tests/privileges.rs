//! The default install's least privilege, through the real API server (authorizer: RBAC):
//! the webhook's own identity has exactly the RBAC of `manifests/base/otel-injector.yaml` plus
//! `manifests/components/events/rbac.yaml` (create and patch Events, in every overlay), and
//! with it and the one-entry `manifests/base/webhook.yaml` a namespace's annotation injects its
//! pods with no write but Events, opted-out pods and namespaces are never sent, and a pod that
//! asks for nothing is answered unchanged without being decoded.

mod requests;

use otel_injector::keys::{OPT_OUT, OPT_OUT_LABEL};
use std::collections::BTreeSet;

use axum::http::Method;
use serde_json::{Value, json};

use crate::harness::*;
use crate::support::api::{self, Access};
use crate::support::identity::{Identity, NAMESPACE, SERVICE_ACCOUNT};

const OPTED_OUT: (&str, &str) = (OPT_OUT_LABEL, OPT_OUT);

/// `(apiGroup, resource, resourceName, verb)` of every combination a list of rules allows
/// (`resourceName` empty: any).
fn atoms(rules: &Value) -> BTreeSet<(String, String, String, String)> {
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s.as_str().map(str::to_owned))
            .collect()
    };
    let mut out = BTreeSet::new();
    for rule in rules.as_array().into_iter().flatten() {
        let names = match strings(&rule["resourceNames"]) {
            n if n.is_empty() => vec![String::new()],
            n => n,
        };
        for g in strings(&rule["apiGroups"]) {
            for r in strings(&rule["resources"]) {
                for n in &names {
                    for v in strings(&rule["verbs"]) {
                        out.insert((g.clone(), r.clone(), n.clone(), v));
                    }
                }
            }
        }
    }
    out
}

/// `(url, verb)` of every non-resource rule.
fn url_atoms(rules: &Value) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    for rule in rules.as_array().into_iter().flatten() {
        for u in rule["nonResourceURLs"].as_array().into_iter().flatten() {
            for v in rule["verbs"].as_array().into_iter().flatten() {
                out.insert((
                    u.as_str().unwrap_or("").to_owned(),
                    v.as_str().unwrap_or("").to_owned(),
                ));
            }
        }
    }
    out
}

async fn get(client: &kube::Client, path: &str) -> Value {
    let r = api::send(client, Method::GET, path, None)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 200, "GET {path}: {}", r.body);
    r.body
}

/// Every (Cluster)RoleBinding that applies to `id`, as `Kind/namespace/name -> RoleKind/role`.
async fn bindings_of(client: &kube::Client, id: &Identity) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for (kind, path) in [
        (
            "ClusterRoleBinding",
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        ),
        (
            "RoleBinding",
            "/apis/rbac.authorization.k8s.io/v1/rolebindings",
        ),
    ] {
        for b in get(client, path).await["items"].as_array().expect("items") {
            let applies = b["subjects"].as_array().into_iter().flatten().any(|s| {
                match s["kind"].as_str().unwrap_or("") {
                    "User" => s["name"] == id.user.as_str(),
                    "Group" => id.groups.iter().any(|g| s["name"] == g.as_str()),
                    "ServiceAccount" => s["name"] == SERVICE_ACCOUNT && s["namespace"] == NAMESPACE,
                    _ => false,
                }
            });
            if applies {
                found.insert(format!(
                    "{kind}/{}/{} -> {}/{}",
                    b["metadata"]["namespace"].as_str().unwrap_or(""),
                    b["metadata"]["name"].as_str().unwrap_or(""),
                    b["roleRef"]["kind"].as_str().unwrap_or(""),
                    b["roleRef"]["name"].as_str().unwrap_or(""),
                ));
            }
        }
    }
    found
}

#[tokio::test]
async fn the_webhook_identity_has_exactly_the_default_rbac() {
    // No test binds an opt-in role to this ServiceAccount meanwhile.
    let _shared = CLUSTER_WIDE.read().await;
    let id = identity(Rbac::Default).await;
    let admin = cluster().await.client();
    let own = id.client().await.unwrap_or_else(|e| panic!("{e}"));

    // The token is the ServiceAccount's, with the groups every ServiceAccount gets.
    let review = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"});
    let r = api::send(
        &own,
        Method::POST,
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        Some(&review),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 201, "{}", r.body);
    let info = &r.body["status"]["userInfo"];
    assert_eq!(
        info["username"],
        "system:serviceaccount:otel-injector:otel-injector"
    );
    assert_eq!(
        info["groups"],
        json!([
            "system:serviceaccounts",
            "system:serviceaccounts:otel-injector",
            "system:authenticated"
        ])
    );

    // Bound: the manifest's ClusterRole, and what every authenticated user and every
    // ServiceAccount of any cluster has.
    let bindings = bindings_of(&admin, &id).await;
    assert_eq!(
        bindings,
        BTreeSet::from(
            [
                "ClusterRoleBinding//otel-injector -> ClusterRole/otel-injector",
                "ClusterRoleBinding//otel-injector-events -> ClusterRole/otel-injector-events",
                "ClusterRoleBinding//system:basic-user -> ClusterRole/system:basic-user",
                "ClusterRoleBinding//system:cluster-trust-bundle-discovery -> \
                 ClusterRole/system:cluster-trust-bundle-discovery",
                "ClusterRoleBinding//system:discovery -> ClusterRole/system:discovery",
                "ClusterRoleBinding//system:public-info-viewer -> ClusterRole/system:public-info-viewer",
                "ClusterRoleBinding//system:service-account-issuer-discovery -> \
                 ClusterRole/system:service-account-issuer-discovery",
            ]
            .map(String::from)
        )
    );
    let manifest = api::read_yaml_docs(
        &crate::support::tools::root().join("manifests/base/otel-injector.yaml"),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let role = manifest
        .iter()
        .find(|d| d["kind"] == "ClusterRole")
        .expect("a ClusterRole in base/otel-injector.yaml");
    assert_eq!(
        atoms(&role["rules"]),
        BTreeSet::from(
            [
                ("opentelemetry.io", "instrumentations", "", "get"),
                ("opentelemetry.io", "instrumentations", "", "list"),
                ("opentelemetry.io", "instrumentations", "", "watch"),
                ("", "namespaces", "", "get"),
                ("", "namespaces", "", "list"),
                ("", "namespaces", "", "watch"),
            ]
            .map(|(g, r, n, v)| (g.into(), r.into(), n.into(), v.into()))
        ),
        "the default ClusterRole"
    );
    // The events component, in every overlay: create and patch Events, nothing else.
    let events = api::read_yaml_docs(
        &crate::support::tools::root().join("manifests/components/events/rbac.yaml"),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let events_role = events
        .iter()
        .find(|d| d["kind"] == "ClusterRole")
        .expect("a ClusterRole in components/events/rbac.yaml");
    assert_eq!(
        atoms(&events_role["rules"]),
        BTreeSet::from(
            [
                ("events.k8s.io", "events", "", "create"),
                ("events.k8s.io", "events", "", "patch"),
            ]
            .map(|(g, r, n, v)| (g.into(), r.into(), n.into(), v.into()))
        ),
        "the events ClusterRole"
    );
    let (mut want, mut want_urls) = (atoms(&role["rules"]), BTreeSet::new());
    want.extend(atoms(&events_role["rules"]));
    for b in &bindings {
        let Some(name) = b.strip_prefix("ClusterRoleBinding//system:") else {
            continue;
        };
        let role = name.split(" -> ").next().unwrap_or("");
        let stored = get(
            &admin,
            &format!("/apis/rbac.authorization.k8s.io/v1/clusterroles/system:{role}"),
        )
        .await;
        want.extend(atoms(&stored["rules"]));
        want_urls.extend(url_atoms(&stored["rules"]));
    }

    // What the authorizer itself says this identity may do, in its own namespace and in
    // another one: exactly that.
    for ns in [NAMESPACE, "default"] {
        let review = json!({
            "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview",
            "spec": {"namespace": ns}
        });
        let r = api::send(
            &own,
            Method::POST,
            "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews",
            Some(&review),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.status, 201, "{}", r.body);
        assert_eq!(r.body["status"]["incomplete"], false, "{}", r.body);
        assert_eq!(
            atoms(&r.body["status"]["resourceRules"]),
            want,
            "resource rules in {ns}"
        );
        assert_eq!(
            url_atoms(&r.body["status"]["nonResourceRules"]),
            want_urls,
            "non-resource rules in {ns}"
        );
    }

    // The questions a reviewer asks, one by one (SubjectAccessReview).
    let table: &[(bool, &str, &str, &str, &str, &str)] = &[
        (true, "list", "opentelemetry.io", "instrumentations", "", ""),
        (
            true,
            "watch",
            "opentelemetry.io",
            "instrumentations",
            "",
            "",
        ),
        (
            true,
            "get",
            "opentelemetry.io",
            "instrumentations",
            "shop",
            "x",
        ),
        (true, "list", "", "namespaces", "", ""),
        (true, "watch", "", "namespaces", "", ""),
        (true, "get", "", "namespaces", "", "default"),
        (false, "patch", "", "namespaces", "", "default"),
        (false, "update", "", "namespaces", "", "default"),
        (false, "create", "", "namespaces", "", ""),
        (false, "delete", "", "namespaces", "", "default"),
        (false, "list", "", "secrets", "", ""),
        (false, "watch", "", "secrets", "", ""),
        (false, "get", "", "secrets", NAMESPACE, "otel-injector-tls"),
        (false, "create", "", "secrets", NAMESPACE, ""),
        (false, "list", "", "configmaps", "", ""),
        (false, "watch", "", "configmaps", "", ""),
        (false, "list", "", "pods", "", ""),
        (false, "create", "", "pods", "default", ""),
        (true, "create", "events.k8s.io", "events", "default", ""),
        (true, "patch", "events.k8s.io", "events", "default", ""),
        (false, "get", "events.k8s.io", "events", "default", ""),
        (false, "list", "events.k8s.io", "events", "", ""),
        (false, "delete", "events.k8s.io", "events", "default", ""),
        (false, "create", "", "events", "default", ""),
        (
            false,
            "create",
            "opentelemetry.io",
            "instrumentations",
            "shop",
            "",
        ),
        (
            false,
            "patch",
            "opentelemetry.io",
            "instrumentations",
            "shop",
            "x",
        ),
        (
            false,
            "delete",
            "opentelemetry.io",
            "instrumentations",
            "shop",
            "x",
        ),
        (
            false,
            "get",
            "admissionregistration.k8s.io",
            "mutatingwebhookconfigurations",
            "",
            "otel-injector",
        ),
        (
            false,
            "patch",
            "admissionregistration.k8s.io",
            "mutatingwebhookconfigurations",
            "",
            "otel-injector",
        ),
        (false, "impersonate", "", "users", "", ""),
    ];
    for &(allowed, verb, group, resource, namespace, name) in table {
        let access = Access {
            verb,
            group,
            resource,
            namespace,
            name,
        };
        assert_eq!(
            api::may(&admin, &id.user, &id.groups, access)
                .await
                .unwrap_or_else(|e| panic!("{e}")),
            allowed,
            "{access}"
        );
    }

    // And what the API server answers the token itself.
    for (method, path, status) in [
        (Method::GET, "/api/v1/namespaces", 200),
        (
            Method::GET,
            "/apis/opentelemetry.io/v1alpha1/instrumentations",
            200,
        ),
        (Method::GET, "/api/v1/secrets", 403),
        (Method::GET, "/api/v1/configmaps", 403),
    ] {
        let r = api::send(&own, method.clone(), path, None)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.status, status, "{method} {path}: {}", r.body);
    }
    let label =
        json!({"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "privileged"}}});
    let r = api::merge_patch(&own, "/api/v1/namespaces/default", &label)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 403, "PATCH namespace default: {}", r.body);
    assert!(
        r.message().contains(
            "User \"system:serviceaccount:otel-injector:otel-injector\" cannot patch resource \
             \"namespaces\""
        ),
        "{}",
        r.message()
    );
}
