use std::sync::Arc;

use super::*;
use crate::engine::AgentDelivery;
use crate::keys::SPEC_HASH_ANNOTATION;

mod delivery;
mod forms;
mod keyless;
mod notes;
mod selected;
use crate::cluster::StaticCatalog;
use crate::crd::parse_instrumentations;
use k8s_openapi::api::core::v1::Pod;

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

/// The webhook's configuration with image-volume delivery.
fn image_volumes() -> EngineConfig {
    EngineConfig {
        delivery: AgentDelivery::ImageVolume,
        ..EngineConfig::default()
    }
}

#[test]
fn the_java_template_is_the_engines_injection() {
    let t = template::read(&inst(JAVA), Language::Java, &image_volumes()).unwrap();
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
        [template::ExtendedVariable {
            name: "JAVA_TOOL_OPTIONS".into(),
            prefix: String::new(),
            suffix: format!(
                " -javaagent:/otel-auto-instrumentation-java-{}/javaagent.jar",
                template::CONTAINER
            ),
            empty: format!(
                " -javaagent:/otel-auto-instrumentation-java-{}/javaagent.jar",
                template::CONTAINER
            ),
        }]
    );
    assert!(
        t.refuse_value_from
            .contains(&"JAVA_TOOL_OPTIONS".to_owned())
    );
    // A container's own resource attributes are merged and moved last, as the engine does.
    assert!(t.merges_resource_attributes);
    for refused in [&t.refuse_literal, &t.refuse_value_from] {
        assert!(!refused.contains(&"OTEL_RESOURCE_ATTRIBUTES".to_owned()));
    }
    let attributes = t.appended.last().unwrap();
    assert_eq!(attributes.kind, template::Kind::ResourceAttributes);
    assert_eq!(attributes.kept_out_by, ["OTEL_RESOURCE_ATTRIBUTES"]);
    assert!(!t.refuse_literal.contains(&"OTEL_SERVICE_NAME".to_owned()));
    // The agent cannot extend a value it cannot read: the webhook leaves that container.
    assert_eq!(t.agent_refuses, [("JAVA_TOOL_OPTIONS".to_owned(), true)]);
    assert_eq!(t.volumes.len(), 1);
    assert_eq!(
        t.volumes[0]["image"]["reference"],
        crate::agents::java::DEFAULT_IMAGE
    );
    assert_eq!(t.annotations["otel-injector/injected"], "java");
    assert!(t.annotations["otel-injector/status"].starts_with("java=injected shop/java "));
    assert_eq!(t.labels["otel-injector/injected"], "true");
    assert!(t.init_containers.is_empty());
}

