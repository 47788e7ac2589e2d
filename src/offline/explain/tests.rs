//! `explain` on manifests: the record of the engine's decision (requests, choices, targets,
//! variables and skips) as the explanation and its text.

use super::{Explanation, SkipExplained, explain, fix, text};
use crate::engine::{Catalog, EngineConfig, SkipReason};
use crate::offline::Context;
use crate::offline::manifests::{self, Source};

const JAVA: &str = "tests/data/instrumentations/java.yaml";

/// The context of `sources` with the Java Instrumentation, in namespace `shop`.
fn context(sources: &[Source]) -> Context {
    Context::build(
        sources,
        &[JAVA.into()],
        &[],
        None,
        EngineConfig::default(),
        "shop".into(),
    )
    .unwrap()
}

fn explain_text(manifest: &str) -> Vec<Explanation> {
    let sources = vec![manifests::parse("m.yaml", manifest).unwrap()];
    explain(&context(&sources), &sources).unwrap()
}

/// Asserts that `skip` is of `language` for `reason`, with the one warning `message`.
fn assert_skip(skip: &SkipExplained, language: &str, reason: &str, message: &str) {
    assert_eq!(
        (skip.language.as_deref(), skip.reason),
        (Some(language), reason)
    );
    assert_eq!(skip.messages, [message]);
}

const DEPLOYMENT: &str = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: cart}\nspec:\n  template:\n    metadata:\n      annotations:\n        instrumentation.opentelemetry.io/inject-java: \"true\"\n        instrumentation.opentelemetry.io/inject-python: shop/missing\n        instrumentation.opentelemetry.io/python-container-names: app\n        instrumentation.opentelemetry.io/java-container-names: app\n    spec:\n      containers:\n      - name: app\n        image: cart:1.0\n        env:\n        - {name: OTEL_LOGS_EXPORTER, value: none}\n";

#[test]
fn explains_requests_choices_targets_env_and_skips() {
    let e = &explain_text(DEPLOYMENT)[0];
    assert_eq!(e.object, "Deployment shop/cart");
    assert_eq!(e.injected, ["java"]);
    assert_eq!(e.requests.len(), 2);
    let java = &e.requests[0];
    assert_eq!(
        (java.language.as_str(), java.from, java.value.as_str()),
        ("java", "pod", "true")
    );
    assert_eq!(java.instrumentation.as_deref(), Some("shop/java-inst"));
    assert_eq!(
        java.why.as_deref(),
        Some("the only Instrumentation in namespace \"shop\" (the annotation says \"true\")")
    );
    assert_eq!(java.targets, ["app"]);
    assert_eq!(
        java.targets_why,
        "instrumentation.opentelemetry.io/java-container-names: \"app\""
    );
    let python = &e.requests[1];
    assert_eq!(python.instrumentation, None);

    let app = e.containers.iter().find(|c| c.name == "app").unwrap();
    let source = |n: &str| {
        let v = app.env.iter().find(|v| v.name == n).unwrap();
        (v.source, v.detail.as_str())
    };
    assert_eq!(
        source("OTEL_LOGS_EXPORTER"),
        ("user", "set by the pod; the webhook keeps it")
    );
    assert_eq!(
        source("OTEL_INSTRUMENTATION_JDBC_ENABLED"),
        ("language section", "spec.java.env of shop/java-inst")
    );
    assert_eq!(
        source("OTEL_SERVICE_NAME"),
        ("derived", "the Deployment's name")
    );
    assert_eq!(
        source("OTEL_POD_IP"),
        ("derived", "downward API: status.podIP")
    );
    assert_eq!(
        source("OTEL_EXPORTER_OTLP_ENDPOINT"),
        (
            "instrumentation",
            "spec.exporter.endpoint of shop/java-inst"
        )
    );
    assert_eq!(
        source("JAVA_TOOL_OPTIONS"),
        ("agent", "set by the java agent")
    );
    assert!(
        e.containers
            .iter()
            .any(|c| c.added && c.name == "opentelemetry-auto-instrumentation-java")
    );

    assert_eq!(e.skipped.len(), 1);
    let s = &e.skipped[0];
    assert_skip(
        s,
        "python",
        "instrumentation_not_found",
        "inject-python: Instrumentation \"shop/missing\" not found; not injected",
    );
    assert_eq!(s.fix, fix(SkipReason::InstrumentationNotFound));

    let text = text(&explain_text(DEPLOYMENT));
    assert!(text.starts_with("Deployment shop/cart (m.yaml, document 1)\n  java: asked by the pod annotation instrumentation.opentelemetry.io/inject-java: \"true\"\n    Instrumentation shop/java-inst: the only Instrumentation"), "{text}");
    assert!(text.contains("\n  skipped python (instrumentation_not_found)\n    inject-python: Instrumentation \"shop/missing\" not found; not injected\n    fix: "), "{text}");

    // The outcome the webhook would record, with the Instrumentation's spec digest.
    let hash = crate::crd::SpecHash::of(
        &crate::crd::parse_instrumentations(&std::fs::read_to_string(JAVA).unwrap()).unwrap()[0]
            .spec,
    );
    let status = format!(
        "java=injected shop/java-inst {hash}; python=skipped instrumentation_not_found shop/missing"
    );
    assert_eq!(e.status.as_deref(), Some(status.as_str()));
    assert_eq!(e.injected_label, Some("true"));
    assert!(
        text.ends_with(&format!(
            "\n  annotation otel-injector/status: {status}\n  label otel-injector/injected: true\n"
        )),
        "{text}"
    );
}

