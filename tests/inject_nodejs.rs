//! Node.js injection, end to end through the engine: each case applies the returned JSON patch
//! to the input pod and compares the resulting pod parts (ordered env, init containers,
//! volumes, mounts) with the expected ones.

mod common;

use common::{
    HTTP_SDK, agent_init, agent_mount, agent_volume, app_pod, assert_reinvocation_patches_nothing,
    catalog, env, fref, head, lit, relabel, run, run_with,
};
use otel_injector::agents::Language;
use otel_injector::engine::{EngineConfig, SkipReason};
use serde_json::{Value, json};

const IMAGE: &str =
    "ghcr.io/open-telemetry/opentelemetry-operator/autoinstrumentation-nodejs:0.78.0";
const REQUIRE: &str = " --require /otel-auto-instrumentation-nodejs/autoinstrumentation.js";
const INJECT: &str = "instrumentation.opentelemetry.io/inject-nodejs";

/// The Instrumentation most cases use.
const SHOP: &str = r#"
apiVersion: opentelemetry.io/v1alpha1
kind: Instrumentation
metadata:
  name: node-inst
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
  nodejs:
    env:
      - name: OTEL_NODE_RESOURCE_DETECTORS
        value: env,host
"#;

/// The Node.js variables of a container that had none of its own.
fn node_env() -> Vec<Value> {
    vec![
        lit("OTEL_NODE_RESOURCE_DETECTORS", "env,host"),
        lit("OTEL_LOGS_EXPORTER", "otlp"),
        lit("NODE_OPTIONS", REQUIRE),
        lit("OTEL_METRICS_EXPORTER", "otlp"),
    ]
}

fn node_init(security: Option<Value>) -> Value {
    agent_init(
        "nodejs",
        IMAGE,
        json!([
            "cp",
            "-r",
            "/autoinstrumentation/.",
            "/otel-auto-instrumentation-nodejs"
        ]),
        "128Mi",
        security,
    )
}

fn node_pod(env: Value) -> Value {
    app_pod(INJECT, json!({}), env)
}

