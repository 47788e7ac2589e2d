//! What the webhook's requests need and do not: no write for an annotated namespace, opted-out
//! pods never sent, pods that ask for nothing not decoded, the exporter TLS check's overlay RBAC,
//! a pod asking by label.

use std::collections::BTreeSet;

use axum::http::Method;
use serde_json::{Value, json};

use crate::harness::*;
use crate::support::api::{self, Access};
use crate::support::webhook::Requests;

use super::OPTED_OUT;
use otel_injector::keys::{INJECT_JAVA, INJECTED_ANNOTATION, OPT_OUT_LABEL};

#[tokio::test]
async fn annotated_namespace_is_injected_without_any_write() {
    let env = Env::start_with(
        "no-write",
        Options {
            exclusive_namespace_labels: true,
            ..Options::default()
        },
    )
    .await;
    assert_eq!(
        env.identity.user,
        "system:serviceaccount:otel-injector:otel-injector"
    );
    assert_eq!(
        env.assert_registered_as_the_manifest().await,
        ["pods.otel-injector.opentelemetry.io"]
    );
    let ns = env.namespace("team", &[(INJECT_JAVA, "true")]).await;
    env.await_webhook(&ns).await;
    env.instrumentation(&ns, "java", endpoint_spec("http://team.example:4318"))
        .await;
    let p = pod("plain", &[]);
    env.until_dry_run(&ns, &p, "injection from the namespace annotation", |r| {
        is_injected(&r.body)
    })
    .await;

    let before = env.requests().await;
    let created = env.create(&ns, &p).await;
    assert!(created.warnings.is_empty(), "{:?}", created.warnings);
    assert_eq!(
        env.requests().await,
        Requests {
            patched: before.patched + 1.0,
            ..before
        },
        "sent once, patched"
    );
    let stored = env.stored(&ns, "plain").await;
    assert_eq!(
        annotations_less_status(&stored, "java=injected ", "true"),
        json!({INJECTED_ANNOTATION: "java"})
    );
    assert_eq!(stored["spec"]["initContainers"][0]["name"], JAVA_INIT);
    assert_eq!(
        env_value(&stored, 0, "OTEL_EXPORTER_OTLP_ENDPOINT"),
        "http://team.example:4318"
    );

    // The namespace kept exactly the labels it was created with (and the one the API server
    // sets), and nobody but the test wrote it.
    let stored_ns = env.stored_namespace(&ns).await;
    assert_eq!(
        stored_ns["metadata"]["labels"],
        json!({SCOPE_LABEL: env.id, "kubernetes.io/metadata.name": ns}),
        "no {OPT_OUT_LABEL} label"
    );
    let managers: BTreeSet<&str> = stored_ns["metadata"]["managedFields"]
        .as_array()
        .expect("managedFields")
        .iter()
        .filter_map(|m| m["manager"].as_str())
        .collect();
    assert!(!managers.contains("otel-injector"), "{managers:?}");
    // It could not have: the webhook's identity may not patch namespaces.
    let patch = Access {
        verb: "patch",
        group: "",
        resource: "namespaces",
        namespace: "",
        name: &ns,
    };
    assert!(
        !api::may(&env.client, &env.identity.user, &env.identity.groups, patch)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    );
    assert!(
        !env.webhook.log().contains("namespace label"),
        "the labeler ran:\n{}",
        env.webhook.log()
    );
}

