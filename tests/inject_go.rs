//! Go injection, end to end through the engine: each case applies the returned JSON patch to
//! the input pod and compares the result (the sidecar's ordered env, volumes, pod fields).

mod common;

use common::{
    Decision, HTTP_SDK, annotated_pod, assert_reinvocation_patches_nothing, assert_skipped,
    catalog, env, head, lit, run,
};
use otel_injector::agents::Language;
use otel_injector::agents::golang::DEFAULT_IMAGE;
use otel_injector::engine::SkipReason;
use serde_json::{Value, json};

const SHOP: &str = r#"
apiVersion: opentelemetry.io/v1alpha1
kind: Instrumentation
metadata:
  name: go-inst
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
      value: otlp
  go:
    env:
      - name: OTEL_GO_AUTO_INCLUDE_DB_STATEMENT
        value: "true"
"#;

const TARGET_EXE: &str = "instrumentation.opentelemetry.io/otel-go-auto-target-exe";

fn go_pod(annotations: Value, containers: Value) -> Value {
    annotated_pod(
        "instrumentation.opentelemetry.io/inject-go",
        annotations,
        json!({"containers": containers}),
    )
}

fn sidecar_of(out: &Value) -> &Value {
    let cs = out["spec"]["containers"].as_array().unwrap();
    let last = cs.last().unwrap();
    assert_eq!(last["name"], "opentelemetry-auto-instrumentation");
    last
}

/// Nothing changed: the only skip is NothingInstrumented, with `warning` as the only warning.
fn assert_left_alone(out: &Value, pod: &Value, d: &Decision, warning: &str) {
    assert_eq!(out, pod, "pod unchanged");
    assert!(d.injected.is_empty());
    assert_skipped(d, SkipReason::NothingInstrumented, warning);
}

#[test]
fn single_container_gets_a_privileged_sidecar_with_the_env_in_order() {
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "checkout", "namespace": "shop",
            "annotations": {"instrumentation.opentelemetry.io/inject-go": "true",
                            TARGET_EXE: "/app/checkout"}},
        "spec": {"containers": [{"name": "app", "image": "shop/checkout:1.4.2",
            "env": [{"name": "PORT", "value": "8080"}]}]}
    });
    let (out, d) = run(&catalog(SHOP), &pod);
    assert_eq!(d.injected, [Language::Go]);
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
    let attrs = "k8s.container.name=app,k8s.namespace.name=shop,\
        k8s.node.name=$(OTEL_RESOURCE_ATTRIBUTES_NODE_NAME),\
        k8s.pod.name=$(OTEL_RESOURCE_ATTRIBUTES_POD_NAME),\
        service.instance.id=shop.$(OTEL_RESOURCE_ATTRIBUTES_POD_NAME).app,\
        service.namespace=shop,service.version=1.4.2";
    let expected = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "checkout", "namespace": "shop",
            "annotations": {"instrumentation.opentelemetry.io/inject-go": "true",
                            TARGET_EXE: "/app/checkout",
                            "otel-injector/injected": "go"}},
        "spec": {
            "shareProcessNamespace": true,
            "containers": [
                // The app is not changed.
                {"name": "app", "image": "shop/checkout:1.4.2",
                 "env": [{"name": "PORT", "value": "8080"}]},
                {"name": "opentelemetry-auto-instrumentation",
                 "image": "ghcr.io/open-telemetry/opentelemetry-go-instrumentation/autoinstrumentation-go:v0.24.0",
                 "env": [
                    {"name": "OTEL_NODE_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}},
                    {"name": "OTEL_POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                    {"name": "OTEL_GO_AUTO_TARGET_EXE", "value": "/app/checkout"},
                    {"name": "OTEL_GO_AUTO_INCLUDE_DB_STATEMENT", "value": "true"},
                    {"name": "OTEL_LOGS_EXPORTER", "value": "otlp"},
                    {"name": "OTEL_SERVICE_NAME", "value": "checkout"},
                    {"name": "OTEL_EXPORTER_OTLP_ENDPOINT", "value": "http://otel-collector.observability:4318"},
                    {"name": "OTEL_RESOURCE_ATTRIBUTES_POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "OTEL_RESOURCE_ATTRIBUTES_NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                    {"name": "OTEL_PROPAGATORS", "value": "tracecontext,baggage"},
                    {"name": "OTEL_TRACES_SAMPLER", "value": "parentbased_traceidratio"},
                    {"name": "OTEL_TRACES_SAMPLER_ARG", "value": "0.25"},
                    {"name": "OTEL_RESOURCE_ATTRIBUTES", "value": attrs}
                 ],
                 "resources": {"limits": {"cpu": "500m", "memory": "256Mi"},
                               "requests": {"cpu": "50m", "memory": "64Mi"}},
                 "securityContext": {"privileged": true, "runAsUser": 0},
                 "volumeMounts": [{"name": "kernel-debug", "mountPath": "/sys/kernel/debug"}]}
            ],
            "volumes": [{"name": "kernel-debug", "hostPath": {"path": "/sys/kernel/debug"}}]
        }
    });
    assert_eq!(out, expected);
    // The helpers below reproduce this case.
    assert_eq!(
        sidecar_of(&out)["env"],
        env(vec![
            head(),
            vec![
                lit("OTEL_GO_AUTO_TARGET_EXE", "/app/checkout"),
                lit("OTEL_GO_AUTO_INCLUDE_DB_STATEMENT", "true"),
                lit("OTEL_LOGS_EXPORTER", "otlp"),
            ],
            HTTP_SDK.tail("checkout", "app", Some("1.4.2")),
        ])
    );
    assert_eq!(sidecar_of(&out)["image"], DEFAULT_IMAGE);
}

