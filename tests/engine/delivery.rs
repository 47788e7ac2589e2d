//! Agent delivery: image volumes instead of copying agents (same mount paths, same
//! environment), the `auto` mode by feature gate and API server version, the
//! per-Instrumentation override, and the Go agent as a native sidecar.

use k8s_openapi::api::core::v1::Pod;
use otel_injector::admission::mutate;
use otel_injector::agents::Language;
use otel_injector::cluster::StaticCatalog;
use otel_injector::engine::{AgentDelivery, EngineConfig, GoSidecar, Report, Snapshot};
use otel_injector::pod::valid;
use rstest::rstest;
use serde_json::{Value, json};

const INSTRUMENTATION: &str = "apiVersion: opentelemetry.io/v1alpha1\nkind: Instrumentation\n\
    metadata: {name: inst, namespace: shop}\n\
    spec: {exporter: {endpoint: 'http://c:4318'}, go: {env: [{name: OTEL_GO_AUTO_TARGET_EXE, value: /app}]}}\n";

fn pod(lang: &str, extra: Value) -> Value {
    let mut annotations =
        json!({format!("instrumentation.opentelemetry.io/inject-{lang}"): "true"});
    for (k, v) in extra.as_object().unwrap() {
        annotations[k] = v.clone();
    }
    json!({"metadata": {"name": "p", "annotations": annotations},
        "spec": {"containers": [{"name": "app", "image": "app:1"}]}})
}

fn run(
    catalog: &StaticCatalog,
    config: &EngineConfig,
    version: Option<(u32, u32)>,
    pod: &Value,
) -> (Value, Report) {
    run_with_gate(catalog, config, version, None, pod)
}

/// [`run`] with the API server's `ImageVolume` gate as read (`None`: unreadable).
fn run_with_gate(
    catalog: &StaticCatalog,
    config: &EngineConfig,
    version: Option<(u32, u32)>,
    gate: Option<bool>,
    pod: &Value,
) -> (Value, Report) {
    let typed: Pod = serde_json::from_value(pod.clone()).unwrap();
    let mut snapshot = Snapshot::take(catalog, "shop", config);
    snapshot.server_version = version;
    snapshot.image_volume_gate = gate;
    let (patch, report) = mutate(&snapshot, &typed);
    let mut out = pod.clone();
    json_patch::patch(&mut out, &json_patch::Patch(patch)).unwrap();
    valid::check(&serde_json::from_value(out.clone()).unwrap()).unwrap();
    (out, report)
}

fn config(delivery: AgentDelivery) -> EngineConfig {
    EngineConfig {
        delivery,
        ..EngineConfig::default()
    }
}

fn catalog() -> StaticCatalog {
    StaticCatalog::from_yaml(INSTRUMENTATION).unwrap()
}

#[rstest]
#[case::java("java", json!({}), "opentelemetry-auto-instrumentation-java", "/otel-auto-instrumentation-java-app", None,
    "ghcr.io/open-telemetry/opentelemetry-operator/autoinstrumentation-java:2.30.0")]
#[case::nodejs("nodejs", json!({}), "opentelemetry-auto-instrumentation-nodejs", "/otel-auto-instrumentation-nodejs", Some("autoinstrumentation"),
    "ghcr.io/open-telemetry/opentelemetry-operator/autoinstrumentation-nodejs:0.78.0")]
#[case::python("python", json!({}), "opentelemetry-auto-instrumentation-python", "/otel-auto-instrumentation-python", Some("autoinstrumentation"),
    "ghcr.io/open-telemetry/opentelemetry-operator/autoinstrumentation-python:0.64b0")]
#[case::python_musl("python", json!({"instrumentation.opentelemetry.io/otel-python-platform": "musl"}),
    "opentelemetry-auto-instrumentation-python", "/otel-auto-instrumentation-python", Some("autoinstrumentation-musl"),
    "ghcr.io/open-telemetry/opentelemetry-operator/autoinstrumentation-python:0.64b0")]
#[case::dotnet("dotnet", json!({}), "opentelemetry-auto-instrumentation-dotnet", "/otel-auto-instrumentation-dotnet", Some("autoinstrumentation"),
    "ghcr.io/open-telemetry/opentelemetry-operator/autoinstrumentation-dotnet:1.16.0")]
