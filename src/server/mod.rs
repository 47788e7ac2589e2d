//! The servers and their lifecycle: the webhook's route ([`webhook`]) served over TLS
//! ([`listener`], with the per-connection deadlines and the cap of [`conns`], and the
//! file-descriptor limit of [`fds`]), the admin endpoints ([`admin`]), and the
//! signal-driven drain of both ([`shutdown`]).

pub mod admin;
pub mod auth;
pub mod budget;
pub mod conns;
pub mod fds;
pub mod late;
pub mod listener;
pub mod metrics;
pub mod shutdown;
pub mod webhook;

pub use budget::{CONVERSION_BUDGET_BYTES, ConversionBudget};
pub use conns::ConnLimits;
pub use late::InstrumentationWait;
pub use listener::{serve_plain, serve_tls};
pub use metrics::Metrics;
pub use shutdown::{Aborted, Drain, Shutdown};
pub use webhook::{
    DEFAULT_DEADLINE, MAX_BODY_BYTES, MAX_CONVERSION_BYTES, MAX_DEADLINE, Webhook, router,
};
