//! SDK-only injection (`inject-sdk`), end to end through the engine: no init container and no
//! volume, only the common SDK configuration on each target.

mod common;

use common::{
    GRPC_SDK, Sdk, app_pod, assert_reinvocation_patches_nothing, catalog, env, fref, head, lit,
    relabel, run,
};
use otel_injector::agents::Language;
use otel_injector::engine::INJECTED_ANNOTATION;
use serde_json::{Value, json};

const INJECT: &str = "instrumentation.opentelemetry.io/inject-sdk";

/// The Instrumentation most cases use.
const SHOP: &str = r#"
apiVersion: opentelemetry.io/v1alpha1
kind: Instrumentation
metadata:
  name: sdk-inst
  namespace: shop
spec:
  exporter:
    endpoint: http://otel-collector.observability:4317
  propagators: [tracecontext, baggage, b3]
  sampler:
    type: parentbased_always_on
  env:
    - name: OTEL_EXPORTER_OTLP_PROTOCOL
      value: grpc
  java:
    env:
      - name: OTEL_INSTRUMENTATION_JDBC_ENABLED
        value: "false"
"#;

/// The SDK settings of `SHOP`.
const SDK: Sdk = Sdk {
    propagators: "tracecontext,baggage,b3",
    sampler: "parentbased_always_on",
    sampler_arg: None,
    ..GRPC_SDK
};

/// spec.env and the SDK block for a container of `shop`.
fn sdk_env(service: &str, container: &str, version: Option<&str>) -> Vec<Value> {
    let mut vars = vec![lit("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")];
    vars.extend(SDK.tail(service, container, version));
    vars
}

fn sdk_pod(env: Value) -> Value {
    app_pod(INJECT, json!({}), env)
}

#[test]
fn single_container_gets_only_the_sdk_env() {
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "gateway", "namespace": "shop",
            "annotations": {"instrumentation.opentelemetry.io/inject-sdk": "true"}},
        "spec": {"containers": [{"name": "app", "image": "shop/gateway:1.2",
            "env": [{"name": "RUST_LOG", "value": "info"}]}]}
    });
    let (out, d) = run(&catalog(SHOP), &pod);
    assert_eq!(d.injected, [Language::Sdk]);
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
    assert!(d.skipped.is_empty());
    let attrs = "k8s.container.name=app,k8s.namespace.name=shop,\
        k8s.node.name=$(OTEL_RESOURCE_ATTRIBUTES_NODE_NAME),\
        k8s.pod.name=$(OTEL_RESOURCE_ATTRIBUTES_POD_NAME),\
        service.instance.id=shop.$(OTEL_RESOURCE_ATTRIBUTES_POD_NAME).app,\
        service.namespace=shop,service.version=1.2";
    // Written out in full once: no init container, no volume, no mount.
    let expected = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "gateway", "namespace": "shop",
            "annotations": {"instrumentation.opentelemetry.io/inject-sdk": "true",
                            "otel-injector/injected": "sdk"}},
        "spec": {
            "containers": [{"name": "app", "image": "shop/gateway:1.2",
                "env": [
                    {"name": "OTEL_NODE_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}},
                    {"name": "OTEL_POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                    {"name": "RUST_LOG", "value": "info"},
                    {"name": "OTEL_EXPORTER_OTLP_PROTOCOL", "value": "grpc"},
                    {"name": "OTEL_SERVICE_NAME", "value": "gateway"},
                    {"name": "OTEL_EXPORTER_OTLP_ENDPOINT", "value": "http://otel-collector.observability:4317"},
                    {"name": "OTEL_RESOURCE_ATTRIBUTES_POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "OTEL_RESOURCE_ATTRIBUTES_NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                    {"name": "OTEL_PROPAGATORS", "value": "tracecontext,baggage,b3"},
                    {"name": "OTEL_TRACES_SAMPLER", "value": "parentbased_always_on"},
                    {"name": "OTEL_RESOURCE_ATTRIBUTES", "value": attrs}
                ]}]
        }
    });
    assert_eq!(out, expected);
    assert_eq!(
        out["spec"]["containers"][0]["env"],
        env(vec![
            head(),
            vec![lit("RUST_LOG", "info")],
            sdk_env("gateway", "app", Some("1.2")),
        ])
    );
}

#[test]
fn multiple_containers_from_common_and_sdk_container_names() {
    let pod = json!({
        "metadata": {"name": "edge", "annotations": {
            INJECT: "sdk-inst",
            "instrumentation.opentelemetry.io/container-names": "api",
            "instrumentation.opentelemetry.io/sdk-container-names": "worker"}},
        "spec": {"containers": [
            {"name": "proxy", "image": "envoy:1.30"},
            {"name": "api", "image": "edge/api:4"},
            {"name": "worker", "image": "edge/worker:5"}
        ]}
    });
    let (out, d) = run(&catalog(SHOP), &pod);
    assert_eq!(d.injected, [Language::Sdk]);
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
    let cs = &out["spec"]["containers"];
    assert_eq!(cs[0], pod["spec"]["containers"][0], "proxy untouched");
    assert_eq!(
        cs[1]["env"],
        env(vec![head(), sdk_env("edge", "api", Some("4"))])
    );
    assert_eq!(
        cs[2]["env"],
        env(vec![head(), sdk_env("edge", "worker", Some("5"))])
    );
    assert!(cs[1].get("volumeMounts").is_none());
    assert!(out["spec"].get("initContainers").is_none());
    assert!(out["spec"].get("volumes").is_none());
}

