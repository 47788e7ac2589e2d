//! Python injection, end to end through the engine: each case applies the returned JSON patch
//! to the input pod and compares the resulting pod parts (ordered env, init containers,
//! volumes, mounts) with the expected ones.

mod common;

use common::{
    HTTP_SDK, agent_init, agent_mount, agent_volume, app_pod, assert_not_injected,
    assert_reinvocation_patches_nothing, catalog, env, head, lit, relabel, run,
};
use otel_injector::agents::Language;
use otel_injector::engine::SkipReason;
use serde_json::{Value, json};

const IMAGE: &str =
    "ghcr.io/open-telemetry/opentelemetry-operator/autoinstrumentation-python:0.64b0";
const INJECT: &str = "instrumentation.opentelemetry.io/inject-python";
const PLATFORM: &str = "instrumentation.opentelemetry.io/otel-python-platform";
const PREFIX: &str =
    "/otel-auto-instrumentation-python/opentelemetry/instrumentation/auto_instrumentation";
const MOUNT: &str = "/otel-auto-instrumentation-python";

/// The Instrumentation most cases use.
const SHOP: &str = r#"
apiVersion: opentelemetry.io/v1alpha1
kind: Instrumentation
metadata:
  name: py-inst
  namespace: shop
spec:
  exporter:
    endpoint: http://otel-collector.observability:4318
  propagators: [tracecontext, baggage]
  sampler:
    type: parentbased_traceidratio
    argument: "0.25"
  env:
    - name: OTEL_LOGS_EXPORTER
      value: console
  python:
    env:
      - name: OTEL_PYTHON_LOGGING_AUTO_INSTRUMENTATION_ENABLED
        value: "true"
"#;

