//! A container's own variables: the agent's variable set from `valueFrom` (in the pod or in
//! the Instrumentation) is not instrumented, and the container's values win.

use rstest::rstest;
use serde_json::{Value, json};

use crate::common::{
    DOTNET, EnvLang, HTTP_SDK, JAVA, Lang, NGINX, NODEJS, PYTHON, SDK, assert_not_injected,
    catalog, dotnet,
    dotnet::{DEPS, HOME, HOOK, STORE},
    env, fref, head, lit,
    nodejs::REQUIRE,
    python::{MOUNT, PREFIX},
    resource_attributes, run, with_lang_env, with_spec_env,
};

/// The agent's variable set with valueFrom in the only target cannot be extended: nothing is
/// injected, with a warning.
#[rstest]
#[case::java(&JAVA, "JAVA_TOOL_OPTIONS", json!({"configMapKeyRef": {"name": "jvm", "key": "opts"}}),
    "java: container \"app\" sets JAVA_TOOL_OPTIONS with valueFrom; not instrumented")]
#[case::nodejs(&NODEJS, "NODE_OPTIONS", json!({"configMapKeyRef": {"name": "node", "key": "opts"}}),
    "nodejs: container \"app\" sets NODE_OPTIONS with valueFrom; not instrumented")]
#[case::python(&PYTHON, "PYTHONPATH", json!({"configMapKeyRef": {"name": "py", "key": "path"}}),
    "python: container \"app\" sets PYTHONPATH with valueFrom; not instrumented")]
#[case::dotnet_startup_hooks(&DOTNET, "DOTNET_STARTUP_HOOKS", json!({"configMapKeyRef": {"name": "net", "key": "v"}}),
    "dotnet: container \"app\" sets DOTNET_STARTUP_HOOKS with valueFrom; not instrumented")]
#[case::dotnet_additional_deps(&DOTNET, "DOTNET_ADDITIONAL_DEPS", json!({"configMapKeyRef": {"name": "net", "key": "v"}}),
    "dotnet: container \"app\" sets DOTNET_ADDITIONAL_DEPS with valueFrom; not instrumented")]
#[case::dotnet_shared_store(&DOTNET, "DOTNET_SHARED_STORE", json!({"configMapKeyRef": {"name": "net", "key": "v"}}),
    "dotnet: container \"app\" sets DOTNET_SHARED_STORE with valueFrom; not instrumented")]
fn the_agents_variable_from_value_from_is_not_instrumented(
    #[case] lang: &EnvLang,
    #[case] var: &str,
    #[case] from: Value,
    #[case] warning: &str,
) {
    let pod = lang.app_pod(json!({}), json!([{"name": var, "valueFrom": from}]));
    let (out, d) = run(&lang.catalog(), &pod);
    assert_eq!(out, pod, "nothing changes: no init container, no volume");
    assert_not_injected(&d, lang.language, warning);
}

/// The same with a second target, named by `list`: that one is still instrumented.
#[rstest]
#[case::java(&JAVA, "container-names", "JAVA_TOOL_OPTIONS",
    json!({"configMapKeyRef": {"name": "jvm", "key": "opts"}}),
    "java: container \"app\" sets JAVA_TOOL_OPTIONS with valueFrom; not instrumented")]
#[case::nodejs(&NODEJS, "container-names", "NODE_OPTIONS",
    json!({"configMapKeyRef": {"name": "node", "key": "opts"}}),
    "nodejs: container \"app\" sets NODE_OPTIONS with valueFrom; not instrumented")]
#[case::python(&PYTHON, "python-container-names", "PYTHONPATH",
    json!({"configMapKeyRef": {"name": "py", "key": "path"}}),
    "python: container \"app\" sets PYTHONPATH with valueFrom; not instrumented")]
#[case::dotnet(&DOTNET, "container-names", "DOTNET_STARTUP_HOOKS",
    json!({"secretKeyRef": {"name": "net", "key": "hooks"}}),
    "dotnet: container \"app\" sets DOTNET_STARTUP_HOOKS with valueFrom; not instrumented")]
