//! Java injection, end to end through the engine: each case applies the returned JSON patch
//! to the input pod and compares the whole resulting pod (ordered env) with the expected one.

mod common;

use common::{
    HTTP_SDK, agent_init, agent_mount_at, agent_volume, assert_reinvocation_patches_nothing,
    assert_skipped, catalog, env, fref, head, lit, relabel, run, run_with,
};
use otel_injector::agents::Language;
use otel_injector::cluster::StaticCatalog;
use otel_injector::engine::{EngineConfig, INJECTED_ANNOTATION, SkipReason};
use serde_json::{Value, json};

const IMAGE: &str = "ghcr.io/open-telemetry/opentelemetry-operator/autoinstrumentation-java:2.30.0";

/// The Instrumentation most cases use.
const SHOP: &str = r#"
apiVersion: opentelemetry.io/v1alpha1
kind: Instrumentation
metadata:
  name: java-inst
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
  java:
    env:
      - name: OTEL_INSTRUMENTATION_JDBC_ENABLED
        value: "false"
"#;

fn java_init(security: Option<Value>) -> Value {
    agent_init(
        "java",
        IMAGE,
        json!([
            "cp",
            "/javaagent.jar",
            "/otel-auto-instrumentation-java/javaagent.jar"
        ]),
        "64Mi",
        security,
    )
}

fn java_mount(container: &str) -> Value {
    agent_mount_at(
        "java",
        &format!("/otel-auto-instrumentation-java-{container}"),
    )
}

#[test]
fn single_container_gets_the_agent_and_the_sdk_env_in_order() {
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "checkout", "namespace": "shop",
            "annotations": {"instrumentation.opentelemetry.io/inject-java": "true"}},
        "spec": {"containers": [{"name": "app", "image": "shop/checkout:1.4.2",
            "env": [{"name": "PORT", "value": "8080"}]}]}
    });
    let (out, d) = run(&catalog(SHOP), &pod);
    assert_eq!(d.injected, [Language::Java]);
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
    let attrs = "k8s.container.name=app,k8s.namespace.name=shop,\
        k8s.node.name=$(OTEL_RESOURCE_ATTRIBUTES_NODE_NAME),\
        k8s.pod.name=$(OTEL_RESOURCE_ATTRIBUTES_POD_NAME),\
        service.instance.id=shop.$(OTEL_RESOURCE_ATTRIBUTES_POD_NAME).app,\
        service.namespace=shop,service.version=1.4.2";
    // Written out in full once; later cases use the helpers this case pins down.
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
                "image": IMAGE,
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
    // The helpers below reproduce this case exactly.
    let c = &out["spec"]["containers"][0];
    assert_eq!(
        c["env"],
        env(vec![
            head(),
            vec![
                lit("PORT", "8080"),
                lit("OTEL_INSTRUMENTATION_JDBC_ENABLED", "false"),
                lit("OTEL_LOGS_EXPORTER", "otlp"),
                lit(
                    "JAVA_TOOL_OPTIONS",
                    " -javaagent:/otel-auto-instrumentation-java-app/javaagent.jar"
                )
            ],
            HTTP_SDK.tail("checkout", "app", Some("1.4.2")),
        ])
    );
    assert_eq!(out["spec"]["initContainers"][0], java_init(None));
}

fn java_env_for(container: &str) -> Vec<Value> {
    vec![
        lit("OTEL_INSTRUMENTATION_JDBC_ENABLED", "false"),
        lit("OTEL_LOGS_EXPORTER", "otlp"),
        lit(
            "JAVA_TOOL_OPTIONS",
            &format!(" -javaagent:/otel-auto-instrumentation-java-{container}/javaagent.jar"),
        ),
    ]
}

