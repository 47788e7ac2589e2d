//! The behaviours the languages share, as tables: one row per language (or per variable), each
//! run end to end through the engine with the returned JSON patch applied to the input pod.
//! The languages' own behaviours are in `inject_<language>.rs`.

mod own_variables;
mod skips;

use otel_injector::engine::EngineConfig;
use otel_injector::keys::{DOTNET_RUNTIME, GO_TARGET_EXE, INJECTED_ANNOTATION, PYTHON_PLATFORM};
use rstest::rstest;
use serde_json::{Value, json};

use crate::common::{
    APACHE, DOTNET, EnvLang, GO, JAVA, Lang, NGINX, NODEJS, PYTHON, SDK,
    assert_reinvocation_patches_nothing, catalog, relabel, run, run_with, set_some, unchanged,
    with_section, with_spec,
};

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
