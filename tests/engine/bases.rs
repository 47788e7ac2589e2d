//! Shared bases (`otel-injector/base`): the pod gets the Instrumentation laid over its bases,
//! whatever order the index learns them in; the digest is the merge's, so a base's change
//! changes it; a missing, cyclic, too deep or unshared base is a skip with its reason.

use crate::common::{catalog, env_value, run, run_with};
use otel_injector::agents::Language;
use otel_injector::crd::{SpecHash, parse_instrumentations};
use otel_injector::engine::{CrossNamespace, EngineConfig, Instrumentations, SkipReason};
use serde_json::{Value, json};

fn inst(ns: &str, name: &str, base: Option<&str>, spec: &str) -> String {
    let annotation = base.map_or(String::new(), |b| {
        format!("  annotations: {{otel-injector/base: \"{b}\"}}\n")
    });
    format!(
        "---\napiVersion: opentelemetry.io/v1alpha1\nkind: Instrumentation\nmetadata:\n  name: {name}\n  namespace: {ns}\n{annotation}spec:\n{spec}"
    )
}

fn platform() -> String {
    inst(
        "platform",
        "java",
        None,
        "  exporter: {endpoint: \"http://platform-collector:4318\"}\n  \
         env: [{name: OTEL_METRICS_EXPORTER, value: none}, {name: OTEL_LOGS_EXPORTER, value: none}]\n  \
         resource: {resourceAttributes: {team: platform, tier: shared}}\n  \
         java: {image: \"registry.example/java:2.20.0\"}\n",
    )
}

fn team(base: &str) -> String {
    inst(
        "shop",
        "java",
        Some(base),
        "  exporter: {endpoint: \"http://shop-collector:4318\"}\n  \
         env: [{name: OTEL_LOGS_EXPORTER, value: otlp}]\n  \
         resource: {resourceAttributes: {team: shop}}\n",
    )
}

fn java_pod() -> Value {
    json!({"metadata": {"name": "p", "annotations": {"instrumentation.opentelemetry.io/inject-java": "java"}},
           "spec": {"containers": [{"name": "app", "image": "app:1"}]}})
}

fn index(yaml: &str) -> Instrumentations {
    parse_instrumentations(yaml).unwrap().into_iter().collect()
}

#[test]
fn the_pod_gets_the_team_laid_over_the_platform() {
    let cat = catalog(&(platform() + &team("platform/java")));
    let (out, d) = run(&cat, &java_pod());
    assert_eq!(d.injected, [Language::Java]);
    let app = &out["spec"]["containers"][0];
    let value = |n: &str| env_value(app, n).and_then(|v| v.as_str().map(str::to_owned));
    assert_eq!(
        value("OTEL_EXPORTER_OTLP_ENDPOINT").unwrap(),
        "http://shop-collector:4318"
    );
    assert_eq!(value("OTEL_METRICS_EXPORTER").unwrap(), "none");
    assert_eq!(value("OTEL_LOGS_EXPORTER").unwrap(), "otlp");
    let attributes = value("OTEL_RESOURCE_ATTRIBUTES").unwrap();
    assert!(attributes.contains("team=shop"), "{attributes}");
    assert!(attributes.contains("tier=shared"), "{attributes}");
    assert_eq!(
        out["spec"]["initContainers"][0]["image"],
        "registry.example/java:2.20.0"
    );
}

#[test]
fn the_order_of_arrival_does_not_matter_and_a_base_change_reaches_its_dependents() {
    let both = index(&(team("platform/java") + &platform()));
    let other = index(&(platform() + &team("platform/java")));
    let hash = both.spec_hash("shop", "java").unwrap();
    assert_eq!(Some(hash), other.spec_hash("shop", "java"));
    let based = both.based("shop", "java").unwrap();
    assert_eq!(based.chain, ["platform/java"]);
    assert_eq!(based.error, None);
    let from = |path: &str| {
        based
            .inherited
            .iter()
            .find(|(p, _)| p == path)
            .map(|(_, s)| s.as_str())
    };
    assert_eq!(from("java"), Some("platform/java"));
    assert_eq!(from("env[OTEL_METRICS_EXPORTER]"), Some("platform/java"));
    assert_eq!(
        from("resource.resourceAttributes.tier"),
        Some("platform/java")
    );
    assert_eq!(from("exporter.endpoint"), None, "its own");

    let mut changed = both.clone();
    let newer = platform().replace("2.20.0", "2.21.0");
    changed.insert(parse_instrumentations(&newer).unwrap().remove(0));
    assert_ne!(
        changed.spec_hash("shop", "java"),
        Some(hash),
        "a base change is a new spec"
    );
    let merged = changed.get("shop", "java").unwrap().as_ref().unwrap();
    let image = merged.spec.java.as_ref().unwrap().image.as_deref();
    assert_eq!(image, Some("registry.example/java:2.21.0"));
    let own = changed.own("shop", "java").unwrap().as_ref().unwrap();
    assert_eq!(
        SpecHash::of(&own.spec),
        SpecHash::of(&parse_instrumentations(&team("platform/java")).unwrap()[0].spec)
    );

    assert!(changed.remove("platform", "java"));
    let gone = changed.based("shop", "java").unwrap();
    assert_eq!(
        gone.error.as_deref(),
        Some("base \"platform/java\" not found")
    );
    assert!(changed.get("shop", "java").unwrap().is_err());
}

