//! The rollout against the API server: read what the plan needs (`read.rs`), then restart
//! the planned workloads at most N at a time (`restart.rs`) and follow each (`follow.rs`)
//! until it completes, fails, crash-loops or times out.

use std::fmt;
use std::time::{Duration, Instant};

use kube::Client;
use kube::core::Selector;

use super::plan::Plan;
use crate::census::Workload;
use crate::crd::SpecHash;
use follow::{Check, InFlight, check, soak_check};

mod follow;
mod read;
mod restart;

pub use read::{Census, RolloutError, read_plan};
pub use restart::{restart, stamp_now};

/// The field manager of the restarts' patches.
pub const FIELD_MANAGER: &str = "otel-injector-rollout";

/// How a rollout runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Workloads restarted and not yet complete at any one time (at least 1).
    pub concurrency: usize,
    /// How long one workload may take to complete before the rollout stops.
    pub timeout: Duration,
    /// How often a restarted workload is read.
    pub poll: Duration,
    /// The canary's soak (zero: no canary): the first workload is restarted alone, and
    /// once complete its new pods must not fail for this long before any other is
    /// restarted; a failure then stops the rollout (`CanaryFailed`).
    pub canary_soak: Duration,
}

/// The permissions a rollout needs, named in its errors.
const LIST_INSTRUMENTATIONS: &str = "list on instrumentations.opentelemetry.io in all namespaces";
const LIST_NAMESPACES: &str = "list on namespaces";
const LIST_PODS: &str = "list on pods in all namespaces";
const GET_WORKLOADS: &str = "get on deployments, statefulsets and daemonsets (group apps)";
const PATCH_WORKLOADS: &str = "patch on deployments, statefulsets and daemonsets (group apps)";
const LIST_WORKLOAD_PODS: &str = "list on pods of the restarted workloads' namespaces";

/// Why a rollout stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// Not complete within the timeout.
    Timeout,
    /// A new pod's container crash-loops.
    CrashLoop,
    /// The Deployment's own progress deadline passed.
    ProgressDeadlineExceeded,
    /// The workload was deleted while it rolled out.
    WorkloadGone,
    /// The API server refused a request (a missing permission, most often).
    ApiError,
    /// The canary's new pods failed during its soak.
    CanaryFailed,
    /// The safety net rolled the workload back from this spec (`otel-injector/rolled-back`).
    RolledBack,
}

impl StopReason {
    /// The reason as written in `status.rollout.reason` and the Event.
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::Timeout => "Timeout",
            StopReason::CrashLoop => "CrashLoop",
            StopReason::ProgressDeadlineExceeded => "ProgressDeadlineExceeded",
            StopReason::WorkloadGone => "WorkloadGone",
            StopReason::ApiError => "APIError",
            StopReason::CanaryFailed => "CanaryFailed",
            StopReason::RolledBack => "RolledBack",
        }
    }
}

/// The workload that stopped a rollout, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stop {
    pub workload: Workload,
    pub reason: StopReason,
    pub message: String,
}

impl fmt::Display for Stop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {}: {}",
            self.workload,
            self.reason.as_str(),
            self.message
        )
    }
}

/// One step of a rollout, as it happens.
#[derive(Debug)]
pub enum Step<'a> {
    /// The workload's template was stamped; its controller replaces its pods now.
    Restarted {
        workload: &'a Workload,
        stamp: &'a str,
    },
    /// Every pod of the workload runs the new template and is available.
    Complete {
        workload: &'a Workload,
        took: Duration,
    },
    /// The canary is complete; no other workload is restarted while it soaks this long.
    Soaking {
        workload: &'a Workload,
        soak: Duration,
    },
    /// The canary's pods did not fail during the soak: the others follow.
    Soaked { workload: &'a Workload },
    /// The rollout stops here; no other workload is restarted.
    Stopped(&'a Stop),
}

/// How a rollout ended.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ended {
    /// Restarted (stamped), in order.
    pub restarted: Vec<Workload>,
    /// Of those, complete.
    pub completed: Vec<Workload>,
    /// Planned and never restarted (after a stop).
    pub pending: Vec<Workload>,
    pub stopped: Option<Stop>,
}