/// The Python variables of a container that had none of its own: the language env and
/// PYTHONPATH, then spec.env, then the defaults not already set (spec.env sets the logs
/// exporter, so the default one is not added).
fn python_env() -> Vec<Value> {
    vec![
        lit("OTEL_PYTHON_LOGGING_AUTO_INSTRUMENTATION_ENABLED", "true"),
        lit("PYTHONPATH", &format!("{PREFIX}:{MOUNT}")),
        lit("OTEL_LOGS_EXPORTER", "console"),
        lit("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
        lit("OTEL_TRACES_EXPORTER", "otlp"),
        lit("OTEL_METRICS_EXPORTER", "otlp"),
    ]
}

fn python_init(source: &str, security: Option<Value>) -> Value {
    agent_init(
        "python",
        IMAGE,
        json!(["cp", "-r", source, MOUNT]),
        "64Mi",
        security,
    )
}

fn python_pod(annotations: Value, env: Value) -> Value {
    app_pod(INJECT, annotations, env)
}

#[test]
fn single_container_gets_the_sdk_and_the_env_in_order() {
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "recs", "namespace": "shop",
            "annotations": {"instrumentation.opentelemetry.io/inject-python": "true"}},
        "spec": {"containers": [{"name": "app", "image": "shop/recs:0.9",
            "env": [{"name": "WORKERS", "value": "4"}]}]}
    });
    let (out, d) = run(&catalog(SHOP), &pod);
    assert_eq!(d.injected, [Language::Python]);
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
    assert!(d.skipped.is_empty());
    let attrs = "k8s.container.name=app,k8s.namespace.name=shop,\
        k8s.node.name=$(OTEL_RESOURCE_ATTRIBUTES_NODE_NAME),\
        k8s.pod.name=$(OTEL_RESOURCE_ATTRIBUTES_POD_NAME),\
        service.instance.id=shop.$(OTEL_RESOURCE_ATTRIBUTES_POD_NAME).app,\
        service.namespace=shop,service.version=0.9";
    // Written out in full once; later cases use the helpers this case pins down.
    let expected = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "recs", "namespace": "shop",
            "annotations": {"instrumentation.opentelemetry.io/inject-python": "true",
                            "otel-injector/injected": "python"}},
        "spec": {
            "containers": [{"name": "app", "image": "shop/recs:0.9",
                "env": [
                    {"name": "OTEL_NODE_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}},
                    {"name": "OTEL_POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                    {"name": "WORKERS", "value": "4"},
                    {"name": "OTEL_PYTHON_LOGGING_AUTO_INSTRUMENTATION_ENABLED", "value": "true"},
                    {"name": "PYTHONPATH", "value": "/otel-auto-instrumentation-python/opentelemetry/instrumentation/auto_instrumentation:/otel-auto-instrumentation-python"},
                    {"name": "OTEL_LOGS_EXPORTER", "value": "console"},
                    {"name": "OTEL_EXPORTER_OTLP_PROTOCOL", "value": "http/protobuf"},
                    {"name": "OTEL_TRACES_EXPORTER", "value": "otlp"},
                    {"name": "OTEL_METRICS_EXPORTER", "value": "otlp"},
                    {"name": "OTEL_SERVICE_NAME", "value": "recs"},
                    {"name": "OTEL_EXPORTER_OTLP_ENDPOINT", "value": "http://otel-collector.observability:4318"},
                    {"name": "OTEL_RESOURCE_ATTRIBUTES_POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "OTEL_RESOURCE_ATTRIBUTES_NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                    {"name": "OTEL_PROPAGATORS", "value": "tracecontext,baggage"},
                    {"name": "OTEL_TRACES_SAMPLER", "value": "parentbased_traceidratio"},
                    {"name": "OTEL_TRACES_SAMPLER_ARG", "value": "0.25"},
                    {"name": "OTEL_RESOURCE_ATTRIBUTES", "value": attrs}
                ],
                "volumeMounts": [{"name": "opentelemetry-auto-instrumentation-python",
                                  "mountPath": "/otel-auto-instrumentation-python"}]}],
            "initContainers": [{
                "name": "opentelemetry-auto-instrumentation-python",
                "image": "ghcr.io/open-telemetry/opentelemetry-operator/autoinstrumentation-python:0.64b0",
                "command": ["cp", "-r", "/autoinstrumentation/.", "/otel-auto-instrumentation-python"],
                "resources": {"limits": {"cpu": "500m", "memory": "256Mi"},
                              "requests": {"cpu": "50m", "memory": "64Mi"}},
                "volumeMounts": [{"name": "opentelemetry-auto-instrumentation-python",
                                  "mountPath": "/otel-auto-instrumentation-python"}]}],
            "volumes": [{"name": "opentelemetry-auto-instrumentation-python",
                         "emptyDir": {"sizeLimit": "200Mi"}}]
        }
    });
    assert_eq!(out, expected);
    // The helpers below reproduce this case exactly.
    let c = &out["spec"]["containers"][0];
    assert_eq!(
        c["env"],
        env(vec![
            head(),
            vec![lit("WORKERS", "4")],
            python_env(),
            HTTP_SDK.tail("recs", "app", Some("0.9")),
        ])
    );
    assert_eq!(c["volumeMounts"], json!([agent_mount("python")]));
    assert_eq!(
        out["spec"]["initContainers"],
        json!([python_init("/autoinstrumentation/.", None)])
    );
    assert_eq!(out["spec"]["volumes"], json!([agent_volume("python")]));
}

#[test]
fn multiple_containers_by_python_container_names() {
    let sc = json!({"runAsNonRoot": true, "runAsUser": 1000});
    let pod = json!({
        "metadata": {"name": "ml", "annotations": {
            INJECT: "py-inst",
            "instrumentation.opentelemetry.io/python-container-names": "api,worker"}},
        "spec": {"containers": [
            {"name": "proxy", "image": "envoy:1.30"},
            {"name": "api", "image": "ml/api:5", "securityContext": sc},
            {"name": "worker", "image": "ml/worker:6"}
        ]}
    });
    let (out, d) = run(&catalog(SHOP), &pod);
    assert_eq!(d.injected, [Language::Python]);
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
    let cs = &out["spec"]["containers"];
    assert_eq!(cs[0], pod["spec"]["containers"][0], "proxy untouched");
    for (i, name, version) in [(1, "api", "5"), (2, "worker", "6")] {
        assert_eq!(
            cs[i]["env"],
            env(vec![
                head(),
                python_env(),
                HTTP_SDK.tail("ml", name, Some(version))
            ])
        );
        assert_eq!(cs[i]["volumeMounts"], json!([agent_mount("python")]));
    }
    assert_eq!(
        out["spec"]["initContainers"],
        json!([python_init("/autoinstrumentation/.", Some(sc))])
    );
    assert_eq!(out["spec"]["volumes"], json!([agent_volume("python")]));
}

