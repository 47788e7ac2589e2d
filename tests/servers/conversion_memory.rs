//! A measurement, `#[ignore]`d (run by `just convert-memory`, on the release binary): the
//! peak resident memory of a replica answering ConversionReviews of many full-sized
//! Instrumentations (about 1.3 KiB of JSON each), as the API server sends them for a LIST in
//! v1beta1: 1,000 objects, 6,000, and ten 6,000-object reviews at once (the API server sends
//! up to ten while its watch cache warms up). Each case runs in a fresh process; the figures
//! are its `VmHWM` before and after. `TEST_SERVER_BIN` names another binary to measure the
//! same way (an older build, for a before/after in one run).

use std::time::Instant;

use serde_json::{Value, json};

use crate::support::{Server, serial};

/// A full-sized v1alpha1 Instrumentation: every section set, as a platform team writes one.
fn instrumentation(i: usize) -> Value {
    let env = |lang: &str| json!([{"name": format!("OTEL_{lang}_SETTING"), "value": "on"}]);
    let section = |lang: &str| {
        json!({"image": format!("registry.example/autoinstrumentation-{lang}:1.2.3"),
               "env": env(lang), "volumeLimitSize": "200Mi",
               "resourceRequirements": {"limits": {"cpu": "500m", "memory": "256Mi"}}})
    };
    json!({
        "apiVersion": "opentelemetry.io/v1alpha1", "kind": "Instrumentation",
        "metadata": {"name": format!("inst-{i}"), "namespace": format!("team-{}", i % 1000),
            "uid": format!("00000000-0000-0000-0000-{i:012}"), "resourceVersion": "12345",
            "generation": 3, "creationTimestamp": "2026-12-01T10:00:00Z",
            "labels": {"app.kubernetes.io/managed-by": "argocd"}},
        "spec": {
            "exporter": {"endpoint": "http://otel-collector.observability.svc:4318"},
            "propagators": ["tracecontext", "baggage"],
            "sampler": {"type": "parentbased_traceidratio", "argument": "0.25"},
            "resource": {"resourceAttributes": {"team": "payments", "env": "prod"},
                         "addK8sUIDAttributes": true},
            "env": [{"name": "OTEL_LOGS_EXPORTER", "value": "otlp"}],
            "java": section("java"), "nodejs": section("nodejs"),
            "python": section("python"), "dotnet": section("dotnet"),
        },
        "status": {}
    })
}

/// A ConversionReview of `n` objects to v1beta1.
fn review(n: usize) -> Vec<u8> {
    let objects: Vec<Value> = (0..n).map(instrumentation).collect();
    serde_json::to_vec(&json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
        "request": {"uid": "measure", "desiredAPIVersion": "opentelemetry.io/v1beta1",
                    "objects": objects}
    }))
    .unwrap()
}

/// The process's peak resident memory so far, in KiB.
fn peak_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/<pid>/status")
}

#[tokio::test]
#[ignore = "a measurement: just convert-memory"]
async fn peak_memory_of_conversion_reviews() {
    let _serial = serial().await;
    for (n, at_once) in [(1_000, 1), (6_000, 1), (6_000, 10)] {
        let body = review(n);
        let server = Server::start().await;
        let before = peak_kib(server.pid());
        let t0 = Instant::now();
        let answers = futures::future::join_all(
            (0..at_once).map(|_| server.post_raw("/convert?timeout=30s", &body)),
        )
        .await;
        let took = t0.elapsed();
        for a in &answers {
            assert_eq!(a.status, 200, "{}", a.text());
            let converted = &a.json()["response"]["convertedObjects"];
            assert_eq!(converted.as_array().map(Vec::len), Some(n));
        }
        let after = peak_kib(server.pid());
        eprintln!(
            "[measure] {at_once} x {n} objects ({:.1} MiB each): peak RSS {:.1} MiB (at rest {:.1} MiB), {:.2} s",
            body.len() as f64 / 1048576.0,
            after as f64 / 1024.0,
            before as f64 / 1024.0,
            took.as_secs_f64()
        );
    }
}
