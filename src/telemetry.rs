//! Logging: tracing to stderr, plain or JSON.

use tracing_subscriber::EnvFilter;

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    // Human-readable lines, the span fields as a prefix.
    #[default]
    Plain,
    // One JSON object per line, with the current span fields.
    Json,
}

/// Installs the global subscriber. `filter` uses EnvFilter syntax; an invalid one falls
/// back to `info` with a warning.
pub fn init(format: LogFormat, filter: &str) {
    let (filter, bad) = match EnvFilter::try_new(filter) {
        Ok(f) => (f, None),
        Err(e) => (EnvFilter::new("info"), Some(e)),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Plain => builder.try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .try_init(),
    };
    if let Some(e) = bad {
        tracing::warn!(error = %e, "invalid --log-level; using info");
    }
}
