//! Flags of the logs.

use clap::Args;

use crate::telemetry::{self, LogFormat};

#[derive(Debug, Args)]
#[command(next_help_heading = "Logging")]
pub struct LogArgs {
    /// Log format.
    #[arg(long, env = "OTEL_INJECTOR_LOG_FORMAT", value_enum, default_value_t = LogFormat::Plain)]
    pub log_format: LogFormat,

    /// Log filter (tracing EnvFilter syntax, e.g. `info` or `otel_injector=debug`).
    #[arg(long, env = "OTEL_INJECTOR_LOG_LEVEL", default_value = "info")]
    pub log_level: String,
}

impl LogArgs {
    /// Installs the process's log subscriber.
    pub fn init(&self) {
        telemetry::init(self.log_format, &self.log_level);
    }
}
