//! .NET injection, end to end through the engine: each case applies the returned JSON patch
//! to the input pod and compares the resulting pod parts (ordered env, init containers,
//! volumes, mounts) with the expected ones.

mod common;

use common::{
    HTTP_SDK, agent_init, agent_mount, agent_volume, app_pod, assert_not_injected,
    assert_reinvocation_patches_nothing, catalog, env, head, lit, relabel, run,
};
use otel_injector::agents::Language;
use serde_json::{Value, json};

const IMAGE: &str =
    "ghcr.io/open-telemetry/opentelemetry-operator/autoinstrumentation-dotnet:1.16.0";
const INJECT: &str = "instrumentation.opentelemetry.io/inject-dotnet";
const RUNTIME: &str = "instrumentation.opentelemetry.io/otel-dotnet-auto-runtime";
const PROFILER_ID: &str = "{918728DD-259F-4A6A-AC2B-B85E1B658318}";
const GLIBC: &str =
    "/otel-auto-instrumentation-dotnet/linux/OpenTelemetry.AutoInstrumentation.Native.so";
const MUSL: &str =
    "/otel-auto-instrumentation-dotnet/linux-musl/OpenTelemetry.AutoInstrumentation.Native.so";
const HOOK: &str =
    "/otel-auto-instrumentation-dotnet/net/OpenTelemetry.AutoInstrumentation.StartupHook.dll";
const DEPS: &str = "/otel-auto-instrumentation-dotnet/AdditionalDeps";
const STORE: &str = "/otel-auto-instrumentation-dotnet/store";
const HOME: &str = "/otel-auto-instrumentation-dotnet";

/// The Instrumentation most cases use.
const SHOP: &str = r#"
apiVersion: opentelemetry.io/v1alpha1
kind: Instrumentation
metadata:
  name: dotnet-inst
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
  dotnet:
    env:
      - name: OTEL_DOTNET_AUTO_TRACES_CONSOLE_EXPORTER_ENABLED
        value: "false"
"#;

/// The .NET variables, in the Operator's order, for a container that had none of its own.
fn dotnet_env(profiler: &str) -> Vec<Value> {
    vec![
        lit("OTEL_DOTNET_AUTO_TRACES_CONSOLE_EXPORTER_ENABLED", "false"),
        lit("OTEL_LOGS_EXPORTER", "otlp"),
        lit("CORECLR_ENABLE_PROFILING", "1"),
        lit("CORECLR_PROFILER", PROFILER_ID),
        lit("CORECLR_PROFILER_PATH", profiler),
        lit("DOTNET_STARTUP_HOOKS", HOOK),
        lit("DOTNET_ADDITIONAL_DEPS", DEPS),
        lit("OTEL_DOTNET_AUTO_HOME", HOME),
        lit("DOTNET_SHARED_STORE", STORE),
    ]
}

fn dotnet_init(security: Option<Value>) -> Value {
    agent_init(
        "dotnet",
        IMAGE,
        json!(["cp", "-r", "/autoinstrumentation/.", HOME]),
        "128Mi",
        security,
    )
}

fn dotnet_pod(annotations: Value, env: Value) -> Value {
    app_pod(INJECT, annotations, env)
}

