//! Java injection, end to end through the engine: each case applies the returned JSON patch
//! to the input pod and compares the result with the expected one. What every language does
//! alike is in `inject_languages.rs`; the Instrumentation is `data/instrumentations/java.yaml`.

use crate::common::{
    HTTP_SDK, JAVA, assert_skipped, catalog, env, head, java, lit, run, with_section,
};
use otel_injector::agents::Language;
use otel_injector::cluster::StaticCatalog;
use otel_injector::engine::SkipReason;
use otel_injector::keys::INJECTED_ANNOTATION;
use rstest::rstest;
use serde_json::{Value, json};

#[test]
fn single_container_gets_the_agent_and_the_sdk_env_in_order() {
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "checkout", "namespace": "shop",
            "annotations": {"instrumentation.opentelemetry.io/inject-java": "true"}},
        "spec": {"containers": [{"name": "app", "image": "shop/checkout:1.4.2",
            "env": [{"name": "PORT", "value": "8080"}]}]}
    });
    let (out, d) = run(&JAVA.catalog(), &pod);
    assert_eq!(d.injected, [Language::Java]);
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
    let attrs = "k8s.container.name=app,k8s.namespace.name=shop,\
        k8s.node.name=$(OTEL_RESOURCE_ATTRIBUTES_NODE_NAME),\
        k8s.pod.name=$(OTEL_RESOURCE_ATTRIBUTES_POD_NAME),\
        service.instance.id=shop.$(OTEL_RESOURCE_ATTRIBUTES_POD_NAME).app,\
        service.namespace=shop,service.version=1.4.2";
    // Written out in full once; the tables (inject_languages.rs) build this pod, and the
    // other languages', from the helpers this case pins down.
    let expected = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "checkout", "namespace": "shop",
            "annotations": {"instrumentation.opentelemetry.io/inject-java": "true",
                            "otel-injector/injected": "java"}},
        "spec": {
            "containers": [{"name": "app", "image": "shop/checkout:1.4.2",
                "env": [
                    {"name": "OTEL_NODE_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}},
                    {"name": "OTEL_POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                    {"name": "PORT", "value": "8080"},
                    {"name": "OTEL_INSTRUMENTATION_JDBC_ENABLED", "value": "false"},
                    {"name": "OTEL_LOGS_EXPORTER", "value": "otlp"},
                    {"name": "JAVA_TOOL_OPTIONS", "value": " -javaagent:/otel-auto-instrumentation-java-app/javaagent.jar"},
                    {"name": "OTEL_SERVICE_NAME", "value": "checkout"},
                    {"name": "OTEL_EXPORTER_OTLP_ENDPOINT", "value": "http://otel-collector.observability:4318"},
                    {"name": "OTEL_RESOURCE_ATTRIBUTES_POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "OTEL_RESOURCE_ATTRIBUTES_NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                    {"name": "OTEL_PROPAGATORS", "value": "tracecontext,baggage"},
                    {"name": "OTEL_TRACES_SAMPLER", "value": "parentbased_traceidratio"},
                    {"name": "OTEL_TRACES_SAMPLER_ARG", "value": "0.25"},
                    {"name": "OTEL_RESOURCE_ATTRIBUTES", "value": attrs}
                ],
                "volumeMounts": [{"name": "opentelemetry-auto-instrumentation-java",
                                  "mountPath": "/otel-auto-instrumentation-java-app"}]}],
            "initContainers": [{
                "name": "opentelemetry-auto-instrumentation-java",
                "image": java::IMAGE,
                "command": ["cp", "/javaagent.jar", "/otel-auto-instrumentation-java/javaagent.jar"],
                "resources": {"limits": {"cpu": "500m", "memory": "256Mi"},
                              "requests": {"cpu": "50m", "memory": "64Mi"}},
                "volumeMounts": [{"name": "opentelemetry-auto-instrumentation-java",
                                  "mountPath": "/otel-auto-instrumentation-java"}]}],
            "volumes": [{"name": "opentelemetry-auto-instrumentation-java",
                         "emptyDir": {"sizeLimit": "200Mi"}}]
        }
    });
    assert_eq!(out, expected);
}

#[test]
fn extensions_get_one_init_container_each() {
    let inst = with_section(
        JAVA.shop,
        "extensions:\n  - image: ext/one:1\n    dir: /ext\n  - image: ext/two:2\n    dir: /opt/ext/",
    );
    let (out, _) = run(&catalog(&inst), &JAVA.asking("true"));
    let ext = |i: usize, image: &str, dir: &str| {
        let mut c = java::init(None);
        c["name"] = json!(format!("opentelemetry-auto-instrumentation-extension-{i}"));
        c["image"] = json!(image);
        c["command"] = json!([
            "cp",
            "-r",
            dir,
            "/otel-auto-instrumentation-java/extensions"
        ]);
        c
    };
    assert_eq!(
        out["spec"]["initContainers"],
        json!([
            java::init(None),
            ext(0, "ext/one:1", "/ext/."),
            ext(1, "ext/two:2", "/opt/ext/.")
        ])
    );
    let env = &out["spec"]["containers"][0]["env"];
    assert_eq!(
        env[4],
        lit(
            "JAVA_TOOL_OPTIONS",
            " -javaagent:/otel-auto-instrumentation-java-app/javaagent.jar \
             -Dotel.javaagent.extensions=/otel-auto-instrumentation-java-app/extensions"
        )
    );
}

