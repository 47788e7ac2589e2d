use std::process::ExitCode;

use clap::Parser;
use otel_injector::cli::Cli;
use otel_injector::server::Aborted;

#[tokio::main]
async fn main() -> ExitCode {
    match otel_injector::app::run(Cli::parse().command).await {
        Ok(()) => ExitCode::SUCCESS,
        // A second signal during the drain: the shell's code for an interrupted process.
        Err(e) if e.is::<Aborted>() => ExitCode::from(130),
        Err(e) => {
            eprintln!("Error: {e:?}");
            ExitCode::FAILURE
        }
    }
}