#[test]
fn every_instrumentation_gets_a_policy_and_mode_policy_the_skip_objects() {
    let catalog = StaticCatalog::from_yaml(JAVA).unwrap();
    let config = EngineConfig::default();
    let kinds = |mode| -> Vec<(String, String)> {
        render(
            &catalog,
            &config,
            &PolicyOptions {
                mode,
                ..PolicyOptions::default()
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
    let rendered = render(&catalog, &config, &PolicyOptions::default());
    let coverage = &rendered.coverage["shop/java"];
    assert_eq!(coverage.injected, LANGUAGES);
    // One mutation per language; Python's and .NET's hold a branch per variant (glibc, musl).
    let mutations = rendered.objects[0]["spec"]["mutations"].as_array().unwrap();
    assert_eq!(mutations.len(), LANGUAGES.len());
    let python = mutations[2]["jsonPatch"]["expression"].as_str().unwrap();
    assert!(python.starts_with("variables.covered2 ? ("), "{python}");
    assert!(python.contains(" : variables.covered3 ? ("), "{python}");
    assert!(python.ends_with(") : []"), "{python}");
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
fn explain_names_the_policy_for_the_pods_it_covers_and_says_why_not_for_the_rest() {
    let catalog = StaticCatalog::new([Instrumentation::clone(&inst(JAVA))]);
    let config = EngineConfig::default();
    let pod = |spec: Value| -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": spec})).unwrap()
    };
    let app = |env: Value| pod(json!({"containers": [{"name": "app", "image": "a", "env": env}]}));
    let java = [(Language::Java, "shop/java")];
    let targets = ["app".to_owned()];
    let paths = std::cell::RefCell::new(Paths::new(&catalog, &config));
    let path_in = |ns: &str, p: &Pod, asked: &[(Language, &str)], injected: &[(Language, &str)]| {
        paths
            .borrow_mut()
            .of(ns, p, AskedFor::keys(asked), injected, &targets)
    };
    let path_of = |p: &Pod, asked: &[(Language, &str)], injected: &[(Language, &str)]| {
        path_in("shop", p, asked, injected)
    };
    let webhook = |why: &str| Path::Webhook(why.to_owned());
    for value in ["true", " TRUE ", "java", "shop/java"] {
        assert_eq!(
            path_of(&app(json!([])), &[(Language::Java, value)], &java),
            Path::Policy("shop/java".into()),
            "{value:?}"
        );
    }
    let asked = [(Language::Java, "true")];
    for own in [
        json!({"name": "OTEL_RESOURCE_ATTRIBUTES", "value": "a=b"}),
        json!({"name": "OTEL_RESOURCE_ATTRIBUTES", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}),
    ] {
        assert_eq!(
            path_of(&app(json!([own])), &asked, &java),
            Path::Policy("shop/java".into())
        );
    }
    // The agent extends a literal JAVA_TOOL_OPTIONS, not one from valueFrom.
    assert_eq!(
        path_of(
            &app(json!([{"name": "JAVA_TOOL_OPTIONS", "value": "-Xmx1g"}])),
            &asked,
            &java
        ),
        Path::Policy("shop/java".into())
    );
    assert_eq!(
        path_of(
            &app(
                json!([{"name": "JAVA_TOOL_OPTIONS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}])
            ),
            &asked,
            &java
        ),
        webhook(
            "container app sets JAVA_TOOL_OPTIONS with valueFrom: a merge the template cannot replay"
        )
    );
    assert_eq!(
        path_of(
            &app(json!([{"name": "A", "value": "1"}, {"name": "A", "value": "2"}])),
            &asked,
            &java
        ),
        webhook("container app sets a variable twice")
    );
    // A pod that names its node: the policy writes the name, as the webhook does.
    assert_eq!(
        path_of(
            &pod(json!({"nodeName": "n1", "containers": [{"name": "app", "image": "a"}]})),
            &asked,
            &java
        ),
        Path::Policy("shop/java".into())
    );
    let mut with_uid = pod(json!({"containers": [{"name": "app", "image": "a"}]}));
    with_uid.metadata.uid = Some("0f".into());
    assert_eq!(
        path_of(&with_uid, &asked, &java),
        webhook("metadata.uid is set: the webhook writes its value, a policy references it")
    );
    assert_eq!(
        path_of(
            &pod(
                json!({"containers": [{"name": "app", "image": "a", "volumeMounts": [{"name": "x", "mountPath": "/otel-auto-instrumentation-java-app"}]}]})
            ),
            &asked,
            &java
        ),
        webhook("container app mounts something at the agent's volume or path")
    );
    assert_eq!(
        path_in(
            "web",
            &app(json!([])),
            &[(Language::Java, "shop/java")],
            &java
        ),
        webhook(
            "the request names an Instrumentation of another namespace that is not annotated \
             otel-injector/cross-namespace: allowed (its policy is bound in its own)"
        )
    );
    assert_eq!(
        path_of(
            &app(json!([])),
            &[(Language::Java, "true"), (Language::Python, "true")],
            &java
        ),
        webhook("several languages in one pod: the outcome annotation lists them together")
    );
    assert_eq!(
        path_of(
            &app(json!([])),
            &[(Language::Go, "true")],
            &[(Language::Go, "shop/java")]
        ),
        webhook("a sidecar that shares the pod's process namespace: not a template")
    );
}

/// Each variant of `vars::VARIANTS` is one injection of the engine's: its values give the
/// same patch, the variants differ, the first is what a pod without the key gets, and the
/// values the agent refuses (the webhook instruments nothing) belong to no variant.
#[test]
fn variants_are_the_engines() {
    use crate::pod::select::Keys;
    let catalog = StaticCatalog::one("shop", "langs");
    let config = EngineConfig::default();
    let snapshot = crate::engine::Snapshot::take(&catalog, "shop", &config);
    let patch_of = |lang: Language, variant: Option<(&str, &str)>| {
        let mut annotations = serde_json::Map::new();
        annotations.insert(lang.inject_annotation().into(), "true".into());
        if let Some((k, v)) = variant {
            annotations.insert(k.into(), v.into());
        }
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "annotations": annotations},
            "spec": {"containers": [{"name": "app"}]}
        }))
        .unwrap();
        let (patch, _) = crate::admission::mutate(&snapshot, &pod);
        (serde_json::to_value(patch).unwrap(), pod)
    };
    let refused = [
        (Language::Python, &["alpine", " glibc", "MUSL"][..]),
        (Language::DotNet, &["linux-arm64", "linux-x64 "][..]),
    ];
    for (lang, key, groups) in vars::VARIANTS {
        let (plain, _) = patch_of(lang, None);
        let mut seen = Vec::new();
        for (i, values) in groups.iter().enumerate() {
            let (first, _) = patch_of(lang, Some((key, values[0])));
            assert_eq!(
                i == 0,
                first == plain,
                "{lang}: the first variant is the default"
            );
            assert!(
                !seen.contains(&first),
                "{lang} {key}={:?}: another variant's",
                values[0]
            );
            for value in values.iter() {
                let (patch, pod) = patch_of(lang, Some((key, value)));
                assert_eq!(patch, first, "{lang} {key}={value:?}");
                let annotations = crate::pod::select::Annotations::new(&pod, Keys::default());
                assert_eq!(
                    super::pod::variant_of(lang, &annotations),
                    Ok(Some((key, *values)))
                );
            }
            seen.push(first);
        }
        let (_, others) = refused.iter().find(|(l, _)| *l == lang).unwrap();
        for value in others.iter() {
            let (patch, pod) = patch_of(lang, Some((key, value)));
            assert!(!seen.contains(&patch), "{lang} {key}={value:?}");
            let annotations = crate::pod::select::Annotations::new(&pod, Keys::default());
            assert!(super::pod::variant_of(lang, &annotations).is_err());
        }
    }
}

/// An Instrumentation annotated `otel-injector/cross-namespace: allowed` is served by its
/// policy in every namespace by `ns/name` (a bare name or `"true"` only in its own), unless
/// the webhook's flags deny references across namespaces.
#[test]
fn a_shared_instrumentation_is_bound_everywhere_and_named_by_ns_name() {
    let shared = JAVA.replace(
        "metadata: {name: java, namespace: shop}",
        "metadata: {name: java, namespace: shop, annotations: {otel-injector/cross-namespace: allowed}}",
    );
    let catalog = StaticCatalog::from_yaml(&shared).unwrap();
    let namespaces_of = |config: &EngineConfig| {
        let rendered = render(&catalog, config, &PolicyOptions::default());
        let (policy, binding) = (&rendered.objects[0], &rendered.objects[1]);
        let selector = &binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"];
        let cel = policy["spec"]["variables"].to_string();
        (selector[1].clone(), cel)
    };
    let (everywhere, cel) = namespaces_of(&EngineConfig::default());
    assert_eq!(everywhere["operator"], "NotIn", "{everywhere}");
    assert!(
        cel.contains(
            r#"(namespaceObject.metadata.name == \"shop\" ? (variables.req0 == \"java\" || variables.req0 == \"shop/java\" || variables.req0.lowerAscii() == \"true\") : (variables.req0 == \"shop/java\"))"#
        ),
        "{cel}"
    );
    let deny = EngineConfig {
        cross_namespace: CrossNamespace::Deny,
        ..EngineConfig::default()
    };
    let (own, _) = namespaces_of(&deny);
    assert_eq!(
        own,
        json!({"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["shop"]})
    );

    let config = EngineConfig::default();
    let mut paths = Paths::new(&catalog, &config);
    let pod: Pod = serde_json::from_value(
        json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "app", "image": "a"}]}}),
    )
    .unwrap();
    let java = [(Language::Java, "shop/java")];
    let targets = ["app".to_owned()];
    assert_eq!(
        paths.of("web", &pod, AskedFor::keys(&java), &java, &targets),
        Path::Policy("shop/java".into())
    );
    let mut denied = Paths::new(&catalog, &deny);
    assert!(matches!(
        denied.of("web", &pod, AskedFor::keys(&java), &java, &targets),
        Path::Webhook(_)
    ));
}