#[test]
fn a_rolled_back_workload_is_explained_with_what_to_do() {
    let ctx_hash = context(&[manifests::parse("m.yaml", "").unwrap()])
        .catalog
        .instrumentations()
        .spec_hash("shop", "java-inst")
        .unwrap();
    let marked = DEPLOYMENT.replace(
        "        instrumentation.opentelemetry.io/inject-python: shop/missing\n",
        &format!("        otel-injector/rolled-back: java={ctx_hash}\n"),
    );
    let e = &explain_text(&marked)[0];
    assert!(e.injected.is_empty());
    assert_eq!(e.path.as_ref().map(|p| p.via), None, "nothing is injected");
    let skip = &e.skipped[0];
    assert_skip(
        skip,
        "java",
        "rolled_back",
        &format!(
            "inject-java: rolled back, failed with shop/java-inst spec {ctx_hash}; remove \
             otel-injector/rolled-back to retry"
        ),
    );
    assert!(
        skip.fix.starts_with("find out why it failed"),
        "{}",
        skip.fix
    );
    let text = text(&explain_text(&marked));
    assert!(text.contains("  skipped java (rolled_back)\n"), "{text}");
}

#[test]
fn namespace_requests_and_nothing_asked() {
    let ns = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: shop\n  annotations:\n    instrumentation.opentelemetry.io/inject-java: java-inst\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers: [{name: app}]\n";
    let e = &explain_text(ns)[0];
    assert_eq!(e.requests[0].from, "namespace");
    assert_eq!(
        e.requests[0].why.as_deref(),
        Some("named by the annotation, in the pod's namespace")
    );
    assert_eq!(
        e.requests[0].targets_why,
        "the first container: no container-names annotation"
    );

    let none = explain_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers: [{name: app}]\n",
    );
    assert!(none[0].requests.is_empty() && none[0].containers.is_empty());
    assert_eq!(
        (none[0].status.as_deref(), none[0].injected_label),
        (None, None)
    );
    assert!(text(&none).contains("nothing asked for injection"));
}

#[test]
fn skips_and_targets_are_read_from_the_engines_record() {
    // A bad common list: the skip is the language's, its message the engine's warning.
    let bad = explain_text(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  annotations:\n    instrumentation.opentelemetry.io/inject-java: \"true\"\n    instrumentation.opentelemetry.io/container-names: nope\nspec:\n  containers: [{name: app}]\n",
    );
    let e = &bad[0];
    assert_eq!(e.requests[0].targets, Vec::<String>::new());
    assert_eq!(
        e.requests[0].targets_why,
        "instrumentation.opentelemetry.io/container-names: \"nope\": no container \"nope\" in this pod"
    );
    assert_skip(
        &e.skipped[0],
        "java",
        "invalid_container_names",
        "container-names: no container \"nope\" in this pod; pod not injected",
    );

    // Injected already: asked for, never targeted.
    let done = explain_text(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  annotations:\n    instrumentation.opentelemetry.io/inject-java: \"true\"\n    otel-injector/injected: java\nspec:\n  containers: [{name: app}]\n",
    );
    let e = &done[0];
    assert!(e.already_injected && e.skipped.is_empty());
    assert_eq!(
        (e.requests[0].from, e.requests[0].value.as_str()),
        ("pod", "true")
    );
    assert_eq!(
        e.requests[0].targets_why,
        "the first container: no container-names annotation; not looked at: the pod, or this language, stopped before targeting"
    );
}

