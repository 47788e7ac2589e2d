//! Fuzz target: raw ConversionReview bytes (`/convert`), seeded with reviews of both versions.
#![no_main]

#[path = "../checks.rs"]
#[allow(dead_code)] // each target uses part of the shared checks
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::check_conversion(data));
