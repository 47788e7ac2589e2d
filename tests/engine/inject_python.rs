//! Python injection, end to end through the engine: each case applies the returned JSON patch
//! to the input pod and compares the resulting pod parts with the expected ones. What every
//! language does alike is in `inject_languages.rs`; the Instrumentation is
//! `data/instrumentations/python.yaml`.

use crate::common::{
    HTTP_SDK, PYTHON, catalog, env, head, lit, python,
    python::{MOUNT, PREFIX},
    run, with_lang_env,
};
use otel_injector::agents::Language;
use otel_injector::cluster::StaticCatalog;
use otel_injector::keys::PYTHON_PLATFORM;
use rstest::rstest;
use serde_json::{Value, json};

/// The PYTHONPATH that is wrapped, in the container's env at `at`.
#[rstest]
// spec.python.env is merged first, so its PYTHONPATH is the one wrapped.
#[case::from_the_instrumentation(
    with_lang_env(PYTHON.shop, "- name: PYTHONPATH\n  value: /opt/extra"),
    json!([]),
    3,
    format!("{PREFIX}:/opt/extra:{MOUNT}")
)]
// An empty value would add an empty entry (the working directory) to the path.
#[case::empty_is_dropped(
    PYTHON.shop.to_owned(),
    json!([{"name": "PYTHONPATH", "value": ""}]),
    2,
    format!("{PREFIX}:{MOUNT}")
)]
fn pythonpath_is_wrapped(
    #[case] instrumentation: String,
    #[case] own: Value,
    #[case] at: usize,
    #[case] expected: String,
) {
    let (out, _) = run(&catalog(&instrumentation), &PYTHON.app_pod(json!({}), own));
    assert_eq!(
        out["spec"]["containers"][0]["env"][at],
        lit("PYTHONPATH", &expected)
    );
}

/// The pod's otel-python-platform, else the namespace's, picks the build that is copied; the
/// app side does not depend on it.
#[rstest]
#[case::musl(PYTHON.catalog(), json!({PYTHON_PLATFORM: "musl"}), python::MUSL)]
// "glibc" is the default, spelled out.
#[case::glibc(PYTHON.catalog(), json!({PYTHON_PLATFORM: "glibc"}), python::GLIBC)]
#[case::musl_from_the_namespace(musl_namespace(), json!({}), python::MUSL)]
#[case::the_pod_wins_over_the_namespace(musl_namespace(), json!({PYTHON_PLATFORM: "glibc"}), python::GLIBC)]
fn the_platform_picks_the_build(
    #[case] catalog: StaticCatalog,
    #[case] annotations: Value,
    #[case] source: &str,
) {
    let (out, d) = run(&catalog, &PYTHON.app_pod(annotations, json!([])));
    assert_eq!(d.injected, [Language::Python]);
    assert_eq!(
        out["spec"]["initContainers"],
        json!([python::init(source, None)])
    );
    assert_eq!(
        out["spec"]["containers"][0]["env"],
        env(vec![
            head(),
            python::env("app"),
            HTTP_SDK.tail("p", "app", None)
        ])
    );
}

fn musl_namespace() -> StaticCatalog {
    PYTHON
        .catalog()
        .with_namespace("shop", &[(PYTHON_PLATFORM, "musl")])
}
