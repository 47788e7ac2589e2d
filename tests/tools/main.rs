//! The tests that run tools from outside Rust, behind the `tools` feature (`just unit` turns
//! it on): Helm (`chart`) and promtool (`monitoring`), built from their Go modules by
//! `scripts/e2e-build.sh`; `kubectl kustomize` (`kustomize`); bubblewrap and busybox from
//! Debian (`scripts/test-deps.sh`) to run the init containers' scripts and the web servers'
//! setup as a kubelet would (`injection_payloads`, `webserver_scripts`) and the image's
//! binary alone (`image`, `#[ignore]`d: `just image-test`). Plain `cargo test` builds this
//! binary empty, so it needs no Go tool.
#![cfg(feature = "tools")]

#[path = "../support/kubelet.rs"]
mod kubelet;
#[path = "../support/rendered.rs"]
mod rendered;
// `monitoring` and `image` start the server as `tests/servers` does, and use a part of its
// helpers.
#[path = "../support/mod.rs"]
#[allow(dead_code, unused_imports)]
mod support;

mod chart;
mod image;
mod injection_payloads;
mod kustomize;
mod monitoring;
mod webserver_scripts;
