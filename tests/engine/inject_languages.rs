//! The behaviours the languages share, as tables: one row per language (or per variable), each
//! run end to end through the engine with the returned JSON patch applied to the input pod.
//! The languages' own behaviours are in `inject_<language>.rs`.

use crate::common::{
    APACHE, DOTNET, EnvLang, GO, HTTP_SDK, JAVA, Lang, NGINX, NODEJS, PYTHON, SDK,
    assert_not_injected, assert_reinvocation_patches_nothing, assert_skipped, catalog, disabled,
    dotnet,
    dotnet::{DEPS, HOME, HOOK, STORE},
    env, fref, head, lit, names,
    nodejs::REQUIRE,
    python::{MOUNT, PREFIX},
    relabel, resource_attributes, run, run_with, set_some, unchanged, with_lang_env, with_section,
    with_spec, with_spec_env,
};
use otel_injector::cluster::StaticCatalog;
use otel_injector::engine::{EngineConfig, SkipReason};
use otel_injector::keys::{DOTNET_RUNTIME, GO_TARGET_EXE, INJECTED_ANNOTATION, PYTHON_PLATFORM};
use rstest::rstest;
use serde_json::{Value, json};

fn restricted() -> Value {
    json!({"runAsNonRoot": true, "runAsUser": 1000, "allowPrivilegeEscalation": false,
           "capabilities": {"drop": ["ALL"]}})
}

fn non_root() -> Value {
    json!({"runAsNonRoot": true, "runAsUser": 1000})
}

/// The whole pod out: the agent's variables between the container's own and the SDK block,
/// its init container, volume and mount. `inject_java.rs` writes the Java row out in full.
#[rstest]
#[case::java(&JAVA, "checkout", "shop/checkout:1.4.2", "1.4.2", json!({"name": "PORT", "value": "8080"}))]
#[case::nodejs(&NODEJS, "web", "shop/web:2.1.0", "2.1.0", json!({"name": "PORT", "value": "3000"}))]
#[case::python(&PYTHON, "recs", "shop/recs:0.9", "0.9", json!({"name": "WORKERS", "value": "4"}))]
#[case::dotnet(&DOTNET, "cart", "shop/cart:8.0.1", "8.0.1", json!({"name": "ASPNETCORE_URLS", "value": "http://+:8080"}))]
#[case::sdk(&SDK, "gateway", "shop/gateway:1.2", "1.2", json!({"name": "RUST_LOG", "value": "info"}))]
fn one_container_gets_the_agent_and_the_env_in_order(
    #[case] lang: &EnvLang,
    #[case] name: &str,
    #[case] image: &str,
    #[case] version: &str,
    #[case] own: Value,
) {
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "shop", "annotations": {lang.inject: "true"}},
        "spec": {"containers": [{"name": "app", "image": image, "env": [own]}]}
    });
    let (out, d) = run(&lang.catalog(), &pod);
    assert_eq!(d.injected, [lang.language]);
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
    assert!(d.skipped.is_empty());
    let mut expected = pod.clone();
    expected["metadata"]["annotations"][INJECTED_ANNOTATION] = json!(lang.name);
    let app = &pod["spec"]["containers"][0];
    expected["spec"]["containers"][0] = lang.instrumented(app, name, Some(version));
    set_some(&mut expected["spec"], "initContainers", lang.inits(None));
    set_some(&mut expected["spec"], "volumes", lang.volumes(&Value::Null));
    assert_eq!(out, expected);
}

