//! Helpers shared by the engine table tests: run `decide` on a pod and apply its patch.
#![allow(dead_code)]

use k8s_openapi::api::core::v1::Pod;
use otel_injector::inject::{Decision, EngineConfig, decide};
use otel_injector::store::StaticCatalog;
use serde_json::{Value, json};

/// A catalog of the Instrumentations in `yaml`.
pub fn catalog(yaml: &str) -> StaticCatalog {
    StaticCatalog::from_yaml(yaml).unwrap()
}

/// Decides for `pod` created in namespace `shop` and returns the patched pod.
pub fn run_with(catalog: &StaticCatalog, config: &EngineConfig, pod: &Value) -> (Value, Decision) {
    let typed: Pod = serde_json::from_value(pod.clone()).unwrap();
    let d = decide(&typed, "shop", catalog, config);
    let mut out = pod.clone();
    json_patch::patch(&mut out, &json_patch::Patch(d.patch.clone())).unwrap();
    (out, d)
}

pub fn run(catalog: &StaticCatalog, pod: &Value) -> (Value, Decision) {
    run_with(catalog, &EngineConfig::default(), pod)
}

/// Runs the engine again on its own output, as a reinvocation does: nothing may change.
pub fn assert_idempotent(catalog: &StaticCatalog, injected: &Value) {
    let (again, d) = run(catalog, injected);
    assert!(d.patch.is_empty(), "second pass patched: {:?}", d.patch);
    assert_eq!(&again, injected);
}

pub fn fref(name: &str, path: &str) -> Value {
    json!({"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}})
}

pub fn lit(name: &str, value: &str) -> Value {
    json!({"name": name, "value": value})
}

/// The names of a list of containers (or env entries).
pub fn names(list: &Value) -> Vec<String> {
    list.as_array()
        .map(|a| a.iter().map(|c| c["name"].as_str().unwrap_or("").to_owned()).collect())
        .unwrap_or_default()
}

/// The value of one variable in a container's env.
pub fn env_value<'v>(container: &'v Value, name: &str) -> Option<&'v Value> {
    container["env"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)
        .map(|e| e.get("value").unwrap_or(&Value::Null))
}
