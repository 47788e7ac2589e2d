//! .NET injection, end to end through the engine: each case applies the returned JSON patch
//! to the input pod and compares the resulting pod parts with the expected ones. What every
//! language does alike is in `inject_languages.rs`; the Instrumentation is
//! `data/instrumentations/dotnet.yaml`.

use crate::common::{
    DOTNET, HTTP_SDK, assert_not_injected, catalog, dotnet,
    dotnet::{GLIBC, MUSL},
    env, head, run, with_lang_env,
};
use otel_injector::agents::Language;
use otel_injector::cluster::StaticCatalog;
use otel_injector::keys::DOTNET_RUNTIME;
use rstest::rstest;
use serde_json::{Value, json};

/// The pod's otel-dotnet-auto-runtime, else the namespace's, picks the profiler; one image
/// holds both runtimes, so the init container is the same.
#[rstest]
#[case::musl(DOTNET.catalog(), json!({DOTNET_RUNTIME: "linux-musl-x64"}), MUSL)]
// "linux-x64" is the default, spelled out.
#[case::glibc(DOTNET.catalog(), json!({DOTNET_RUNTIME: "linux-x64"}), GLIBC)]
#[case::musl_from_the_namespace(
    DOTNET.catalog().with_namespace("shop", &[(DOTNET_RUNTIME, "linux-musl-x64")]),
    json!({}),
    MUSL
)]
fn the_runtime_picks_the_profiler(
    #[case] catalog: StaticCatalog,
    #[case] annotations: Value,
    #[case] profiler: &str,
) {
    let (out, d) = run(&catalog, &DOTNET.app_pod(annotations, json!([])));
    assert_eq!(d.injected, [Language::DotNet]);
    assert_eq!(
        out["spec"]["containers"][0]["env"],
        env(vec![
            head(),
            dotnet::env(profiler),
            HTTP_SDK.tail("p", "app", None)
        ])
    );
    assert_eq!(out["spec"]["initContainers"], json!([dotnet::init(None)]));
}

/// OTEL_DOTNET_AUTO_HOME already set means .NET is configured some other way.
#[rstest]
// In the container: that container is not instrumented.
#[case::in_the_container(
    DOTNET.shop.to_owned(),
    DOTNET.app_pod(json!({}), json!([{"name": "OTEL_DOTNET_AUTO_HOME", "value": "/otel-dotnet-auto"}])),
    "dotnet: container \"app\" already sets OTEL_DOTNET_AUTO_HOME; not instrumented"
)]
// In spec.dotnet.env: no container is.
#[case::in_the_instrumentation(
    with_lang_env(DOTNET.shop, "- name: OTEL_DOTNET_AUTO_HOME\n  value: /opt/otel"),
    DOTNET.pod(
        json!({"instrumentation.opentelemetry.io/container-names": "a,b"}),
        json!({"containers": [{"name": "a", "image": "a"}, {"name": "b", "image": "b"}]})
    ),
    "dotnet: spec.dotnet.env sets OTEL_DOTNET_AUTO_HOME; not injected"
)]
fn otel_dotnet_auto_home_already_set_is_not_injected(
    #[case] instrumentation: String,
    #[case] pod: Value,
    #[case] warning: &str,
) {
    let (out, d) = run(&catalog(&instrumentation), &pod);
    assert_eq!(out, pod);
    assert_not_injected(&d, Language::DotNet, warning);
}

#[test]
fn a_value_from_on_a_variable_set_only_when_absent_is_left_alone() {
    // Unlike the list variables (inject_languages.rs), it is not extended.
    let pod = DOTNET.app_pod(
        json!({}),
        json!([{"name": "CORECLR_PROFILER_PATH", "valueFrom": {"configMapKeyRef": {"name": "net", "key": "p"}}}]),
    );
    let (out, d) = run(&DOTNET.catalog(), &pod);
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