#[test]
fn init_container_target_gets_the_sdk_copied_before_it() {
    let pod = json!({
        "metadata": {"name": "etl", "annotations": {
            INJECT: "true",
            "instrumentation.opentelemetry.io/container-names": "migrate"}},
        "spec": {
            "initContainers": [{"name": "wait", "image": "busybox"},
                               {"name": "migrate", "image": "etl/migrate:2"}],
            "containers": [{"name": "app", "image": "etl/app:2"}]
        }
    });
    let (out, d) = run(&catalog(SHOP), &pod);
    assert_eq!(d.injected, [Language::Python]);
    let inits = &out["spec"]["initContainers"];
    assert_eq!(inits.as_array().unwrap().len(), 3);
    assert_eq!(inits[0], json!({"name": "wait", "image": "busybox"}));
    assert_eq!(inits[1], python_init("/autoinstrumentation/.", None));
    assert_eq!(inits[2]["name"], "migrate");
    assert_eq!(
        inits[2]["env"],
        env(vec![
            head(),
            python_env(),
            HTTP_SDK.tail("etl", "migrate", Some("2"))
        ])
    );
    assert_eq!(inits[2]["volumeMounts"], json!([agent_mount("python")]));
    assert_eq!(out["spec"]["containers"], pod["spec"]["containers"]);
    assert_eq!(out["spec"]["volumes"], json!([agent_volume("python")]));
}

