use super::*;
use crate::cluster::StaticCatalog;
use crate::crd::parse_instrumentations;

const JAVA: &str = r#"
apiVersion: opentelemetry.io/v1alpha1
kind: Instrumentation
metadata: {name: java, namespace: shop}
spec:
  exporter: {endpoint: "http://collector:4318"}
  sampler: {type: parentbased_traceidratio, argument: "0.5"}
  java:
    env: [{name: OTEL_INSTRUMENTATION_JDBC_ENABLED, value: "false"}]
"#;

fn inst(yaml: &str) -> Arc<Instrumentation> {
    let mut all = parse_instrumentations(yaml).unwrap();
    Arc::new(all.remove(0))
}

fn names(entries: &[Value]) -> Vec<&str> {
    entries
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect()
}

#[test]
fn the_java_template_is_the_engines_injection() {
    let t = template::read(&inst(JAVA), Language::Java, &EngineConfig::default()).unwrap();
    assert_eq!(names(&t.prepended), ["OTEL_NODE_IP", "OTEL_POD_IP"]);
    let appended: Vec<&str> = t
        .appended
        .iter()
        .map(|a| a.entry["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        appended,
        [
            "OTEL_INSTRUMENTATION_JDBC_ENABLED",
            "JAVA_TOOL_OPTIONS",
            "OTEL_SERVICE_NAME",
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "OTEL_RESOURCE_ATTRIBUTES_POD_NAME",
            "OTEL_RESOURCE_ATTRIBUTES_NODE_NAME",
            "OTEL_TRACES_SAMPLER",
            "OTEL_TRACES_SAMPLER_ARG",
            "OTEL_RESOURCE_ATTRIBUTES",
        ]
    );
    let kinds: Vec<template::Kind> = t.appended.iter().map(|a| a.kind).collect();
    assert_eq!(kinds[2], template::Kind::ServiceName);
    assert_eq!(kinds[8], template::Kind::ResourceAttributes);
    // A user's sampler keeps both sampler variables out; a user's argument too.
    let sampler = &t.appended[6];
    assert_eq!(
        sampler.kept_out_by,
        ["OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG"]
    );
    // JAVA_TOOL_OPTIONS is extended in place, at the container's own mount.
    assert_eq!(
        t.extensions,
        [template::Extension {
            name: "JAVA_TOOL_OPTIONS".into(),
            prefix: String::new(),
            suffix: format!(
                " -javaagent:/otel-auto-instrumentation-java-{}/javaagent.jar",
                template::CONTAINER
            ),
        }]
    );
    assert!(
        t.refuse_value_from
            .contains(&"JAVA_TOOL_OPTIONS".to_owned())
    );
    assert!(
        t.refuse_literal
            .contains(&"OTEL_RESOURCE_ATTRIBUTES".to_owned())
    );
    assert!(!t.refuse_literal.contains(&"OTEL_SERVICE_NAME".to_owned()));
    assert_eq!(t.volumes.len(), 1);
    assert_eq!(
        t.volumes[0]["image"]["reference"],
        crate::agents::java::DEFAULT_IMAGE
    );
    assert_eq!(t.annotations["otel-injector/injected"], "java");
    assert!(t.annotations["otel-injector/status"].starts_with("java=injected shop/java "));
    assert_eq!(t.labels["otel-injector/injected"], "true");
}

#[test]
fn what_a_template_cannot_replay_is_not_covered_with_the_reason() {
    let copy = JAVA.replace("metadata: {name: java, namespace: shop}", "metadata: {name: java, namespace: shop, annotations: {otel-injector/agent-delivery: init-container}}");
    let err = template::read(&inst(&copy), Language::Java, &EngineConfig::default()).unwrap_err();
    assert_eq!(err.why, "the injection adds init containers");
    assert_eq!(err.reason, SkipReason::PolicyUnsupported);
    let tls = JAVA.replace(
        "exporter: {endpoint: \"http://collector:4318\"}",
        "exporter: {endpoint: \"https://collector:4318\", tls: {secretName: certs, ca: ca.crt}}",
    );
    let err = template::read(&inst(&tls), Language::Java, &EngineConfig::default()).unwrap_err();
    assert_eq!(
        err.why,
        "exporter TLS: a policy cannot check its Secret and ConfigMap"
    );
    let beta = JAVA.replace("  java:\n", "  nodejs: {}\n  java:\n").replace("metadata: {name: java, namespace: shop}", "metadata: {name: java, namespace: shop, annotations: {otel-injector/v1beta1-fields: '{\"defaultImages\":false}'}}");
    let err = template::read(&inst(&beta), Language::Python, &EngineConfig::default()).unwrap_err();
    assert_eq!(err.why, "the webhook skips it: image_required");
    assert_eq!(err.reason, SkipReason::ImageRequired);
}

#[test]
fn every_instrumentation_gets_a_policy_and_mode_policy_the_skip_objects() {
    let catalog = StaticCatalog::from_yaml(JAVA).unwrap();
    let config = EngineConfig::default();
    let kinds = |mode| -> Vec<(String, String)> {
        render(
            &catalog,
            &config,
            &Options {
                mode,
                ..Options::default()
            },
        )
        .objects
        .iter()
        .map(|o| {
            (
                o["kind"].as_str().unwrap().to_owned(),
                o["metadata"]["name"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
    };
    let both = kinds(Mode::Both);
    assert_eq!(
        both,
        [
            (
                "MutatingAdmissionPolicy".to_owned(),
                "otel-injector.shop.java".to_owned()
            ),
            (
                "MutatingAdmissionPolicyBinding".to_owned(),
                "otel-injector.shop.java".to_owned()
            ),
        ]
    );
    let policy = kinds(Mode::Policy);
    assert_eq!(policy.len(), 6);
    assert_eq!(policy[4].0, "ValidatingAdmissionPolicy");
    let rendered = render(&catalog, &config, &Options::default());
    let coverage = &rendered.coverage["shop/java"];
    assert_eq!(coverage.injected, LANGUAGES);
    let binding = &rendered.objects[1];
    assert_eq!(binding["spec"]["paramRef"]["name"], "java");
    assert_eq!(
        binding["spec"]["paramRef"]["parameterNotFoundAction"],
        "Allow"
    );
    assert_eq!(
        rendered.objects[0]["metadata"]["annotations"][SPEC_HASH_ANNOTATION],
        SpecHash::of(&inst(JAVA).spec).to_string()
    );
}

#[test]
fn long_names_are_shortened_by_digest() {
    let long = "n".repeat(250);
    let name = object_name("otel-injector", "shop", &long);
    assert!(name.len() <= 253, "{name}");
    assert_ne!(name, object_name("otel-injector", "shop", &"m".repeat(250)));
    assert_eq!(
        object_name("otel-injector", "shop", "java"),
        "otel-injector.shop.java"
    );
}
