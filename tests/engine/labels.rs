//! Labels as the opt-in: every injection key may be a label or an annotation, on the pod or
//! its namespace; on one object a label wins over an annotation with the same key, and the
//! namespace-vs-pod rule then applies as before.

use k8s_openapi::api::core::v1::Pod;
use otel_injector::admission::mutate;
use otel_injector::agents::Language;
use otel_injector::cluster::StaticCatalog;
use otel_injector::engine::{EngineConfig, Report, Snapshot};
use rstest::rstest;
use serde_json::{Value, json};

const INJECT: &str = "instrumentation.opentelemetry.io/inject-java";
const NAMES: &str = "instrumentation.opentelemetry.io/container-names";

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
#[case::pod_label_alone(json!({INJECT: "true"}), json!({}), &["a"])]
#[case::pod_label_false_beats_annotation(json!({INJECT: "false"}), json!({INJECT: "true"}), &[])]
#[case::pod_label_true_beats_annotation_false(json!({INJECT: "true"}), json!({INJECT: "false"}), &["a"])]
#[case::label_names_the_target(json!({INJECT: "true", NAMES: "b"}), json!({NAMES: "a"}), &["b"])]
#[case::annotation_when_no_label(json!({}), json!({INJECT: "inst", NAMES: "b"}), &["b"])]
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
#[case::namespace_label(&[(INJECT, "true")], &[], &["a"])]
#[case::namespace_label_false_beats_its_annotation(&[(INJECT, "false")], &[(INJECT, "true")], &[])]
#[case::namespace_label_names_the_instrumentation(&[(INJECT, "inst")], &[(INJECT, "other")], &["a"])]
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
    let catalog = catalog().with_namespace_labels("shop", &[(INJECT, "true")]);
    let (got, report) = decide(&catalog, json!({INJECT: "false"}), json!({}));
    assert!(got.is_empty());
    assert!(report.injected.is_empty());
}
