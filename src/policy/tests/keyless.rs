//! Which pods reach an injection policy's mutations when the renderer reads the namespaces
//! (live policies, `PolicyOptions::namespaces_read`): where neither the namespace's keys nor
//! a selector can ask, only the pods with a key of their own.

use super::JAVA;
use crate::cluster::StaticCatalog;
use crate::engine::EngineConfig;
use crate::policy::{PolicyOptions, render};

/// The names of the match conditions of the first policy rendered from `catalog`.
fn conditions(catalog: &StaticCatalog, namespaces_read: bool) -> Vec<String> {
    let options = PolicyOptions {
        namespaces_read,
        ..PolicyOptions::default()
    };
    let rendered = render(catalog, &EngineConfig::default(), &options);
    let policy = &rendered.objects[0];
    assert_eq!(policy["kind"], "MutatingAdmissionPolicy");
    policy["spec"]["matchConditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn only_pods_with_keys_of_their_own_reach_a_policy_where_nothing_else_can_ask() {
    let all = ["not-injected-before"];
    let keyed = ["not-injected-before", "asks-by-its-own-keys"];
    let plain = StaticCatalog::from_yaml(JAVA)
        .unwrap()
        .with_namespace("shop", &[]);
    assert_eq!(conditions(&plain, true), keyed);
    // A render that does not read the namespaces (the CLI's) cannot tell.
    assert_eq!(conditions(&plain, false), all);
    // The namespace's own keys, annotation or label, `"false"` included: every pod.
    let java = "instrumentation.opentelemetry.io/inject-java";
    for value in ["true", "false"] {
        let annotated = StaticCatalog::from_yaml(JAVA)
            .unwrap()
            .with_namespace("shop", &[(java, value)]);
        assert_eq!(conditions(&annotated, true), all, "{value}");
    }
    let labeled = StaticCatalog::from_yaml(JAVA)
        .unwrap()
        .with_namespace_labels("shop", &[(java, "true")]);
    assert_eq!(conditions(&labeled, true), all);
    // Bound in every namespace (shared), or with a selector: every pod.
    for annotation in [
        "otel-injector/cross-namespace: allowed",
        r#"otel-injector/selector: '{"languages": ["java"], "podSelector": {"matchLabels": {"tier": "web"}}}'"#,
    ] {
        let yaml = JAVA.replace(
            "metadata: {name: java, namespace: shop}",
            &format!("metadata: {{name: java, namespace: shop, annotations: {{{annotation}}}}}"),
        );
        let catalog = StaticCatalog::from_yaml(&yaml)
            .unwrap()
            .with_namespace("shop", &[]);
        assert_eq!(conditions(&catalog, true), all, "{annotation}");
    }
}
