//! Certificates: generating them (development CA, serving pairs), loading and hot-reloading
//! the served pair from files, and the built-in mode that keeps a CA and serving pair in a
//! Secret and the webhook configuration's `caBundle` current.

pub mod builtin;
pub mod files;
pub mod generate;

pub use generate::{DevCerts, generate};
