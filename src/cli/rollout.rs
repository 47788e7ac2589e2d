//! Flags of the `rollout` command: which Instrumentation, dry run or not, how many workloads
//! at a time and how long each may take.

use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Args};

use super::excluded_by_name;

use crate::cluster::rollout::{AutoRollout, Settings};

/// How often a restarted workload is read while it rolls out.
pub const POLL: Duration = Duration::from_secs(1);

/// `rollout`.
#[derive(Debug, Args)]
#[command(after_help = "\
What it reads (once, no watch): every Instrumentation (for the current spec digests), the \
namespaces (their otel-injector/inject=disabled label and their injection annotations), the \
metadata of the pods labeled otel-injector/injected (their otel-injector/status annotation \
says which spec each runs, or why it was skipped) in all namespaces, of the pods without that \
label (one paged list; those that ask for injection by their own annotation or label, or by \
their namespace's, were admitted without the webhook), and each stale workload.

What it restarts: the Deployments, StatefulSets and DaemonSets of the Instrumentation with \
pods injected with an earlier spec, admitted without the webhook (missed), or skipped \
because the Instrumentation did not exist yet (instrumentation_not_found, \
no_instrumentation); never in an excluded namespace or one \
labeled otel-injector/inject=disabled, never a workload whose pod template is labeled \
otel-injector/inject=disabled or that is annotated otel-injector/rollout: disabled, and not \
a paused Deployment or an OnDelete or partitioned update. A restart is what `kubectl rollout \
restart` does: the pod template's annotation kubectl.kubernetes.io/restartedAt set to now \
(a merge patch). Then it waits until the workload is complete (every pod updated and \
available, no old pod left) before it restarts the next, --concurrency at a time.

It stops, restarting nothing more, when a restarted workload is not complete within \
--timeout, one of its new pods has a container in CrashLoopBackOff or restarted 3 times, a \
Deployment's progress deadline passes, or a request is refused.

Permissions: list instrumentations.opentelemetry.io, namespaces and pods in all namespaces; \
get on deployments, statefulsets and daemonsets; and, without --dry-run, patch on them and \
list on pods in their namespaces.

Exit status: 0 done or nothing to do; 1 stopped (the workload and why on stderr), or the \
cluster could not be read (the permission it needs is named); 2 bad usage.")]
pub struct RolloutArgs {
    /// The Instrumentation whose stale workloads to restart, as NAMESPACE/NAME.
    #[arg(long, value_name = "NAMESPACE/NAME", value_parser = reference)]
    pub instrumentation: (String, String),

    /// Print the plan and restart nothing.
    #[arg(long)]
    pub dry_run: bool,

    /// Kubeconfig of the cluster; by default the in-cluster config, else $KUBECONFIG or
    /// ~/.kube/config.
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,

    /// Workloads restarted and not yet complete at any one time.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    pub concurrency: u16,

    /// How long one restarted workload may take to complete before the rollout stops.
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = super::duration)]
    pub timeout: Duration,

    /// A canary: restart the first workload alone and, once it is complete, watch its new
    /// pods this long (a crash loop, an OOM kill, 3 restarts stop the rollout, reason
    /// CanaryFailed) before the others follow, --concurrency at a time. 0s: no canary.
    #[arg(long, value_name = "DURATION", default_value = "0s", value_parser = super::duration)]
    pub canary_soak: Duration,

    /// Namespaces never touched (the webhook's exclusions: kube-system and its own
    /// namespace). Repeatable or comma-separated; replaces the default.
    #[arg(long = "excluded-namespace")]
    #[arg(value_name = "NAMESPACE", value_delimiter = ',', default_values_t = excluded_by_name())]
    pub excluded_namespaces: Vec<String>,
}

impl RolloutArgs {
    /// How the rollout runs.
    pub fn settings(&self) -> Settings {
        Settings {
            concurrency: self.concurrency.into(),
            timeout: self.timeout,
            poll: POLL,
            canary_soak: self.canary_soak,
        }
    }
}

/// `serve`'s automatic rollout.
#[derive(Debug, Args)]
#[command(next_help_heading = "Rollout")]
pub struct RolloutServeArgs {
    /// Restart, on the replica holding the Lease, the stale workloads of every Instrumentation
    /// annotated `otel-injector/rollout: automatic` when its spec changes (or once it exists
    /// for pods that were skipped for want of it), as the `rollout` command does, and record
    /// the progress in its `status.rollout`; a stop (timeout, crash loop) is recorded there
    /// and as a Warning Event `RolloutStopped`, and not retried for that spec. Needs get
    /// and patch on deployments, statefulsets and daemonsets, list on pods, patch
    /// on instrumentations/status, create on events and the Lease
    /// (manifests/components/rollout, chart value rollout.enabled). Off by default.
    #[arg(long = "rollout", env = "OTEL_INJECTOR_ROLLOUT")]
    #[arg(default_value_t = false, action = ArgAction::Set)]
    pub enabled: bool,

    /// Workloads restarted and not yet complete at any one time.
    #[arg(long, env = "OTEL_INJECTOR_ROLLOUT_CONCURRENCY", value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    pub rollout_concurrency: u16,

