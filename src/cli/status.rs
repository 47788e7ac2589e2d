//! Flags of the status controller and of the Lease that elects its one writer.

use std::time::Duration;

use clap::{ArgAction, Args};

use super::{duration, excluded_by_name};
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
    #[arg(long, env = "OTEL_INJECTOR_STATUS")]
    #[arg(default_value_t = true, action = ArgAction::Set)]
    pub status: bool,

    /// Also find the pods that asked for injection and were admitted without the webhook (it
    /// was unreachable, or not registered yet, when they were created), whatever way they ask
    /// (annotation or label, on the pod or its namespace): one metadata-only watch of the pods
    /// without the otel-injector/injected label, all namespaces, keeping only those that ask.
    /// Counted in `status.missed` and the metric otel_injector_status_pods_missed, announced
    /// with one InjectionMissed Event per workload (with --events), restarted by the automatic
    /// rollout. Needs nothing beyond --status.
    #[arg(long, env = "OTEL_INJECTOR_FIND_MISSED")]
    #[arg(default_value_t = true, action = ArgAction::Set)]
    pub find_missed: bool,

    /// With --status, also tell the failing pods among those injected with an
    /// Instrumentation's current spec: a container waiting in CrashLoopBackOff, OOM-killed,
    /// or restarted 3 times or more. Counted in `status.failing` and per workload, named in
    /// the `Failing` condition (the container's last termination reason), announced with one
    /// InstrumentedPodsFailing Event per workload (with --events), and in the metric
    /// otel_injector_status_failing_workloads. The pod watch then receives whole pods instead
    /// of their metadata (more bytes per event; what is kept per pod grows by a word, and by
    /// the failure of a failing one). Needs nothing beyond --status.
    #[arg(long, env = "OTEL_INJECTOR_DETECT_FAILURES")]
    #[arg(default_value_t = false, action = ArgAction::Set)]
    pub detect_failures: bool,

    /// With --status (implies --detect-failures), the Lease holder rolls back the workloads
    /// (Deployments, StatefulSets, DaemonSets) whose pods fail with the current spec of an
    /// Instrumentation annotated otel-injector/on-failure: rollback: it sets
    /// otel-injector/rolled-back: <lang>=<spec> on the pod template (the controller replaces
    /// the pods; the webhook leaves that language out while that spec is current), records
    /// it in status.rolledBack and a Warning InstrumentationRolledBack Event. Once per
    /// workload and spec, at most 10 a minute. Needs get/patch on those workloads
    /// (manifests/components/rollback).
    #[arg(long, env = "OTEL_INJECTOR_ROLLBACK")]
    #[arg(default_value_t = false, action = ArgAction::Set)]
    pub rollback: bool,

    /// Namespaces whose pods are never counted missed: the webhook configuration's exclusions
    /// by name (namespaces and pods labeled otel-injector/inject=disabled are always left out).
    #[arg(long, env = "OTEL_INJECTOR_MISSED_EXCLUDED_NAMESPACES")]
    #[arg(value_name = "NAMESPACE", value_delimiter = ',', default_values_t = excluded_by_name())]
    pub missed_excluded_namespaces: Vec<String>,

    /// Namespace of the Lease; by default $POD_NAMESPACE, else the service account's
    /// namespace (in a pod) or the kubeconfig context's.
    #[arg(long, env = "OTEL_INJECTOR_LEASE_NAMESPACE")]
    pub lease_namespace: Option<String>,

    /// Name of the Lease (coordination.k8s.io/v1) that elects the one replica running the
    /// leader-only writers. The shipped Role grants get and update on this name only.
    #[arg(long, env = "OTEL_INJECTOR_LEASE_NAME", default_value = lease::DEFAULT_NAME)]
    pub lease_name: String,

    /// This replica's identity in the Lease; by default the pod name ($HOSTNAME), else
    /// `otel-injector-` and a random suffix. Must differ between replicas.
    #[arg(long, env = "OTEL_INJECTOR_LEASE_IDENTITY")]
    pub lease_identity: Option<String>,

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
            identity: self
                .lease_identity
                .clone()
                .filter(|i| !i.is_empty())
                .unwrap_or_else(lease::default_identity),
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
        let cases = [
            ("15s", Some(15)),
            ("3s", Some(3)),
            ("2s", None),
            ("3500ms", None),
        ];
        for (text, seconds) in cases {
            let got = lease_duration(text).ok();
            assert_eq!(got, seconds.map(Duration::from_secs), "{text}");
        }
    }
}
