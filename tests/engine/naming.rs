//! One resolver: [`NamingRule`], which the policies' CEL and `explain` ask which request
//! values name one Instrumentation, agrees with the engine's resolution of the request for
//! every form of value (`true` in any case, a name, `ns/name`, white space, `false`, an
//! Instrumentation named `true`), from its own namespace and from others, under each
//! `--cross-namespace-references` setting.

use k8s_openapi::api::core::v1::Pod;
use otel_injector::admission::mutate;
use otel_injector::agents::Language;
use otel_injector::cluster::StaticCatalog;
use otel_injector::engine::{
    Catalog, CrossNamespace, EngineConfig, NamingRule, Snapshot, shared_with_others,
};
use otel_injector::keys::CROSS_NAMESPACE_ANNOTATION;
use serde_json::json;

/// `(namespace, name, shared)`: `shop` holds one, `platform` two (one shared), `solo` one
/// named `true`, `pair` two of which one is named `true`.
const INSTRUMENTATIONS: [(&str, &str, bool); 6] = [
    ("shop", "java", false),
    ("platform", "shared", true),
    ("platform", "private", false),
    ("solo", "true", false),
    ("pair", "true", false),
    ("pair", "other", false),
];

fn catalog() -> StaticCatalog {
    let docs: Vec<String> = INSTRUMENTATIONS
        .iter()
        .map(|(ns, name, shared)| {
            let annotations = if *shared {
                format!(", annotations: {{{CROSS_NAMESPACE_ANNOTATION}: allowed}}")
            } else {
                String::new()
            };
            format!(
                "apiVersion: opentelemetry.io/v1alpha1\nkind: Instrumentation\n\
                 metadata: {{name: \"{name}\", namespace: {ns}{annotations}}}\n"
            )
        })
        .collect();
    StaticCatalog::from_yaml(&docs.join("---\n")).unwrap()
}

#[test]
fn the_naming_rule_is_the_engines_resolution_seen_from_each_instrumentation() {
    let catalog = catalog();
    let values = [
        "true",
        "TRUE",
        " true ",
        "false",
        "",
        "java",
        " java ",
        "shop/java",
        "shop/ java",
        "private",
        "shared",
        "platform/shared",
        "platform/private",
        "solo/true",
        "pair/true",
        "pair/other",
        "other",
        "nowhere/java",
        "shop/",
        "/java",
    ];
    let mut named = 0;
    for cross in [
        CrossNamespace::OptIn,
        CrossNamespace::All,
        CrossNamespace::Deny,
    ] {
        let config = EngineConfig {
            cross_namespace: cross,
            ..EngineConfig::default()
        };
        for pod_ns in ["shop", "platform", "solo", "pair", "elsewhere"] {
            let snapshot = Snapshot::take(&catalog, pod_ns, &config);
            for value in values {
                let pod: Pod = serde_json::from_value(json!({
                    "metadata": {"name": "p", "namespace": pod_ns, "annotations": {
                        Language::Sdk.inject_annotation(): value}},
                    "spec": {"containers": [{"name": "app", "image": "app:1"}]},
                }))
                .unwrap();
                let (_, report) = mutate(&snapshot, &pod);
                let engine: Vec<String> = report
                    .injected
                    .iter()
                    .map(|i| i.instrumentation.clone())
                    .collect();
                let index = catalog.instrumentations();
                let rules: Vec<String> = INSTRUMENTATIONS
                    .iter()
                    .filter(|(ns, name, _)| {
                        let Some(Ok(inst)) = index.get(ns, name) else {
                            panic!("{ns}/{name} not read");
                        };
                        let shared = shared_with_others(&config, inst);
                        NamingRule::of(&index, ns, name, shared).names(pod_ns, value)
                    })
                    .map(|(ns, name, _)| format!("{ns}/{name}"))
                    .collect();
                assert_eq!(
                    engine, rules,
                    "{cross:?}, a pod of {pod_ns} asking {value:?}"
                );
                named += rules.len();
            }
        }
    }
    // The table names something often enough to mean it.
    assert!(named > 40, "{named}");
}
