//! The webhook's HTTP contract, in-process: `server::router` driven with tower's `oneshot`,
//! without a socket or the binary. Each table row is one behaviour. What needs a connection
//! (TLS, keep-alive, slow clients, drain) stays in `server.rs` and `process.rs`; the
//! request span is checked alone in `router_logs.rs`.

use crate::support;
use std::time::{Duration, Instant};

use crate::support::router::{call, post, requests, webhook};
use crate::support::{MUTATE, fixture, review_of, uid_of};
use axum::body::{Body, Bytes};
use axum::http::{Request, header};
use otel_injector::server::MAX_BODY_BYTES;
use serde_json::json;

#[tokio::test]
async fn every_readable_review_gets_200_with_its_uid() {
    let _serial = crate::support::serial().await;
    // (fixture, whether the answer carries a patch, the outcome counted)
    let table = [
        ("pod-create-inject-java.json", true, "patched"),
        ("pod-create.json", false, "unchanged"),
        ("pod-update.json", false, "unchanged"),
        ("deployment-create.json", false, "unchanged"),
    ];
    for (name, patched, outcome) in table {
        let (router, metrics) = webhook();
        let review = fixture(name);
        let r = call(router, post(MUTATE, serde_json::to_vec(&review).unwrap())).await;
        let r = review_of(&r);
        assert_eq!(r.uid, uid_of(&review), "{name}");
        assert!(r.allowed, "{name}");
        assert_eq!(r.patch.is_some(), patched, "{name}: {:?}", r.patch);
        assert_eq!(r.patch_type.is_some(), patched, "{name}");
        assert_eq!(requests(&metrics, outcome), 1.0, "{name}");
    }
}

#[tokio::test]
async fn the_patch_applies_to_the_reviewed_pod_and_adds_the_agent() {
    let _serial = crate::support::serial().await;
    let (router, _) = webhook();
    let review = fixture("pod-create-inject-java.json");
    let r = call(router, post(MUTATE, serde_json::to_vec(&review).unwrap())).await;
    let patch: json_patch::Patch = serde_json::from_value(review_of(&r).patch.unwrap()).unwrap();
    let mut pod = review["request"]["object"].clone();
    json_patch::patch(&mut pod, &patch).expect("the patch applies");
    let spec = &pod["spec"];
    assert_eq!(
        spec["initContainers"][0]["name"],
        "opentelemetry-auto-instrumentation-java"
    );
    let env = spec["containers"][0]["env"].as_array().unwrap();
    let java_tool_options = env
        .iter()
        .find(|e| e["name"] == "JAVA_TOOL_OPTIONS")
        .and_then(|e| e["value"].as_str())
        .unwrap();
    assert!(
        java_tool_options.contains("-javaagent:"),
        "{java_tool_options}"
    );
    assert_eq!(
        pod["metadata"]["annotations"]["otel-injector/injected"],
        "java"
    );
}

#[tokio::test]
async fn unreadable_bodies_get_400_with_a_text_reason() {
    let _serial = crate::support::serial().await;
    // (body, a word the reason must contain)
    let table: [(Vec<u8>, &str); 6] = [
        (b"not json".to_vec(), "not valid AdmissionReview JSON"),
        (Vec::new(), "not valid AdmissionReview JSON"),
        (b"[1, 2]".to_vec(), "not valid AdmissionReview JSON"),
        (
            json!({"apiVersion": "v1", "kind": "Pod"})
                .to_string()
                .into(),
            "expected apiVersion admission.k8s.io/v1",
        ),
        (
            json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"})
                .to_string()
                .into(),
            "has no request",
        ),
        (
            json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                   "request": {"uid": ""}})
            .to_string()
            .into(),
            "empty uid",
        ),
    ];
    for (body, reason) in table {
        let (router, metrics) = webhook();
        let shown = String::from_utf8_lossy(&body).into_owned();
        let r = call(router, post(MUTATE, body)).await;
        assert_eq!(r.status, 400, "{shown}: {}", r.text());
        assert_eq!(
            r.header("content-type"),
            Some("text/plain; charset=utf-8"),
            "{shown}"
        );
        assert!(r.text().contains(reason), "{shown}: {}", r.text());
        assert_eq!(requests(&metrics, "invalid"), 1.0, "{shown}");
    }
}