/// Restarts the plan's workloads in order, at most `settings.concurrency` not yet complete
/// at any time, and reads each every `settings.poll` until it completes. The first that
/// fails (deadline, crash loop, timeout, deleted, refused) stops the rollout: no other is
/// restarted, and those already restarted are not waited for. `on` hears every step.
pub async fn execute(
    client: &Client,
    plan: &Plan,
    spec: SpecHash,
    settings: &Settings,
    on: &mut (dyn FnMut(Step<'_>) + Send),
) -> Ended {
    let mut report = Ended::default();
    let mut queue = plan.restarts.iter().map(|r| &r.workload);
    let mut inflight: Vec<InFlight> = Vec::new();
    // The canary: pending until the first workload completes, then soaking until when.
    let mut canary_pending = !settings.canary_soak.is_zero();
    let mut soaking: Option<(InFlight, Instant)> = None;
    'rollout: loop {
        let cap = match canary_pending || soaking.is_some() {
            true => 1,
            false => settings.concurrency.max(1),
        };
        while inflight.len() < cap && soaking.is_none() {
            let Some(w) = queue.next() else { break };
            let stamp = stamp_now();
            match restart(client, w, &stamp).await {
                Ok(None) => {
                    report.stopped = Some(Stop {
                        workload: w.clone(),
                        reason: StopReason::WorkloadGone,
                        message: format!("a {} is not restarted by a rollout", w.kind),
                    });
                    break 'rollout;
                }
                Ok(Some(object)) => {
                    report.restarted.push(w.clone());
                    on(Step::Restarted {
                        workload: w,
                        stamp: &stamp,
                    });
                    let selector = Selector::try_from(object.selector().clone())
                        .ok()
                        .map(|s| s.to_string())
                        .filter(|s| !s.is_empty());
                    inflight.push(InFlight {
                        workload: w.clone(),
                        spec,
                        stamp,
                        selector,
                        started: Instant::now(),
                    });
                }
                Err(e) => {
                    let (reason, message) = match &e {
                        kube::Error::Api(s) if s.code == 404 => {
                            (StopReason::WorkloadGone, format!("restart: {e}"))
                        }
                        _ => (
                            StopReason::ApiError,
                            format!("restart: {e} (rollout needs {PATCH_WORKLOADS})"),
                        ),
                    };
                    report.stopped = Some(Stop {
                        workload: w.clone(),
                        reason,
                        message,
                    });
                    break 'rollout;
                }
            }
        }
        if inflight.is_empty() && soaking.is_none() {
            break;
        }
        tokio::time::sleep(settings.poll).await;
        if let Some((canary, until)) = &soaking {
            if let Some((reason, message)) = soak_check(client, canary).await {
                let message = match reason {
                    StopReason::ApiError => message,
                    _ => format!(
                        "the canary failed during its {} soak: {message}",
                        crate::duration::format(settings.canary_soak)
                    ),
                };
                let reason = match reason {
                    StopReason::ApiError => reason,
                    _ => StopReason::CanaryFailed,
                };
                report.stopped = Some(Stop {
                    workload: canary.workload.clone(),
                    reason,
                    message,
                });
                break 'rollout;
            }
            if Instant::now() >= *until {
                on(Step::Soaked {
                    workload: &canary.workload,
                });
                soaking = None;
            }
            continue;
        }
        let mut i = 0;
        while i < inflight.len() {
            match check(client, &inflight[i], settings.timeout).await {
                Check::Waiting => i += 1,
                Check::Complete => {
                    let done = inflight.remove(i);
                    on(Step::Complete {
                        workload: &done.workload,
                        took: done.started.elapsed(),
                    });
                    report.completed.push(done.workload.clone());
                    if canary_pending {
                        canary_pending = false;
                        on(Step::Soaking {
                            workload: &done.workload,
                            soak: settings.canary_soak,
                        });
                        soaking = Some((done, Instant::now() + settings.canary_soak));
                    }
                }
                Check::Stop(reason, message) => {
                    report.stopped = Some(Stop {
                        workload: inflight[i].workload.clone(),
                        reason,
                        message,
                    });
                    break 'rollout;
                }
            }
        }
    }
    report.pending = queue.cloned().collect();
    if let Some(stop) = &report.stopped {
        on(Step::Stopped(stop));
    }
    report
}
