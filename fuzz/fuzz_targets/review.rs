//! Fuzz target: raw AdmissionReview bytes (seeded with the fixtures in tests/data).
#![no_main]

#[path = "../checks.rs"]
#[allow(dead_code)] // each target uses part of the shared checks
mod checks;

use std::sync::LazyLock;

static WEBHOOK: LazyLock<checks::Webhook> = LazyLock::new(checks::Webhook::default);

libfuzzer_sys::fuzz_target!(|data: &[u8]| WEBHOOK.check_review(data));