#[tokio::test]
async fn bodies_over_the_limit_get_413() {
    let _serial = crate::support::serial().await;
    // Declared too large (refused before reading), and streamed past the limit unannounced.
    let declared = Request::post(MUTATE)
        .header(header::CONTENT_LENGTH, MAX_BODY_BYTES + 1)
        .body(Body::from("{}"))
        .unwrap();
    let chunk = Bytes::from(vec![b' '; 64 * 1024]);
    let chunks = MAX_BODY_BYTES / chunk.len() + 1;
    let stream =
        futures::stream::iter(std::iter::repeat_n(chunk, chunks).map(Ok::<_, std::io::Error>));
    let streamed = Request::post(MUTATE)
        .body(Body::from_stream(stream))
        .unwrap();
    for (what, req) in [("declared", declared), ("streamed", streamed)] {
        let (router, metrics) = webhook();
        let r = call(router, req).await;
        assert_eq!(r.status, 413, "{what}: {}", r.text());
        assert!(r.text().contains("byte limit"), "{what}: {}", r.text());
        assert_eq!(requests(&metrics, "too_large"), 1.0, "{what}");
    }
}

#[tokio::test]
async fn a_body_not_complete_before_the_timeout_parameter_gets_408() {
    let _serial = crate::support::serial().await;
    // The API server's `?timeout=` in Go syntax; the answer leaves time in hand before it.
    for (timeout, shown) in [("300ms", "300ms"), ("1s", "1s")] {
        let (router, metrics) = webhook();
        let stalled =
            Body::from_stream(futures::stream::pending::<Result<Bytes, std::io::Error>>());
        let t0 = Instant::now();
        let r = call(
            router,
            post(&format!("/mutate-v1-pod?timeout={timeout}"), stalled),
        )
        .await;
        let took = t0.elapsed();
        assert_eq!(r.status, 408, "{timeout}: {}", r.text());
        assert!(
            r.text().contains(&format!("within the {shown} deadline")),
            "{timeout}: {}",
            r.text()
        );
        let limit = otel_injector::duration::parse(timeout).unwrap();
        assert!(took < limit, "{timeout}: answered after {took:?}");
        assert_eq!(requests(&metrics, "deadline"), 1.0, "{timeout}");
    }
}

#[tokio::test]
async fn other_paths_and_methods_are_not_the_webhook() {
    let _serial = crate::support::serial().await;
    let get = Request::get(MUTATE).body(Body::empty()).unwrap();
    let other = post("/validate", "{}");
    for (req, status) in [(get, 405), (other, 404)] {
        let (router, metrics) = webhook();
        let r = call(router, req).await;
        assert_eq!(r.status, status);
        let counted: f64 = ["patched", "unchanged", "invalid", "too_large", "deadline"]
            .iter()
            .map(|o| requests(&metrics, o))
            .sum();
        assert_eq!(counted, 0.0, "not an admission request");
    }
}