fn a_value_from_target_does_not_stop_the_next(
    #[case] lang: &EnvLang,
    #[case] list: &str,
    #[case] var: &str,
    #[case] from: Value,
    #[case] warning: &str,
) {
    let pod = json!({
        "metadata": {"name": "p", "annotations": {
            lang.inject: "true",
            format!("instrumentation.opentelemetry.io/{list}"): "app,other"}},
        "spec": {"containers": [{"name": "app", "image": "app", "env": [{"name": var, "valueFrom": from}]},
                                {"name": "other", "image": "other"}]}
    });
    let (out, d) = run(&lang.catalog(), &pod);
    assert_eq!(d.injected, [lang.language]);
    assert_eq!(d.warnings, [warning]);
    let (before, after) = (&pod["spec"]["containers"], &out["spec"]["containers"]);
    assert_eq!(after[0], before[0]);
    assert_eq!(after[1], lang.instrumented(&before[1], "p", None));
    assert_eq!(out["spec"]["initContainers"], lang.inits(None).unwrap());
}

/// The same variable with valueFrom in the Instrumentation (in the language's env, or for .NET
/// in spec.env, both merged before the agent's variables) cannot be extended either: no
/// target is instrumented.
#[rstest]
#[case::nodejs(&NODEJS,
    with_lang_env(NODEJS.shop, "- name: NODE_OPTIONS\n  valueFrom:\n    configMapKeyRef: {name: node, key: opts}"),
    NODEJS.app_pod(json!({}), json!([])),
    "nodejs: Instrumentation sets NODE_OPTIONS with valueFrom; container \"app\" not instrumented")]
#[case::python(&PYTHON,
    with_lang_env(PYTHON.shop, "- name: PYTHONPATH\n  valueFrom:\n    configMapKeyRef: {name: py, key: path}"),
    PYTHON.app_pod(json!({}), json!([])),
    "python: Instrumentation sets PYTHONPATH with valueFrom; container \"app\" not instrumented")]
#[case::dotnet(&DOTNET,
    with_spec_env(DOTNET.shop, "- name: DOTNET_SHARED_STORE\n  valueFrom:\n    configMapKeyRef: {name: net, key: store}"),
    DOTNET.app_pod(json!({}), json!([])),
    "dotnet: Instrumentation sets DOTNET_SHARED_STORE with valueFrom; container \"app\" not instrumented")]
#[case::nginx(&NGINX,
    with_lang_env(NGINX.shop, "- name: LD_LIBRARY_PATH\n  valueFrom:\n    configMapKeyRef: {name: libs, key: path}"),
    NGINX.pod(json!({}), json!({"containers": [{"name": "proxy", "image": "nginx"}]})),
    "nginx: Instrumentation sets LD_LIBRARY_PATH with valueFrom; container \"proxy\" not instrumented")]
fn the_agents_variable_from_value_from_in_the_instrumentation_is_not_instrumented(
    #[case] lang: &Lang,
    #[case] instrumentation: String,
    #[case] pod: Value,
    #[case] warning: &str,
) {
    let (out, d) = run(&catalog(&instrumentation), &pod);
    assert_eq!(out, pod);
    assert_not_injected(&d, lang.language, warning);
}

