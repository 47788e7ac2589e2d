//! KEP-6060's webhook-bound tokens as Kubernetes 1.37 issues them (alpha gate
//! `APIServerWebhookAuthenticationToken`, on in this control plane). 1.37's API server does
//! not yet present them to admission webhooks, so a ServiceAccount allowed to `attest` the
//! API groups stands in for it: the TokenRequest API binds its token to the
//! MutatingWebhookConfiguration, for the audience of that configuration's Service
//! (`https://otel-injector.otel-injector.svc:443/mutate-v1-pod`, the chart's). A webhook
//! started with `--webhook-bound-token-audience` for that audience admits that token, checked
//! against the keys the API server publishes, and refuses one bound to another configuration,
//! one that attests another API group only, a plain ServiceAccount token for the same
//! audience, and a caller with no token.
//!
//! 1.37 refuses the core group (`""`, pods) as an attested group ("may not be an empty
//! string"): a token for a pod webhook attests `*`, which only an identity allowed to `attest`
//! every group (the API server, by design) may ask for.

use std::time::{Duration, Instant};

use axum::http::Method;
use base64::Engine as _;
use serde_json::{Value, json};

use super::{forged, namespace_with_java};
use crate::harness::{is_injected, webhook_ready};
use crate::support::api;
use crate::support::controlplane::ControlPlane;
use crate::support::identity::Identity;
use crate::support::webhook::metric;

const NS: &str = "by-bound-token";
/// The configuration the webhook's tokens are bound to, and another one.
const CONFIG: &str = "e2e-callers-bound";
const OTHER: &str = "e2e-callers-other";
/// The chart's Service, as the API server computes a service webhook's audience.
const AUDIENCE: &str = "https://otel-injector.otel-injector.svc:443/mutate-v1-pod";
const CALLER: &str = "apiserver-stand-in";

async fn created(client: &kube::Client, path: &str, body: &Value) -> Value {
    let r = api::send(client, Method::POST, path, Some(body))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 201, "POST {path}: {}", r.body);
    r.body
}

/// A configuration whose one entry sends pods to the chart's Service, in no namespace (it
/// exists to bind tokens to; the API server never calls it).
fn configuration(name: &str) -> Value {
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [{
            "name": "pods.otel-injector.opentelemetry.io",
            "admissionReviewVersions": ["v1"], "sideEffects": "None", "failurePolicy": "Ignore",
            "clientConfig": {"service": {"namespace": "otel-injector", "name": "otel-injector",
                "port": 443, "path": "/mutate-v1-pod"}},
            "rules": [
                {"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                    "resources": ["pods"]},
                {"operations": ["CREATE"], "apiGroups": ["apps"], "apiVersions": ["v1"],
                    "resources": ["deployments"]}
            ],
            "namespaceSelector": {"matchLabels": {"e2e-callers/never": "true"}}
        }]
    })
}