/// Targets `api` and `worker` (tagged `versions`) are named by the common or the language's
/// container list; `proxy` is left alone. One init container serves all targets, with the
/// first target's security context; the pod's own mounts and volumes are kept.
#[rstest]
#[case::java(&JAVA, ["2", "sha256:abcd"], json!({
    "metadata": {"name": "pay", "annotations": {
        "instrumentation.opentelemetry.io/inject-java": "java-inst",
        "instrumentation.opentelemetry.io/container-names": "api,worker"}},
    "spec": {"containers": [
        {"name": "proxy", "image": "envoy:1.30"},
        {"name": "api", "image": "pay/api:2", "securityContext": restricted()},
        {"name": "worker", "image": "pay/worker@sha256:abcd"}]}
}))]
#[case::nodejs(&NODEJS, ["3", "sha256:abcd"], json!({
    "metadata": {"name": "shop-api", "annotations": {
        "instrumentation.opentelemetry.io/inject-nodejs": "node-inst",
        "instrumentation.opentelemetry.io/container-names": "api",
        "instrumentation.opentelemetry.io/nodejs-container-names": "worker"}},
    "spec": {"containers": [
        {"name": "proxy", "image": "envoy:1.30"},
        {"name": "api", "image": "shop/api:3", "securityContext": restricted(),
         "volumeMounts": [{"name": "cache", "mountPath": "/cache"}]},
        {"name": "worker", "image": "shop/worker@sha256:abcd"}],
     "volumes": [{"name": "cache", "emptyDir": {}}]}
}))]
#[case::python(&PYTHON, ["5", "6"], json!({
    "metadata": {"name": "ml", "annotations": {
        "instrumentation.opentelemetry.io/inject-python": "py-inst",
        "instrumentation.opentelemetry.io/python-container-names": "api,worker"}},
    "spec": {"containers": [
        {"name": "proxy", "image": "envoy:1.30"},
        {"name": "api", "image": "ml/api:5", "securityContext": non_root()},
        {"name": "worker", "image": "ml/worker:6"}]}
}))]
#[case::dotnet(&DOTNET, ["1", "2"], json!({
    "metadata": {"name": "orders", "annotations": {
        "instrumentation.opentelemetry.io/inject-dotnet": "dotnet-inst",
        "instrumentation.opentelemetry.io/dotnet-container-names": "api,worker"}},
    "spec": {"containers": [
        {"name": "proxy", "image": "envoy:1.30"},
        {"name": "api", "image": "orders/api:1", "securityContext": non_root()},
        {"name": "worker", "image": "orders/worker:2"}]}
}))]
#[case::sdk(&SDK, ["4", "5"], json!({
    "metadata": {"name": "edge", "annotations": {
        "instrumentation.opentelemetry.io/inject-sdk": "sdk-inst",
        "instrumentation.opentelemetry.io/container-names": "api",
        "instrumentation.opentelemetry.io/sdk-container-names": "worker"}},
    "spec": {"containers": [
        {"name": "proxy", "image": "envoy:1.30"},
        {"name": "api", "image": "edge/api:4"},
        {"name": "worker", "image": "edge/worker:5"}]}
}))]
fn several_targets_share_one_agent(
    #[case] lang: &EnvLang,
    #[case] versions: [&str; 2],
    #[case] pod: Value,
) {
    let (out, d) = run(&lang.catalog(), &pod);
    assert_eq!(d.injected, [lang.language]);
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
    let (before, after) = (&pod["spec"]["containers"], &out["spec"]["containers"]);
    assert_eq!(after[0], before[0], "proxy untouched");
    let service = pod["metadata"]["name"].as_str().unwrap();
    assert_eq!(
        after[1],
        lang.instrumented(&before[1], service, Some(versions[0]))
    );
    assert_eq!(
        after[2],
        lang.instrumented(&before[2], service, Some(versions[1]))
    );
    let security = before[1].get("securityContext").cloned();
    assert_eq!(
        out["spec"].get("initContainers"),
        lang.inits(security).as_ref()
    );
    assert_eq!(
        out["spec"].get("volumes"),
        lang.volumes(&pod["spec"]["volumes"]).as_ref()
    );
}