#[tokio::test]
async fn opted_out_pods_and_namespaces_are_never_sent() {
    let env = Env::start("opt-out").await;
    let ns = env.namespace("shop", &[(INJECT_JAVA, "true")]).await;
    env.await_webhook(&ns).await;
    env.instrumentation(&ns, "java", endpoint_spec("http://shop.example:4318"))
        .await;
    // This namespace's pods are injected, the webhook's cache is current...
    env.until_dry_run(&ns, &pod("probe", &[]), "injection", |r| {
        is_injected(&r.body)
    })
    .await;

    // ... but a pod labeled otel-injector/inject=disabled is not sent, though it asks.
    let before = env.requests().await;
    let labeled = pod_labeled("opted-out", &[(INJECT_JAVA, "true")], &[OPTED_OUT]);
    let created = env.create(&ns, &labeled).await;
    assert!(created.warnings.is_empty(), "{:?}", created.warnings);
    assert_eq!(env.requests().await, before, "the labeled pod was not sent");
    let stored = env.stored(&ns, "opted-out").await;
    assert_unchanged(&stored, &labeled);
    assert_eq!(
        stored["metadata"]["labels"],
        json!({OPTED_OUT.0: OPTED_OUT.1})
    );

    // A namespace labeled so, annotated and with an Instrumentation: none of its pods is sent.
    let off = env
        .namespace_labeled("off", &[OPTED_OUT], &[(INJECT_JAVA, "true")])
        .await;
    env.instrumentation(&off, "java", endpoint_spec("http://off.example:4318"))
        .await;
    for p in [pod("asks", &[(INJECT_JAVA, "true")]), pod("inherits", &[])] {
        let created = env.create(&off, &p).await;
        assert!(created.warnings.is_empty(), "{:?}", created.warnings);
        let name = p["metadata"]["name"].as_str().unwrap();
        assert_unchanged(&env.stored(&off, name).await, &p);
    }
    assert_eq!(
        env.requests().await,
        before,
        "no pod of the opted-out namespace was sent"
    );

    // The same pod without the label, in the first namespace, is sent and injected.
    env.create(&ns, &pod("opted-in", &[(INJECT_JAVA, "true")]))
        .await;
    assert_eq!(
        env.requests().await,
        Requests {
            patched: before.patched + 1.0,
            ..before
        }
    );
    assert!(is_injected(&env.stored(&ns, "opted-in").await));
}

#[tokio::test]
async fn pod_that_asks_for_nothing_is_answered_unchanged_without_being_decoded() {
    let env = Env::start("fast-path").await;
    let ns = env.namespace("plain", &[]).await;
    env.await_webhook(&ns).await;

    // Through the API server: sent (the default configuration sends every pod), answered
    // unchanged, no warning, no decision counted.
    let before = env.requests().await;
    let counters = decision_counters(&env.webhook.metrics().await);
    let p = pod("quiet", &[]);
    let created = env.create(&ns, &p).await;
    assert!(created.warnings.is_empty(), "{:?}", created.warnings);
    assert_eq!(
        env.requests().await,
        Requests {
            unchanged: before.unchanged + 1.0,
            ..before
        },
        "sent once, answered unchanged"
    );
    assert_unchanged(&env.stored(&ns, "quiet").await, &p);
    assert_eq!(decision_counters(&env.webhook.metrics().await), counters);

    // Not decoded: a review whose object is no Pod at all (`containers` is not a list) is
    // answered like any pod that asks for nothing; with an inject-* key in it, the pod is
    // decoded, fails, and the answer says so.
    let review = |annotations: Value| {
        json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": "0f6c1a57-3c1e-4b4e-9d55-7c1c2b3a4d5e",
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "namespace": ns, "operation": "CREATE",
                "userInfo": {"username": "e2e"},
                "object": {"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": "odd", "annotations": annotations},
                    "spec": {"containers": "not a list"}}
            }
        })
    };
    let (status, body) = env
        .webhook
        .post_review(&review(json!({"team": "shop"})))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "response": {"uid": "0f6c1a57-3c1e-4b4e-9d55-7c1c2b3a4d5e", "allowed": true}
        })
    );
    let (status, body) = env
        .webhook
        .post_review(&review(json!({INJECT_JAVA: "true"})))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["response"]["allowed"], true, "{body}");
    assert!(body["response"]["patch"].is_null(), "{body}");
    let warnings = body["response"]["warnings"].as_array().expect("warnings");
    assert_eq!(warnings.len(), 1, "{body}");
    assert!(
        warnings[0]
            .as_str()
            .unwrap_or("")
            .starts_with("otel-injector: pod could not be decoded ("),
        "{body}"
    );
}

