//! What this binary was built from, set at build time by `build.rs`: shown by
//! `otel-injector --version` and exported as the `otel_injector_build_info` gauge.

/// The crate's version (`Cargo.toml`).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The git commit (40 hex digits), or `unknown` when built outside a checkout without
/// `OTEL_INJECTOR_GIT_COMMIT`.
pub const COMMIT: &str = env!("OTEL_INJECTOR_BUILD_COMMIT");
/// RFC 3339 UTC: `SOURCE_DATE_EPOCH` when the build set it, else when `build.rs` ran.
pub const DATE: &str = env!("OTEL_INJECTOR_BUILD_DATE");
/// `rustc --version` without its `rustc ` prefix, e.g. `1.95.0 (59807616e 2026-04-14)`.
pub const RUSTC: &str = env!("OTEL_INJECTOR_BUILD_RUSTC");
/// The compiler's version number alone, e.g. `1.95.0`.
pub const RUSTC_VERSION: &str = env!("OTEL_INJECTOR_BUILD_RUSTC_VERSION");
/// The target triple, e.g. `x86_64-unknown-linux-gnu`.
pub const TARGET: &str = env!("OTEL_INJECTOR_BUILD_TARGET");

/// What `--version` prints after the program's name.
pub const LONG_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    "\ncommit: ",
    env!("OTEL_INJECTOR_BUILD_COMMIT"),
    "\nbuilt:  ",
    env!("OTEL_INJECTOR_BUILD_DATE"),
    "\nrustc:  ",
    env!("OTEL_INJECTOR_BUILD_RUSTC"),
    "\ntarget: ",
    env!("OTEL_INJECTOR_BUILD_TARGET"),
);
