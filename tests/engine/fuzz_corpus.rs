//! Replays the fuzz corpus (`fuzz/corpus/`) through the same checks the fuzz targets make,
//! so every input the fuzzer kept stays a regression test without libFuzzer.

#[path = "../../fuzz/checks.rs"]
#[allow(dead_code)] // each target uses part of the shared checks
mod checks;

use std::path::Path;

fn replay(target: &str, check: impl Fn(&[u8])) -> usize {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(&data)));
        assert!(outcome.is_ok(), "corpus input {} fails", path.display());
        n += 1;
    }
    n
}

#[test]
fn review_corpus() {
    let webhook = checks::Webhook::default();
    let n = replay("review", |d| webhook.check_review(d));
    assert!(n > 0, "empty corpus");
}

#[test]
fn pod_corpus() {
    let webhook = checks::Webhook::default();
    let n = replay("pod", |d| webhook.check_pod(d));
    assert!(n > 0, "empty corpus");
}