#[test]
fn target_exe_from_go_env_and_the_annotation_beats_it() {
    let inst = format!("{SHOP}      - name: OTEL_GO_AUTO_TARGET_EXE\n        value: /from/spec\n");
    let containers = json!([{"name": "app", "image": "app"}]);

    // From go.env, in go.env's position.
    let pod = go_pod(json!({}), containers.clone());
    let (out, d) = run(&catalog(&inst), &pod);
    assert_eq!(d.injected, [Language::Go]);
    assert_eq!(
        sidecar_of(&out)["env"],
        env(vec![
            head(),
            vec![
                lit("OTEL_GO_AUTO_INCLUDE_DB_STATEMENT", "true"),
                lit("OTEL_GO_AUTO_TARGET_EXE", "/from/spec"),
                lit("OTEL_LOGS_EXPORTER", "otlp"),
            ],
            HTTP_SDK.tail("p", "app", None),
        ])
    );

    // The pod annotation wins, and the variable is not duplicated.
    let pod = go_pod(json!({TARGET_EXE: "/from/pod"}), containers);
    let (out, _) = run(&catalog(&inst), &pod);
    assert_eq!(
        sidecar_of(&out)["env"],
        env(vec![
            head(),
            vec![
                lit("OTEL_GO_AUTO_TARGET_EXE", "/from/pod"),
                lit("OTEL_GO_AUTO_INCLUDE_DB_STATEMENT", "true"),
                lit("OTEL_LOGS_EXPORTER", "otlp"),
            ],
            HTTP_SDK.tail("p", "app", None),
        ])
    );
}

#[test]
fn target_exe_from_spec_env_is_enough() {
    let inst = SHOP.replace(
        "  env:\n    - name: OTEL_LOGS_EXPORTER\n      value: otlp\n",
        "  env:\n    - name: OTEL_LOGS_EXPORTER\n      value: otlp\n    - name: OTEL_GO_AUTO_TARGET_EXE\n      value: /bin/server\n",
    );
    let pod = go_pod(json!({}), json!([{"name": "app", "image": "app"}]));
    let (out, d) = run(&catalog(&inst), &pod);
    assert_eq!(d.injected, [Language::Go]);
    let e = &sidecar_of(&out)["env"];
    assert_eq!(e[4], lit("OTEL_GO_AUTO_TARGET_EXE", "/bin/server"));
}

