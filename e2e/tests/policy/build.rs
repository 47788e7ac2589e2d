//! The policy tests' builders: Instrumentations, containers and pods as JSON.

use serde_json::{Value, json};

/// An Instrumentation `ns/name` with this spec.
pub fn inst(ns: &str, name: &str, spec: Value) -> Value {
    json!({"apiVersion": "opentelemetry.io/v1alpha1", "kind": "Instrumentation",
           "metadata": {"name": name, "namespace": ns}, "spec": spec})
}

pub fn container(name: &str, image: &str, env: Value) -> Value {
    let mut c = json!({"name": name, "image": image});
    if env.as_array().is_some_and(|e| !e.is_empty()) {
        c["env"] = env;
    }
    c
}

/// A pod `name` with these annotations, labels and containers.
pub fn pod(name: &str, annotations: Value, labels: Value, containers: Value) -> Value {
    let mut p = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                       "spec": {"containers": containers}});
    // An empty map is not stored: leave it out, so the pod sent is the pod stored.
    for (field, map) in [("annotations", annotations), ("labels", labels)] {
        if map.as_object().is_some_and(|m| !m.is_empty()) {
            p["metadata"][field] = map;
        }
    }
    p
}

pub fn owned(mut p: Value, kind: &str, owner: &str, hash: Option<&str>) -> Value {
    p["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": kind,
        "name": owner, "uid": "6a1e0b1c-0000-4000-8000-000000000001", "controller": true}]);
    if let Some(h) = hash {
        if p["metadata"]["labels"].is_null() {
            p["metadata"]["labels"] = json!({});
        }
        p["metadata"]["labels"]["pod-template-hash"] = json!(h);
    }
    p
}
