//! The conversion webhook in-process: `crd::review::review()` of a ConversionReview holding
//! one Instrumentation and holding 1,000 (what a LIST of 1,000 sends), each direction,
//! against the baseline every conversion webhook pays at least: parsing the same bytes into
//! a `serde_json::Value` and writing that back. Run with `cargo bench --bench conversion`;
//! at the end the medians of this invocation are printed as ratios to the baseline of their
//! size, and per object.

use std::hint::black_box;
use std::time::{Duration, SystemTime};

use criterion::{Criterion, Throughput};
use otel_injector::crd::review;
use serde_json::{Value, json};

#[path = "support/medians.rs"]
mod medians;
use medians::{criterion_home, median_ns};

/// A v1alpha1 Instrumentation of the size users write: exporter, sampler, resource, env and
/// two language sections.
fn alpha(i: usize) -> Value {
    json!({
        "apiVersion": "opentelemetry.io/v1alpha1", "kind": "Instrumentation",
        "metadata": {"name": format!("inst-{i}"), "namespace": "shop", "uid": format!("u-{i}"),
            "resourceVersion": "4711", "generation": 2, "creationTimestamp": "2026-12-01T10:00:00Z",
            "labels": {"team": "payments"}},
        "spec": {
            "exporter": {"endpoint": "http://otel-collector.observability:4318"},
            "propagators": ["tracecontext", "baggage"],
            "sampler": {"type": "parentbased_traceidratio", "argument": "0.25"},
            "resource": {"resourceAttributes": {"deployment.environment.name": "prod"}},
            "env": [{"name": "OTEL_LOGS_EXPORTER", "value": "otlp"}],
            "java": {"image": "ghcr.io/open-telemetry/opentelemetry-operator/autoinstrumentation-java:2.33.1",
                "env": [{"name": "OTEL_INSTRUMENTATION_JDBC_ENABLED", "value": "false"}],
                "resources": {"limits": {"cpu": "500m", "memory": "256Mi"}}},
            "python": {"image": "ghcr.io/open-telemetry/opentelemetry-operator/autoinstrumentation-python:0.66b1",
                "volumeLimitSize": "300Mi"}
        },
        "status": {"injected": 12, "specHash": "0a1b2c3d"}
    })
}

fn review_of(desired: &str, objects: Vec<Value>) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
        "request": {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "desiredAPIVersion": desired,
                    "objects": objects}
    }))
    .unwrap()
}

const SIZES: [(&str, usize); 2] = [("one", 1), ("list_1000", 1000)];
const PATHS: [&str; 3] = ["baseline_parse_write", "to_v1beta1", "to_v1alpha1"];

fn main() {
    let started = SystemTime::now();
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    for (size, n) in SIZES {
        let objects: Vec<Value> = (0..n).map(alpha).collect();
        let to_beta = review_of("opentelemetry.io/v1beta1", objects);
        // The v1beta1 objects, as the webhook serves them, for the way back.
        let served = review::review(&to_beta);
        assert!(served.failure.is_none(), "{:?}", served.failure);
        let answer: Value = serde_json::from_slice(&served.body).unwrap();
        let betas = answer["response"]["convertedObjects"]
            .as_array()
            .unwrap()
            .clone();
        assert_eq!(betas.len(), n);
        let to_alpha = review_of("opentelemetry.io/v1alpha1", betas);
        assert!(review::review(&to_alpha).failure.is_none());

        let mut g = c.benchmark_group(size);
        g.throughput(Throughput::Elements(n as u64));
        g.bench_function(PATHS[0], |b| {
            b.iter(|| {
                let v: Value = serde_json::from_slice(black_box(&to_beta)).unwrap();
                serde_json::to_vec(&v).unwrap()
            })
        });
        g.bench_function(PATHS[1], |b| b.iter(|| review::review(black_box(&to_beta))));
        g.bench_function(PATHS[2], |b| {
            b.iter(|| review::review(black_box(&to_alpha)))
        });
        g.finish();
    }
    c.final_summary();

    let Some(home) = criterion_home() else { return };
    let mut lines = Vec::new();
    for (size, n) in SIZES {
        let Some(base) = median_ns(&home, size, PATHS[0], started) else {
            continue;
        };
        for path in PATHS {
            if let Some(m) = median_ns(&home, size, path, started) {
                lines.push(format!(
                    "{size:<10} {path:<22} {:>10.2} µs {:>8.2} µs/object {:>6.2}x",
                    m / 1e3,
                    m / 1e3 / n as f64,
                    m / base
                ));
            }
        }
    }
    if !lines.is_empty() {
        println!(
            "\nmedians, per object, and ratio to baseline_parse_write of the same size (this run):"
        );
        println!("{}", lines.join("\n"));
    }
}