#[test]
fn deployment_pod_with_generate_name_is_named_after_the_deployment() {
    let pod = json!({
        "metadata": {"generateName": "checkout-7d4b9c8f5-", "namespace": "shop",
            "labels": {"app": "checkout", "pod-template-hash": "7d4b9c8f5"},
            "annotations": {"instrumentation.opentelemetry.io/inject-java": "true"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "name": "checkout-7d4b9c8f5", "uid": "8b1c", "controller": true, "blockOwnerDeletion": true}]},
        "spec": {"containers": [{"name": "app", "image": "shop/checkout:3"}]}
    });
    let (out, _) = run(&JAVA.catalog(), &pod);
    assert_eq!(
        out["spec"]["containers"][0]["env"],
        env(vec![
            head(),
            java::env("app"),
            HTTP_SDK
                .tail("checkout", "app", Some("3"))
                .into_iter()
                .map(|mut v| {
                    // The owner's names sort into place among the other attributes.
                    if v["name"] == "OTEL_RESOURCE_ATTRIBUTES" {
                        let s = v["value"]
                            .as_str()
                            .unwrap()
                            .replace(
                                "k8s.container.name=app,",
                                "k8s.container.name=app,k8s.deployment.name=checkout,",
                            )
                            .replace(
                                "k8s.pod.name=$(OTEL_RESOURCE_ATTRIBUTES_POD_NAME),",
                                "k8s.pod.name=$(OTEL_RESOURCE_ATTRIBUTES_POD_NAME),k8s.replicaset.name=checkout-7d4b9c8f5,",
                            );
                        v["value"] = json!(s);
                    }
                    v
                })
                .collect(),
        ])
    );
}

/// Two Instrumentations in `shop`: `java-inst` and `second`.
fn two() -> StaticCatalog {
    catalog(&format!(
        "{}\n---\n{}",
        JAVA.shop,
        JAVA.shop.replace("name: java-inst", "name: second")
    ))
}

/// `shop` where the namespace asks for Java with `value`.
fn namespace_asking(catalog: StaticCatalog, value: &str) -> StaticCatalog {
    catalog.with_namespace(
        "shop",
        &[("instrumentation.opentelemetry.io/inject-java", value)],
    )
}

/// [`JAVA.asking`] `true` with the common container list `names`.
fn naming(names: &str) -> Value {
    let mut pod = JAVA.asking("true");
    pod["metadata"]["annotations"]["instrumentation.opentelemetry.io/container-names"] =
        json!(names);
    pod
}

/// Which Instrumentation the pod gets, by the pod's annotation or the namespace's.
#[rstest]
#[case::naming_one_of_two(two(), JAVA.asking("second"))]
#[case::in_another_namespace(
    catalog(&JAVA.shop.replace("namespace: shop", "namespace: observability")),
    JAVA.asking("observability/java-inst")
)]
#[case::the_namespace_asks(
    namespace_asking(JAVA.catalog(), "true"),
    json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "app", "image": "app"}]}})
)]
// The namespace names an instance; the pod says true: the namespace's instance.
#[case::the_namespace_names_it(namespace_asking(two(), "second"), JAVA.asking("true"))]
fn the_instrumentation_is_found(#[case] catalog: StaticCatalog, #[case] pod: Value) {
    let (out, d) = run(&catalog, &pod);
    assert_eq!(d.injected, [Language::Java]);
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
    assert_eq!(out["metadata"]["annotations"][INJECTED_ANNOTATION], "java");
}

/// Pods that ask but are not injected are told why (see inject_languages.rs for a namespace
/// without an Instrumentation and a disabled language).
#[rstest]
#[case::two_instrumentations(two(), JAVA.asking("true"), SkipReason::MultipleInstrumentations,
    "inject-java: 2 Instrumentations in namespace \"shop\"; name one instead of \"true\"")]
#[case::not_found(JAVA.catalog(), JAVA.asking("nope"), SkipReason::InstrumentationNotFound,
    "inject-java: Instrumentation \"shop/nope\" not found; not injected")]
#[case::not_found_in_another_namespace(JAVA.catalog(), JAVA.asking("other/java-inst"),
    SkipReason::InstrumentationNotFound,
    "inject-java: Instrumentation \"other/java-inst\" not found; not injected")]
#[case::cache_not_ready(JAVA.catalog().not_ready(), JAVA.asking("true"), SkipReason::CacheNotReady,
    "otel-injector: Instrumentation cache not synced yet; pod admitted without injection")]
#[case::unknown_container(JAVA.catalog(), naming("app,ghost"), SkipReason::InvalidContainerNames,
    "container-names: no container \"ghost\" in this pod; pod not injected")]
#[case::container_listed_twice(JAVA.catalog(), naming("app,app"), SkipReason::InvalidContainerNames,
    "container-names: container \"app\" listed twice; pod not injected")]
fn pods_that_are_not_injected_are_told_why(
    #[case] catalog: StaticCatalog,
    #[case] pod: Value,
    #[case] reason: SkipReason,
    #[case] warning: &str,
) {
    let (_, d) = run(&catalog, &pod);
    assert_skipped(&d, reason, warning);
}

/// Pods that do not ask (or cannot be injected at all) are left alone without a word.
#[rstest]
// Not asking is not a skip.
#[case::the_pod_says_false(JAVA.catalog(), JAVA.asking("false"))]
#[case::the_pod_overrides_the_namespace(namespace_asking(JAVA.catalog(), "true"), JAVA.asking("false"))]
#[case::a_mirror_pod(JAVA.catalog(), json!({
    "metadata": {"name": "p", "annotations": {
        "instrumentation.opentelemetry.io/inject-java": "true", "kubernetes.io/config.mirror": "abc"}},
    "spec": {"containers": [{"name": "app", "image": "app"}]}}))]
fn pods_that_do_not_ask_are_left_alone(#[case] catalog: StaticCatalog, #[case] pod: Value) {
    let (out, d) = run(&catalog, &pod);
    assert_eq!(out, pod);
    assert!(d.patch.is_empty() && !d.requested, "{d:?}");
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
}