#[test]
fn existing_pythonpath_is_wrapped_and_user_values_win() {
    let pod = python_pod(
        json!({}),
        json!([
            {"name": "PYTHONPATH", "value": "/app/src:/app/lib"},
            {"name": "OTEL_TRACES_EXPORTER", "value": "console"},
            {"name": "OTEL_EXPORTER_OTLP_PROTOCOL", "value": "grpc"},
            {"name": "OTEL_SERVICE_NAME", "value": "mine"},
            {"name": "Z", "value": "1"}
        ]),
    );
    let (out, d) = run(&catalog(SHOP), &pod);
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
    let mut tail = HTTP_SDK.tail("p", "app", None);
    tail.remove(0); // OTEL_SERVICE_NAME is the user's
    assert_eq!(
        out["spec"]["containers"][0]["env"],
        env(vec![
            head(),
            vec![
                lit("PYTHONPATH", &format!("{PREFIX}:/app/src:/app/lib:{MOUNT}")),
                lit("OTEL_TRACES_EXPORTER", "console"),
                lit("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
                lit("OTEL_SERVICE_NAME", "mine"),
                lit("Z", "1"),
                lit("OTEL_PYTHON_LOGGING_AUTO_INSTRUMENTATION_ENABLED", "true"),
                lit("OTEL_LOGS_EXPORTER", "console"),
                lit("OTEL_METRICS_EXPORTER", "otlp"),
            ],
            tail,
        ])
    );
}

#[test]
fn pythonpath_from_the_instrumentation_is_wrapped_and_an_empty_one_is_dropped() {
    // spec.python.env is merged first, so its PYTHONPATH is the one wrapped.
    let inst = SHOP.replace(
        "        value: \"true\"\n",
        "        value: \"true\"\n      - name: PYTHONPATH\n        value: /opt/extra\n",
    );
    let (out, _) = run(&catalog(&inst), &python_pod(json!({}), json!([])));
    assert_eq!(
        out["spec"]["containers"][0]["env"][3],
        lit("PYTHONPATH", &format!("{PREFIX}:/opt/extra:{MOUNT}"))
    );
    // An empty value would add an empty entry (the working directory) to the path.
    let pod = python_pod(json!({}), json!([{"name": "PYTHONPATH", "value": ""}]));
    let (out, _) = run(&catalog(SHOP), &pod);
    assert_eq!(
        out["spec"]["containers"][0]["env"][2],
        lit("PYTHONPATH", &format!("{PREFIX}:{MOUNT}"))
    );
}

#[test]
fn musl_platform_copies_the_musl_build() {
    let pod = python_pod(json!({PLATFORM: "musl"}), json!([]));
    let (out, d) = run(&catalog(SHOP), &pod);
    assert_eq!(d.injected, [Language::Python]);
    assert_eq!(
        out["spec"]["initContainers"],
        json!([python_init("/autoinstrumentation-musl/.", None)])
    );
    // The app side does not depend on the platform.
    assert_eq!(
        out["spec"]["containers"][0]["env"],
        env(vec![head(), python_env(), HTTP_SDK.tail("p", "app", None)])
    );

    // "glibc" is the default, spelled out.
    let (out, _) = run(
        &catalog(SHOP),
        &python_pod(json!({PLATFORM: "glibc"}), json!([])),
    );
    assert_eq!(
        out["spec"]["initContainers"][0]["command"][2],
        "/autoinstrumentation/."
    );

    // The namespace's value applies when the pod has none; the pod's wins otherwise.
    let ns_musl = catalog(SHOP).with_namespace("shop", &[(PLATFORM, "musl")]);
    let (out, _) = run(&ns_musl, &python_pod(json!({}), json!([])));
    assert_eq!(
        out["spec"]["initContainers"][0]["command"][2],
        "/autoinstrumentation-musl/."
    );
    let (out, _) = run(&ns_musl, &python_pod(json!({PLATFORM: "glibc"}), json!([])));
    assert_eq!(
        out["spec"]["initContainers"][0]["command"][2],
        "/autoinstrumentation/."
    );
}

#[test]
fn invalid_platform_is_not_injected_with_a_warning() {
    let pod = python_pod(json!({PLATFORM: "alpine"}), json!([]));
    let (out, d) = run(&catalog(SHOP), &pod);
    assert_eq!(out, pod);
    assert_not_injected(
        &d,
        Language::Python,
        "python: otel-python-platform \"alpine\" is not supported (use glibc or musl); not injected",
    );
}

#[test]
fn pythonpath_from_value_from_skips_that_container_with_a_warning() {
    let from = json!({"name": "PYTHONPATH",
        "valueFrom": {"configMapKeyRef": {"name": "py", "key": "path"}}});
    let pod = python_pod(json!({}), json!([from]));
    let (out, d) = run(&catalog(SHOP), &pod);
    assert_eq!(out, pod, "nothing changes: no init container, no volume");
    assert_eq!(d.skipped[0].reason, SkipReason::NothingInstrumented);
    assert_eq!(
        d.warnings,
        ["python: container \"app\" sets PYTHONPATH with valueFrom; not instrumented"]
    );

    // With a second target, that one is still instrumented.
    let pod = json!({
        "metadata": {"name": "p", "annotations": {
            INJECT: "true",
            "instrumentation.opentelemetry.io/python-container-names": "app,other"}},
        "spec": {"containers": [{"name": "app", "image": "app", "env": [from]},
                                {"name": "other", "image": "other"}]}
    });
    let (out, d) = run(&catalog(SHOP), &pod);
    assert_eq!(d.injected, [Language::Python]);
    assert_eq!(d.warnings.len(), 1);
    assert_eq!(out["spec"]["containers"][0], pod["spec"]["containers"][0]);
    assert_eq!(
        out["spec"]["containers"][1]["env"],
        env(vec![
            head(),
            python_env(),
            HTTP_SDK.tail("p", "other", None)
        ])
    );

    // A valueFrom in spec.python.env cannot be wrapped either.
    let inst = SHOP.replace(
        "        value: \"true\"\n",
        "        value: \"true\"\n      - name: PYTHONPATH\n        valueFrom:\n          configMapKeyRef: {name: py, key: path}\n",
    );
    let pod = python_pod(json!({}), json!([]));
    let (out, d) = run(&catalog(&inst), &pod);
    assert_eq!(out, pod);
    assert_eq!(
        d.warnings,
        [
            "python: Instrumentation sets PYTHONPATH with valueFrom; container \"app\" not instrumented"
        ]
    );
}

#[test]
fn reinvocation_gets_no_second_patch() {
    assert_reinvocation_patches_nothing(
        &catalog(SHOP),
        &python_pod(json!({PLATFORM: "musl"}), json!([])),
        "python",
        relabel,
    );
}