#[test]
fn the_targeted_container_drives_the_resource_attributes() {
    let pod = json!({
        "metadata": {"name": "pay", "annotations": {
            "instrumentation.opentelemetry.io/inject-go": "go-inst",
            "instrumentation.opentelemetry.io/go-container-names": "worker",
            TARGET_EXE: "/worker"}},
        "spec": {"containers": [
            {"name": "proxy", "image": "envoy:1.30"},
            {"name": "worker", "image": "pay/worker:7"}
        ]}
    });
    let (out, d) = run(&catalog(SHOP), &pod);
    assert_eq!(d.injected, [Language::Go]);
    let cs = out["spec"]["containers"].as_array().unwrap();
    assert_eq!(cs.len(), 3);
    assert_eq!(cs[..2], pod["spec"]["containers"].as_array().unwrap()[..]);
    assert_eq!(
        cs[2]["env"],
        env(vec![
            head(),
            vec![
                lit("OTEL_GO_AUTO_TARGET_EXE", "/worker"),
                lit("OTEL_GO_AUTO_INCLUDE_DB_STATEMENT", "true"),
                lit("OTEL_LOGS_EXPORTER", "otlp"),
            ],
            HTTP_SDK.tail("pay", "worker", Some("7")),
        ])
    );
}

#[test]
fn sidecar_settings_come_from_the_go_section() {
    let inst = format!(
        "{SHOP}    image: registry.example/go-auto:v9\n    securityContext:\n      privileged: true\n      runAsUser: 0\n      capabilities:\n        add: [SYS_ADMIN]\n    resourceRequirements:\n      limits:\n        cpu: \"1\"\n        memory: 512Mi\n  imagePullPolicy: Always\n"
    );
    let pod = go_pod(
        json!({TARGET_EXE: "/app"}),
        json!([{"name": "app", "image": "app"}]),
    );
    let (out, d) = run(&catalog(&inst), &pod);
    assert_eq!(d.injected, [Language::Go]);
    let s = sidecar_of(&out);
    assert_eq!(s["image"], "registry.example/go-auto:v9");
    assert_eq!(s["imagePullPolicy"], "Always");
    assert_eq!(
        s["securityContext"],
        json!({"privileged": true, "runAsUser": 0, "capabilities": {"add": ["SYS_ADMIN"]}})
    );
    assert_eq!(
        s["resources"],
        json!({"limits": {"cpu": "1", "memory": "512Mi"},
               "requests": {"cpu": "50m", "memory": "64Mi"}})
    );
}

#[test]
fn existing_share_process_namespace_and_volumes_are_kept() {
    let mut pod = go_pod(
        json!({TARGET_EXE: "/app"}),
        json!([{"name": "app", "image": "app"}]),
    );
    pod["spec"]["shareProcessNamespace"] = json!(true);
    pod["spec"]["volumes"] = json!([{"name": "data", "emptyDir": {}}]);
    let (out, d) = run(&catalog(SHOP), &pod);
    assert_eq!(d.injected, [Language::Go]);
    assert_eq!(out["spec"]["shareProcessNamespace"], true);
    assert_eq!(
        out["spec"]["volumes"],
        json!([{"name": "data", "emptyDir": {}},
               {"name": "kernel-debug", "hostPath": {"path": "/sys/kernel/debug"}}])
    );
    // No operation for a field that is already true.
    let ops = serde_json::to_value(&d.patch).unwrap();
    assert!(
        !ops.as_array()
            .unwrap()
            .iter()
            .any(|o| o["path"] == "/spec/shareProcessNamespace")
    );
}

#[test]
fn no_target_exe_means_no_injection() {
    let pod = go_pod(json!({}), json!([{"name": "app", "image": "app"}]));
    let (out, d) = run(&catalog(SHOP), &pod);
    assert_left_alone(
        &out,
        &pod,
        &d,
        "go: OTEL_GO_AUTO_TARGET_EXE not set (annotation otel-go-auto-target-exe or go.env); not injected",
    );

    // An empty annotation does not count.
    let pod = go_pod(
        json!({TARGET_EXE: ""}),
        json!([{"name": "app", "image": "app"}]),
    );
    let (out, d) = run(&catalog(SHOP), &pod);
    assert_eq!(out, pod);
    assert_eq!(d.warnings.len(), 1);
}

