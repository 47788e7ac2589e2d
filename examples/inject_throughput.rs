//! Throughput of `otel-injector inject`: a generated 1,000-document manifest (a third
//! Deployments asking for Java, a third Services, a third ConfigMaps) read, injected and
//! written as YAML, in-process with the same functions the command uses. Prints documents
//! per second, the best of five runs.
//!
//! ```sh
//! cargo run --release --example inject_throughput -- [--documents 1000]
//! ```

use std::time::{Duration, Instant};

use otel_injector::engine::EngineConfig;
use otel_injector::offline::{Context, inject, manifests};

fn manifest(documents: usize) -> String {
    let mut text = String::new();
    for i in 0..documents {
        text.push_str(&match i % 3 {
            0 => format!(
                "---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web-{i}\n  namespace: shop\nspec:\n  replicas: 2\n  selector:\n    matchLabels: {{app: web-{i}}}\n  template:\n    metadata:\n      labels: {{app: web-{i}}}\n      annotations:\n        instrumentation.opentelemetry.io/inject-java: \"true\"\n    spec:\n      containers:\n      - name: app\n        image: registry.example/web:1.{i}\n        ports:\n        - containerPort: 8080\n"
            ),
            1 => format!(
                "---\n# service {i}\napiVersion: v1\nkind: Service\nmetadata:\n  name: web-{i}\n  namespace: shop\nspec:\n  selector: {{app: web-{i}}}\n  ports:\n  - port: 80\n    targetPort: 8080\n"
            ),
            _ => format!(
                "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web-{i}\n  namespace: shop\ndata:\n  mode: fast\n"
            ),
        });
    }
    text
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let documents = args
        .iter()
        .position(|a| a == "--documents")
        .and_then(|i| args.get(i + 1)?.parse().ok())
        .unwrap_or(1000);
    let text = manifest(documents);
    let instrumentations = [std::path::PathBuf::from(
        "tests/data/instrumentations/java.yaml",
    )];
    let mut best = Duration::MAX;
    let mut bytes = 0;
    for _ in 0..5 {
        let started = Instant::now();
        let sources = vec![manifests::parse("bench.yaml", &text)?];
        let ctx = Context::build(
            &sources,
            &instrumentations,
            &[],
            None,
            EngineConfig::default(),
            "default".into(),
        )?;
        let out = inject::inject(&ctx, sources, inject::Options::default())?;
        best = best.min(started.elapsed());
        bytes = out.output.len();
        assert_eq!(out.mutated, documents.div_ceil(3));
    }
    println!(
        "{documents} documents ({} KiB in, {} KiB out) in {:.1} ms: {:.0} documents/s",
        text.len() / 1024,
        bytes / 1024,
        best.as_secs_f64() * 1000.0,
        documents as f64 / best.as_secs_f64()
    );
    Ok(())
}
