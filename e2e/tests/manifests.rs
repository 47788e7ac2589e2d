//! The shipped manifests (the kustomize base and components) and the CRD's validation,
//! through the real apiserver: every document is applied with server-side apply, for real
//! (RBAC, webhook configurations, Services, NetworkPolicy, PDB) or as a dry run
//! (Deployments, the CRD, cert-manager's objects, checked against cert-manager's own CRDs),
//! and read back.

mod components;

use serde_json::{Value, json};

use crate::harness::{CLUSTER_WIDE, cluster};
use crate::support::api::{self, Access};
use crate::support::identity::{NAMESPACE, SERVICE_ACCOUNT};
use crate::support::tools::root;

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
    // A control plane of its own: the shared one's CRD points its conversion at the
    // harness's webhook by URL, which an apply of the manifest's Service reference would
    // merge with (a CRD names exactly one of the two).
    let _shared = CLUSTER_WIDE.read().await;
    let cp = crate::support::controlplane::ControlPlane::start()
        .await
        .unwrap_or_else(|e| panic!("control plane: {e}"));
    let applied = api::server_side_apply(&cp.client(), &manifest("crd.yaml"), true)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        applied,
        ["CustomResourceDefinition/instrumentations.opentelemetry.io"]
    );
}

fn manifest(file: &str) -> std::path::PathBuf {
    root().join("manifests").join(file)
}

/// Applies `manifests/<file>`: Deployments as a dry run, everything else for real. Returns
/// `kind/name` and the object as returned, in the file's order.
async fn apply(file: &str) -> Vec<(String, Value)> {
    let client = cluster().await.client();
    api::server_side_apply_each(&client, &manifest(file), |d| d["kind"] == "Deployment")
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

fn ids(applied: &[(String, Value)]) -> Vec<&str> {
    applied.iter().map(|(id, _)| id.as_str()).collect()
}

fn object<'a>(applied: &'a [(String, Value)], id: &str) -> &'a Value {
    &applied
        .iter()
        .find(|(i, _)| i == id)
        .unwrap_or_else(|| panic!("{id} not applied"))
        .1
}

/// The env of the Deployment's one container, as `NAME=value`.
fn env_of(deployment: &Value) -> Vec<String> {
    deployment["spec"]["template"]["spec"]["containers"][0]["env"]
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

/// Whether the manifests' own ServiceAccount may do this (SubjectAccessReview).
async fn account_may(access: Access<'_>) -> bool {
    let client = cluster().await.client();
    let user = format!("system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNT}");
    let groups = [
        "system:serviceaccounts".to_owned(),
        format!("system:serviceaccounts:{NAMESPACE}"),
        "system:authenticated".to_owned(),
    ];
    api::may(&client, &user, &groups, access)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

fn access<'a>(
    verb: &'a str,
    group: &'a str,
    resource: &'a str,
    namespace: &'a str,
    name: &'a str,
) -> Access<'a> {
    Access {
        verb,
        group,
        resource,
        namespace,
        name,
    }
}

const BASE_ENV: [&str; 4] = [
    "OTEL_INJECTOR_STATUS=false",
    "OTEL_INJECTOR_TLS_CERT_FILE=/tls/tls.crt",
    "OTEL_INJECTOR_TLS_KEY_FILE=/tls/tls.key",
    "OTEL_INJECTOR_LOG_FORMAT=json",
];

#[tokio::test]
async fn manifest_otel_injector_applies_with_read_only_rbac_and_a_metrics_service() {
    // Its Services must not exist while a test applies a webhook configuration for real.
    let _shared = CLUSTER_WIDE.read().await;
    product_namespace().await;
    let applied = apply("base/otel-injector.yaml").await;
    assert_eq!(
        ids(&applied),
        [
            "Namespace/otel-injector",
            "ServiceAccount/otel-injector",
            "ClusterRole/otel-injector",
            "ClusterRoleBinding/otel-injector",
            "Deployment/otel-injector",
            "Service/otel-injector",
            "Service/otel-injector-metrics",
            "PodDisruptionBudget/otel-injector",
        ]
    );
    assert_eq!(
        object(&applied, "ClusterRole/otel-injector")["rules"],
        json!([
            {"apiGroups": ["opentelemetry.io"], "resources": ["instrumentations"],
             "verbs": ["get", "list", "watch"]},
            {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "watch"]},
        ])
    );
    let pods = json!({"app.kubernetes.io/name": "otel-injector"});
    let deployment = object(&applied, "Deployment/otel-injector");
    assert_eq!(deployment["spec"]["template"]["metadata"]["labels"], pods);
    let spec = &deployment["spec"]["template"]["spec"];
    assert_eq!(spec["serviceAccountName"], SERVICE_ACCOUNT);
    assert_eq!(spec["containers"][0]["args"], json!(["serve"]));
    // No namespace labeling, no Secret/ConfigMap watch: their flags keep their defaults.
    assert_eq!(env_of(deployment), BASE_ENV);
    assert_eq!(
        spec["containers"][0]["ports"],
        json!([
            {"name": "webhook", "containerPort": 9443, "protocol": "TCP"},
            {"name": "admin", "containerPort": 8080, "protocol": "TCP"},
        ])
    );
    // The webhook's Service exposes the webhook port only; the admin port has its own.
    for (service, port) in [
        (
            "Service/otel-injector",
            json!({"name": "webhook", "port": 443, "targetPort": "webhook", "protocol": "TCP"}),
        ),
        (
            "Service/otel-injector-metrics",
            json!({"name": "admin", "port": 8080, "targetPort": "admin", "protocol": "TCP"}),
        ),
    ] {
        let stored = &object(&applied, service)["spec"];
        assert_eq!(stored["selector"], pods, "{service}");
        assert_eq!(stored["ports"], json!([port]), "{service}");
    }
}