#[test]
fn multiple_containers_by_container_names_with_security_context_from_the_first() {
    let sc = json!({"runAsNonRoot": true, "runAsUser": 1000, "allowPrivilegeEscalation": false,
                    "capabilities": {"drop": ["ALL"]}});
    let pod = json!({
        "metadata": {"name": "pay", "annotations": {
            "instrumentation.opentelemetry.io/inject-java": "java-inst",
            "instrumentation.opentelemetry.io/container-names": "api,worker"}},
        "spec": {"containers": [
            {"name": "proxy", "image": "envoy:1.30"},
            {"name": "api", "image": "pay/api:2", "securityContext": sc},
            {"name": "worker", "image": "pay/worker@sha256:abcd"}
        ]}
    });
    let (out, d) = run(&catalog(SHOP), &pod);
    assert_eq!(d.injected, [Language::Java]);
    let cs = &out["spec"]["containers"];
    assert_eq!(cs[0], pod["spec"]["containers"][0], "proxy untouched");
    assert_eq!(
        cs[1]["env"],
        env(vec![
            head(),
            java_env_for("api"),
            HTTP_SDK.tail("pay", "api", Some("2"))
        ])
    );
    assert_eq!(
        cs[2]["env"],
        env(vec![
            head(),
            java_env_for("worker"),
            HTTP_SDK.tail("pay", "worker", Some("sha256:abcd"))
        ])
    );
    assert_eq!(cs[1]["volumeMounts"], json!([java_mount("api")]));
    assert_eq!(cs[2]["volumeMounts"], json!([java_mount("worker")]));
    assert_eq!(
        out["spec"]["initContainers"],
        json!([java_init(Some(sc.clone()))])
    );
    assert_eq!(out["spec"]["volumes"], json!([agent_volume("java")]));
}

#[test]
fn init_container_target_gets_the_agent_copied_before_it() {
    let pod = json!({
        "metadata": {"name": "batch", "annotations": {
            "instrumentation.opentelemetry.io/inject-java": "true",
            "instrumentation.opentelemetry.io/java-container-names": "migrate"}},
        "spec": {
            "initContainers": [{"name": "wait", "image": "busybox"}, {"name": "migrate", "image": "db/migrate:7"}],
            "containers": [{"name": "app", "image": "app:1"}],
            "volumes": [{"name": "data", "emptyDir": {}}]
        }
    });
    let (out, d) = run(&catalog(SHOP), &pod);
    assert_eq!(d.injected, [Language::Java]);
    let inits = &out["spec"]["initContainers"];
    assert_eq!(inits.as_array().unwrap().len(), 3);
    assert_eq!(inits[0], json!({"name": "wait", "image": "busybox"}));
    assert_eq!(inits[1], java_init(None));
    assert_eq!(inits[2]["name"], "migrate");
    assert_eq!(
        inits[2]["env"],
        env(vec![
            head(),
            java_env_for("migrate"),
            HTTP_SDK.tail("batch", "migrate", Some("7"))
        ])
    );
    assert_eq!(inits[2]["volumeMounts"], json!([java_mount("migrate")]));
    assert_eq!(out["spec"]["containers"], pod["spec"]["containers"]);
    assert_eq!(
        out["spec"]["volumes"],
        json!([{"name": "data", "emptyDir": {}}, agent_volume("java")])
    );
}

#[test]
fn existing_java_tool_options_are_extended_in_place() {
    let pod = json!({
        "metadata": {"name": "p", "annotations": {"instrumentation.opentelemetry.io/inject-java": "true"}},
        "spec": {"containers": [{"name": "app", "image": "app",
            "env": [{"name": "JAVA_TOOL_OPTIONS", "value": "-Xmx512m"}, {"name": "Z", "value": "1"}]}]}
    });
    let (out, _) = run(&catalog(SHOP), &pod);
    assert_eq!(
        out["spec"]["containers"][0]["env"],
        env(vec![
            head(),
            vec![
                lit(
                    "JAVA_TOOL_OPTIONS",
                    "-Xmx512m -javaagent:/otel-auto-instrumentation-java-app/javaagent.jar"
                ),
                lit("Z", "1"),
                lit("OTEL_INSTRUMENTATION_JDBC_ENABLED", "false"),
                lit("OTEL_LOGS_EXPORTER", "otlp"),
            ],
            HTTP_SDK.tail("p", "app", None),
        ])
    );
}

