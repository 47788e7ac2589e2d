//! The servers, one test at a time (`support::serial`: several are about time bounds): the
//! router in process (`router*`), and the `otel-injector` binary as a
//! process (`server`, `process`: TLS, limits, certificate reload, the drain, start without
//! the API server; `hostile`: slow clients and floods; `conversion_memory`, a measurement).

#[path = "../support/mod.rs"]
mod support;

mod auth;
mod auth_cost;
mod conversion_memory;
mod hostile;
mod late;
mod process;
mod router;
mod router_logs;
mod server;
