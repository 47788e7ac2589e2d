//! otel-injector: an OpenTelemetry auto-instrumentation admission webhook for Kubernetes.
//!
//! `serve` ([`app::serve`]) binds the admin and webhook listeners first, on every replica,
//! then starts the watches that fill the Instrumentation and Namespace caches; requests are
//! answered from those caches only.

pub mod admission;
pub mod agents;
pub mod app;
pub mod build_info;
pub mod census;
pub mod certs;
pub mod cli;
pub mod cluster;
pub mod crd;
pub mod duration;
pub mod engine;
pub mod keys;
pub mod metrics;
pub mod offline;
pub mod pod;
pub mod policy;
pub mod retry;
pub mod server;
pub mod telemetry;
pub mod warnings;

pub use app::serve;
