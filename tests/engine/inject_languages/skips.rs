//! The pods a language is not injected into, with the skip that says why.

use otel_injector::cluster::StaticCatalog;
use otel_injector::engine::SkipReason;
use otel_injector::keys::{DOTNET_RUNTIME, GO_TARGET_EXE, PYTHON_PLATFORM};
use rstest::rstest;
use serde_json::{Value, json};

use crate::common::{
    APACHE, DOTNET, EnvLang, GO, JAVA, Lang, NGINX, NODEJS, PYTHON, SDK, assert_not_injected,
    assert_skipped, disabled, names, run, run_with,
};

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
