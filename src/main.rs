use std::process::ExitCode;

use clap::Parser;
use otel_injector::app::{RolloutStopped, Skipped};
use otel_injector::cli::Cli;
use otel_injector::cluster::rollout::RolloutError;
use otel_injector::offline::manifests::InputError;
use otel_injector::server::Aborted;

#[tokio::main]
async fn main() -> ExitCode {
    let result = otel_injector::app::run(Cli::parse().command).await;
    // Log lines still pending come before the error message.
    otel_injector::telemetry::flush();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // A second signal during the drain: the shell's code for an interrupted process.
        Err(e) if e.is::<Aborted>() => ExitCode::from(130),
        // `inject --strict`: the output is written; some object was not (fully) injected.
        // Bad manifests: the message names the file and document; no backtrace.
        Err(e) if e.is::<InputError>() => {
            eprintln!("Error: {e}");
            ExitCode::FAILURE
        }
        // `rollout`: the workload that stopped it, or the permission it lacks.
        Err(e) if e.is::<RolloutStopped>() || e.is::<RolloutError>() => {
            eprintln!("Error: {e}");
            ExitCode::FAILURE
        }
        Err(e) if e.is::<Skipped>() => {
            eprintln!("Error: {e}");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("Error: {e:?}");
            ExitCode::FAILURE
        }
    }
}
