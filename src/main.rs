use std::process::ExitCode;

use clap::Parser;
use otel_injector::cli::Cli;

#[tokio::main]
async fn main() -> ExitCode {
    let result = otel_injector::app::run(Cli::parse().command).await;
    // Log lines still pending come before the error message.
    otel_injector::telemetry::flush();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            if let Some(message) = failure.message() {
                eprintln!("{message}");
            }
            ExitCode::from(failure.exit_code())
        }
    }
}
