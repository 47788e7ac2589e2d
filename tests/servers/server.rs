//! The webhook's HTTP behaviour through a real TLS socket to the real binary: reviews in and
//! out, error statuses, the body limit, deadlines, warnings and junk input.

mod junk;
mod limits;

use serde_json::{Value, json};

use crate::support::{
    IO_TIMEOUT, MUTATE, Server, fixture, head, post, review_of, serial, uid_of, within,
};

const JAVA_INIT: &str = "opentelemetry-auto-instrumentation-java";

/// A copy of `review` with the pod's `inject-java` annotation set to `value`, moved to
/// `namespace`, with a new uid.
fn variant(review: &Value, namespace: &str, value: &str, uid: &str) -> Value {
    let mut r = review.clone();
    r["request"]["uid"] = json!(uid);
    r["request"]["namespace"] = json!(namespace);
    let md = &mut r["request"]["object"]["metadata"];
    md["namespace"] = json!(namespace);
    md["annotations"]["instrumentation.opentelemetry.io/inject-java"] = json!(value);
    r
}

#[tokio::test]
async fn pod_create_with_inject_java_gets_a_patch_that_applies() {
    let _serial = serial().await;
    let server = Server::start().await;
    let review = fixture("pod-create-inject-java.json");
    let body = serde_json::to_vec(&review).unwrap();

    let mut conn = server.connect().await;
    assert_eq!(conn.alpn().as_deref(), Some(&b"http/1.1"[..]), "ALPN");
    let resp = within(
        IO_TIMEOUT,
        "review",
        conn.roundtrip(&post(MUTATE, &body, false)),
    )
    .await
    .unwrap();
    let r = review_of(&resp);
    assert_eq!(r.uid, uid_of(&review));
    assert!(r.allowed);
    assert_eq!(r.patch_type.as_deref(), Some("JSONPatch"));
    assert!(
        r.warnings.is_empty(),
        "unexpected warnings {:?}",
        r.warnings
    );
    let patch = r.patch.expect("a patch");

    let ops = patch.as_array().expect("patch is an array of operations");
    let init = ops
        .iter()
        .find(|op| op["op"] == "add" && op["path"] == "/spec/initContainers")
        .unwrap_or_else(|| panic!("no add of /spec/initContainers in {patch:#}"));
    assert_eq!(init["value"][0]["name"], JAVA_INIT, "{init:#}");
    assert_eq!(
        init["value"][0]["image"],
        "ghcr.io/open-telemetry/opentelemetry-operator/autoinstrumentation-java:2.30.0"
    );
    // Targeted operations only: nothing replaces the whole spec, metadata or managedFields.
    for op in ops {
        let path = op["path"].as_str().unwrap();
        assert!(
            !matches!(path, "" | "/spec" | "/metadata")
                && !path.starts_with("/metadata/managedFields"),
            "untargeted operation {op}"
        );
    }

    let original = review["request"]["object"].clone();
    let mut pod = original.clone();
    let ops: json_patch::Patch = serde_json::from_value(patch.clone()).unwrap();
    json_patch::patch(&mut pod, &ops).expect("the patch applies to the request's object");
    let annotations = &pod["metadata"]["annotations"];
    assert_eq!(annotations["otel-injector/injected"], "java");
    assert_eq!(
        annotations["instrumentation.opentelemetry.io/inject-java"],
        "true"
    );
    assert_eq!(
        pod["metadata"]["managedFields"],
        original["metadata"]["managedFields"]
    );
    assert_eq!(pod["spec"]["initContainers"][0]["name"], JAVA_INIT);
    let app = &pod["spec"]["containers"][0];
    let env = app["env"].as_array().unwrap();
    let tool_options = env
        .iter()
        .find(|e| e["name"] == "JAVA_TOOL_OPTIONS")
        .expect("JAVA_TOOL_OPTIONS");
    assert_eq!(
        tool_options["value"],
        "-XX:MaxRAMPercentage=75 -javaagent:/otel-auto-instrumentation-java-checkout/javaagent.jar"
    );
    assert_eq!(
        env.iter()
            .filter(|e| e["name"] == "JAVA_TOOL_OPTIONS")
            .count(),
        1
    );
    assert!(
        env.iter()
            .any(|e| e["name"] == "OTEL_EXPORTER_OTLP_ENDPOINT"
                && e["value"] == "http://otel-collector.observability.svc:4318"),
        "{env:#?}"
    );
    let volumes = pod["spec"]["volumes"].as_array().unwrap();
    assert_eq!(
        volumes[0]["name"], "kube-api-access-x7k2p",
        "existing volume kept first"
    );
    assert!(
        volumes.iter().any(|v| v["name"] == JAVA_INIT),
        "{volumes:#?}"
    );

    // The same connection is kept alive for the next review.
    let again = within(
        IO_TIMEOUT,
        "second review",
        conn.roundtrip(&post(MUTATE, &body, false)),
    )
    .await
    .expect("keep-alive connection reused");
    assert_eq!(review_of(&again).uid, uid_of(&review));

    let text = server.metrics().await;
    for needle in [
        "otel_injector_admission_requests_total{outcome=\"patched\"} 2",
        "otel_injector_injections_total{language=\"java\",outcome=\"injected\"} 2",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in\n{text}");
    }
}

