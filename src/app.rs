//! The composition root: each command's parts, built from their flag groups and started
//! in the order the design asks for.

mod commands;
mod rollout;
mod serve;

pub use rollout::RolloutStopped;
pub use serve::serve;

use std::io::Write as _;

use commands::{convert, explain, inject, policy};
use rollout::rollout;

use crate::cli::{Command, DevCertsArgs, StaticWebhookArgs};
use crate::cluster;
use crate::offline;
use crate::offline::registration::StaticWebhook;
use crate::server;

/// Runs one command to its end.
pub async fn run(command: Command) -> Result<(), Failure> {
    match command {
        Command::Serve(args) => serve(*args).await,
        Command::Crd(args) => Ok(print(&args.yaml())?),
        Command::DevCerts(args) => Ok(dev_certs(&args)?),
        Command::Inject(args) => inject(&args).await,
        Command::Convert(args) => convert(&args).await,
        Command::Policy(args) => policy(&args).await,
        Command::Explain(args) => explain(&args).await,
        Command::StaticWebhook(args) => Ok(static_webhook(&args)?),
        Command::Rollout(args) => rollout(&args).await,
    }
}

fn static_webhook(args: &StaticWebhookArgs) -> anyhow::Result<()> {
    let ca = match &args.ca_file {
        Some(path) => Some(
            std::fs::read_to_string(path)
                .map_err(|e| anyhow::anyhow!("cannot read --ca-file {}: {e}", path.display()))?,
        ),
        None => None,
    };
    let config = crate::offline::registration::static_webhook(&StaticWebhook {
        name: &args.name,
        url: &args.url,
        ca_pem: ca.as_deref(),
        failure_policy: &args.failure_policy,
        timeout_seconds: args.timeout_seconds,
        excluded_namespaces: &args.excluded_namespaces,
    })?;
    Ok(print(&serde_saphyr::to_string(&config)?)?)
}

/// How a command failed: what `main` prints, and the exit code that says so.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    /// A second signal cut the drain short: 130, as a shell reports an interrupted process.
    /// Nothing is printed (the log said it).
    #[error(transparent)]
    Aborted(#[from] server::Aborted),
    /// `inject`/`explain --strict`: the output is written, and some object was not (fully)
    /// injected: 2.
    #[error(transparent)]
    Skipped(#[from] Skipped),
    /// Bad manifests: the message names the file and document: 1.
    #[error(transparent)]
    Input(#[from] offline::manifests::InputError),
    /// `rollout` cannot run: the message names the permission it lacks: 1.
    #[error(transparent)]
    Rollout(#[from] cluster::rollout::RolloutError),
    /// `rollout` stopped at a workload: 1.
    #[error(transparent)]
    RolloutStopped(#[from] RolloutStopped),
    /// Anything else, printed with its chain of causes: 1.
    #[error(transparent)]
    Other(#[from] anyhow::Error),
}

/// Errors with no exit code of their own: anything else (1), with their causes.
macro_rules! other {
    ($($t:ty),*) => {$(
        impl From<$t> for Failure {
            fn from(e: $t) -> Self {
                Failure::Other(e.into())
            }
        }
    )*};
}
other!(
    std::io::Error,
    serde_json::Error,
    crate::certs::TlsError,
    cluster::list::ListError
);

impl Failure {
    pub fn exit_code(&self) -> u8 {
        match self {
            Failure::Aborted(_) => 130,
            Failure::Skipped(_) => 2,
            _ => 1,
        }
    }

    /// What `main` prints on stderr, if anything.
    pub fn message(&self) -> Option<String> {
        match self {
            Failure::Aborted(_) => None,
            Failure::Other(e) => Some(format!("Error: {e:?}")),
            e => Some(format!("Error: {e}")),
        }
    }
}

/// `inject` and `explain` ended with objects that asked for a language that was not
/// injected, under `--strict`; the process exits with 2.
#[derive(Debug, thiserror::Error)]
#[error("{0} object(s) asked for a language that was not injected (--strict)")]
pub struct Skipped(pub usize);

/// Writes `text` to stdout. A reader that stopped reading (`| head`, `| grep -q`: the pipe is
/// closed) is no error of the command's: the rest of the output is dropped, nothing is said,
/// and the command ends with its own result (so `set -o pipefail` scripts see the reader's).
/// Any other write error is the command's.
fn print(text: &str) -> std::io::Result<()> {
    let mut stdout = std::io::stdout().lock();
    let written = stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush());
    match written {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

/// `otel-injector dev-certs`.
fn dev_certs(args: &DevCertsArgs) -> anyhow::Result<()> {
    let certs = crate::certs::generate(&args.ca_name, &args.hosts)?;
    certs.write_to(&args.out_dir)?;
    print(&format!(
        "wrote ca.crt, ca.key, tls.crt, tls.key to {} for {}\n",
        args.out_dir.display(),
        args.hosts.join(", ")
    ))?;
    if let Some(name) = &args.client {
        let (cert, key) = certs.client(name)?;
        std::fs::write(args.out_dir.join("client.crt"), cert)?;
        std::fs::write(args.out_dir.join("client.key"), key)?;
        print(&format!(
            "wrote client.crt, client.key (CN {name}) to {}\n",
            args.out_dir.display()
        ))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