#[test]
fn java_tool_options_from_value_from_skips_that_container_with_a_warning() {
    let from = json!({"name": "JAVA_TOOL_OPTIONS",
        "valueFrom": {"configMapKeyRef": {"name": "jvm", "key": "opts"}}});
    let pod = json!({
        "metadata": {"name": "p", "annotations": {"instrumentation.opentelemetry.io/inject-java": "true"}},
        "spec": {"containers": [{"name": "app", "image": "app", "env": [from]}]}
    });
    let (out, d) = run(&catalog(SHOP), &pod);
    assert_eq!(out, pod, "nothing changes");
    assert!(d.injected.is_empty());
    assert_eq!(d.skipped[0].reason, SkipReason::NothingInstrumented);
    assert_eq!(
        d.warnings,
        ["java: container \"app\" sets JAVA_TOOL_OPTIONS with valueFrom; not instrumented"]
    );

    // With a second target, that one is still instrumented.
    let pod = json!({
        "metadata": {"name": "p", "annotations": {
            "instrumentation.opentelemetry.io/inject-java": "true",
            "instrumentation.opentelemetry.io/container-names": "app,other"}},
        "spec": {"containers": [{"name": "app", "image": "app", "env": [from]},
                                {"name": "other", "image": "other"}]}
    });
    let (out, d) = run(&catalog(SHOP), &pod);
    assert_eq!(d.injected, [Language::Java]);
    assert_eq!(d.warnings.len(), 1);
    assert_eq!(out["spec"]["containers"][0], pod["spec"]["containers"][0]);
    assert_eq!(
        out["spec"]["containers"][1]["env"],
        env(vec![
            head(),
            java_env_for("other"),
            HTTP_SDK.tail("p", "other", None)
        ])
    );
}

#[test]
fn user_set_variables_win_and_are_not_duplicated() {
    let pod = json!({
        "metadata": {"name": "p", "annotations": {"instrumentation.opentelemetry.io/inject-java": "true"}},
        "spec": {"containers": [{"name": "app", "image": "app", "env": [
            {"name": "OTEL_SERVICE_NAME", "value": "mine"},
            {"name": "OTEL_RESOURCE_ATTRIBUTES", "value": "team=core,k8s.container.name=custom"},
            {"name": "OTEL_TRACES_SAMPLER_ARG", "value": "1"},
            {"name": "OTEL_LOGS_EXPORTER", "value": "none"},
            {"name": "LAST", "value": "x"}
        ]}]}
    });
    let (out, _) = run(&catalog(SHOP), &pod);
    let attrs = "team=core,k8s.container.name=custom,k8s.namespace.name=shop,\
        k8s.node.name=$(OTEL_RESOURCE_ATTRIBUTES_NODE_NAME),\
        k8s.pod.name=$(OTEL_RESOURCE_ATTRIBUTES_POD_NAME),\
        service.instance.id=shop.$(OTEL_RESOURCE_ATTRIBUTES_POD_NAME).app,service.namespace=shop";
    assert_eq!(
        out["spec"]["containers"][0]["env"],
        env(vec![
            head(),
            vec![
                lit("OTEL_SERVICE_NAME", "mine"),
                lit("OTEL_TRACES_SAMPLER_ARG", "1"),
                lit("OTEL_LOGS_EXPORTER", "none"),
                lit("LAST", "x"),
                lit("OTEL_INSTRUMENTATION_JDBC_ENABLED", "false"),
                lit(
                    "JAVA_TOOL_OPTIONS",
                    " -javaagent:/otel-auto-instrumentation-java-app/javaagent.jar"
                ),
                lit(
                    "OTEL_EXPORTER_OTLP_ENDPOINT",
                    "http://otel-collector.observability:4318"
                ),
                fref("OTEL_RESOURCE_ATTRIBUTES_POD_NAME", "metadata.name"),
                fref("OTEL_RESOURCE_ATTRIBUTES_NODE_NAME", "spec.nodeName"),
                lit("OTEL_PROPAGATORS", "tracecontext,baggage"),
                // The sampler is left alone when the user set either variable.
                lit("OTEL_RESOURCE_ATTRIBUTES", attrs),
            ],
        ])
    );
}