#[test]
fn a_declarative_file_too_large_says_what_to_shrink() {
    let fix = fix(SkipReason::DeclarativeConfigTooLarge);
    assert!(
        fix.contains("spec.declarativeConfig") && fix.contains("annotations"),
        "{fix}"
    );
    assert!(!fix.contains("--max-pod-bytes"), "{fix}");
}

const SELECTED: &str = r#"apiVersion: v1
kind: Namespace
metadata: {name: shop, labels: {env: prod}}
---
apiVersion: opentelemetry.io/v1alpha1
kind: Instrumentation
metadata:
  name: python
  namespace: platform
  annotations:
    otel-injector/selector: '{"languages": ["python"], "namespaceSelector": {"matchLabels": {"env": "prod"}}, "containers": ["app"]}'
    otel-injector/base: base
spec:
  exporter: {endpoint: "http://platform:4318"}
---
apiVersion: opentelemetry.io/v1alpha1
kind: Instrumentation
metadata: {name: base, namespace: platform}
spec:
  propagators: [b3]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: cart}
spec:
  template:
    spec:
      containers:
      - {name: sidecar, image: envoy:1}
      - {name: app, image: cart:1.0}
"#;

#[test]
fn explains_a_selector_and_the_base_of_what_it_injects() {
    let e = &explain_text(SELECTED)[0];
    assert_eq!(e.injected, ["python"]);
    let r = &e.requests[0];
    assert_eq!(
        (r.from, r.annotation.as_str(), r.value.as_str()),
        ("selector", "otel-injector/selector", "platform/python")
    );
    assert_eq!(r.targets, ["app"]);
    assert_eq!(r.targets_why, "the selector's containers: \"app\"");
    assert_eq!(r.bases, ["platform/base"]);
    let inherited: Vec<(&str, &str)> = r
        .inherited
        .iter()
        .map(|i| (i.field.as_str(), i.from.as_str()))
        .collect();
    assert_eq!(inherited, [("propagators", "platform/base")]);
    let app = e.containers.iter().find(|c| c.name == "app").unwrap();
    let propagators = app
        .env
        .iter()
        .find(|v| v.name == "OTEL_PROPAGATORS")
        .unwrap();
    assert_eq!(
        propagators.detail,
        "spec.propagators of platform/python (from its base platform/base)"
    );
    let out = text(std::slice::from_ref(e));
    for line in [
        "  python: asked by the selector of platform/python (otel-injector/selector)\n",
        "    laid over its bases (otel-injector/base): platform/base\n",
        "      propagators from platform/base\n",
        "  path: the policy of platform/python, once applied (otel-injector policy); the webhook then leaves the pod alone\n",
    ] {
        assert!(out.contains(line), "{line:?} in\n{out}");
    }
}

#[test]
fn explains_two_selectors_with_the_webhooks_warning_and_a_false_that_keeps_them_out() {
    let two = format!(
        "{SELECTED}---\n\
         apiVersion: opentelemetry.io/v1alpha1\n\
         kind: Instrumentation\n\
         metadata:\n  name: team\n  namespace: shop\n  annotations:\n    \
         otel-injector/selector: '{{\"languages\": [\"python\"]}}'\n\
         spec: {{exporter: {{endpoint: \"http://team:4318\"}}}}\n\
         ---\n\
         apiVersion: apps/v1\n\
         kind: Deployment\n\
         metadata: {{name: legacy}}\n\
         spec:\n  template:\n    metadata:\n      annotations: {{instrumentation.opentelemetry.io/inject-python: \"false\"}}\n    \
         spec:\n      containers:\n      - {{name: app, image: legacy:1.0}}\n"
    );
    let all = explain_text(&two);
    let cart = &all[0];
    assert_eq!(
        cart.requests[0].value, "shop/team",
        "its own namespace's first"
    );
    let out = text(std::slice::from_ref(cart));
    assert_eq!(
        cart.requests[0].warnings,
        [
            "inject-python: the selectors of \"shop/team\" and \"platform/python\" both select this pod; using \"shop/team\""
        ]
    );
    let warning = "    warning: inject-python: the selectors of \"shop/team\" and \"platform/python\" both select this pod; using \"shop/team\"\n";
    assert!(out.contains(warning), "{out}");
    let legacy = text(std::slice::from_ref(&all[1]));
    assert!(
        legacy.contains("(one set to \"false\" also keeps the selectors out)"),
        "{legacy}"
    );
    assert!(all[1].requests.is_empty());
}
