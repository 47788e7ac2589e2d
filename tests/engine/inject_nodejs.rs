//! Node.js injection, end to end through the engine: each case applies the returned JSON patch
//! to the input pod and compares the resulting pod parts with the expected ones. What every
//! language does alike is in `inject_languages.rs`; the Instrumentation is
//! `data/instrumentations/nodejs.yaml`.

use crate::common::{
    HTTP_SDK, NODEJS, catalog, env, head, lit, nodejs, nodejs::REQUIRE, run, with_lang_env,
    with_section, with_spec, with_spec_env,
};
use serde_json::json;

#[test]
fn instrumentation_env_wins_over_the_language_defaults() {
    // spec.env is merged before the defaults, so its OTEL_METRICS_EXPORTER is kept, and a
    // NODE_OPTIONS from spec.nodejs.env is extended like the container's own.
    let inst = with_lang_env(
        &with_spec_env(
            NODEJS.shop,
            "- name: OTEL_METRICS_EXPORTER\n  value: prometheus",
        ),
        "- name: NODE_OPTIONS\n  value: --enable-source-maps",
    );
    let (out, _) = run(&catalog(&inst), &NODEJS.app_pod(json!({}), json!([])));
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
fn the_containers_node_options_wins_over_a_value_from_in_the_instrumentation() {
    // Without the container's own, the Instrumentation's valueFrom stops the injection
    // (inject_languages.rs); the container's literal value wins, so it is extended.
    let inst = with_lang_env(
        NODEJS.shop,
        "- name: NODE_OPTIONS\n  valueFrom:\n    configMapKeyRef: {name: node, key: opts}",
    );
    let pod = NODEJS.app_pod(
        json!({}),
        json!([{"name": "NODE_OPTIONS", "value": "--inspect"}]),
    );
    let (out, d) = run(&catalog(&inst), &pod);
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
    assert_eq!(
        out["spec"]["containers"][0]["env"][2],
        lit("NODE_OPTIONS", &format!("--inspect{REQUIRE}"))
    );
}

#[test]
fn image_resources_pull_policy_and_volume_come_from_the_instrumentation() {
    let inst = with_section(
        &with_spec(NODEJS.shop, "imagePullPolicy: IfNotPresent"),
        "image: registry.local/node-auto:9\n\
         resourceRequirements:\n  limits: {cpu: \"1\", memory: 1Gi}\n\
         volumeLimitSize: 500Mi",
    );
    let (out, _) = run(&catalog(&inst), &NODEJS.app_pod(json!({}), json!([])));
    let mut init = nodejs::init(None);
    init["image"] = json!("registry.local/node-auto:9");
    init["imagePullPolicy"] = json!("IfNotPresent");
    init["resources"] = json!({"limits": {"cpu": "1", "memory": "1Gi"},
        "requests": {"cpu": "50m", "memory": "128Mi"}});
    assert_eq!(out["spec"]["initContainers"], json!([init]));
    assert_eq!(
        out["spec"]["volumes"],
        json!([{"name": "opentelemetry-auto-instrumentation-nodejs", "emptyDir": {"sizeLimit": "500Mi"}}])
    );
}
