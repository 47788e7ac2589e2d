//! Targeting by selector (`otel-injector/selector`): a pod with no annotation is injected
//! when an Instrumentation's selector selects its namespace and labels; an explicit key on
//! the pod or namespace, for any language, `"false"` included, decides for the whole pod; of two selectors the pod's namespace's comes first,
//! then by name, with a warning that names both; the real review (fixture) is not taken
//! for a pod that asks for nothing.

use otel_injector::admission;
use otel_injector::agents::Language;
use otel_injector::cluster::StaticCatalog;
use otel_injector::engine::{AskedBy, CrossNamespace, EngineConfig, SkipReason};
use serde_json::{Value, json};

use crate::common::{names, run, run_with};

fn inst(ns: &str, name: &str, selector: Option<&str>) -> String {
    let annotation = selector.map_or(String::new(), |s| {
        format!("  annotations:\n    otel-injector/selector: '{s}'\n")
    });
    format!(
        "---\napiVersion: opentelemetry.io/v1alpha1\nkind: Instrumentation\nmetadata:\n  name: {name}\n  namespace: {ns}\n{annotation}spec:\n  exporter: {{endpoint: \"http://{name}.{ns}:4318\"}}\n"
    )
}

const PROD_BACKEND: &str = r#"{"languages": ["java"], "namespaceSelector": {"matchLabels": {"env": "prod"}}, "podSelector": {"matchLabels": {"tier": "backend"}}, "containers": ["app"]}"#;

fn catalog(yaml: &str) -> StaticCatalog {
    StaticCatalog::from_yaml(yaml)
        .unwrap()
        .with_namespace_labels("shop", &[("env", "prod")])
}

fn pod(labels: Value, annotations: Value) -> Value {
    json!({"metadata": {"name": "p", "labels": labels, "annotations": annotations},
           "spec": {"containers": [{"name": "sidecar", "image": "envoy:1"}, {"name": "app", "image": "app:1"}]}})
}

fn endpoint(out: &Value, container: usize) -> Option<String> {
    out["spec"]["containers"][container]["env"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == "OTEL_EXPORTER_OTLP_ENDPOINT")
        .and_then(|e| e["value"].as_str().map(str::to_owned))
}

#[test]
fn a_pod_with_no_annotation_is_injected_by_a_selector_in_its_containers() {
    let cat = catalog(&inst("platform", "java", Some(PROD_BACKEND)));
    let (out, d) = run(&cat, &pod(json!({"tier": "backend"}), json!({})));
    assert_eq!(d.injected, [Language::Java]);
    assert_eq!(d.injected[0].instrumentation, "platform/java");
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
    assert_eq!(d.requests.len(), 1);
    assert_eq!(d.requests[0].from, AskedBy::Selector);
    assert_eq!(d.requests[0].value, "platform/java");
    assert_eq!(
        endpoint(&out, 1).as_deref(),
        Some("http://java.platform:4318")
    );
    assert_eq!(endpoint(&out, 0), None, "only the selector's containers");
    assert_eq!(
        names(&out["spec"]["initContainers"]),
        ["opentelemetry-auto-instrumentation-java"]
    );
    // The pod says which selector asked, for the status to count.
    assert_eq!(
        out["metadata"]["annotations"]["otel-injector/selected-by"],
        "java=platform/java"
    );
}

#[test]
fn what_a_selector_does_not_select_asks_for_nothing() {
    let cat = catalog(&inst("platform", "java", Some(PROD_BACKEND)));
    for (labels, ns) in [
        (json!({"tier": "frontend"}), "shop"),
        (json!({"tier": "backend"}), "dev"),
    ] {
        let typed: k8s_openapi::api::core::v1::Pod =
            serde_json::from_value(pod(labels, json!({}))).unwrap();
        let config = EngineConfig::default();
        let snapshot = otel_injector::engine::Snapshot::take(&cat, ns, &config);
        let d = otel_injector::engine::decide(&snapshot, &typed);
        assert!(!d.report.requested, "{ns}: {:?}", d.report);
    }
}