#[tokio::test]
async fn exporter_tls_verification_works_with_the_rbac_of_its_overlay() {
    // Ready means the Secret and ConfigMap name caches have synced: with the list/watch of
    // manifests/components/verify-exporter-tls and nothing more.
    let env = Env::start_with(
        "verify-tls",
        Options {
            rbac: Rbac::VerifyExporterTls,
            args: vec!["--verify-exporter-tls=true".to_owned()],
            ..Options::default()
        },
    )
    .await;
    assert_eq!(
        env.identity.user,
        "system:serviceaccount:otel-injector:e2e-verify-exporter-tls"
    );
    let ns = env.namespace("shop", &[]).await;
    env.await_webhook(&ns).await;
    env.instrumentation(
        &ns,
        "java",
        json!({"exporter": {"endpoint": "https://collector.example:4318",
                            "tls": {"secretName": "collector-client", "ca_file": "ca.crt"}}}),
    )
    .await;
    let p = pod("tls", &[(INJECT_JAVA, "true")]);
    let missing = format!(
        "inject-java: exporter TLS Secret \"collector-client\" not found in namespace \
         \"{ns}\"; not injected"
    );
    let r = env
        .until_dry_run(&ns, &p, "the missing Secret's warning", |r| {
            r.warnings.contains(&missing)
        })
        .await;
    assert_eq!(r.warnings, [missing]);
    assert!(!is_injected(&r.body));

    let secret = json!({"apiVersion": "v1", "kind": "Secret",
                        "metadata": {"name": "collector-client", "namespace": ns},
                        "data": {"ca.crt": "Y2E="}});
    let created = api::send(
        &env.client,
        Method::POST,
        &format!("/api/v1/namespaces/{ns}/secrets"),
        Some(&secret),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(created.status, 201, "{}", created.body);
    env.until_dry_run(&ns, &p, "injection once the Secret exists", |r| {
        is_injected(&r.body)
    })
    .await;
    let created = env.create(&ns, &p).await;
    assert!(created.warnings.is_empty(), "{:?}", created.warnings);
    let stored = env.stored(&ns, "tls").await;
    assert_eq!(
        stored["spec"]["volumes"][1],
        json!({"name": "otel-auto-secret-collector-client",
               "secret": {"secretName": "collector-client", "defaultMode": 420}})
    );
}

#[tokio::test]
async fn a_pod_asking_by_label_is_injected_with_the_default_configuration() {
    // Labels as the opt-in (the Operator's v1beta1 design): the default configuration sends
    // every pod, and a label is read like the annotation of the same key.
    let env = Env::start_with("by-label", Options::default()).await;
    let ns = env.namespace("team", &[]).await;
    env.await_webhook(&ns).await;
    env.instrumentation(&ns, "java", endpoint_spec("http://team.example:4318"))
        .await;
    let p = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "labeled", "labels": {INJECT_JAVA: "true"}},
        "spec": {"containers": [{"name": "app", "image": "shop/app:1"}]}});
    env.until_dry_run(&ns, &p, "injection from the pod label", |r| {
        is_injected(&r.body)
    })
    .await;
    let created = env.create(&ns, &p).await;
    assert!(created.warnings.is_empty(), "{:?}", created.warnings);
    let stored = env.stored(&ns, "labeled").await;
    assert_eq!(
        annotations_less_status(&stored, "java=injected ", "true"),
        json!({INJECTED_ANNOTATION: "java"})
    );
    assert_eq!(stored["spec"]["initContainers"][0]["name"], JAVA_INIT);
    assert_eq!(
        env_value(&stored, 0, "OTEL_EXPORTER_OTLP_ENDPOINT"),
        "http://team.example:4318"
    );
}