#[test]
fn single_container_gets_the_profiler_and_the_env_in_order() {
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "cart", "namespace": "shop",
            "annotations": {"instrumentation.opentelemetry.io/inject-dotnet": "true"}},
        "spec": {"containers": [{"name": "app", "image": "shop/cart:8.0.1",
            "env": [{"name": "ASPNETCORE_URLS", "value": "http://+:8080"}]}]}
    });
    let (out, d) = run(&catalog(SHOP), &pod);
    assert_eq!(d.injected, [Language::DotNet]);
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
    assert!(d.skipped.is_empty());
    let attrs = "k8s.container.name=app,k8s.namespace.name=shop,\
        k8s.node.name=$(OTEL_RESOURCE_ATTRIBUTES_NODE_NAME),\
        k8s.pod.name=$(OTEL_RESOURCE_ATTRIBUTES_POD_NAME),\
        service.instance.id=shop.$(OTEL_RESOURCE_ATTRIBUTES_POD_NAME).app,\
        service.namespace=shop,service.version=8.0.1";
    // Written out in full once; later cases use the helpers this case pins down.
    let expected = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "cart", "namespace": "shop",
            "annotations": {"instrumentation.opentelemetry.io/inject-dotnet": "true",
                            "otel-injector/injected": "dotnet"}},
        "spec": {
            "containers": [{"name": "app", "image": "shop/cart:8.0.1",
                "env": [
                    {"name": "OTEL_NODE_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}},
                    {"name": "OTEL_POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                    {"name": "ASPNETCORE_URLS", "value": "http://+:8080"},
                    {"name": "OTEL_DOTNET_AUTO_TRACES_CONSOLE_EXPORTER_ENABLED", "value": "false"},
                    {"name": "OTEL_LOGS_EXPORTER", "value": "otlp"},
                    {"name": "CORECLR_ENABLE_PROFILING", "value": "1"},
                    {"name": "CORECLR_PROFILER", "value": "{918728DD-259F-4A6A-AC2B-B85E1B658318}"},
                    {"name": "CORECLR_PROFILER_PATH", "value": "/otel-auto-instrumentation-dotnet/linux/OpenTelemetry.AutoInstrumentation.Native.so"},
                    {"name": "DOTNET_STARTUP_HOOKS", "value": "/otel-auto-instrumentation-dotnet/net/OpenTelemetry.AutoInstrumentation.StartupHook.dll"},
                    {"name": "DOTNET_ADDITIONAL_DEPS", "value": "/otel-auto-instrumentation-dotnet/AdditionalDeps"},
                    {"name": "OTEL_DOTNET_AUTO_HOME", "value": "/otel-auto-instrumentation-dotnet"},
                    {"name": "DOTNET_SHARED_STORE", "value": "/otel-auto-instrumentation-dotnet/store"},
                    {"name": "OTEL_SERVICE_NAME", "value": "cart"},
                    {"name": "OTEL_EXPORTER_OTLP_ENDPOINT", "value": "http://otel-collector.observability:4318"},
                    {"name": "OTEL_RESOURCE_ATTRIBUTES_POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "OTEL_RESOURCE_ATTRIBUTES_NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                    {"name": "OTEL_PROPAGATORS", "value": "tracecontext,baggage"},
                    {"name": "OTEL_TRACES_SAMPLER", "value": "parentbased_traceidratio"},
                    {"name": "OTEL_TRACES_SAMPLER_ARG", "value": "0.25"},
                    {"name": "OTEL_RESOURCE_ATTRIBUTES", "value": attrs}
                ],
                "volumeMounts": [{"name": "opentelemetry-auto-instrumentation-dotnet",
                                  "mountPath": "/otel-auto-instrumentation-dotnet"}]}],
            "initContainers": [{
                "name": "opentelemetry-auto-instrumentation-dotnet",
                "image": "ghcr.io/open-telemetry/opentelemetry-operator/autoinstrumentation-dotnet:1.16.0",
                "command": ["cp", "-r", "/autoinstrumentation/.", "/otel-auto-instrumentation-dotnet"],
                "resources": {"limits": {"cpu": "500m", "memory": "256Mi"},
                              "requests": {"cpu": "50m", "memory": "128Mi"}},
                "volumeMounts": [{"name": "opentelemetry-auto-instrumentation-dotnet",
                                  "mountPath": "/otel-auto-instrumentation-dotnet"}]}],
            "volumes": [{"name": "opentelemetry-auto-instrumentation-dotnet",
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
            vec![lit("ASPNETCORE_URLS", "http://+:8080")],
            dotnet_env(GLIBC),
            HTTP_SDK.tail("cart", "app", Some("8.0.1")),
        ])
    );
    assert_eq!(c["volumeMounts"], json!([agent_mount("dotnet")]));
    assert_eq!(out["spec"]["initContainers"], json!([dotnet_init(None)]));
    assert_eq!(out["spec"]["volumes"], json!([agent_volume("dotnet")]));
}

#[test]
fn multiple_containers_by_dotnet_container_names() {
    let sc = json!({"runAsNonRoot": true, "runAsUser": 1000});
    let pod = json!({
        "metadata": {"name": "orders", "annotations": {
            INJECT: "dotnet-inst",
            "instrumentation.opentelemetry.io/dotnet-container-names": "api,worker"}},
        "spec": {"containers": [
            {"name": "proxy", "image": "envoy:1.30"},
            {"name": "api", "image": "orders/api:1", "securityContext": sc},
            {"name": "worker", "image": "orders/worker:2"}
        ]}
    });
    let (out, d) = run(&catalog(SHOP), &pod);
    assert_eq!(d.injected, [Language::DotNet]);
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
    let cs = &out["spec"]["containers"];
    assert_eq!(cs[0], pod["spec"]["containers"][0], "proxy untouched");
    for (i, name, version) in [(1, "api", "1"), (2, "worker", "2")] {
        assert_eq!(
            cs[i]["env"],
            env(vec![
                head(),
                dotnet_env(GLIBC),
                HTTP_SDK.tail("orders", name, Some(version))
            ])
        );
        assert_eq!(cs[i]["volumeMounts"], json!([agent_mount("dotnet")]));
    }
    assert_eq!(
        out["spec"]["initContainers"],
        json!([dotnet_init(Some(sc))])
    );
    assert_eq!(out["spec"]["volumes"], json!([agent_volume("dotnet")]));
}

#[test]
fn init_container_target_gets_the_agent_copied_before_it() {
    let pod = json!({
        "metadata": {"name": "job", "annotations": {
            INJECT: "true",
            "instrumentation.opentelemetry.io/dotnet-container-names": "migrate"}},
        "spec": {
            "initContainers": [{"name": "wait", "image": "busybox"},
                               {"name": "migrate", "image": "db/migrate:3"}],
            "containers": [{"name": "app", "image": "app:1"}]
        }
    });
    let (out, d) = run(&catalog(SHOP), &pod);
    assert_eq!(d.injected, [Language::DotNet]);
    let inits = &out["spec"]["initContainers"];
    assert_eq!(inits.as_array().unwrap().len(), 3);
    assert_eq!(inits[0], json!({"name": "wait", "image": "busybox"}));
    assert_eq!(inits[1], dotnet_init(None));
    assert_eq!(inits[2]["name"], "migrate");
    assert_eq!(
        inits[2]["env"],
        env(vec![
            head(),
            dotnet_env(GLIBC),
            HTTP_SDK.tail("job", "migrate", Some("3"))
        ])
    );
    assert_eq!(inits[2]["volumeMounts"], json!([agent_mount("dotnet")]));
    assert_eq!(out["spec"]["containers"], pod["spec"]["containers"]);
    assert_eq!(out["spec"]["volumes"], json!([agent_volume("dotnet")]));
}

#[test]
fn existing_lists_are_joined_and_user_values_win() {
    let pod = dotnet_pod(
        json!({}),
        json!([
            {"name": "DOTNET_STARTUP_HOOKS", "value": "/app/Hook.dll"},
            {"name": "CORECLR_PROFILER", "value": "{00000000-0000-0000-0000-000000000001}"},
            {"name": "DOTNET_ADDITIONAL_DEPS", "value": "/app/deps:/more/deps"},
            {"name": "DOTNET_SHARED_STORE", "value": ""},
            {"name": "CORECLR_ENABLE_PROFILING", "value": "0"},
            {"name": "Z", "value": "1"}
        ]),
    );
    let (out, d) = run(&catalog(SHOP), &pod);
    assert_eq!(d.injected, [Language::DotNet]);
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
    assert_eq!(
        out["spec"]["containers"][0]["env"],
        env(vec![
            head(),
            vec![
                lit("DOTNET_STARTUP_HOOKS", &format!("/app/Hook.dll:{HOOK}")),
                lit("CORECLR_PROFILER", "{00000000-0000-0000-0000-000000000001}"),
                lit(
                    "DOTNET_ADDITIONAL_DEPS",
                    &format!("/app/deps:/more/deps:{DEPS}")
                ),
                // An empty list gets the agent's entry alone.
                lit("DOTNET_SHARED_STORE", STORE),
                lit("CORECLR_ENABLE_PROFILING", "0"),
                lit("Z", "1"),
                lit("OTEL_DOTNET_AUTO_TRACES_CONSOLE_EXPORTER_ENABLED", "false"),
                lit("OTEL_LOGS_EXPORTER", "otlp"),
                lit("CORECLR_PROFILER_PATH", GLIBC),
                lit("OTEL_DOTNET_AUTO_HOME", HOME),
            ],
            HTTP_SDK.tail("p", "app", None),
        ])
    );
}

#[test]
fn musl_runtime_uses_the_musl_profiler() {
    let pod = dotnet_pod(json!({RUNTIME: "linux-musl-x64"}), json!([]));
    let (out, d) = run(&catalog(SHOP), &pod);
    assert_eq!(d.injected, [Language::DotNet]);
    assert_eq!(
        out["spec"]["containers"][0]["env"],
        env(vec![
            head(),
            dotnet_env(MUSL),
            HTTP_SDK.tail("p", "app", None)
        ])
    );
    // One image holds both runtimes: the init container is the same.
    assert_eq!(out["spec"]["initContainers"], json!([dotnet_init(None)]));

    // "linux-x64" is the default, spelled out.
    let (out, _) = run(
        &catalog(SHOP),
        &dotnet_pod(json!({RUNTIME: "linux-x64"}), json!([])),
    );
    assert_eq!(
        out["spec"]["containers"][0]["env"][6],
        lit("CORECLR_PROFILER_PATH", GLIBC)
    );

    // A namespace-level runtime applies when the pod has none.
    let ns_musl = catalog(SHOP).with_namespace("shop", &[(RUNTIME, "linux-musl-x64")]);
    let (out, _) = run(&ns_musl, &dotnet_pod(json!({}), json!([])));
    assert_eq!(
        out["spec"]["containers"][0]["env"][6],
        lit("CORECLR_PROFILER_PATH", MUSL)
    );
}

#[test]
fn invalid_runtime_is_not_injected_with_a_warning() {
    let pod = dotnet_pod(json!({RUNTIME: "win-x64"}), json!([]));
    let (out, d) = run(&catalog(SHOP), &pod);
    assert_eq!(out, pod);
    assert_not_injected(
        &d,
        Language::DotNet,
        "dotnet: otel-dotnet-auto-runtime \"win-x64\" is not supported (use linux-x64 or linux-musl-x64); not injected",
    );
}

#[test]
fn otel_dotnet_auto_home_already_set_skips_with_a_warning() {
    // In the container: that container is configured some other way.
    let pod = dotnet_pod(
        json!({}),
        json!([{"name": "OTEL_DOTNET_AUTO_HOME", "value": "/otel-dotnet-auto"}]),
    );
    let (out, d) = run(&catalog(SHOP), &pod);
    assert_eq!(out, pod);
    assert_not_injected(
        &d,
        Language::DotNet,
        "dotnet: container \"app\" already sets OTEL_DOTNET_AUTO_HOME; not instrumented",
    );

    // In spec.dotnet.env: no container is injected.
    let inst = SHOP.replace(
        "        value: \"false\"\n",
        "        value: \"false\"\n      - name: OTEL_DOTNET_AUTO_HOME\n        value: /opt/otel\n",
    );
    let pod = json!({
        "metadata": {"name": "p", "annotations": {
            INJECT: "true",
            "instrumentation.opentelemetry.io/container-names": "a,b"}},
        "spec": {"containers": [{"name": "a", "image": "a"}, {"name": "b", "image": "b"}]}
    });
    let (out, d) = run(&catalog(&inst), &pod);
    assert_eq!(out, pod);
    assert_not_injected(
        &d,
        Language::DotNet,
        "dotnet: spec.dotnet.env sets OTEL_DOTNET_AUTO_HOME; not injected",
    );
}

#[test]
fn list_variables_from_value_from_skip_that_container_with_a_warning() {
    for var in [
        "DOTNET_STARTUP_HOOKS",
        "DOTNET_ADDITIONAL_DEPS",
        "DOTNET_SHARED_STORE",
    ] {
        let from =
            json!({"name": var, "valueFrom": {"configMapKeyRef": {"name": "net", "key": "v"}}});
        let pod = dotnet_pod(json!({}), json!([from]));
        let (out, d) = run(&catalog(SHOP), &pod);
        assert_eq!(out, pod, "{var}");
        assert_not_injected(
            &d,
            Language::DotNet,
            &format!("dotnet: container \"app\" sets {var} with valueFrom; not instrumented"),
        );
    }

    // With a second target, that one is still instrumented.
    let from = json!({"name": "DOTNET_STARTUP_HOOKS",
        "valueFrom": {"secretKeyRef": {"name": "net", "key": "hooks"}}});
    let pod = json!({
        "metadata": {"name": "p", "annotations": {
            INJECT: "true",
            "instrumentation.opentelemetry.io/container-names": "app,other"}},
        "spec": {"containers": [{"name": "app", "image": "app", "env": [from]},
                                {"name": "other", "image": "other"}]}
    });
    let (out, d) = run(&catalog(SHOP), &pod);
    assert_eq!(d.injected, [Language::DotNet]);
    assert_eq!(d.warnings.len(), 1);
    assert_eq!(out["spec"]["containers"][0], pod["spec"]["containers"][0]);
    assert_eq!(
        out["spec"]["containers"][1]["env"],
        env(vec![
            head(),
            dotnet_env(GLIBC),
            HTTP_SDK.tail("p", "other", None)
        ])
    );

    // spec.env is merged before the agent's variables: a valueFrom there cannot be joined.
    let inst = SHOP.replace(
        "      value: otlp\n",
        "      value: otlp\n    - name: DOTNET_SHARED_STORE\n      valueFrom:\n        configMapKeyRef: {name: net, key: store}\n",
    );
    let pod = dotnet_pod(json!({}), json!([]));
    let (out, d) = run(&catalog(&inst), &pod);
    assert_eq!(out, pod);
    assert_not_injected(
        &d,
        Language::DotNet,
        "dotnet: Instrumentation sets DOTNET_SHARED_STORE with valueFrom; container \"app\" not instrumented",
    );

    // A valueFrom on a variable that is only set when absent is simply left alone.
    let pod = dotnet_pod(
        json!({}),
        json!([{"name": "CORECLR_PROFILER_PATH", "valueFrom": {"configMapKeyRef": {"name": "net", "key": "p"}}}]),
    );
    let (out, d) = run(&catalog(SHOP), &pod);
    assert_eq!(d.injected, [Language::DotNet]);
    let env = out["spec"]["containers"][0]["env"].as_array().unwrap();
    assert_eq!(
        env.iter()
            .filter(|e| e["name"] == "CORECLR_PROFILER_PATH")
            .count(),
        1
    );
    assert_eq!(env[2], pod["spec"]["containers"][0]["env"][0]);
}

#[test]
fn reinvocation_gets_no_second_patch() {
    assert_reinvocation_patches_nothing(
        &catalog(SHOP),
        &dotnet_pod(json!({RUNTIME: "linux-musl-x64"}), json!([])),
        "dotnet",
        relabel,
    );
}