/// The container's own variables win and are not duplicated; the agent's variable the
/// container already has is extended (a list joined, a path wrapped) in its place.
#[rstest]
#[case::java(&JAVA,
    JAVA.app_pod(json!({}), json!([
        {"name": "OTEL_SERVICE_NAME", "value": "mine"},
        {"name": "OTEL_RESOURCE_ATTRIBUTES", "value": "team=core,k8s.container.name=custom"},
        {"name": "OTEL_TRACES_SAMPLER_ARG", "value": "1"},
        {"name": "OTEL_LOGS_EXPORTER", "value": "none"},
        {"name": "LAST", "value": "x"}
    ])),
    vec![head(), vec![
        lit("OTEL_SERVICE_NAME", "mine"),
        lit("OTEL_TRACES_SAMPLER_ARG", "1"),
        lit("OTEL_LOGS_EXPORTER", "none"),
        lit("LAST", "x"),
        lit("OTEL_INSTRUMENTATION_JDBC_ENABLED", "false"),
        lit("JAVA_TOOL_OPTIONS", " -javaagent:/otel-auto-instrumentation-java-app/javaagent.jar"),
        lit("OTEL_EXPORTER_OTLP_ENDPOINT", "http://otel-collector.observability:4318"),
        fref("OTEL_RESOURCE_ATTRIBUTES_POD_NAME", "metadata.name"),
        fref("OTEL_RESOURCE_ATTRIBUTES_NODE_NAME", "spec.nodeName"),
        lit("OTEL_PROPAGATORS", "tracecontext,baggage"),
        // The sampler is left alone when the user set either variable.
        lit("OTEL_RESOURCE_ATTRIBUTES", "team=core,k8s.container.name=custom,k8s.namespace.name=shop,\
            k8s.node.name=$(OTEL_RESOURCE_ATTRIBUTES_NODE_NAME),\
            k8s.pod.name=$(OTEL_RESOURCE_ATTRIBUTES_POD_NAME),\
            service.instance.id=shop.$(OTEL_RESOURCE_ATTRIBUTES_POD_NAME).app,service.namespace=shop"),
    ]]
)]
#[case::java_tool_options_extended(&JAVA,
    JAVA.app_pod(json!({}), json!([
        {"name": "JAVA_TOOL_OPTIONS", "value": "-Xmx512m"},
        {"name": "Z", "value": "1"}
    ])),
    vec![head(), vec![
        lit("JAVA_TOOL_OPTIONS", "-Xmx512m -javaagent:/otel-auto-instrumentation-java-app/javaagent.jar"),
        lit("Z", "1"),
        lit("OTEL_INSTRUMENTATION_JDBC_ENABLED", "false"),
        lit("OTEL_LOGS_EXPORTER", "otlp"),
    ], HTTP_SDK.tail("p", "app", None)]
)]
#[case::nodejs_node_options_extended(&NODEJS,
    NODEJS.app_pod(json!({}), json!([
        {"name": "NODE_OPTIONS", "value": "--max-old-space-size=512"},
        {"name": "OTEL_METRICS_EXPORTER", "value": "none"},
        {"name": "OTEL_SERVICE_NAME", "value": "mine"},
        {"name": "OTEL_NODE_RESOURCE_DETECTORS", "value": "all"},
        {"name": "OTEL_RESOURCE_ATTRIBUTES", "value": "team=web"},
        {"name": "Z", "value": "1"}
    ])),
    vec![head(), vec![
        lit("NODE_OPTIONS", &format!("--max-old-space-size=512{REQUIRE}")),
        lit("OTEL_METRICS_EXPORTER", "none"),
        lit("OTEL_SERVICE_NAME", "mine"),
        lit("OTEL_NODE_RESOURCE_DETECTORS", "all"),
        lit("Z", "1"),
        lit("OTEL_LOGS_EXPORTER", "otlp"),
        lit("OTEL_EXPORTER_OTLP_ENDPOINT", "http://otel-collector.observability:4318"),
        fref("OTEL_RESOURCE_ATTRIBUTES_POD_NAME", "metadata.name"),
        fref("OTEL_RESOURCE_ATTRIBUTES_NODE_NAME", "spec.nodeName"),
        lit("OTEL_PROPAGATORS", "tracecontext,baggage"),
        lit("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
        lit("OTEL_TRACES_SAMPLER_ARG", "0.25"),
        lit("OTEL_RESOURCE_ATTRIBUTES", &format!("team=web,{}", resource_attributes("app", None))),
    ]]
)]
#[case::python_pythonpath_wrapped(&PYTHON,
    PYTHON.app_pod(json!({}), json!([
        {"name": "PYTHONPATH", "value": "/app/src:/app/lib"},
        {"name": "OTEL_TRACES_EXPORTER", "value": "console"},
        {"name": "OTEL_EXPORTER_OTLP_PROTOCOL", "value": "grpc"},
        {"name": "OTEL_SERVICE_NAME", "value": "mine"},
        {"name": "Z", "value": "1"}
    ])),
    vec![head(), vec![
        lit("PYTHONPATH", &format!("{PREFIX}:/app/src:/app/lib:{MOUNT}")),
        lit("OTEL_TRACES_EXPORTER", "console"),
        lit("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        lit("OTEL_SERVICE_NAME", "mine"),
        lit("Z", "1"),
        lit("OTEL_PYTHON_LOGGING_AUTO_INSTRUMENTATION_ENABLED", "true"),
        lit("OTEL_LOGS_EXPORTER", "console"),
        lit("OTEL_METRICS_EXPORTER", "otlp"),
    ], HTTP_SDK.tail("p", "app", None)[1..].to_vec()] // OTEL_SERVICE_NAME is the user's
)]
#[case::dotnet_lists_joined(&DOTNET,
    DOTNET.app_pod(json!({}), json!([
        {"name": "DOTNET_STARTUP_HOOKS", "value": "/app/Hook.dll"},
        {"name": "CORECLR_PROFILER", "value": "{00000000-0000-0000-0000-000000000001}"},
        {"name": "DOTNET_ADDITIONAL_DEPS", "value": "/app/deps:/more/deps"},
        {"name": "DOTNET_SHARED_STORE", "value": ""},
        {"name": "CORECLR_ENABLE_PROFILING", "value": "0"},
        {"name": "Z", "value": "1"}
    ])),
    vec![head(), vec![
        lit("DOTNET_STARTUP_HOOKS", &format!("/app/Hook.dll:{HOOK}")),
        lit("CORECLR_PROFILER", "{00000000-0000-0000-0000-000000000001}"),
        lit("DOTNET_ADDITIONAL_DEPS", &format!("/app/deps:/more/deps:{DEPS}")),
        // An empty list gets the agent's entry alone.
        lit("DOTNET_SHARED_STORE", STORE),
        lit("CORECLR_ENABLE_PROFILING", "0"),
        lit("Z", "1"),
        lit("OTEL_DOTNET_AUTO_TRACES_CONSOLE_EXPORTER_ENABLED", "false"),
        lit("OTEL_LOGS_EXPORTER", "otlp"),
        lit("CORECLR_PROFILER_PATH", dotnet::GLIBC),
        lit("OTEL_DOTNET_AUTO_HOME", HOME),
    ], HTTP_SDK.tail("p", "app", None)]
)]
// Even the variables put before the container's own.
#[case::sdk(&SDK,
    SDK.app_pod(json!({}), json!([
        {"name": "OTEL_EXPORTER_OTLP_PROTOCOL", "value": "http/protobuf"},
        {"name": "OTEL_SERVICE_NAME", "value": "mine"},
        {"name": "OTEL_PROPAGATORS", "value": "xray"},
        {"name": "OTEL_TRACES_SAMPLER", "value": "always_off"},
        {"name": "OTEL_POD_IP", "value": "override"},
        {"name": "OTEL_RESOURCE_ATTRIBUTES", "value": "team=edge"},
        {"name": "LAST", "value": "x"}
    ])),
    vec![vec![
        fref("OTEL_NODE_IP", "status.hostIP"),
        lit("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
        lit("OTEL_SERVICE_NAME", "mine"),
        lit("OTEL_PROPAGATORS", "xray"),
        lit("OTEL_TRACES_SAMPLER", "always_off"),
        lit("OTEL_POD_IP", "override"),
        lit("LAST", "x"),
        lit("OTEL_EXPORTER_OTLP_ENDPOINT", "http://otel-collector.observability:4317"),
        fref("OTEL_RESOURCE_ATTRIBUTES_POD_NAME", "metadata.name"),
        fref("OTEL_RESOURCE_ATTRIBUTES_NODE_NAME", "spec.nodeName"),
        lit("OTEL_RESOURCE_ATTRIBUTES", &format!("team=edge,{}", resource_attributes("app", None))),
    ]]
)]
#[case::nginx(&NGINX,
    NGINX.pod(json!({}), json!({"containers": [{"name": "proxy", "image": "nginx", "env": [
        {"name": "NGINX_OTEL_DEBUG", "value": "1"},
        {"name": "OTEL_SERVICE_NAME", "value": "gateway"},
        {"name": "OTEL_PROPAGATORS", "value": "b3"}
    ]}]})),
    vec![head(), vec![
        lit("NGINX_OTEL_DEBUG", "1"),
        lit("OTEL_SERVICE_NAME", "gateway"),
        lit("OTEL_PROPAGATORS", "b3"),
        lit("LD_LIBRARY_PATH", "/opt/opentelemetry-webserver/agent/sdk_lib/lib"),
        lit("OTEL_LOGS_EXPORTER", "otlp"),
        lit("OTEL_EXPORTER_OTLP_ENDPOINT", "http://otel-collector.observability:4317"),
        fref("OTEL_RESOURCE_ATTRIBUTES_POD_NAME", "metadata.name"),
        fref("OTEL_RESOURCE_ATTRIBUTES_NODE_NAME", "spec.nodeName"),
        lit("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
        lit("OTEL_TRACES_SAMPLER_ARG", "0.25"),
        lit("OTEL_RESOURCE_ATTRIBUTES", &resource_attributes("proxy", None)),
    ]]
)]
fn the_containers_own_variables_win(
    #[case] lang: &Lang,
    #[case] pod: Value,
    #[case] expected: Vec<Vec<Value>>,
) {
    let (out, d) = run(&lang.catalog(), &pod);
    assert_eq!(d.injected, [lang.language]);
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
    assert_eq!(out["spec"]["containers"][0]["env"], env(expected));
}