#[test]
fn a_chain_attributes_each_value_to_the_base_that_set_it() {
    let middle = inst(
        "platform",
        "java-eu",
        Some("java"),
        "  exporter: {endpoint: \"http://eu-collector:4318\"}\n  java: {env: [{name: EU, value: \"1\"}]}\n",
    );
    let all = index(&(team("platform/java-eu") + &middle + &platform()));
    let based = all.based("shop", "java").unwrap();
    assert_eq!(based.chain, ["platform/java-eu", "platform/java"]);
    let java = all
        .get("shop", "java")
        .unwrap()
        .as_ref()
        .unwrap()
        .spec
        .java
        .clone()
        .unwrap();
    assert_eq!(java.image.as_deref(), Some("registry.example/java:2.20.0"));
    assert_eq!(java.env.len(), 1);
    assert!(
        based
            .inherited
            .contains(&("java".into(), "platform/java-eu".into()))
    );
    assert!(
        based
            .inherited
            .contains(&("java.image".into(), "platform/java".into()))
    );
}

#[rstest::rstest]
#[case::missing(team("platform/nope"), "base \"platform/nope\" not found")]
#[case::itself(
    inst("shop", "java", Some("java"), "  java: {}\n"),
    "bases form a cycle: shop/java -> shop/java"
)]
#[case::cycle(
    inst("shop", "java", Some("b"), "  java: {}\n") + &inst("shop", "b", Some("java"), "  java: {}\n"),
    "bases form a cycle: shop/java -> shop/b -> shop/java"
)]
#[case::not_a_name(team("Platform/java"), "base \"Platform/java\" is not a name or namespace/name")]
fn an_unusable_base_is_a_skip_with_its_reason(#[case] yaml: String, #[case] why: &str) {
    let cat = catalog(&(platform() + &yaml));
    let (_, d) = run(&cat, &java_pod());
    assert!(d.injected.is_empty());
    assert_eq!(d.skipped.len(), 1);
    assert_eq!(d.skipped[0].reason, SkipReason::BaseUnresolved);
    assert_eq!(
        d.warnings,
        [format!(
            "inject-java: Instrumentation \"shop/java\": {why}; not injected"
        )]
    );
}

#[test]
fn a_chain_is_bounded() {
    let mut yaml = inst("shop", "b0", None, "  java: {}\n");
    for i in 1..=5 {
        yaml += &inst(
            "shop",
            &format!("b{i}"),
            Some(&format!("b{}", i - 1)),
            "  java: {}\n",
        );
    }
    yaml += &inst("shop", "java", Some("b5"), "  java: {}\n");
    let all = index(&yaml);
    assert!(
        all.based("shop", "b4").unwrap().error.is_none(),
        "four bases are allowed"
    );
    assert_eq!(
        all.based("shop", "java").unwrap().error.as_deref(),
        Some("more than 4 bases")
    );
}

#[test]
fn a_base_in_another_namespace_is_shared_by_the_rule_pods_follow() {
    let cat = catalog(&(platform() + &team("platform/java")));
    let config = EngineConfig {
        cross_namespace: CrossNamespace::OptIn,
        ..EngineConfig::default()
    };
    let (_, d) = run_with(&cat, &config, &java_pod());
    assert_eq!(d.skipped[0].reason, SkipReason::BaseUnresolved);
    assert_eq!(
        d.warnings,
        [
            "inject-java: Instrumentation \"shop/java\": base \"platform/java\" not shared with other namespaces; not injected"
        ]
    );
    let shared = platform().replace(
        "  namespace: platform\n",
        "  namespace: platform\n  annotations: {otel-injector/cross-namespace: allowed}\n",
    );
    let cat = catalog(&(shared + &team("platform/java")));
    let (_, d) = run_with(&cat, &config, &java_pod());
    assert_eq!(d.injected, [Language::Java]);
}

