//! Go injection, end to end through the engine: each case applies the returned JSON patch to
//! the input pod and compares the result (the sidecar's ordered env, volumes, pod fields).
//! What every language does alike is in `inject_languages.rs`; the Instrumentation is
//! `data/instrumentations/go.yaml`.

use crate::common::{GO, HTTP_SDK, catalog, env, head, lit, run, with_lang_env, with_spec_env};
use otel_injector::agents::Language;
use otel_injector::agents::golang::DEFAULT_IMAGE;
use otel_injector::cluster::StaticCatalog;
use otel_injector::engine::SkipReason;
use otel_injector::keys::GO_TARGET_EXE;
use rstest::rstest;
use serde_json::{Value, json};

fn go_pod(annotations: Value, containers: Value) -> Value {
    GO.pod(annotations, json!({"containers": containers}))
}

fn app() -> Value {
    json!([{"name": "app", "image": "app"}])
}

fn sidecar_of(out: &Value) -> &Value {
    let cs = out["spec"]["containers"].as_array().unwrap();
    let last = cs.last().unwrap();
    assert_eq!(last["name"], "opentelemetry-auto-instrumentation");
    last
}

#[test]
fn single_container_gets_a_privileged_sidecar_with_the_env_in_order() {
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "checkout", "namespace": "shop",
            "annotations": {"instrumentation.opentelemetry.io/inject-go": "true",
                            GO_TARGET_EXE: "/app/checkout"}},
        "spec": {"containers": [{"name": "app", "image": "shop/checkout:1.4.2",
            "env": [{"name": "PORT", "value": "8080"}]}]}
    });
    let (out, d) = run(&GO.catalog(), &pod);
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
                            GO_TARGET_EXE: "/app/checkout",
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

/// OTEL_GO_AUTO_TARGET_EXE from go.env, in go.env's position; the pod annotation wins, and
/// the variable is not duplicated.
#[rstest]
#[case::from_go_env(json!({}), vec![
    lit("OTEL_GO_AUTO_INCLUDE_DB_STATEMENT", "true"),
    lit("OTEL_GO_AUTO_TARGET_EXE", "/from/spec"),
    lit("OTEL_LOGS_EXPORTER", "otlp"),
])]
#[case::from_the_pod(json!({GO_TARGET_EXE: "/from/pod"}), vec![
    lit("OTEL_GO_AUTO_TARGET_EXE", "/from/pod"),
    lit("OTEL_GO_AUTO_INCLUDE_DB_STATEMENT", "true"),
    lit("OTEL_LOGS_EXPORTER", "otlp"),
])]
fn target_exe_from_go_env_and_the_annotation_beats_it(
    #[case] annotations: Value,
    #[case] vars: Vec<Value>,
) {
    let inst = with_lang_env(
        GO.shop,
        "- name: OTEL_GO_AUTO_TARGET_EXE\n  value: /from/spec",
    );
    let (out, d) = run(&catalog(&inst), &go_pod(annotations, app()));
    assert_eq!(d.injected, [Language::Go]);
    assert_eq!(
        sidecar_of(&out)["env"],
        env(vec![head(), vars, HTTP_SDK.tail("p", "app", None)])
    );
}

#[test]
fn target_exe_from_spec_env_is_enough() {
    let inst = with_spec_env(
        GO.shop,
        "- name: OTEL_GO_AUTO_TARGET_EXE\n  value: /bin/server",
    );
    let pod = go_pod(json!({}), app());
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
            GO_TARGET_EXE: "/worker"}},
        "spec": {"containers": [
            {"name": "proxy", "image": "envoy:1.30"},
            {"name": "worker", "image": "pay/worker:7"}
        ]}
    });
    let (out, d) = run(&GO.catalog(), &pod);
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
        "{}    image: registry.example/go-auto:v9\n    securityContext:\n      privileged: true\n      runAsUser: 0\n      capabilities:\n        add: [SYS_ADMIN]\n    resourceRequirements:\n      limits:\n        cpu: \"1\"\n        memory: 512Mi\n  imagePullPolicy: Always\n",
        GO.shop
    );
    let pod = go_pod(json!({GO_TARGET_EXE: "/app"}), app());
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
    let mut pod = go_pod(json!({GO_TARGET_EXE: "/app"}), app());
    pod["spec"]["shareProcessNamespace"] = json!(true);
    pod["spec"]["volumes"] = json!([{"name": "data", "emptyDir": {}}]);
    let (out, d) = run(&GO.catalog(), &pod);
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

const NO_TARGET_EXE: &str = "go: OTEL_GO_AUTO_TARGET_EXE not set (annotation otel-go-auto-target-exe or go.env); not injected";
const TWO_TARGETS: &str =
    "go: 2 containers named; Go instruments one container per pod; not injected";

/// A pod Go cannot instrument is left as it is, with the reason as the warning.
#[rstest]
#[case::no_target_exe(GO.catalog(), go_pod(json!({}), app()), &[NO_TARGET_EXE])]
// An empty annotation does not count.
#[case::empty_target_exe(GO.catalog(), go_pod(json!({GO_TARGET_EXE: ""}), app()), &[NO_TARGET_EXE])]
// The target is read from the pod only, not from the namespace.
#[case::target_exe_from_the_namespace(
    GO.catalog().with_namespace("shop", &[(GO.inject, "true"), (GO_TARGET_EXE, "/from/namespace")]),
    json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "app", "image": "app"}]}}),
    &[NO_TARGET_EXE]
)]
#[case::share_process_namespace_false(GO.catalog(), sharing_no_process_namespace(),
    &["go: pod sets shareProcessNamespace: false, which the Go sidecar needs; not injected"])]
#[case::two_targets(GO.catalog(), two_targets("container-names"), &[TWO_TARGETS])]
#[case::two_go_targets(GO.catalog(), two_targets("go-container-names"), &[TWO_TARGETS])]
// Naming an init container along with an app container still counts two names (an init
// container alone: inject_languages.rs).
#[case::an_init_container_and_an_app_container(GO.catalog(), GO.pod(
    json!({"instrumentation.opentelemetry.io/go-container-names": "migrate,app", GO_TARGET_EXE: "/migrate"}),
    json!({"initContainers": [{"name": "migrate", "image": "migrate"}], "containers": app()})
), &["go: init container \"migrate\" cannot be instrumented; skipped", TWO_TARGETS])]
fn no_injection(#[case] catalog: StaticCatalog, #[case] pod: Value, #[case] warnings: &[&str]) {
    let (out, d) = run(&catalog, &pod);
    assert_eq!(out, pod, "pod unchanged");
    assert!(d.requested && d.injected.is_empty());
    assert_eq!(
        d.skipped.iter().map(|s| s.reason).collect::<Vec<_>>(),
        [SkipReason::NothingInstrumented]
    );
    assert_eq!(d.warnings, warnings);
}

fn sharing_no_process_namespace() -> Value {
    let mut pod = go_pod(json!({GO_TARGET_EXE: "/app"}), app());
    pod["spec"]["shareProcessNamespace"] = json!(false);
    pod
}

fn two_targets(list: &str) -> Value {
    go_pod(
        json!({GO_TARGET_EXE: "/app", format!("instrumentation.opentelemetry.io/{list}"): "a,b"}),
        json!([{"name": "a", "image": "a"}, {"name": "b", "image": "b"}]),
    )
}