#[tokio::test]
async fn manifest_network_policy_applies_admin_port_only_from_monitoring() {
    product_namespace().await;
    let applied = apply("components/network-policy/network-policy.yaml").await;
    assert_eq!(ids(&applied), ["NetworkPolicy/otel-injector"]);
    assert_eq!(
        object(&applied, "NetworkPolicy/otel-injector")["spec"],
        json!({
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": "otel-injector"}},
            "policyTypes": ["Ingress"],
            "ingress": [
                {"ports": [{"port": "webhook", "protocol": "TCP"}]},
                {"from": [{"namespaceSelector": {"matchLabels":
                    {"kubernetes.io/metadata.name": "monitoring"}}}],
                 "ports": [{"port": "admin", "protocol": "TCP"}]},
            ]
        })
    );
}

/// Applies a webhook configuration manifest for real, checks it as stored, and deletes it.
/// Holds [`CLUSTER_WIDE`] exclusively: while it exists, the API server would send other
/// tests' pods to the Service `otel-injector/otel-injector`, which runs nothing here.
async fn webhook_configuration_as_stored(file: &str) -> Value {
    let _alone = CLUSTER_WIDE.write().await;
    let client = cluster().await.client();
    // Pods made by the controllers meanwhile (a CronJob's, say) still reach it. Without the
    // Service, the API server cannot resolve where to send them and fails open at once; with
    // it, it would dial the Service's cluster IP, which leads nowhere here. The tests that
    // apply the Services hold CLUSTER_WIDE too.
    for doc in api::read_yaml_docs(&manifest("base/otel-injector.yaml"))
        .unwrap_or_else(|e| panic!("{e}"))
        .iter()
        .filter(|d| d["kind"] == "Service")
    {
        api::delete_doc(&client, doc)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let doc = api::read_yaml_docs(&manifest(file))
        .unwrap_or_else(|e| panic!("{e}"))
        .into_iter()
        .next()
        .expect("one document");
    // The built-in certificate test registers its own `otel-injector`.
    api::delete_doc(&client, &doc)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let applied = apply(file).await;
    api::delete_doc(&client, &doc)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        ids(&applied),
        ["MutatingWebhookConfiguration/otel-injector"]
    );
    // Every field the manifest sets is stored as it is; the API server adds nothing.
    assert_eq!(applied[0].1["webhooks"], doc["webhooks"]);
    applied[0].1["webhooks"].clone()
}

#[tokio::test]
async fn manifest_webhook_applies_as_one_fail_open_entry_for_every_pod_but_the_excluded() {
    let entries = webhook_configuration_as_stored("base/webhook.yaml").await;
    let opt_out =
        json!({"key": "otel-injector/inject", "operator": "NotIn", "values": ["disabled"]});
    assert_eq!(
        entries,
        json!([{
            "name": "pods.otel-injector.opentelemetry.io",
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": "Ignore",
            "timeoutSeconds": 5,
            "reinvocationPolicy": "IfNeeded",
            "matchPolicy": "Equivalent",
            "clientConfig": {"service": {"name": "otel-injector", "namespace": "otel-injector",
                                         "path": "/mutate-v1-pod", "port": 443}},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                       "resources": ["pods"], "scope": "Namespaced"}],
            "namespaceSelector": {"matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                 "values": ["kube-system", "otel-injector"]},
                opt_out,
            ]},
            "objectSelector": {"matchExpressions": [opt_out]},
        }])
    );
}

#[tokio::test]
async fn manifest_webhook_targeted_applies_as_two_entries() {
    let entries =
        webhook_configuration_as_stored("components/targeted/webhook-targeted.yaml").await;
    let names: Vec<&str> = entries
        .as_array()
        .expect("entries")
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "pods.otel-injector.opentelemetry.io",
            "namespaces.otel-injector.opentelemetry.io"
        ]
    );
    for e in entries.as_array().unwrap() {
        assert_eq!(e["failurePolicy"], "Ignore");
        assert_eq!(e["matchConditions"].as_array().map(Vec::len), Some(1));
    }
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