#[rstest::rstest]
#[case::pod_false(json!({"instrumentation.opentelemetry.io/inject-java": "false"}), None)]
#[case::pod_names_another(json!({"instrumentation.opentelemetry.io/inject-java": "own"}), Some("shop/own"))]
#[case::pod_asks_another_language(json!({"instrumentation.opentelemetry.io/inject-python": "own"}), Some("shop/own"))]
fn an_explicit_key_wins_over_a_selector(#[case] annotations: Value, #[case] used: Option<&str>) {
    let cat = catalog(&(inst("platform", "java", Some(PROD_BACKEND)) + &inst("shop", "own", None)));
    let (out, d) = run(&cat, &pod(json!({"tier": "backend"}), annotations));
    assert!(out["metadata"]["annotations"]["otel-injector/selected-by"].is_null());
    let injected: Vec<&str> = d
        .injected
        .iter()
        .map(|i| i.instrumentation.as_str())
        .collect();
    assert_eq!(injected, used.into_iter().collect::<Vec<_>>());
    assert!(
        d.requests.iter().all(|r| r.from == AskedBy::Pod),
        "{:?}",
        d.requests
    );
}

#[test]
fn a_namespace_false_wins_too() {
    let cat = catalog(&inst("platform", "java", Some(PROD_BACKEND))).with_namespace(
        "shop",
        &[("instrumentation.opentelemetry.io/inject-java", "false")],
    );
    let (_, d) = run(&cat, &pod(json!({"tier": "backend"}), json!({})));
    assert!(
        d.injected.is_empty() && d.requests.is_empty(),
        "{:?}",
        d.requests
    );
}

#[test]
fn of_two_selectors_the_pods_namespace_comes_first_with_a_warning_naming_both() {
    let own = r#"{"languages": ["java", "python"], "containers": ["app"]}"#;
    let yaml = inst("platform", "java", Some(PROD_BACKEND)) + &inst("shop", "team", Some(own));
    let cat = catalog(&yaml);
    let (_, d) = run(&cat, &pod(json!({"tier": "backend"}), json!({})));
    let injected: Vec<(Language, &str)> = d
        .injected
        .iter()
        .map(|i| (i.language, i.instrumentation.as_str()))
        .collect();
    assert_eq!(
        injected,
        [
            (Language::Java, "shop/team"),
            (Language::Python, "shop/team")
        ]
    );
    assert_eq!(
        d.warnings,
        [
            "inject-java: the selectors of \"shop/team\" and \"platform/java\" both select this pod; using \"shop/team\""
        ]
    );
    // Whatever order the Instrumentations come in.
    let swapped = inst("shop", "team", Some(own)) + &inst("platform", "java", Some(PROD_BACKEND));
    let (_, again) = run(
        &catalog(&swapped),
        &pod(json!({"tier": "backend"}), json!({})),
    );
    assert_eq!(again.warnings, d.warnings);
}

#[test]
fn a_selector_of_another_namespace_follows_the_cross_namespace_rule() {
    let cat = catalog(&inst("platform", "java", Some(PROD_BACKEND)));
    let config = EngineConfig {
        cross_namespace: CrossNamespace::Deny,
        ..EngineConfig::default()
    };
    let (_, d) = run_with(&cat, &config, &pod(json!({"tier": "backend"}), json!({})));
    assert_eq!(d.skipped.len(), 1);
    assert_eq!(d.skipped[0].reason, SkipReason::CrossNamespaceDenied);
}

#[test]
fn a_bad_selector_selects_nothing_and_the_index_says_why() {
    let bad = r#"{"languages": ["cobol"]}"#;
    let cat = catalog(&inst("shop", "java", Some(bad)));
    let (_, d) = run(&cat, &pod(json!({}), json!({})));
    assert!(d.requests.is_empty());
    let index = otel_injector::engine::Catalog::instrumentations(&cat);
    assert_eq!(
        index
            .selector("shop", "java")
            .unwrap()
            .as_ref()
            .unwrap_err(),
        "unknown language \"cobol\""
    );
}

#[test]
fn the_review_decodes_a_pod_that_asks_for_nothing_when_a_selector_selects_it() {
    let text = include_str!("../data/pod-create.json");
    let mut review: Value = serde_json::from_str(text).unwrap();
    review["request"]["object"]["metadata"]["labels"]["tier"] = json!("backend");
    let body = serde_json::to_vec(&review).unwrap();
    let selector =
        r#"{"languages": ["java"], "podSelector": {"matchLabels": {"tier": "backend"}}}"#;
    let cat = catalog(&inst("shop", "java", Some(selector)));
    let config = EngineConfig::default();
    let (_, s) = admission::review(&body, &cat, &config).unwrap();
    assert!(s.patched, "{:?}", s.report);
    assert_eq!(s.report.injected.len(), 1);
    let (_, s) = admission::review_two_pass(&body, &cat, &config).unwrap();
    assert!(s.patched, "{:?}", s.report);
}