#[tokio::test]
async fn a_review_is_answered_well_inside_the_default_deadline() {
    let _serial = crate::support::serial().await;
    let (router, _) = webhook();
    let review = fixture("pod-create-inject-java.json");
    let t0 = Instant::now();
    let r = call(
        router,
        post("/mutate-v1-pod", serde_json::to_vec(&review).unwrap()),
    )
    .await;
    assert_eq!(review_of(&r).uid, uid_of(&review));
    assert!(t0.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn skips_are_queued_as_events_about_the_pods_controller_and_dry_runs_are_not() {
    let _serial = crate::support::serial().await;
    let (router, _, mut rx) = support::router::webhook_with_events(8);
    let mut review = fixture("pod-create-inject-java.json");
    review["request"]["object"]["metadata"]["annotations"]["instrumentation.opentelemetry.io/inject-java"] =
        json!("missing");
    let r = call(
        router.clone(),
        post(MUTATE, serde_json::to_vec(&review).unwrap()),
    )
    .await;
    let r = review_of(&r);
    assert_eq!(
        r.status_only(),
        "java=skipped instrumentation_not_found shop/missing"
    );
    let event = rx.try_recv().expect("one event queued");
    assert_eq!(event.namespace, "shop");
    assert_eq!(event.note, r.warnings[0]);
    assert_eq!(event.instrumentation.as_deref(), Some("shop/missing"));
    let owner = event.owner.expect("the controller");
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
        (
            "ReplicaSet",
            "checkout-7d9f8b6c5d",
            "c2a5e7d1-8f4b-4e3a-b6d9-1a0f2e3c4b5d"
        )
    );
    assert!(rx.try_recv().is_err(), "one skip, one event");

    // A dry run has no side effects: the same answer, no event.
    review["request"]["dryRun"] = json!(true);
    let r = call(
        router.clone(),
        post(MUTATE, serde_json::to_vec(&review).unwrap()),
    )
    .await;
    assert!(review_of(&r).patch.is_some());
    assert!(rx.try_recv().is_err());

    // An injected pod: no event.
    let review = fixture("pod-create-inject-java.json");
    let r = call(router, post(MUTATE, serde_json::to_vec(&review).unwrap())).await;
    assert!(review_of(&r).warnings.is_empty());
    assert!(rx.try_recv().is_err());
}

#[tokio::test]
async fn a_full_event_queue_drops_and_counts_and_the_review_is_answered() {
    let _serial = crate::support::serial().await;
    let (router, metrics, _rx) = support::router::webhook_with_events(1);
    let mut review = fixture("pod-create-inject-java.json");
    review["request"]["object"]["metadata"]["annotations"]["instrumentation.opentelemetry.io/inject-java"] =
        json!("missing");
    for _ in 0..3 {
        let r = call(
            router.clone(),
            post(MUTATE, serde_json::to_vec(&review).unwrap()),
        )
        .await;
        assert!(review_of(&r).patch.is_some());
    }
    let text = metrics.encode();
    assert!(
        text.contains("otel_injector_events_total{result=\"dropped\"} 2"),
        "{text}"
    );
}

/// `POST /convert`: a ConversionReview answered from the objects alone, counted by outcome.
#[tokio::test]
async fn conversion_reviews_are_answered_with_their_uid_and_counted() {
    let _serial = crate::support::serial().await;
    let object = json!({
        "apiVersion": "opentelemetry.io/v1beta1", "kind": "Instrumentation",
        "metadata": {"name": "i", "namespace": "apps", "uid": "x"},
        "spec": {"envConfig": {"exporter": {"endpoint": "http://c:4317", "protocol": "grpc"}}}
    });
    let review = |desired: &str, objects: serde_json::Value| {
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
               "request": {"uid": "u-1", "desiredAPIVersion": desired, "objects": objects}})
        .to_string()
    };
    let (router, metrics) = webhook();
    let r = call(
        router,
        post(
            "/convert",
            review("opentelemetry.io/v1alpha1", json!([object])),
        ),
    )
    .await;
    assert_eq!(r.status, 200);
    let body: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(body["response"]["uid"], "u-1");
    assert_eq!(body["response"]["result"], json!({"status": "Success"}));
    assert_eq!(
        body["response"]["convertedObjects"],
        json!([{
            "apiVersion": "opentelemetry.io/v1alpha1", "kind": "Instrumentation",
            "metadata": {"name": "i", "namespace": "apps", "uid": "x", "annotations": {
                "otel-injector/v1beta1-fields":
                    "{\"defaultImages\":false,\"spec\":{\"envConfig\":{\"exporter\":{\"protocol\":\"grpc\"}}}}"
            }},
            "spec": {"exporter": {"endpoint": "http://c:4317"}}
        }])
    );
    let text = metrics.encode();
    let series = |s: &str| support::metric(&text, s).expect("series exists");
    assert_eq!(
        series("otel_injector_conversion_requests_total{outcome=\"success\"}"),
        1.0
    );
    assert_eq!(series("otel_injector_conversion_objects_total"), 1.0);

    // (body, what the Failure message says)
    let table: [(Vec<u8>, &str); 4] = [
        (b"not json".to_vec(), "not a ConversionReview"),
        (review("opentelemetry.io/v2", json!([])).into(), "desiredAPIVersion \"opentelemetry.io/v2\""),
        (
            review("opentelemetry.io/v1alpha1", json!([{"kind": "Secret"}])).into(),
            "object 0: kind \"Secret\" is not Instrumentation",
        ),
        (
            review("opentelemetry.io/v1alpha1", json!([{"kind": "Instrumentation", "apiVersion": "opentelemetry.io/v1beta1", "spec": []}])).into(),
            "object 0: spec is not an object",
        ),
    ];
    for (n, (body, message)) in table.into_iter().enumerate() {
        let (router, metrics) = webhook();
        let r = call(router, post("/convert", body)).await;
        assert_eq!(r.status, 200);
        let answer: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(answer["response"]["result"]["status"], "Failure", "{n}");
        let got = answer["response"]["result"]["message"].as_str().unwrap();
        assert!(got.contains(message), "{n}: {got}");
        let text = metrics.encode();
        assert_eq!(
            support::metric(
                &text,
                "otel_injector_conversion_requests_total{outcome=\"failure\"}"
            ),
            Some(1.0)
        );
    }
}
