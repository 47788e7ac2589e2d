//! The servers and their lifecycle: the webhook's route ([`webhook`]) served over TLS
//! ([`listener`]), the admin endpoints ([`admin`]), and the signal-driven drain of both
//! ([`shutdown`]).

pub mod admin;
pub mod listener;
pub mod shutdown;
pub mod webhook;

pub use listener::{ConnLimits, serve_tls};
pub use shutdown::{Aborted, Drain, Shutdown};
pub use webhook::{DEFAULT_DEADLINE, MAX_BODY_BYTES, Webhook, router};