#[test]
fn extensions_get_one_init_container_each() {
    let inst = format!(
        "{SHOP}    extensions:\n      - image: ext/one:1\n        dir: /ext\n      - image: ext/two:2\n        dir: /opt/ext/\n"
    );
    let pod = json!({
        "metadata": {"name": "p", "annotations": {"instrumentation.opentelemetry.io/inject-java": "true"}},
        "spec": {"containers": [{"name": "app", "image": "app"}]}
    });
    let (out, _) = run(&catalog(&inst), &pod);
    let ext = |i: usize, image: &str, dir: &str| {
        let mut c = java_init(None);
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
            java_init(None),
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
fn volume_claim_template_makes_an_ephemeral_volume() {
    let inst = format!(
        "{SHOP}    volumeClaimTemplate:\n      spec:\n        accessModes: [ReadWriteOnce]\n        resources:\n          requests:\n            storage: 1Gi\n"
    );
    let pod = json!({
        "metadata": {"name": "p", "annotations": {"instrumentation.opentelemetry.io/inject-java": "true"}},
        "spec": {"containers": [{"name": "app", "image": "app"}]}
    });
    let (out, _) = run(&catalog(&inst), &pod);
    assert_eq!(
        out["spec"]["volumes"],
        json!([{"name": "opentelemetry-auto-instrumentation-java", "ephemeral": {"volumeClaimTemplate": {
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}}}])
    );
}

#[test]
fn init_container_security_context_from_the_instrumentation_wins() {
    let inst = SHOP.replace(
        "  env:\n    - name: OTEL_LOGS",
        "  initContainerSecurityContext:\n    runAsUser: 65532\n    readOnlyRootFilesystem: true\n  env:\n    - name: OTEL_LOGS",
    );
    let pod = json!({
        "metadata": {"name": "p", "annotations": {"instrumentation.opentelemetry.io/inject-java": "true"}},
        "spec": {"containers": [{"name": "app", "image": "app", "securityContext": {"runAsUser": 1}}]}
    });
    let (out, _) = run(&catalog(&inst), &pod);
    assert_eq!(
        out["spec"]["initContainers"][0]["securityContext"],
        json!({"runAsUser": 65532, "readOnlyRootFilesystem": true})
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
    let (out, _) = run(&catalog(SHOP), &pod);
    assert_eq!(
        out["spec"]["containers"][0]["env"],
        env(vec![
            head(),
            java_env_for("app"),
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

#[test]
fn reinvocation_gets_no_second_patch() {
    assert_reinvocation_patches_nothing(&catalog(SHOP), &java_pod("true"), "java", relabel);
}

fn java_pod(value: &str) -> Value {
    json!({
        "metadata": {"name": "p", "annotations": {"instrumentation.opentelemetry.io/inject-java": value}},
        "spec": {"containers": [{"name": "app", "image": "app"}]}
    })
}

#[test]
fn pods_that_are_not_injected_are_told_why() {
    let empty = StaticCatalog::default();
    let (_, d) = run(&empty, &java_pod("true"));
    assert_skipped(
        &d,
        SkipReason::NoInstrumentation,
        "inject-java: no Instrumentation in namespace \"shop\"; not injected",
    );

    let two = catalog(&format!(
        "{SHOP}\n---\n{}",
        SHOP.replace("name: java-inst", "name: second")
    ));
    let (_, d) = run(&two, &java_pod("true"));
    assert_skipped(
        &d,
        SkipReason::MultipleInstrumentations,
        "inject-java: 2 Instrumentations in namespace \"shop\"; name one instead of \"true\"",
    );
    // Naming one of them works.
    let (_, d) = run(&two, &java_pod("second"));
    assert_eq!(d.injected, [Language::Java]);

    let (_, d) = run(&catalog(SHOP), &java_pod("nope"));
    assert_skipped(
        &d,
        SkipReason::InstrumentationNotFound,
        "inject-java: Instrumentation \"shop/nope\" not found; not injected",
    );
    let (_, d) = run(&catalog(SHOP), &java_pod("other/java-inst"));
    assert_skipped(
        &d,
        SkipReason::InstrumentationNotFound,
        "inject-java: Instrumentation \"other/java-inst\" not found; not injected",
    );

    let mut disabled = EngineConfig::default();
    disabled.enabled.remove(Language::Java);
    let (_, d) = run_with(&catalog(SHOP), &disabled, &java_pod("true"));
    assert_skipped(
        &d,
        SkipReason::LanguageDisabled,
        "inject-java: java injection is disabled on this webhook",
    );

    let not_ready = catalog(SHOP).not_ready();
    let (_, d) = run(&not_ready, &java_pod("true"));
    assert_skipped(
        &d,
        SkipReason::CacheNotReady,
        "otel-injector: Instrumentation cache not synced yet; pod admitted without injection",
    );

    let mut bad = java_pod("true");
    bad["metadata"]["annotations"]["instrumentation.opentelemetry.io/container-names"] =
        json!("app,ghost");
    let (_, d) = run(&catalog(SHOP), &bad);
    assert_skipped(
        &d,
        SkipReason::InvalidContainerNames,
        "container-names: no container \"ghost\" in this pod; pod not injected",
    );
    bad["metadata"]["annotations"]["instrumentation.opentelemetry.io/container-names"] =
        json!("app,app");
    let (_, d) = run(&catalog(SHOP), &bad);
    assert_skipped(
        &d,
        SkipReason::InvalidContainerNames,
        "container-names: container \"app\" listed twice; pod not injected",
    );

    // Not asking is not a skip.
    let (_, d) = run(&catalog(SHOP), &java_pod("false"));
    assert!(!d.requested && d.warnings.is_empty() && d.patch.is_empty());
}

#[test]
fn cross_namespace_instrumentation_by_ns_slash_name() {
    let other = SHOP.replace("namespace: shop", "namespace: observability");
    let (out, d) = run(&catalog(&other), &java_pod("observability/java-inst"));
    assert_eq!(d.injected, [Language::Java]);
    assert_eq!(out["metadata"]["annotations"][INJECTED_ANNOTATION], "java");
}

#[test]
fn namespace_annotations_and_pod_overrides() {
    let plain = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "app", "image": "app"}]}});
    let ns_true = catalog(SHOP).with_namespace(
        "shop",
        &[("instrumentation.opentelemetry.io/inject-java", "true")],
    );
    let (_, d) = run(&ns_true, &plain);
    assert_eq!(
        d.injected,
        [Language::Java],
        "namespace-level annotation applies"
    );

    let (out, d) = run(&ns_true, &java_pod("false"));
    assert!(
        d.patch.is_empty() && !d.requested,
        "pod false overrides the namespace"
    );
    assert_eq!(out, java_pod("false"));

    // Namespace names an instance; pod says true → the namespace's instance.
    let two = catalog(&format!(
        "{SHOP}\n---\n{}",
        SHOP.replace("name: java-inst", "name: second")
    ))
    .with_namespace(
        "shop",
        &[("instrumentation.opentelemetry.io/inject-java", "second")],
    );
    let (_, d) = run(&two, &java_pod("true"));
    assert_eq!(d.injected, [Language::Java]);
    assert!(d.warnings.is_empty());
}

#[test]
fn mirror_pods_and_pods_without_containers_are_left_alone() {
    let mut mirror = java_pod("true");
    mirror["metadata"]["annotations"]["kubernetes.io/config.mirror"] = json!("abc");
    let (out, d) = run(&catalog(SHOP), &mirror);
    assert_eq!(out, mirror);
    assert!(d.warnings.is_empty());
}