#[test]
fn single_container_gets_the_sdk_and_the_env_in_order() {
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web", "namespace": "shop",
            "annotations": {"instrumentation.opentelemetry.io/inject-nodejs": "true"}},
        "spec": {"containers": [{"name": "app", "image": "shop/web:2.1.0",
            "env": [{"name": "PORT", "value": "3000"}]}]}
    });
    let (out, d) = run(&catalog(SHOP), &pod);
    assert_eq!(d.injected, [Language::NodeJs]);
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
    assert!(d.skipped.is_empty());
    let attrs = "k8s.container.name=app,k8s.namespace.name=shop,\
        k8s.node.name=$(OTEL_RESOURCE_ATTRIBUTES_NODE_NAME),\
        k8s.pod.name=$(OTEL_RESOURCE_ATTRIBUTES_POD_NAME),\
        service.instance.id=shop.$(OTEL_RESOURCE_ATTRIBUTES_POD_NAME).app,\
        service.namespace=shop,service.version=2.1.0";
    // Written out in full once; later cases use the helpers this case pins down.
    let expected = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web", "namespace": "shop",
            "annotations": {"instrumentation.opentelemetry.io/inject-nodejs": "true",
                            "otel-injector/injected": "nodejs"}},
        "spec": {
            "containers": [{"name": "app", "image": "shop/web:2.1.0",
                "env": [
                    {"name": "OTEL_NODE_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}},
                    {"name": "OTEL_POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                    {"name": "PORT", "value": "3000"},
                    {"name": "OTEL_NODE_RESOURCE_DETECTORS", "value": "env,host"},
                    {"name": "OTEL_LOGS_EXPORTER", "value": "otlp"},
                    {"name": "NODE_OPTIONS", "value": " --require /otel-auto-instrumentation-nodejs/autoinstrumentation.js"},
                    {"name": "OTEL_METRICS_EXPORTER", "value": "otlp"},
                    {"name": "OTEL_SERVICE_NAME", "value": "web"},
                    {"name": "OTEL_EXPORTER_OTLP_ENDPOINT", "value": "http://otel-collector.observability:4318"},
                    {"name": "OTEL_RESOURCE_ATTRIBUTES_POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "OTEL_RESOURCE_ATTRIBUTES_NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                    {"name": "OTEL_PROPAGATORS", "value": "tracecontext,baggage"},
                    {"name": "OTEL_TRACES_SAMPLER", "value": "parentbased_traceidratio"},
                    {"name": "OTEL_TRACES_SAMPLER_ARG", "value": "0.25"},
                    {"name": "OTEL_RESOURCE_ATTRIBUTES", "value": attrs}
                ],
                "volumeMounts": [{"name": "opentelemetry-auto-instrumentation-nodejs",
                                  "mountPath": "/otel-auto-instrumentation-nodejs"}]}],
            "initContainers": [{
                "name": "opentelemetry-auto-instrumentation-nodejs",
                "image": "ghcr.io/open-telemetry/opentelemetry-operator/autoinstrumentation-nodejs:0.78.0",
                "command": ["cp", "-r", "/autoinstrumentation/.", "/otel-auto-instrumentation-nodejs"],
                "resources": {"limits": {"cpu": "500m", "memory": "256Mi"},
                              "requests": {"cpu": "50m", "memory": "128Mi"}},
                "volumeMounts": [{"name": "opentelemetry-auto-instrumentation-nodejs",
                                  "mountPath": "/otel-auto-instrumentation-nodejs"}]}],
            "volumes": [{"name": "opentelemetry-auto-instrumentation-nodejs",
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
            vec![lit("PORT", "3000")],
            node_env(),
            HTTP_SDK.tail("web", "app", Some("2.1.0")),
        ])
    );
    assert_eq!(c["volumeMounts"], json!([agent_mount("nodejs")]));
    assert_eq!(out["spec"]["initContainers"], json!([node_init(None)]));
    assert_eq!(out["spec"]["volumes"], json!([agent_volume("nodejs")]));
}

#[test]
fn multiple_containers_from_common_and_nodejs_container_names() {
    let sc = json!({"runAsNonRoot": true, "runAsUser": 1000, "allowPrivilegeEscalation": false,
                    "capabilities": {"drop": ["ALL"]}});
    let pod = json!({
        "metadata": {"name": "shop-api", "annotations": {
            INJECT: "node-inst",
            "instrumentation.opentelemetry.io/container-names": "api",
            "instrumentation.opentelemetry.io/nodejs-container-names": "worker"}},
        "spec": {"containers": [
            {"name": "proxy", "image": "envoy:1.30"},
            {"name": "api", "image": "shop/api:3", "securityContext": sc,
             "volumeMounts": [{"name": "cache", "mountPath": "/cache"}]},
            {"name": "worker", "image": "shop/worker@sha256:abcd"}
        ], "volumes": [{"name": "cache", "emptyDir": {}}]}
    });
    let (out, d) = run(&catalog(SHOP), &pod);
    assert_eq!(d.injected, [Language::NodeJs]);
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
    let cs = &out["spec"]["containers"];
    assert_eq!(cs[0], pod["spec"]["containers"][0], "proxy untouched");
    assert_eq!(
        cs[1]["env"],
        env(vec![
            head(),
            node_env(),
            HTTP_SDK.tail("shop-api", "api", Some("3"))
        ])
    );
    assert_eq!(
        cs[2]["env"],
        env(vec![
            head(),
            node_env(),
            HTTP_SDK.tail("shop-api", "worker", Some("sha256:abcd"))
        ])
    );
    assert_eq!(
        cs[1]["volumeMounts"],
        json!([{"name": "cache", "mountPath": "/cache"}, agent_mount("nodejs")])
    );
    assert_eq!(cs[2]["volumeMounts"], json!([agent_mount("nodejs")]));
    // One init container for all targets, with the first target's security context.
    assert_eq!(out["spec"]["initContainers"], json!([node_init(Some(sc))]));
    assert_eq!(
        out["spec"]["volumes"],
        json!([{"name": "cache", "emptyDir": {}}, agent_volume("nodejs")])
    );
}

#[test]
fn init_container_target_gets_the_sdk_copied_before_it() {
    let pod = json!({
        "metadata": {"name": "batch", "annotations": {
            INJECT: "true",
            "instrumentation.opentelemetry.io/nodejs-container-names": "app,seed"}},
        "spec": {
            "initContainers": [{"name": "wait", "image": "busybox"},
                               {"name": "seed", "image": "db/seed:7"}],
            "containers": [{"name": "app", "image": "app:1"}]
        }
    });
    let (out, d) = run(&catalog(SHOP), &pod);
    assert_eq!(d.injected, [Language::NodeJs]);
    let inits = &out["spec"]["initContainers"];
    assert_eq!(inits.as_array().unwrap().len(), 3);
    assert_eq!(inits[0], json!({"name": "wait", "image": "busybox"}));
    assert_eq!(inits[1], node_init(None));
    assert_eq!(inits[2]["name"], "seed");
    assert_eq!(
        inits[2]["env"],
        env(vec![
            head(),
            node_env(),
            HTTP_SDK.tail("batch", "seed", Some("7"))
        ])
    );
    assert_eq!(inits[2]["volumeMounts"], json!([agent_mount("nodejs")]));
    let app = &out["spec"]["containers"][0];
    assert_eq!(
        app["env"],
        env(vec![
            head(),
            node_env(),
            HTTP_SDK.tail("batch", "app", Some("1"))
        ])
    );
    assert_eq!(out["spec"]["volumes"], json!([agent_volume("nodejs")]));
}

#[test]
fn existing_node_options_is_extended_and_user_values_win() {
    let pod = node_pod(json!([
        {"name": "NODE_OPTIONS", "value": "--max-old-space-size=512"},
        {"name": "OTEL_METRICS_EXPORTER", "value": "none"},
        {"name": "OTEL_SERVICE_NAME", "value": "mine"},
        {"name": "OTEL_NODE_RESOURCE_DETECTORS", "value": "all"},
        {"name": "OTEL_RESOURCE_ATTRIBUTES", "value": "team=web"},
        {"name": "Z", "value": "1"}
    ]));
    let (out, d) = run(&catalog(SHOP), &pod);
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
    let attrs = "team=web,k8s.container.name=app,k8s.namespace.name=shop,\
        k8s.node.name=$(OTEL_RESOURCE_ATTRIBUTES_NODE_NAME),\
        k8s.pod.name=$(OTEL_RESOURCE_ATTRIBUTES_POD_NAME),\
        service.instance.id=shop.$(OTEL_RESOURCE_ATTRIBUTES_POD_NAME).app,service.namespace=shop";
    assert_eq!(
        out["spec"]["containers"][0]["env"],
        env(vec![
            head(),
            vec![
                lit(
                    "NODE_OPTIONS",
                    &format!("--max-old-space-size=512{REQUIRE}")
                ),
                lit("OTEL_METRICS_EXPORTER", "none"),
                lit("OTEL_SERVICE_NAME", "mine"),
                lit("OTEL_NODE_RESOURCE_DETECTORS", "all"),
                lit("Z", "1"),
                lit("OTEL_LOGS_EXPORTER", "otlp"),
                lit(
                    "OTEL_EXPORTER_OTLP_ENDPOINT",
                    "http://otel-collector.observability:4318"
                ),
                fref("OTEL_RESOURCE_ATTRIBUTES_POD_NAME", "metadata.name"),
                fref("OTEL_RESOURCE_ATTRIBUTES_NODE_NAME", "spec.nodeName"),
                lit("OTEL_PROPAGATORS", "tracecontext,baggage"),
                lit("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
                lit("OTEL_TRACES_SAMPLER_ARG", "0.25"),
                lit("OTEL_RESOURCE_ATTRIBUTES", attrs),
            ],
        ])
    );
}

#[test]
fn instrumentation_env_wins_over_the_language_defaults() {
    // spec.env is merged before the defaults, so its OTEL_METRICS_EXPORTER is kept, and a
    // NODE_OPTIONS from spec.nodejs.env is extended like the container's own.
    let inst = SHOP
        .replace(
            "    - name: OTEL_LOGS_EXPORTER\n      value: otlp\n",
            "    - name: OTEL_LOGS_EXPORTER\n      value: otlp\n    - name: OTEL_METRICS_EXPORTER\n      value: prometheus\n",
        )
        .replace(
            "        value: env,host\n",
            "        value: env,host\n      - name: NODE_OPTIONS\n        value: --enable-source-maps\n",
        );
    let (out, _) = run(&catalog(&inst), &node_pod(json!([])));
    assert_eq!(
        out["spec"]["containers"][0]["env"],
        env(vec![
            head(),
            vec![
                lit("OTEL_NODE_RESOURCE_DETECTORS", "env,host"),
                lit("NODE_OPTIONS", &format!("--enable-source-maps{REQUIRE}")),
                lit("OTEL_LOGS_EXPORTER", "otlp"),
                lit("OTEL_METRICS_EXPORTER", "prometheus"),
            ],
            HTTP_SDK.tail("p", "app", None),
        ])
    );
}

#[test]
fn node_options_from_value_from_skips_that_container_with_a_warning() {
    let from = json!({"name": "NODE_OPTIONS",
        "valueFrom": {"configMapKeyRef": {"name": "node", "key": "opts"}}});
    let pod = node_pod(json!([from]));
    let (out, d) = run(&catalog(SHOP), &pod);
    assert_eq!(out, pod, "nothing changes: no init container, no volume");
    assert!(d.injected.is_empty());
    assert_eq!(d.skipped.len(), 1);
    assert_eq!(d.skipped[0].language, Some(Language::NodeJs));
    assert_eq!(d.skipped[0].reason, SkipReason::NothingInstrumented);
    assert_eq!(
        d.warnings,
        ["nodejs: container \"app\" sets NODE_OPTIONS with valueFrom; not instrumented"]
    );

    // With a second target, that one is still instrumented.
    let pod = json!({
        "metadata": {"name": "p", "annotations": {
            INJECT: "true",
            "instrumentation.opentelemetry.io/container-names": "app,other"}},
        "spec": {"containers": [{"name": "app", "image": "app", "env": [from]},
                                {"name": "other", "image": "other"}]}
    });
    let (out, d) = run(&catalog(SHOP), &pod);
    assert_eq!(d.injected, [Language::NodeJs]);
    assert_eq!(
        d.warnings,
        ["nodejs: container \"app\" sets NODE_OPTIONS with valueFrom; not instrumented"]
    );
    assert_eq!(out["spec"]["containers"][0], pod["spec"]["containers"][0]);
    assert_eq!(
        out["spec"]["containers"][1]["env"],
        env(vec![head(), node_env(), HTTP_SDK.tail("p", "other", None)])
    );
    assert_eq!(out["spec"]["initContainers"], json!([node_init(None)]));
}

#[test]
fn node_options_from_value_from_in_the_instrumentation_skips_too() {
    let inst = SHOP.replace(
        "        value: env,host\n",
        "        value: env,host\n      - name: NODE_OPTIONS\n        valueFrom:\n          configMapKeyRef: {name: node, key: opts}\n",
    );
    let pod = node_pod(json!([]));
    let (out, d) = run(&catalog(&inst), &pod);
    assert_eq!(out, pod);
    assert_eq!(
        d.warnings,
        [
            "nodejs: Instrumentation sets NODE_OPTIONS with valueFrom; container \"app\" not instrumented"
        ]
    );
    // The container's own literal value wins over the Instrumentation's, so it is extended.
    let pod = node_pod(json!([{"name": "NODE_OPTIONS", "value": "--inspect"}]));
    let (out, d) = run(&catalog(&inst), &pod);
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
    assert_eq!(
        out["spec"]["containers"][0]["env"][2],
        lit("NODE_OPTIONS", &format!("--inspect{REQUIRE}"))
    );
}

#[test]
fn image_resources_pull_policy_and_volume_come_from_the_instrumentation() {
    let inst = SHOP.replace(
        "  nodejs:\n",
        "  imagePullPolicy: IfNotPresent\n  nodejs:\n",
    ) + "    image: registry.local/node-auto:9\n    resourceRequirements:\n      limits: {cpu: \"1\", memory: 1Gi}\n    volumeLimitSize: 500Mi\n";
    let (out, _) = run(&catalog(&inst), &node_pod(json!([])));
    let mut init = node_init(None);
    init["image"] = json!("registry.local/node-auto:9");
    init["imagePullPolicy"] = json!("IfNotPresent");
    init["resources"] = json!({"limits": {"cpu": "1", "memory": "1Gi"},
        "requests": {"cpu": "50m", "memory": "128Mi"}});
    assert_eq!(out["spec"]["initContainers"], json!([init]));
    assert_eq!(
        out["spec"]["volumes"],
        json!([{"name": "opentelemetry-auto-instrumentation-nodejs", "emptyDir": {"sizeLimit": "500Mi"}}])
    );

    let claim = format!(
        "{SHOP}    volumeClaimTemplate:\n      spec:\n        accessModes: [ReadWriteOnce]\n        resources:\n          requests:\n            storage: 1Gi\n"
    );
    let (out, _) = run(&catalog(&claim), &node_pod(json!([])));
    assert_eq!(
        out["spec"]["volumes"],
        json!([{"name": "opentelemetry-auto-instrumentation-nodejs", "ephemeral": {"volumeClaimTemplate": {
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}}}])
    );

    // Without spec.nodejs.image, the webhook's configured default is used.
    let mut config = EngineConfig::default();
    config
        .images
        .set(Language::NodeJs, "mirror.local/nodejs:1".into());
    let (out, _) = run_with(&catalog(SHOP), &config, &node_pod(json!([])));
    assert_eq!(
        out["spec"]["initContainers"][0]["image"],
        "mirror.local/nodejs:1"
    );
}

#[test]
fn init_container_security_context_from_the_instrumentation_wins() {
    let inst = SHOP.replace(
        "  nodejs:\n",
        "  initContainerSecurityContext:\n    runAsUser: 65532\n    readOnlyRootFilesystem: true\n  nodejs:\n",
    );
    let pod = json!({
        "metadata": {"name": "p", "annotations": {INJECT: "true"}},
        "spec": {"containers": [{"name": "app", "image": "app", "securityContext": {"runAsUser": 1}}]}
    });
    let (out, _) = run(&catalog(&inst), &pod);
    assert_eq!(
        out["spec"]["initContainers"][0]["securityContext"],
        json!({"runAsUser": 65532, "readOnlyRootFilesystem": true})
    );
}

#[test]
fn reinvocation_gets_no_second_patch() {
    assert_reinvocation_patches_nothing(&catalog(SHOP), &node_pod(json!([])), "nodejs", relabel);
}