/// A token of [`CALLER`] for [`AUDIENCE`], bound to the configuration `bound` (attesting the
/// API group given) or to nothing. Retried while the authorizer has not seen the binding yet.
async fn token(client: &kube::Client, bound: Option<(&str, &str)>) -> String {
    let mut spec = json!({"audiences": [AUDIENCE], "expirationSeconds": 600});
    if let Some((name, group)) = bound {
        spec["boundObjectRef"] = json!({"apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration", "name": name});
        spec["attestations"] = json!({"admissionReviewAPIGroups": [group]});
    }
    let request = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": spec});
    let path = format!("/api/v1/namespaces/{NS}/serviceaccounts/{CALLER}/token");
    let t0 = Instant::now();
    loop {
        let r = api::send(client, Method::POST, &path, Some(&request))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        if r.status == 201 {
            return r.body["status"]["token"]
                .as_str()
                .expect("a token")
                .to_owned();
        }
        assert!(
            r.status == 403 && t0.elapsed() < Duration::from_secs(10),
            "TokenRequest bound to {bound:?}: HTTP {} {}",
            r.status,
            r.body
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn claims(token: &str) -> Value {
    let payload = token.split('.').nth(1).expect("a JWT");
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .expect("base64url");
    serde_json::from_slice(&bytes).expect("JSON claims")
}

pub(super) async fn only_tokens_bound_to_this_configuration(cp: &ControlPlane, id: &Identity) {
    let client = cp.client();
    for name in [CONFIG, OTHER] {
        created(
            &client,
            "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
            &configuration(name),
        )
        .await;
    }
    namespace_with_java(&client, NS, &[]).await;
    created(
        &client,
        &format!("/api/v1/namespaces/{NS}/serviceaccounts"),
        &json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": CALLER}}),
    )
    .await;
    // It may attest every API group, as the API server's own identity would.
    let rbac = "/apis/rbac.authorization.k8s.io/v1";
    for (plural, object) in [
        (
            "clusterroles",
            json!({"kind": "ClusterRole", "rules": [{"apiGroups": ["authentication.k8s.io"],
                "resources": ["admissionReviewAPIGroups"], "verbs": ["attest"]}]}),
        ),
        (
            "clusterrolebindings",
            json!({"kind": "ClusterRoleBinding",
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "e2e-callers-attest"},
                "subjects": [{"kind": "ServiceAccount", "name": CALLER, "namespace": NS}]}),
        ),
    ] {
        let mut object = object;
        object["apiVersion"] = json!("rbac.authorization.k8s.io/v1");
        object["metadata"] = json!({"name": "e2e-callers-attest"});
        created(&client, &format!("{rbac}/{plural}"), &object).await;
    }

    let bound = token(&client, Some((CONFIG, "*"))).await;
    // The claims 1.37 defines for a webhook-bound token, which the webhook checks.
    let c = claims(&bound);
    assert_eq!(
        (
            &c["aud"],
            &c["kubernetes.io"]["mutatingwebhookconfiguration"]["name"],
            &c["kubernetes.io"]["attestations"]
        ),
        (
            &json!([AUDIENCE]),
            &json!(CONFIG),
            &json!({"admissionReviewAPIGroups": ["*"]})
        ),
        "{c}"
    );
    let other = token(&client, Some((OTHER, "*"))).await;
    let apps = token(&client, Some((CONFIG, "apps"))).await;
    let plain = token(&client, None).await;
    assert!(
        claims(&plain)["kubernetes.io"]["mutatingwebhookconfiguration"].is_null(),
        "{}",
        claims(&plain)
    );

    let args = [
        "--webhook-bound-token-audience",
        AUDIENCE,
        "--webhook-configuration",
        CONFIG,
    ]
    .map(str::to_owned);
    let mut webhook = webhook_ready(&id.kubeconfig, &args).await;
    // Admitted once the keys and the Instrumentation are read (both in the background).
    let t0 = Instant::now();
    loop {
        let (status, answer) = webhook
            .post_bearer("/mutate-v1-pod?timeout=5s", &forged(NS), &bound)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        if status == 200 && answer["response"]["patch"].is_string() {
            let patch = base64::engine::general_purpose::STANDARD
                .decode(answer["response"]["patch"].as_str().unwrap())
                .unwrap();
            let patch: Value = serde_json::from_slice(&patch).unwrap();
            let mut pod = forged(NS)["request"]["object"].clone();
            let patch: json_patch::Patch = serde_json::from_value(patch).unwrap();
            json_patch::patch(&mut pod, &patch).unwrap();
            assert!(is_injected(&pod), "{pod}");
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the bound token was not admitted with an injection in 30 s: HTTP {status} \
             {answer}\n{}",
            webhook.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let before = metric(
        &webhook.metrics().await,
        "otel_injector_callers_refused_total{reason=\"unauthenticated\"}",
    )
    .unwrap_or(0.0);
    for (what, token) in [
        ("bound to another configuration", Some(other.as_str())),
        ("attesting the apps group only", Some(apps.as_str())),
        (
            "a ServiceAccount token bound to nothing",
            Some(plain.as_str()),
        ),
        (
            "the static token of the admission configuration",
            Some(super::TOKEN),
        ),
        ("no token", None),
    ] {
        let review = forged(NS);
        let (status, answer) = match token {
            Some(t) => {
                webhook
                    .post_bearer("/mutate-v1-pod?timeout=5s", &review, t)
                    .await
            }
            None => {
                webhook
                    .post_as("/mutate-v1-pod?timeout=5s", &review, None)
                    .await
            }
        }
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(status, 401, "{what}: {answer}");
        assert!(!answer.to_string().contains("OTEL_"), "{what}: {answer}");
    }
    let after = metric(
        &webhook.metrics().await,
        "otel_injector_callers_refused_total{reason=\"unauthenticated\"}",
    );
    assert_eq!(after, Some(before + 5.0));
    webhook.stop();
}
