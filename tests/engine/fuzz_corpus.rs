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

#[test]
fn conversion_corpus() {
    let n = replay("conversion", checks::check_conversion);
    assert!(n > 0, "empty corpus");
}

/// The conversion corpus mutated without libFuzzer: bytes flipped, dropped and repeated by
/// a fixed generator (the same inputs every run), each checked as the fuzz target checks it.
#[test]
fn conversion_mutations() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/conversion");
    let seeds: Vec<Vec<u8>> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| std::fs::read(e.unwrap().path()).unwrap())
        .filter(|s| s.len() > 8)
        .collect();
    let mut state: u64 = 0x00c0_ffee;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for _ in 0..4000 {
        let mut data = seeds[(next() % seeds.len() as u64) as usize].clone();
        for _ in 0..1 + next() % 4 {
            let at = (next() % data.len() as u64) as usize;
            match next() % 3 {
                0 => {
                    let alphabet = b"{}[]\":,0a-/~\\ ";
                    data[at] = alphabet[(next() % alphabet.len() as u64) as usize];
                }
                1 => {
                    data.remove(at);
                }
                _ => {
                    let len = ((next() % 16) as usize).min(data.len() - at);
                    let piece = data[at..at + len].to_vec();
                    data.splice(at..at, piece);
                }
            }
            if data.is_empty() {
                break;
            }
        }
        let outcome = std::panic::catch_unwind(|| checks::check_conversion(&data));
        assert!(
            outcome.is_ok(),
            "input fails: {}",
            String::from_utf8_lossy(&data)
        );
    }
}
