//! `otel-injector rollout`: the plan printed, then the restarts one workload at a time.

use crate::cli::RolloutArgs;
use crate::cluster;

use super::{Failure, print};

/// `rollout` stopped at a workload; the process exits with 1.
#[derive(Debug, thiserror::Error)]
#[error("rollout stopped at {stop}{pending}")]
pub struct RolloutStopped {
    pub stop: cluster::rollout::Stop,
    /// `; not restarted: ...`, or empty.
    pub pending: String,
}

/// `otel-injector rollout`.
pub(super) async fn rollout(args: &RolloutArgs) -> Result<(), Failure> {
    use cluster::rollout::{RolloutError, Step, plan, run};
    // The kube client's rustls needs a process-wide provider.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let kubeconfig = args.kubeconfig.as_deref();
    let client = cluster::connect_once(kubeconfig)
        .await
        .map_err(RolloutError::from)?;
    let (namespace, name) = &args.instrumentation;
    let excluded = args.excluded_namespaces.iter().cloned().collect();
    let census = run::read_plan(&client, namespace, name, &excluded).await?;
    print(&plan::describe(&census.key, &census.tally, &census.plan))?;
    if args.dry_run {
        print("dry run: nothing restarted\n")?;
        return Ok(());
    }
    if census.plan.restarts.is_empty() {
        return Ok(());
    }
    let report = run::execute(
        &client,
        &census.plan,
        census.spec,
        &args.settings(),
        &mut |step| {
            let line = match step {
                Step::Restarted { workload, stamp } => {
                    format!("restarted {workload} (restartedAt {stamp})\n")
                }
                Step::Complete { workload, took } => {
                    format!("complete  {workload} in {:.1}s\n", took.as_secs_f64())
                }
                Step::Soaking { workload, soak } => format!(
                    "canary    {workload}: soaking {} before the others\n",
                    crate::duration::format(soak)
                ),
                Step::Soaked { workload } => format!("soaked    {workload}: continuing\n"),
                Step::Stopped(_) => return,
            };
            // The restarts go on whatever becomes of the lines that report them.
            let _ = print(&line);
        },
    )
    .await;
    if let Some(stop) = report.stopped {
        let pending = if report.pending.is_empty() {
            String::new()
        } else {
            let names: Vec<String> = report.pending.iter().map(ToString::to_string).collect();
            format!("; not restarted: {}", names.join(", "))
        };
        return Err(RolloutStopped { stop, pending }.into());
    }
    Ok(print(&format!(
        "done: {} restarted and complete\n",
        report.completed.len()
    ))?)
}