fn image_volumes_mount_the_agent_where_the_copy_would_be(
    #[case] lang: &str,
    #[case] extra: Value,
    #[case] volume: &str,
    #[case] path: &str,
    #[case] sub_path: Option<&str>,
    #[case] image: &str,
) {
    let p = pod(lang, extra);
    let (copied, _) = run(&catalog(), &config(AgentDelivery::InitContainer), None, &p);
    let (mounted, r) = run(&catalog(), &config(AgentDelivery::ImageVolume), None, &p);
    assert_eq!(r.injected, [lang.parse::<Language>().unwrap()]);
    assert!(r.warnings.is_empty(), "{:?}", r.warnings);
    // No init container, no emptyDir: one image volume.
    assert!(mounted["spec"].get("initContainers").is_none());
    assert_eq!(
        mounted["spec"]["volumes"],
        json!([{"name": volume, "image": {"reference": image}}])
    );
    let mut mount = json!({"name": volume, "mountPath": path, "readOnly": true});
    if let Some(sub) = sub_path {
        mount["subPath"] = json!(sub);
    }
    let app = &mounted["spec"]["containers"][0];
    assert_eq!(app["volumeMounts"], json!([mount]));
    // The environment is byte-identical to copy mode.
    assert_eq!(app["env"], copied["spec"]["containers"][0]["env"]);
    assert_eq!(
        copied["spec"]["containers"][0]["volumeMounts"][0]["mountPath"],
        path
    );
}

