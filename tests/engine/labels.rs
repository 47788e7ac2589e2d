//! Labels as the opt-in: every injection key may be a label or an annotation, on the pod or
//! its namespace; on one object a label wins over an annotation with the same key, and the
//! namespace-vs-pod rule then applies as before.

use k8s_openapi::api::core::v1::Pod;
use otel_injector::admission::mutate;
use otel_injector::agents::Language;
use otel_injector::cluster::StaticCatalog;
use otel_injector::engine::{EngineConfig, Report, Snapshot};
use otel_injector::keys::{CONTAINER_NAMES, INJECT_JAVA};
use rstest::rstest;
use serde_json::{Value, json};

fn catalog() -> StaticCatalog {
    StaticCatalog::from_yaml(
        "apiVersion: opentelemetry.io/v1alpha1\nkind: Instrumentation\nmetadata: {name: inst, namespace: shop}\n",
    )
    .unwrap()
}

fn decide(catalog: &StaticCatalog, labels: Value, annotations: Value) -> (Vec<String>, Report) {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "p", "labels": labels, "annotations": annotations},
        "spec": {"containers": [{"name": "a"}, {"name": "b"}]}
    }))
    .unwrap();
    let config = EngineConfig::default();
    let (patch, report) = mutate(&Snapshot::take(catalog, "shop", &config), &pod);
    let mut out = serde_json::to_value(&pod).unwrap();
    json_patch::patch(&mut out, &json_patch::Patch(patch)).unwrap();
    let targets = out["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c.get("env").is_some())
        .map(|c| c["name"].as_str().unwrap().to_owned())
        .collect();
    (targets, report)
}

#[rstest]
#[case::pod_label_alone(json!({INJECT_JAVA: "true"}), json!({}), &["a"])]
#[case::pod_label_false_beats_annotation(json!({INJECT_JAVA: "false"}), json!({INJECT_JAVA: "true"}), &[])]
#[case::pod_label_true_beats_annotation_false(json!({INJECT_JAVA: "true"}), json!({INJECT_JAVA: "false"}), &["a"])]
#[case::label_names_the_target(json!({INJECT_JAVA: "true", CONTAINER_NAMES: "b"}), json!({CONTAINER_NAMES: "a"}), &["b"])]
#[case::annotation_when_no_label(json!({}), json!({INJECT_JAVA: "inst", CONTAINER_NAMES: "b"}), &["b"])]
fn on_the_pod(#[case] labels: Value, #[case] annotations: Value, #[case] targets: &[&str]) {
    let (got, report) = decide(&catalog(), labels, annotations);
    assert_eq!(got, targets);
    let expected: &[Language] = if targets.is_empty() {
        &[]
    } else {
        &[Language::Java]
    };
    assert_eq!(report.injected, expected);
}

#[rstest]
#[case::namespace_label(&[(INJECT_JAVA, "true")], &[], &["a"])]
#[case::namespace_label_false_beats_its_annotation(&[(INJECT_JAVA, "false")], &[(INJECT_JAVA, "true")], &[])]
#[case::namespace_label_names_the_instrumentation(&[(INJECT_JAVA, "inst")], &[(INJECT_JAVA, "other")], &["a"])]
fn on_the_namespace(
    #[case] labels: &[(&str, &str)],
    #[case] annotations: &[(&str, &str)],
    #[case] targets: &[&str],
) {
    let catalog = catalog()
        .with_namespace("shop", annotations)
        .with_namespace_labels("shop", labels);
    let (got, _) = decide(&catalog, json!({}), json!({}));
    assert_eq!(got, targets);
}

#[test]
fn a_pod_label_false_overrides_a_namespace_label_true() {
    let catalog = catalog().with_namespace_labels("shop", &[(INJECT_JAVA, "true")]);
    let (got, report) = decide(&catalog, json!({INJECT_JAVA: "false"}), json!({}));
    assert!(got.is_empty());
    assert!(report.injected.is_empty());
}

/// A namespace that asks by a label alone gets its keyless pods injected through the whole
/// review, whose fast path answers a pod that asks for nothing without decoding it (one
/// pass and two: the envelope read with the pod, and the pod decoded after).
#[test]
fn a_namespace_that_asks_by_label_alone_is_not_passed_over_by_the_reviews_fast_path() {
    use otel_injector::admission::{review, review_two_pass};
    let catalog = catalog().with_namespace_labels("shop", &[(INJECT_JAVA, "true")]);
    let sent = json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "namespace": "shop", "operation": "CREATE",
            "object": {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "app", "image": "a"}]}},
        },
    });
    let body = serde_json::to_vec(&sent).unwrap();
    let config = EngineConfig::default();
    for (how, answer) in [
        ("one pass", review(&body, &catalog, &config)),
        ("two passes", review_two_pass(&body, &catalog, &config)),
    ] {
        let (_, s) = answer.unwrap();
        let injected: Vec<Language> = s.report.injected.iter().map(|i| i.language).collect();
        assert_eq!(injected, [Language::Java], "{how}: {:?}", s.report);
    }
}
