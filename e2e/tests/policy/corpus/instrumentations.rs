//! The corpus's Instrumentations: `solo` alone in its namespace, several in `shop` (each
//! with the Instrumentation keys the engine reads, `super::super::keys`), one in the namespace
//! that asks.

use serde_json::{Value, json};

use super::super::build::inst;

/// The namespace beside `shop` annotated `inject-java: "true"`: its pods ask by it alone.
pub fn asked_namespace(shop: &str) -> String {
    format!("{shop}-asked")
}

/// The Instrumentations of the corpus: `solo` alone in its namespace (so `"true"` names
/// it), several in `shop`, one in the namespace that asks.
pub fn instrumentations(solo: &str, shop: &str) -> Vec<Value> {
    let asked = inst(
        &asked_namespace(shop),
        "java",
        json!({"exporter": {"endpoint": "http://collector:4318"}}),
    );
    vec![
        inst(
            solo,
            "only",
            json!({
                "exporter": {"endpoint": "http://collector:4318"},
                "propagators": ["tracecontext", "baggage"],
            }),
        ),
        inst(
            shop,
            "java",
            json!({
                "exporter": {"endpoint": "http://collector:4318"},
                "propagators": ["tracecontext", "baggage", "b3"],
                "sampler": {"type": "parentbased_traceidratio", "argument": "0.25"},
                "resource": {"resourceAttributes": {"deployment.environment.name": "e2e", "k8s.namespace.name": "overridden"}},
                "env": [{"name": "OTEL_METRICS_EXPORTER", "value": "none"}],
                "java": {"env": [{"name": "OTEL_INSTRUMENTATION_JDBC_ENABLED", "value": "false"}],
                         "extensions": [{"image": "e2e.local/java-extension:1", "dir": "/extensions"}]},
            }),
        ),
        inst(
            shop,
            "langs",
            json!({
                "exporter": {"endpoint": "http://collector:4317"},
                "resource": {"addK8sUIDAttributes": true},
                "defaults": {"useLabelsForResourceAttributes": true},
                "nodejs": {"env": [{"name": "OTEL_NODE_RESOURCE_DETECTORS", "value": "env"}]},
                "python": {"env": [{"name": "OTEL_PYTHON_LOG_LEVEL", "value": "debug"}]},
            }),
        ),
        inst(
            shop,
            "tls",
            json!({
                "exporter": {"endpoint": "https://collector:4318", "tls": {"secretName": "certs", "ca_file": "ca.crt"}},
            }),
        ),
        // Named `true`, beside others: `"true"` asks for the namespace's only one, so it never
        // names this one (`edge-true-of-several`: the webhook skips, and so do the policies).
        inst(
            shop,
            "true",
            json!({"exporter": {"endpoint": "http://collector:4318"}}),
        ),
        inst(
            shop,
            "copied",
            json!({"exporter": {"endpoint": "http://collector:4318"}}),
        ),
        // Laid over `java` (its `otel-injector/base`): its own endpoint, sampler and one
        // variable; the rest is `java`'s.
        inst(
            shop,
            "based",
            json!({
                "exporter": {"endpoint": "http://team-collector:4318"},
                "sampler": {"type": "always_on"},
                "env": [{"name": "OTEL_LOGS_EXPORTER", "value": "none"}],
                "resource": {"resourceAttributes": {"team": "checkout"}},
            }),
        ),
    ]
    .into_iter()
    .map(|mut i| {
        let name = i["metadata"]["name"].as_str().unwrap_or("").to_owned();
        let annotations = super::super::keys::instrumentation_annotations(&name);
        if annotations.as_object().is_some_and(|a| !a.is_empty()) {
            i["metadata"]["annotations"] = annotations;
        }
        i
    })
    .chain([asked])
    .collect()
}