#[test]
fn java_extensions_get_an_image_volume_each() {
    let catalog = StaticCatalog::from_yaml(
        "apiVersion: opentelemetry.io/v1alpha1\nkind: Instrumentation\n\
         metadata: {name: inst, namespace: shop}\n\
         spec: {imagePullPolicy: IfNotPresent, java: {extensions: [{image: 'ext:1', dir: /extensions}, {image: 'ext:2', dir: /opt/ext}]}}\n",
    )
    .unwrap();
    let (out, _) = run(
        &catalog,
        &config(AgentDelivery::ImageVolume),
        None,
        &pod("java", json!({})),
    );
    let m = "/otel-auto-instrumentation-java-app";
    assert_eq!(
        out["spec"]["volumes"],
        json!([
            {"name": "opentelemetry-auto-instrumentation-java", "image": {
                "reference": "ghcr.io/open-telemetry/opentelemetry-operator/autoinstrumentation-java:2.30.0",
                "pullPolicy": "IfNotPresent"}},
            {"name": "opentelemetry-auto-instrumentation-extension-0", "image": {"reference": "ext:1", "pullPolicy": "IfNotPresent"}},
            {"name": "opentelemetry-auto-instrumentation-extension-1", "image": {"reference": "ext:2", "pullPolicy": "IfNotPresent"}},
        ])
    );
    let app = &out["spec"]["containers"][0];
    assert_eq!(
        app["volumeMounts"],
        json!([
            {"name": "opentelemetry-auto-instrumentation-java", "mountPath": m, "readOnly": true},
            {"name": "opentelemetry-auto-instrumentation-extension-0", "mountPath": format!("{m}-extension-0"), "subPath": "extensions", "readOnly": true},
            {"name": "opentelemetry-auto-instrumentation-extension-1", "mountPath": format!("{m}-extension-1"), "subPath": "opt/ext", "readOnly": true},
        ])
    );
    let tool = app["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "JAVA_TOOL_OPTIONS")
        .unwrap();
    assert_eq!(
        tool["value"],
        format!(
            " -javaagent:{m}/javaagent.jar -Dotel.javaagent.extensions={m}-extension-0,{m}-extension-1"
        )
    );
}

/// The decision table of `--agent-delivery`: flag × the API server's version (the one it
/// emulates) × its `ImageVolume` feature gate as read from its `/metrics` (`None`: could not
/// be read, e.g. forbidden). A known gate decides `auto`; an unknown one leaves it to the
/// version (image volumes from 1.36, where the gate is GA and locked on). The two fixed
/// modes ignore both.
#[rstest]
#[case::auto_1_37_gate_on(AgentDelivery::Auto, Some((1, 37)), Some(true), true)]
#[case::auto_1_37_gate_off(AgentDelivery::Auto, Some((1, 37)), Some(false), false)]
#[case::auto_1_37_gate_unknown(AgentDelivery::Auto, Some((1, 37)), None, true)]
#[case::auto_1_36_gate_unknown(AgentDelivery::Auto, Some((1, 36)), None, true)]
#[case::auto_1_35_gate_on(AgentDelivery::Auto, Some((1, 35)), Some(true), true)]
#[case::auto_1_35_gate_off(AgentDelivery::Auto, Some((1, 35)), Some(false), false)]
#[case::auto_1_35_gate_unknown(AgentDelivery::Auto, Some((1, 35)), None, false)]
#[case::auto_unknown_version(AgentDelivery::Auto, None, None, false)]
#[case::auto_unknown_version_gate_on(AgentDelivery::Auto, None, Some(true), true)]
#[case::init_1_37_gate_on(AgentDelivery::InitContainer, Some((1, 37)), Some(true), false)]
#[case::init_1_37_gate_unknown(AgentDelivery::InitContainer, Some((1, 37)), None, false)]
#[case::image_1_35_gate_unknown(AgentDelivery::ImageVolume, Some((1, 35)), None, true)]
#[case::image_1_37_gate_off(AgentDelivery::ImageVolume, Some((1, 37)), Some(false), true)]
fn the_delivery_mode(
    #[case] mode: AgentDelivery,
    #[case] version: Option<(u32, u32)>,
    #[case] gate: Option<bool>,
    #[case] image: bool,
) {
    let (out, _) = run_with_gate(
        &catalog(),
        &config(mode),
        version,
        gate,
        &pod("nodejs", json!({})),
    );
    assert_eq!(out["spec"]["volumes"][0].get("image").is_some(), image);
    assert_eq!(out["spec"].get("initContainers").is_some(), !image);
}

#[rstest]
#[case::gate_off("auto", AgentDelivery::ImageVolume, Some(false), false)]
#[case::gate_on("auto", AgentDelivery::InitContainer, Some(true), true)]
#[case::fixed_beats_the_gate("image-volume", AgentDelivery::Auto, Some(false), true)]
fn an_instrumentation_asking_for_auto_follows_the_gate(
    #[case] value: &str,
    #[case] flag: AgentDelivery,
    #[case] gate: Option<bool>,
    #[case] image: bool,
) {
    let catalog = StaticCatalog::from_yaml(&format!(
        "apiVersion: opentelemetry.io/v1alpha1\nkind: Instrumentation\n\
         metadata: {{name: inst, namespace: shop, annotations: {{otel-injector/agent-delivery: {value}}}}}\n"
    ))
    .unwrap();
    let (out, _) = run_with_gate(
        &catalog,
        &config(flag),
        Some((1, 37)),
        gate,
        &pod("java", json!({})),
    );
    assert_eq!(out["spec"]["volumes"][0].get("image").is_some(), image);
}

#[rstest]
#[case::to_image_volume("image-volume", AgentDelivery::InitContainer, true)]
#[case::to_init_container("init-container", AgentDelivery::ImageVolume, false)]
#[case::unknown_value_keeps_the_flag("sideways", AgentDelivery::ImageVolume, true)]
fn an_instrumentation_overrides_the_flag(
    #[case] value: &str,
    #[case] flag: AgentDelivery,
    #[case] image: bool,
) {
    let catalog = StaticCatalog::from_yaml(&format!(
        "apiVersion: opentelemetry.io/v1alpha1\nkind: Instrumentation\n\
         metadata: {{name: inst, namespace: shop, annotations: {{otel-injector/agent-delivery: {value}}}}}\n"
    ))
    .unwrap();
    let (out, _) = run(&catalog, &config(flag), None, &pod("python", json!({})));
    assert_eq!(out["spec"]["volumes"][0].get("image").is_some(), image);
}

#[test]
fn claim_templates_do_not_apply_to_image_volumes() {
    let catalog = StaticCatalog::from_yaml(
        "apiVersion: opentelemetry.io/v1alpha1\nkind: Instrumentation\n\
         metadata: {name: inst, namespace: shop}\nspec: {nodejs: {volumeLimitSize: 300Mi}}\n",
    )
    .unwrap();
    let (_, r) = run(
        &catalog,
        &config(AgentDelivery::ImageVolume),
        None,
        &pod("nodejs", json!({})),
    );
    assert_eq!(r.injected, [Language::NodeJs]);
    assert_eq!(
        r.warnings,
        ["nodejs: volumeClaimTemplate and volumeLimitSize do not apply to image volumes; ignored"]
    );
}

#[rstest]
#[case::auto_on_1_29(GoSidecar::Auto, Some((1, 29)), true)]
#[case::auto_on_1_28(GoSidecar::Auto, Some((1, 28)), false)]
#[case::auto_unknown(GoSidecar::Auto, None, false)]
#[case::native(GoSidecar::Native, None, true)]
#[case::classic(GoSidecar::Classic, Some((1, 37)), false)]
fn the_go_sidecar(
    #[case] mode: GoSidecar,
    #[case] version: Option<(u32, u32)>,
    #[case] native: bool,
) {
    let mut config = EngineConfig {
        go_sidecar: mode,
        ..EngineConfig::default()
    };
    config.enabled.insert(Language::Go);
    let (out, r) = run(&catalog(), &config, version, &pod("go", json!({})));
    assert_eq!(r.injected, [Language::Go], "{:?}", r.warnings);
    let (sidecar, apps) = if native {
        (&out["spec"]["initContainers"][0], 1)
    } else {
        (&out["spec"]["containers"][1], 2)
    };
    assert_eq!(sidecar["name"], "opentelemetry-auto-instrumentation");
    assert_eq!(out["spec"]["containers"].as_array().unwrap().len(), apps);
    if native {
        assert_eq!(sidecar["restartPolicy"], "Always");
    } else {
        assert!(sidecar.get("restartPolicy").is_none());
        assert!(out["spec"].get("initContainers").is_none());
    }
}