#[test]
fn target_exe_is_read_from_the_pod_only() {
    let ns = catalog(SHOP).with_namespace(
        "shop",
        &[
            ("instrumentation.opentelemetry.io/inject-go", "true"),
            (TARGET_EXE, "/from/namespace"),
        ],
    );
    let pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "app", "image": "app"}]}});
    let (out, d) = run(&ns, &pod);
    assert!(d.requested);
    assert_left_alone(
        &out,
        &pod,
        &d,
        "go: OTEL_GO_AUTO_TARGET_EXE not set (annotation otel-go-auto-target-exe or go.env); not injected",
    );
}

#[test]
fn share_process_namespace_false_means_no_injection() {
    let mut pod = go_pod(
        json!({TARGET_EXE: "/app"}),
        json!([{"name": "app", "image": "app"}]),
    );
    pod["spec"]["shareProcessNamespace"] = json!(false);
    let (out, d) = run(&catalog(SHOP), &pod);
    assert_left_alone(
        &out,
        &pod,
        &d,
        "go: pod sets shareProcessNamespace: false, which the Go sidecar needs; not injected",
    );
}

#[test]
fn two_targets_mean_no_injection() {
    let containers = json!([{"name": "a", "image": "a"}, {"name": "b", "image": "b"}]);
    for key in [
        "instrumentation.opentelemetry.io/container-names",
        "instrumentation.opentelemetry.io/go-container-names",
    ] {
        let pod = go_pod(json!({TARGET_EXE: "/app", key: "a,b"}), containers.clone());
        let (out, d) = run(&catalog(SHOP), &pod);
        assert_left_alone(
            &out,
            &pod,
            &d,
            "go: 2 containers named; Go instruments one container per pod; not injected",
        );
    }
}

#[test]
fn init_container_targets_are_skipped_with_a_warning() {
    let pod = json!({
        "metadata": {"name": "p", "annotations": {
            "instrumentation.opentelemetry.io/inject-go": "true",
            "instrumentation.opentelemetry.io/go-container-names": "migrate",
            TARGET_EXE: "/migrate"}},
        "spec": {"initContainers": [{"name": "migrate", "image": "migrate"}],
                 "containers": [{"name": "app", "image": "app"}]}
    });
    let (out, d) = run(&catalog(SHOP), &pod);
    assert_left_alone(
        &out,
        &pod,
        &d,
        "go: init container \"migrate\" cannot be instrumented; skipped",
    );

    // Naming it along with an app container still counts two names.
    let mut pod = pod;
    pod["metadata"]["annotations"]["instrumentation.opentelemetry.io/go-container-names"] =
        json!("migrate,app");
    let (out, d) = run(&catalog(SHOP), &pod);
    assert_eq!(out, pod);
    assert_eq!(
        d.warnings,
        [
            "go: init container \"migrate\" cannot be instrumented; skipped",
            "go: 2 containers named; Go instruments one container per pod; not injected"
        ]
    );
}

#[test]
fn an_existing_sidecar_of_that_name_means_no_injection() {
    // The Operator's Go sidecar: the pod was injected before, so it is silently left alone.
    let pod = go_pod(
        json!({TARGET_EXE: "/app"}),
        json!([{"name": "app", "image": "app"},
               {"name": "opentelemetry-auto-instrumentation", "image": "x"}]),
    );
    let (out, d) = run(&catalog(SHOP), &pod);
    assert_eq!(out, pod);
    assert!(d.injected.is_empty() && d.already_injected);
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
}

#[test]
fn reinvocation_gets_no_second_patch() {
    let pod = go_pod(
        json!({TARGET_EXE: "/app"}),
        json!([{"name": "app", "image": "app"}]),
    );
    let twice = assert_reinvocation_patches_nothing(&catalog(SHOP), &pod, "go", |_| {});
    assert_eq!(twice["spec"]["containers"].as_array().unwrap().len(), 2);
}