#[tokio::test]
async fn unreadable_reviews_get_400_with_a_text_reason() {
    let _serial = serial().await;
    let server = Server::start().await;

    let resp = server
        .post_raw(MUTATE, b"{\"apiVersion\": \"admission.k8s.io/v1\", ")
        .await;
    assert_eq!(resp.status, 400, "{}", resp.text());
    assert_eq!(
        resp.header("content-type"),
        Some("text/plain; charset=utf-8")
    );
    assert!(
        resp.text()
            .starts_with("request body is not valid AdmissionReview JSON: EOF while parsing"),
        "{}",
        resp.text()
    );

    let resp = server
        .post_raw(
            MUTATE,
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#,
        )
        .await;
    assert_eq!(resp.status, 400);
    assert_eq!(resp.text(), "AdmissionReview has no request\n");

    let resp = server
        .post_raw(
            MUTATE,
            br#"{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"x"}}"#,
        )
        .await;
    assert_eq!(resp.status, 400);
    assert_eq!(
        resp.text(),
        "expected apiVersion admission.k8s.io/v1 kind AdmissionReview, got admission.k8s.io/v1beta1/AdmissionReview\n"
    );

    let resp = server
        .post_raw(
            MUTATE,
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":""}}"#,
        )
        .await;
    assert_eq!(resp.status, 400);
    assert_eq!(resp.text(), "AdmissionReview request has an empty uid\n");

    // Only POST is routed.
    let mut c = server.connect().await;
    let resp = c
        .roundtrip(&head("GET", MUTATE, &[("Connection", "close")]))
        .await
        .unwrap();
    assert_eq!(resp.status, 405);

    let text = server.metrics().await;
    assert!(
        text.contains("otel_injector_admission_requests_total{outcome=\"invalid\"} 4"),
        "{text}"
    );
}

#[tokio::test]
async fn other_kinds_and_updates_are_allowed_unchanged() {
    let _serial = serial().await;
    let server = Server::start().await;

    for name in [
        "deployment-create.json",
        "pod-update.json",
        "pod-create.json",
    ] {
        let review = fixture(name);
        let resp = server.review(&review).await;
        let raw = resp.json();
        let r = review_of(&resp);
        assert_eq!(r.uid, uid_of(&review), "{name}");
        assert!(r.allowed, "{name}");
        assert_eq!(r.patch, None, "{name}");
        assert_eq!(r.patch_type, None, "{name}");
        assert!(r.warnings.is_empty(), "{name}: {:?}", r.warnings);
        // Absent, not null: exactly uid and allowed.
        assert_eq!(
            raw["response"],
            json!({"uid": uid_of(&review), "allowed": true}),
            "{name}"
        );
    }

    let text = server.metrics().await;
    assert!(
        text.contains("otel_injector_admission_requests_total{outcome=\"unchanged\"} 3"),
        "{text}"
    );
    assert!(
        text.contains("otel_injector_admission_requests_total{outcome=\"patched\"} 0"),
        "{text}"
    );
}

#[tokio::test]
async fn unresolvable_instrumentations_are_warned_about_and_counted() {
    let _serial = serial().await;
    let server = Server::start().await;
    let base = fixture("pod-create-inject-java.json");

    let named = variant(
        &base,
        "shop",
        "does-not-exist",
        "6a1e0c8f-0000-4000-8000-000000000001",
    );
    let r = review_of(&server.review(&named).await);
    assert_eq!(r.uid, uid_of(&named));
    assert!(r.allowed);
    assert_eq!(
        r.status_only(),
        "java=skipped instrumentation_not_found shop/does-not-exist"
    );
    assert_eq!(r.warnings.len(), 1, "{:?}", r.warnings);
    assert!(r.warnings[0].contains("not found"), "{:?}", r.warnings);
    assert!(
        r.warnings[0].contains("shop/does-not-exist"),
        "{:?}",
        r.warnings
    );

    let two = variant(
        &base,
        "multi",
        "true",
        "6a1e0c8f-0000-4000-8000-000000000002",
    );
    let r = review_of(&server.review(&two).await);
    assert_eq!(r.uid, uid_of(&two));
    assert!(r.allowed);
    assert_eq!(
        r.status_only(),
        "java=skipped multiple_instrumentations multi/*"
    );
    assert_eq!(r.warnings.len(), 1, "{:?}", r.warnings);
    assert!(
        r.warnings[0].contains("2 Instrumentations"),
        "{:?}",
        r.warnings
    );

    let none = variant(
        &base,
        "empty",
        "true",
        "6a1e0c8f-0000-4000-8000-000000000003",
    );
    let r = review_of(&server.review(&none).await);
    assert_eq!(r.status_only(), "java=skipped no_instrumentation empty/*");
    assert_eq!(r.warnings.len(), 1, "{:?}", r.warnings);
    assert!(
        r.warnings[0].contains("no Instrumentation"),
        "{:?}",
        r.warnings
    );

    // Named across namespaces (`ns/name`) resolves.
    let qualified = variant(
        &base,
        "empty",
        "multi/java-b",
        "6a1e0c8f-0000-4000-8000-000000000004",
    );
    let r = review_of(&server.review(&qualified).await);
    let patch = r.patch.map(|p| p.to_string()).unwrap_or_default();
    assert!(
        patch.contains("java=injected multi/java-b "),
        "{patch} {:?}",
        r.warnings
    );

    let text = server.metrics().await;
    for needle in [
        "otel_injector_not_injected_total{reason=\"instrumentation_not_found\"} 1",
        "otel_injector_not_injected_total{reason=\"multiple_instrumentations\"} 1",
        "otel_injector_not_injected_total{reason=\"no_instrumentation\"} 1",
        "otel_injector_injections_total{language=\"java\",outcome=\"skipped\"} 3",
        "otel_injector_injections_total{language=\"java\",outcome=\"injected\"} 1",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in\n{text}");
    }
}
