//! What the one-pass envelope buys, in instructions: `admission::review` (the pod decoded as
//! the envelope is read) or `admission::review_two_pass` (the envelope first, the pod from
//! its raw text afterwards) on the injected review of `tests/data/pod-create-inject-java.json`,
//! `N` times. Run each under callgrind and compare the totals; the difference divided by `N`
//! is per review:
//!
//! ```sh
//! cargo build --release --example envelope
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null target/release/examples/envelope one 2000
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null target/release/examples/envelope two 2000
//! ```

use otel_injector::admission;
use otel_injector::cluster::StaticCatalog;
use otel_injector::engine::EngineConfig;

const REVIEW: &[u8] = include_bytes!("../tests/data/pod-create-inject-java.json");
const INSTRUMENTATIONS: &str = include_str!("../tests/data/instrumentations/java.yaml");

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let two = match args.get(1).map(String::as_str) {
        Some("one") => false,
        Some("two") => true,
        _ => {
            eprintln!("usage: envelope one|two [N]");
            std::process::exit(2);
        }
    };
    let n: usize = args.get(2).and_then(|n| n.parse().ok()).unwrap_or(2000);
    let catalog = StaticCatalog::from_yaml(INSTRUMENTATIONS).expect("Instrumentation YAML");
    let config = EngineConfig::default();
    let mut patched = 0;
    for _ in 0..n {
        let (_, summary) = if two {
            admission::review_two_pass(REVIEW, &catalog, &config)
        } else {
            admission::review(REVIEW, &catalog, &config)
        }
        .expect("a readable review");
        patched += usize::from(summary.patched);
    }
    assert_eq!(patched, n, "every review is patched");
    println!(
        "{} pass: {n} reviews, all patched",
        if two { "two" } else { "one" }
    );
}