/// The last init container (tagged `version`) is a target: the agent's init container goes
/// right before it. The app container is left alone unless it is a target too (tagged `app`).
#[rstest]
#[case::java(&JAVA, "7", None, json!({
    "metadata": {"name": "batch", "annotations": {
        "instrumentation.opentelemetry.io/inject-java": "true",
        "instrumentation.opentelemetry.io/java-container-names": "migrate"}},
    "spec": {
        "initContainers": [{"name": "wait", "image": "busybox"}, {"name": "migrate", "image": "db/migrate:7"}],
        "containers": [{"name": "app", "image": "app:1"}],
        "volumes": [{"name": "data", "emptyDir": {}}]}
}))]
#[case::nodejs(&NODEJS, "7", Some("1"), json!({
    "metadata": {"name": "batch", "annotations": {
        "instrumentation.opentelemetry.io/inject-nodejs": "true",
        "instrumentation.opentelemetry.io/nodejs-container-names": "app,seed"}},
    "spec": {
        "initContainers": [{"name": "wait", "image": "busybox"}, {"name": "seed", "image": "db/seed:7"}],
        "containers": [{"name": "app", "image": "app:1"}]}
}))]
#[case::python(&PYTHON, "2", None, json!({
    "metadata": {"name": "etl", "annotations": {
        "instrumentation.opentelemetry.io/inject-python": "true",
        "instrumentation.opentelemetry.io/container-names": "migrate"}},
    "spec": {
        "initContainers": [{"name": "wait", "image": "busybox"}, {"name": "migrate", "image": "etl/migrate:2"}],
        "containers": [{"name": "app", "image": "etl/app:2"}]}
}))]
#[case::dotnet(&DOTNET, "3", None, json!({
    "metadata": {"name": "job", "annotations": {
        "instrumentation.opentelemetry.io/inject-dotnet": "true",
        "instrumentation.opentelemetry.io/dotnet-container-names": "migrate"}},
    "spec": {
        "initContainers": [{"name": "wait", "image": "busybox"}, {"name": "migrate", "image": "db/migrate:3"}],
        "containers": [{"name": "app", "image": "app:1"}]}
}))]
// No agent to copy: the target is all that changes.
#[case::sdk(&SDK, "1", None, json!({
    "metadata": {"name": "job", "annotations": {
        "instrumentation.opentelemetry.io/inject-sdk": "true",
        "instrumentation.opentelemetry.io/sdk-container-names": "prepare"}},
    "spec": {
        "initContainers": [{"name": "prepare", "image": "job/prepare:1"}],
        "containers": [{"name": "app", "image": "job/app:1"}]}
}))]
fn an_init_container_target_gets_the_agent_copied_before_it(
    #[case] lang: &EnvLang,
    #[case] version: &str,
    #[case] app: Option<&str>,
    #[case] pod: Value,
) {
    let (out, d) = run(&lang.catalog(), &pod);
    assert_eq!(d.injected, [lang.language]);
    let service = pod["metadata"]["name"].as_str().unwrap();
    let inits = pod["spec"]["initContainers"].as_array().unwrap();
    let (target, before) = inits.split_last().unwrap();
    let mut expected = before.to_vec();
    expected.extend(lang.init.map(|init| init(None)));
    expected.push(lang.instrumented(target, service, Some(version)));
    assert_eq!(out["spec"]["initContainers"], Value::Array(expected));
    let app_before = &pod["spec"]["containers"][0];
    let app_after = match app {
        Some(version) => lang.instrumented(app_before, service, Some(version)),
        None => app_before.clone(),
    };
    assert_eq!(out["spec"]["containers"], json!([app_after]));
    assert_eq!(
        out["spec"].get("volumes"),
        lang.volumes(&pod["spec"]["volumes"]).as_ref()
    );
}

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

/// Run again on its own output (after another webhook's edit), a pod gets no second patch.
#[rstest]
#[case::java(&JAVA, JAVA.asking("true"), relabel, 1)]
#[case::nodejs(&NODEJS, NODEJS.app_pod(json!({}), json!([])), relabel, 1)]
#[case::python_musl(&PYTHON, PYTHON.app_pod(json!({PYTHON_PLATFORM: "musl"}), json!([])), relabel, 1)]
#[case::dotnet_musl(&DOTNET, DOTNET.app_pod(json!({DOTNET_RUNTIME: "linux-musl-x64"}), json!([])), relabel, 1)]
#[case::sdk(&SDK, SDK.app_pod(json!({}), json!([])), relabel, 1)]
// The app and the sidecar.
#[case::go(&GO, GO.pod(json!({GO_TARGET_EXE: "/app"}), json!({"containers": [{"name": "app", "image": "app"}]})), unchanged, 2)]
#[case::apache(&APACHE, APACHE.pod(json!({}), json!({
    "containers": [{"name": "web", "image": "httpd",
        "volumeMounts": [{"name": "c", "mountPath": "/usr/local/apache2/conf"}]}],
    "volumes": [{"name": "c", "configMap": {"name": "c"}}]})), unchanged, 1)]
#[case::nginx(&NGINX, NGINX.pod(json!({}), json!({
    "containers": [{"name": "proxy", "image": "nginx",
        "volumeMounts": [{"name": "c", "mountPath": "/etc/nginx/nginx.conf", "subPath": "nginx.conf"}]}],
    "volumes": [{"name": "c", "configMap": {"name": "c"}}]})), unchanged, 1)]
fn reinvocation_gets_no_second_patch(
    #[case] lang: &Lang,
    #[case] pod: Value,
    #[case] edit: fn(&mut Value),
    #[case] containers: usize,
) {
    let twice = assert_reinvocation_patches_nothing(&lang.catalog(), &pod, lang.name, edit);
    assert_eq!(
        twice["spec"]["containers"].as_array().unwrap().len(),
        containers
    );
}

