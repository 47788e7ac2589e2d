#![forbid(unsafe_code)]

use clap::Parser;
use otel_injector::cli::{Cli, Command};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Serve(args) => otel_injector::serve(*args).await,
        Command::Crd => {
            print!("{}", otel_injector::crd::crd_yaml());
            Ok(())
        }
        Command::DevCerts(args) => {
            let certs = otel_injector::certs::generate(&args.ca_name, &args.hosts)?;
            certs.write_to(&args.out_dir)?;
            println!(
                "wrote ca.crt, ca.key, tls.crt, tls.key to {} for {}",
                args.out_dir.display(),
                args.hosts.join(", ")
            );
            Ok(())
        }
    }
}
