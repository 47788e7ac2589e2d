//! Flags of the status controller and of the Lease that elects its one writer.

use std::time::Duration;

use clap::Args;

use super::duration;
use crate::cluster::lease::{self, LeaseConfig};

#[derive(Debug, Args)]
#[command(next_help_heading = "Instrumentation status")]
pub struct StatusArgs {
    /// Keep `status` of every Instrumentation current: pods injected with its current spec,
    /// with an older one (outdated), skipped and why, their workloads, and the Ready and
    /// Degraded conditions (`kubectl get otelinst` shows the counts). Watches the metadata of
    /// the pods labeled otel-injector/injected on every replica; one replica at a time, the
    /// holder of the Lease, writes. Needs list/watch on pods, patch on
    /// instrumentations/status and the Lease (manifests/components/status); without them it
    /// logs and retries, and nothing else is affected. Only when watching the cluster (not
    /// with --instrumentation-file).
    #[arg(
        long,
        env = "OTEL_INJECTOR_STATUS",
        default_value_t = true,
        action = clap::ArgAction::Set
    )]
    pub status: bool,

    /// Namespace of the Lease; by default $POD_NAMESPACE, else the service account's
    /// namespace (in a pod) or the kubeconfig context's.
    #[arg(long, env = "OTEL_INJECTOR_LEASE_NAMESPACE")]
    pub lease_namespace: Option<String>,

    /// Name of the Lease (coordination.k8s.io/v1) that elects the one replica running the
    /// leader-only writers. The shipped Role grants get and update on this name only.
    #[arg(long, env = "OTEL_INJECTOR_LEASE_NAME", default_value = lease::DEFAULT_NAME)]
    pub lease_name: String,

    /// How long the Lease stays held without a renewal: the longest a crashed leader's
    /// writes pause before another replica takes over (a replica that exits cleanly
    /// releases it at once). The holder renews every third of it and stops writing after
    /// two thirds without a renewal. Whole seconds, at least 3s.
    #[arg(long, env = "OTEL_INJECTOR_LEASE_DURATION", default_value = "15s", value_parser = lease_duration)]
    pub lease_duration: Duration,
}

fn lease_duration(s: &str) -> Result<Duration, String> {
    let d = duration(s)?;
    if d < Duration::from_secs(3) || d.subsec_nanos() != 0 {
        return Err(format!(
            "{s}: the Lease duration is whole seconds, at least 3s"
        ));
    }
    Ok(d)
}

impl StatusArgs {
    /// The Lease's configuration for this replica (`client`: for the default namespace).
    pub fn lease(&self, client: &kube::Client) -> LeaseConfig {
        LeaseConfig {
            namespace: lease::namespace_of(self.lease_namespace.as_deref(), client),
            name: self.lease_name.clone(),
            identity: lease::default_identity(),
            duration: self.lease_duration,
            renew_every: self.lease_duration / 3,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lease_duration_is_whole_seconds_of_at_least_three() {
        assert_eq!(lease_duration("15s"), Ok(Duration::from_secs(15)));
        assert_eq!(lease_duration("3s"), Ok(Duration::from_secs(3)));
        assert!(lease_duration("2s").is_err());
        assert!(lease_duration("3500ms").is_err());
    }
}