#[test]
fn a_chain_learnt_from_the_top_down_or_rebased_follows_its_current_bases() {
    let middle = inst(
        "platform",
        "java-eu",
        Some("java"),
        "  java: {env: [{name: EU, value: \"1\"}]}\n",
    );
    let mut index = index(&team("platform/java-eu"));
    assert_eq!(
        index.based("shop", "java").unwrap().error.as_deref(),
        Some("base \"platform/java-eu\" not found")
    );
    index.insert(parse_instrumentations(&middle).unwrap().remove(0));
    assert_eq!(
        index.based("shop", "java").unwrap().error.as_deref(),
        Some("base \"platform/java\" not found")
    );
    index.insert(parse_instrumentations(&platform()).unwrap().remove(0));
    let based = index.based("shop", "java").unwrap();
    assert_eq!((based.chain.len(), based.error.as_deref()), (2, None));

    // Rebased straight onto the platform: the middle one's changes no longer reach it.
    index.insert(
        parse_instrumentations(&team("platform/java"))
            .unwrap()
            .remove(0),
    );
    let hash = index.spec_hash("shop", "java");
    let edited = middle.replace("value: \"1\"", "value: \"2\"");
    index.insert(parse_instrumentations(&edited).unwrap().remove(0));
    assert_eq!(index.spec_hash("shop", "java"), hash);
    index.insert(
        parse_instrumentations(&platform().replace("2.20.0", "2.22.0"))
            .unwrap()
            .remove(0),
    );
    assert_ne!(index.spec_hash("shop", "java"), hash);
    assert!(index.based("platform", "java-eu").unwrap().error.is_none());
}

/// A pod of `shop` with these labels and annotations.
fn pod_with(labels: Value, annotations: Value) -> Value {
    json!({"metadata": {"name": "p", "labels": labels, "annotations": annotations},
           "spec": {"containers": [{"name": "app", "image": "app:1"}]}})
}

#[rstest::rstest]
#[case::pod_annotation_true(json!({}), json!({"instrumentation.opentelemetry.io/inject-java": "true"}), &[])]
#[case::pod_label(json!({"instrumentation.opentelemetry.io/inject-java": "java"}), json!({}), &[])]
#[case::namespace_annotation(json!({}), json!({}), &[("instrumentation.opentelemetry.io/inject-java", "java")])]
fn every_form_of_request_gets_the_merge_or_the_skip(
    #[case] labels: Value,
    #[case] annotations: Value,
    #[case] namespace: &[(&str, &str)],
) {
    let cat = catalog(&(platform() + &team("platform/java"))).with_namespace("shop", namespace);
    let (out, d) = run(&cat, &pod_with(labels.clone(), annotations.clone()));
    assert_eq!(d.injected, [Language::Java], "{:?}", d.warnings);
    let app = &out["spec"]["containers"][0];
    assert_eq!(
        env_value(app, "OTEL_METRICS_EXPORTER"),
        Some(&json!("none")),
        "the base's"
    );
    assert_eq!(
        env_value(app, "OTEL_LOGS_EXPORTER"),
        Some(&json!("otlp")),
        "its own"
    );

    let orphan = catalog(&team("platform/java")).with_namespace("shop", namespace);
    let (_, d) = run(&orphan, &pod_with(labels, annotations));
    assert_eq!(d.skipped.len(), 1);
    assert_eq!(d.skipped[0].reason, SkipReason::BaseUnresolved);
}

#[test]
fn the_merge_no_longer_names_its_base() {
    let all = index(&(platform() + &team("platform/java")));
    let merged = all.get("shop", "java").unwrap().as_ref().unwrap();
    let named = |i: &otel_injector::crd::Instrumentation| {
        i.metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key("otel-injector/base"))
    };
    assert!(!named(merged), "laid over it already");
    assert!(named(all.own("shop", "java").unwrap().as_ref().unwrap()));
    // Put into another index alone (the policies' probes), it stands as it is.
    let alone: Instrumentations = [otel_injector::crd::Instrumentation::clone(merged)]
        .into_iter()
        .collect();
    assert_eq!(
        alone.spec_hash("shop", "java"),
        all.spec_hash("shop", "java")
    );
}