/// A pod asking for a language in a namespace without an Instrumentation is admitted as it is.
#[rstest]
#[case::java(&JAVA, "inject-java: no Instrumentation in namespace \"shop\"; not injected")]
#[case::nodejs(&NODEJS, "inject-nodejs: no Instrumentation in namespace \"shop\"; not injected")]
#[case::python(&PYTHON, "inject-python: no Instrumentation in namespace \"shop\"; not injected")]
#[case::dotnet(&DOTNET, "inject-dotnet: no Instrumentation in namespace \"shop\"; not injected")]
#[case::sdk(&SDK, "inject-sdk: no Instrumentation in namespace \"shop\"; not injected")]
#[case::go(&GO, "inject-go: no Instrumentation in namespace \"shop\"; not injected")]
#[case::apache(&APACHE, "inject-apache-httpd: no Instrumentation in namespace \"shop\"; not injected")]
#[case::nginx(&NGINX, "inject-nginx: no Instrumentation in namespace \"shop\"; not injected")]
fn no_instrumentation_in_the_namespace_is_a_skip(#[case] lang: &Lang, #[case] warning: &str) {
    let (_, d) = run(&StaticCatalog::default(), &lang.asking("true"));
    assert_skipped(&d, SkipReason::NoInstrumentation, warning);
}

/// A language disabled on the webhook (`--enabled-languages`) is not injected.
#[rstest]
#[case::java(&JAVA, "inject-java: java injection is disabled on this webhook")]
#[case::nodejs(&NODEJS, "inject-nodejs: nodejs injection is disabled on this webhook")]
#[case::python(&PYTHON, "inject-python: python injection is disabled on this webhook")]
#[case::dotnet(&DOTNET, "inject-dotnet: dotnet injection is disabled on this webhook")]
#[case::sdk(&SDK, "inject-sdk: sdk injection is disabled on this webhook")]
#[case::go(&GO, "inject-go: go injection is disabled on this webhook")]
#[case::apache(&APACHE, "inject-apache-httpd: apache-httpd injection is disabled on this webhook")]
#[case::nginx(&NGINX, "inject-nginx: nginx injection is disabled on this webhook")]
fn a_disabled_language_is_a_skip(#[case] lang: &Lang, #[case] warning: &str) {
    let (_, d) = run_with(
        &lang.catalog(),
        &disabled(lang.language),
        &lang.asking("true"),
    );
    assert_skipped(&d, SkipReason::LanguageDisabled, warning);
}

/// The Instrumentation's initContainerSecurityContext wins over the first target's.
#[rstest]
fn the_init_container_security_context_from_the_instrumentation_wins(
    #[values(&JAVA, &NODEJS, &PYTHON, &DOTNET)] lang: &EnvLang,
) {
    let inst = with_spec(
        lang.shop,
        "initContainerSecurityContext:\n  runAsUser: 65532\n  readOnlyRootFilesystem: true",
    );
    let pod = lang.pod(
        json!({}),
        json!({"containers": [{"name": "app", "image": "app", "securityContext": {"runAsUser": 1}}]}),
    );
    let (out, _) = run(&catalog(&inst), &pod);
    assert_eq!(
        out["spec"]["initContainers"][0]["securityContext"],
        json!({"runAsUser": 65532, "readOnlyRootFilesystem": true})
    );
}