    /// How long one restarted workload may take to complete before the rollout stops.
    #[arg(long, env = "OTEL_INJECTOR_ROLLOUT_TIMEOUT", value_name = "DURATION", default_value = "5m", value_parser = super::duration)]
    pub rollout_timeout: Duration,

    /// A canary for every automatic rollout: the first workload restarted alone and, once
    /// complete, its new pods watched this long (a crash loop, an OOM kill, 3 restarts stop
    /// the rollout: status.rollout reason CanaryFailed, Warning Event RolloutStopped) before
    /// the others follow. With otel-injector/on-failure: rollback and --rollback, the failed
    /// canary is rolled back too. 0s: no canary.
    #[arg(long, env = "OTEL_INJECTOR_ROLLOUT_CANARY_SOAK", value_name = "DURATION", default_value = "0s", value_parser = super::duration)]
    pub rollout_canary_soak: Duration,

    /// Namespaces the rollout never touches (the webhook configuration's exclusions by name:
    /// kube-system and the webhook's own namespace; namespaces labeled
    /// otel-injector/inject=disabled are always left alone).
    #[arg(long, env = "OTEL_INJECTOR_ROLLOUT_EXCLUDED_NAMESPACES")]
    #[arg(value_name = "NAMESPACE", value_delimiter = ',', default_values_t = excluded_by_name())]
    pub rollout_excluded_namespaces: Vec<String>,
}

impl RolloutServeArgs {
    /// The automatic rollout, when on.
    pub fn build(&self) -> Option<AutoRollout> {
        self.enabled.then(|| AutoRollout {
            settings: Settings {
                concurrency: self.rollout_concurrency.into(),
                timeout: self.rollout_timeout,
                poll: POLL,
                canary_soak: self.rollout_canary_soak,
            },
            excluded: self.rollout_excluded_namespaces.iter().cloned().collect(),
            identity: crate::cluster::lease::default_identity(),
        })
    }
}

/// `NAMESPACE/NAME`, both non-empty.
pub(super) fn reference(v: &str) -> Result<(String, String), String> {
    match v.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok((ns.to_owned(), name.to_owned()))
        }
        _ => Err(format!("expected NAMESPACE/NAME, got {v:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use clap::Parser;

    #[test]
    fn flags_and_defaults() {
        let cli =
            Cli::try_parse_from(["otel-injector", "rollout", "--instrumentation", "shop/java"])
                .unwrap();
        let Command::Rollout(args) = cli.command else {
            panic!("not rollout")
        };
        assert_eq!(args.instrumentation, ("shop".to_owned(), "java".to_owned()));
        assert!(!args.dry_run);
        assert_eq!(
            args.settings(),
            Settings {
                concurrency: 1,
                timeout: Duration::from_secs(300),
                poll: POLL,
                canary_soak: Duration::ZERO
            }
        );
        assert_eq!(args.excluded_namespaces, ["kube-system", "otel-injector"]);
        let cli = Cli::try_parse_from([
            "otel-injector",
            "rollout",
            "--instrumentation",
            "a/b",
            "--dry-run",
            "--concurrency",
            "3",
            "--timeout",
            "90s",
            "--excluded-namespace",
            "x,y",
        ])
        .unwrap();
        let Command::Rollout(args) = cli.command else {
            panic!("not rollout")
        };
        assert!(args.dry_run);
        assert_eq!(args.settings().concurrency, 3);
        assert_eq!(args.settings().timeout, Duration::from_secs(90));
        assert_eq!(args.excluded_namespaces, ["x", "y"]);
        let cli = Cli::try_parse_from(["otel-injector", "serve"]).unwrap();
        let Command::Serve(serve) = cli.command else {
            panic!("not serve")
        };
        assert!(serve.rollout.build().is_none(), "off by default");
        let cli = Cli::try_parse_from([
            "otel-injector",
            "serve",
            "--rollout=true",
            "--rollout-concurrency",
            "2",
            "--rollout-timeout",
            "30s",
            "--rollout-excluded-namespaces",
            "kube-system,ops",
        ])
        .unwrap();
        let Command::Serve(serve) = cli.command else {
            panic!("not serve")
        };
        let auto = serve.rollout.build().expect("on");
        assert_eq!(
            auto.settings,
            Settings {
                concurrency: 2,
                timeout: Duration::from_secs(30),
                poll: POLL,
                canary_soak: Duration::ZERO
            }
        );
        assert_eq!(
            auto.excluded,
            ["kube-system".to_owned(), "ops".to_owned()].into()
        );
        for bad in [
            vec!["--instrumentation", "java"],
            vec!["--instrumentation", "/java"],
            vec!["--instrumentation", "a/b/c"],
            vec!["--instrumentation", "a/b", "--concurrency", "0"],
            vec!["--instrumentation", "a/b", "--timeout", "5"],
            vec![],
        ] {
            let err =
                Cli::try_parse_from(["otel-injector", "rollout"].into_iter().chain(bad.clone()))
                    .unwrap_err();
            assert_eq!(err.exit_code(), 2, "{bad:?}: {err}");
        }
    }
}
