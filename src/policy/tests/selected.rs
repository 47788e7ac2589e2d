//! Selectors in the rendered objects: which bindings span every namespace, what each
//! selector's policy reads, the status of selected pods and the two-selector warning. (What
//! the API server does with them is the e2e suite's: `e2e/tests/policy/selected.rs` and the
//! corpus case `key-selector`.)

use serde_json::Value;

use crate::cluster::StaticCatalog;
use crate::crd::parse_instrumentations;
use crate::engine::{CrossNamespace, EngineConfig};
use crate::policy::{Mode, PolicyOptions, render};

pub(super) const SELECTORS: &str = r#"
apiVersion: opentelemetry.io/v1alpha1
kind: Instrumentation
metadata:
  name: java
  namespace: platform
  annotations:
    otel-injector/selector: '{"languages": ["java"], "namespaceSelector": {"matchLabels": {"env": "prod"}}, "containers": ["app"]}'
spec: {exporter: {endpoint: "http://platform:4318"}}
---
apiVersion: opentelemetry.io/v1alpha1
kind: Instrumentation
metadata:
  name: team
  namespace: shop
  annotations:
    otel-injector/selector: '{"languages": ["java", "python"], "podSelector": {"matchLabels": {"tier": "both"}}}'
spec: {exporter: {endpoint: "http://team:4318"}}
---
apiVersion: opentelemetry.io/v1alpha1
kind: Instrumentation
metadata: {name: plain, namespace: shop}
spec: {exporter: {endpoint: "http://plain:4318"}}
"#;

fn objects(config: &EngineConfig, mode: Mode) -> Vec<Value> {
    let catalog = StaticCatalog::new(parse_instrumentations(SELECTORS).unwrap());
    let options = PolicyOptions {
        mode,
        ..PolicyOptions::default()
    };
    render(&catalog, config, &options).objects
}

fn named<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("{kind} {name}"))
}

fn variable<'a>(policy: &'a Value, name: &str) -> &'a str {
    policy["spec"]["variables"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == name)
        .unwrap_or_else(|| panic!("variable {name}"))["expression"]
        .as_str()
        .unwrap()
}

const NAMESPACE_NAME: &str = "kubernetes.io/metadata.name";

#[test]
fn a_selector_of_other_namespaces_binds_everywhere_and_reads_every_selector() {
    let all = objects(&EngineConfig::default(), Mode::Policy);
    let binding = |name: &str| {
        named(&all, "MutatingAdmissionPolicyBinding", name)["spec"]["matchResources"]
            ["namespaceSelector"]["matchExpressions"][1]
            .clone()
    };
    // The platform's selector reads namespaces by label: bound everywhere but the opt-outs.
    assert_eq!(
        binding("otel-injector.platform.java")["key"],
        NAMESPACE_NAME
    );
    assert_eq!(binding("otel-injector.platform.java")["operator"], "NotIn");
    // The team's selects in its own namespace: bound there, as one without a selector.
    for own in ["otel-injector.shop.team", "otel-injector.shop.plain"] {
        assert_eq!(binding(own)["operator"], "In", "{own}");
    }

    let platform = named(
        &all,
        "MutatingAdmissionPolicy",
        "otel-injector.platform.java",
    );
    // Both selectors, in key order; per language the pod's namespace's first.
    assert_eq!(
        variable(platform, "sel0"),
        "(((\"env\" in namespaceObject.metadata.?labels.orValue({}) && namespaceObject.metadata.?labels.orValue({})[\"env\"] == \"prod\")) && true)"
    );
    assert_eq!(
        variable(platform, "selecting0"),
        "(variables.sel0 ? [\"platform/java\"] : []) + (variables.sel1 ? [\"shop/team\"] : [])"
    );
    assert_eq!(
        variable(platform, "selectedLanguages"),
        "(variables.picked0.size() > 0 ? [\"java\"] : []) + (variables.picked2.size() > 0 ? [\"python\"] : [])"
    );
    // Its Java asks by selector when it is first and Java is the only language selected;
    // the selector's containers, unless the pod names its own.
    let covered = variable(platform, "covered0");
    assert!(
        covered.contains("|| (!variables.keyed && variables.selectedLanguages == [\"java\"] && variables.picked0[0] == \"platform/java\"))"),
        "{covered}"
    );
    assert!(variable(platform, "selectedNames0").ends_with(" : [\"app\"])"));
    // A policy of no selector reads none.
    let plain = named(&all, "MutatingAdmissionPolicy", "otel-injector.shop.plain");
    assert!(
        !plain["spec"]["variables"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v["name"] == "keyed")
    );
}

#[test]
fn selected_pods_get_the_webhooks_status_and_warning_in_mode_policy() {
    let deny = EngineConfig {
        cross_namespace: CrossNamespace::Deny,
        ..EngineConfig::default()
    };
    let all = objects(&deny, Mode::Policy);
    let status = named(
        &all,
        "MutatingAdmissionPolicy",
        "otel-injector.not-injected",
    );
    // The API server evaluates match conditions without the namespace: none reads it.
    let conditions: Vec<&str> = status["spec"]["matchConditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(conditions, ["not-injected-before"]);
    // With --cross-namespace-references=deny the platform's selector is not shared: the
    // pods of other namespaces are marked as the webhook skips them; it serves its own.
    assert_eq!(
        variable(status, "unshared"),
        "[\"platform/java\", \"shop/team\"]"
    );
    assert!(variable(status, "entries").contains("cross_namespace_denied"));
    let platform = named(
        &all,
        "MutatingAdmissionPolicy",
        "otel-injector.platform.java",
    );
    assert!(variable(platform, "covered0").contains(
        "variables.picked0[0] == \"platform/java\" && namespaceObject.metadata.name == \"platform\""
    ));
    let binding = named(
        &all,
        "MutatingAdmissionPolicyBinding",
        "otel-injector.platform.java",
    );
    assert_eq!(
        binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"][1]["operator"],
        "In"
    );

    // Java has two selectors: the warning names the first two.
    let warn = named(
        &all,
        "ValidatingAdmissionPolicy",
        "otel-injector.warn-selectors",
    );
    let validations = warn["spec"]["validations"].as_array().unwrap();
    assert_eq!(validations.len(), 1, "python has one selector");
    assert_eq!(
        validations[0]["messageExpression"],
        "\"inject-java: the selectors of \" + \"\\\"\" + variables.picked0[0] + \"\\\"\" + \" and \" + \"\\\"\" + variables.picked0[1] + \"\\\"\" + \" both select this pod; using \" + \"\\\"\" + variables.picked0[0] + \"\\\"\""
    );
    named(
        &all,
        "ValidatingAdmissionPolicyBinding",
        "otel-injector.warn-selectors",
    );
    // Mode both: the webhook marks and warns itself.
    let both = objects(&EngineConfig::default(), Mode::Both);
    assert!(
        !both
            .iter()
            .any(|o| o["kind"] == "ValidatingAdmissionPolicy")
    );
}