#[test]
fn init_container_target_gets_the_env_and_no_init_container_is_added() {
    let pod = json!({
        "metadata": {"name": "job", "annotations": {
            INJECT: "true",
            "instrumentation.opentelemetry.io/sdk-container-names": "prepare"}},
        "spec": {
            "initContainers": [{"name": "prepare", "image": "job/prepare:1"}],
            "containers": [{"name": "app", "image": "job/app:1"}]
        }
    });
    let (out, d) = run(&catalog(SHOP), &pod);
    assert_eq!(d.injected, [Language::Sdk]);
    let inits = &out["spec"]["initContainers"];
    assert_eq!(inits.as_array().unwrap().len(), 1);
    assert_eq!(inits[0]["name"], "prepare");
    assert_eq!(
        inits[0]["env"],
        env(vec![head(), sdk_env("job", "prepare", Some("1"))])
    );
    assert_eq!(out["spec"]["containers"], pod["spec"]["containers"]);
    assert!(out["spec"].get("volumes").is_none());
}

#[test]
fn user_set_variables_win_and_are_not_duplicated() {
    let pod = sdk_pod(json!([
        {"name": "OTEL_EXPORTER_OTLP_PROTOCOL", "value": "http/protobuf"},
        {"name": "OTEL_SERVICE_NAME", "value": "mine"},
        {"name": "OTEL_PROPAGATORS", "value": "xray"},
        {"name": "OTEL_TRACES_SAMPLER", "value": "always_off"},
        {"name": "OTEL_POD_IP", "value": "override"},
        {"name": "OTEL_RESOURCE_ATTRIBUTES", "value": "team=edge"},
        {"name": "LAST", "value": "x"}
    ]));
    let (out, d) = run(&catalog(SHOP), &pod);
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
    let attrs = "team=edge,k8s.container.name=app,k8s.namespace.name=shop,\
        k8s.node.name=$(OTEL_RESOURCE_ATTRIBUTES_NODE_NAME),\
        k8s.pod.name=$(OTEL_RESOURCE_ATTRIBUTES_POD_NAME),\
        service.instance.id=shop.$(OTEL_RESOURCE_ATTRIBUTES_POD_NAME).app,service.namespace=shop";
    assert_eq!(
        out["spec"]["containers"][0]["env"],
        json!([
            fref("OTEL_NODE_IP", "status.hostIP"),
            lit("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            lit("OTEL_SERVICE_NAME", "mine"),
            lit("OTEL_PROPAGATORS", "xray"),
            lit("OTEL_TRACES_SAMPLER", "always_off"),
            lit("OTEL_POD_IP", "override"),
            lit("LAST", "x"),
            lit(
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                "http://otel-collector.observability:4317"
            ),
            fref("OTEL_RESOURCE_ATTRIBUTES_POD_NAME", "metadata.name"),
            fref("OTEL_RESOURCE_ATTRIBUTES_NODE_NAME", "spec.nodeName"),
            lit("OTEL_RESOURCE_ATTRIBUTES", attrs),
        ])
    );
}

#[test]
fn sdk_and_an_agent_on_different_containers() {
    let pod = json!({
        "metadata": {"name": "mixed", "annotations": {
            INJECT: "true",
            "instrumentation.opentelemetry.io/inject-java": "true",
            "instrumentation.opentelemetry.io/java-container-names": "jvm",
            "instrumentation.opentelemetry.io/sdk-container-names": "native"}},
        "spec": {"containers": [
            {"name": "jvm", "image": "mixed/jvm:1"},
            {"name": "native", "image": "mixed/native:2"}
        ]}
    });
    let (out, d) = run(&catalog(SHOP), &pod);
    assert_eq!(d.injected, [Language::Java, Language::Sdk]);
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
    assert_eq!(
        out["metadata"]["annotations"][INJECTED_ANNOTATION],
        "java,sdk"
    );
    let cs = &out["spec"]["containers"];
    assert_eq!(
        cs[1]["env"],
        env(vec![head(), sdk_env("mixed", "native", Some("2"))])
    );
    assert!(cs[1].get("volumeMounts").is_none());
    // Only Java's init container and volume.
    let inits = out["spec"]["initContainers"].as_array().unwrap();
    assert_eq!(inits.len(), 1);
    assert_eq!(inits[0]["name"], "opentelemetry-auto-instrumentation-java");
    assert_eq!(out["spec"]["volumes"].as_array().unwrap().len(), 1);
}

#[test]
fn reinvocation_gets_no_second_patch() {
    assert_reinvocation_patches_nothing(&catalog(SHOP), &sdk_pod(json!([])), "sdk", relabel);
}
