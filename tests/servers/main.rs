//! The servers: the router in process (`router*`), and the `otel-injector` binary as a
//! process (`server`, `process`: TLS, limits, certificate reload, the drain, start without
//! the API server; `hostile`: slow clients and floods; `hardening`).

#[path = "../support/mod.rs"]
mod support;

mod hardening;
mod hostile;
mod process;
mod router;
mod router_logs;
mod server;
