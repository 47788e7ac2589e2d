//! Fuzz target: structured pods (`arbitrary`) built into the reviews the API server sends.
#![no_main]

#[path = "../checks.rs"]
#[allow(dead_code)] // each target uses part of the shared checks
mod checks;

use std::sync::LazyLock;

static WEBHOOK: LazyLock<checks::Webhook> = LazyLock::new(checks::Webhook::default);

libfuzzer_sys::fuzz_target!(|data: &[u8]| WEBHOOK.check_pod(data));