/// A volumeClaimTemplate makes the agent's volume an ephemeral one.
#[rstest]
#[case::java(&JAVA, JAVA.asking("true"))]
#[case::nodejs(&NODEJS, NODEJS.app_pod(json!({}), json!([])))]
#[case::python(&PYTHON, PYTHON.asking("true"))]
#[case::dotnet(&DOTNET, DOTNET.asking("true"))]
fn a_volume_claim_template_makes_an_ephemeral_volume(#[case] lang: &EnvLang, #[case] pod: Value) {
    let inst = with_section(
        lang.shop,
        "volumeClaimTemplate:\n  spec:\n    accessModes: [ReadWriteOnce]\n    resources:\n      requests:\n        storage: 1Gi",
    );
    let (out, _) = run(&catalog(&inst), &pod);
    assert_eq!(
        out["spec"]["volumes"],
        json!([{"name": format!("opentelemetry-auto-instrumentation-{}", lang.name),
                "ephemeral": {"volumeClaimTemplate": {"spec": {
                    "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}}}])
    );
}

/// Without an image in the language's section, the webhook's configured one is used.
#[rstest]
#[case::java(&JAVA, JAVA.asking("true"), "mirror.local/java:1")]
#[case::nodejs(&NODEJS, NODEJS.app_pod(json!({}), json!([])), "mirror.local/nodejs:1")]
#[case::python(&PYTHON, PYTHON.asking("true"), "mirror.local/python:1")]
#[case::dotnet(&DOTNET, DOTNET.asking("true"), "mirror.local/dotnet:1")]
fn the_configured_default_image_is_used(
    #[case] lang: &EnvLang,
    #[case] pod: Value,
    #[case] image: &str,
) {
    let mut config = EngineConfig::default();
    config.images.set(lang.language, image.into());
    let (out, _) = run_with(&lang.catalog(), &config, &pod);
    assert_eq!(out["spec"]["initContainers"][0]["image"], image);
}

/// A platform the agent image has no build for is not injected, with a warning.
#[rstest]
#[case::python(&PYTHON, PYTHON_PLATFORM, "alpine",
    "python: otel-python-platform \"alpine\" is not supported (use glibc or musl); not injected")]
#[case::dotnet(&DOTNET, DOTNET_RUNTIME, "win-x64",
    "dotnet: otel-dotnet-auto-runtime \"win-x64\" is not supported (use linux-x64 or linux-musl-x64); not injected")]
fn an_unsupported_platform_is_not_injected(
    #[case] lang: &EnvLang,
    #[case] annotation: &str,
    #[case] value: &str,
    #[case] warning: &str,
) {
    let pod = lang.app_pod(json!({annotation: value}), json!([]));
    let (out, d) = run(&lang.catalog(), &pod);
    assert_eq!(out, pod);
    assert_not_injected(&d, lang.language, warning);
}

/// The web servers cannot instrument an init container: it is skipped with a warning and the
/// app container still gets the module (the clone and the attach container are added).
#[rstest]
#[case::apache(&APACHE, json!({
    "instrumentation.opentelemetry.io/apache-httpd-container-names": "setup,web"}),
    json!({"initContainers": [{"name": "setup", "image": "busybox"}],
           "containers": [{"name": "web", "image": "httpd"}]}),
    "apache-httpd: init container \"setup\" cannot be instrumented; skipped",
    "otel-agent-attach-apache")]
#[case::nginx(&NGINX, json!({
    "instrumentation.opentelemetry.io/inject-nginx-container-names": "render,proxy"}),
    json!({"initContainers": [{"name": "render", "image": "envsubst"}],
           "containers": [{"name": "proxy", "image": "nginx"}]}),
    "nginx: init container \"render\" cannot be instrumented; skipped",
    "otel-agent-attach-nginx")]
fn web_servers_skip_init_container_targets(
    #[case] lang: &Lang,
    #[case] annotations: Value,
    #[case] spec: Value,
    #[case] warning: &str,
    #[case] attach: &str,
) {
    let pod = lang.pod(annotations, spec);
    let (out, d) = run(&lang.catalog(), &pod);
    assert_eq!(d.injected, [lang.language]);
    assert_eq!(d.warnings, [warning]);
    let inits = &out["spec"]["initContainers"];
    let init = &pod["spec"]["initContainers"][0];
    assert_eq!(
        names(inits),
        [
            init["name"].as_str().unwrap(),
            "otel-agent-source-container-clone",
            attach
        ]
    );
    assert_eq!(&inits[0], init);
}

/// Where the agent cannot reach init containers, naming only an init container injects
/// nothing.
#[rstest]
#[case::go(&GO, json!({
    "instrumentation.opentelemetry.io/go-container-names": "migrate", GO_TARGET_EXE: "/migrate"}),
    json!({"initContainers": [{"name": "migrate", "image": "migrate"}],
           "containers": [{"name": "app", "image": "app"}]}),
    "go: init container \"migrate\" cannot be instrumented; skipped")]
#[case::apache(&APACHE, json!({
    "instrumentation.opentelemetry.io/apache-httpd-container-names": "setup"}),
    json!({"initContainers": [{"name": "setup", "image": "busybox"}],
           "containers": [{"name": "web", "image": "httpd"}]}),
    "apache-httpd: init container \"setup\" cannot be instrumented; skipped")]
#[case::nginx(&NGINX, json!({
    "instrumentation.opentelemetry.io/inject-nginx-container-names": "render"}),
    json!({"initContainers": [{"name": "render", "image": "envsubst"}],
           "containers": [{"name": "proxy", "image": "nginx"}]}),
    "nginx: init container \"render\" cannot be instrumented; skipped")]
fn only_init_container_targets_inject_nothing(
    #[case] lang: &Lang,
    #[case] annotations: Value,
    #[case] spec: Value,
    #[case] warning: &str,
) {
    let pod = lang.pod(annotations, spec);
    let (out, d) = run(&lang.catalog(), &pod);
    assert_eq!(out, pod, "pod unchanged");
    assert!(d.injected.is_empty());
    assert_skipped(&d, SkipReason::NothingInstrumented, warning);
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
