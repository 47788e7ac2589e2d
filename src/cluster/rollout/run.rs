//! The rollout against the API server: read what the plan needs (one list of the pods that
//! asked for injection, by their label, and the lists of those admitted without the webhook
//! ([`missed::list`]); the Instrumentations; the namespaces; each stale workload), then
//! restart the planned workloads at most N at a time ([`workloads`]) and follow each until it
//! completes, fails, crash-loops or times out.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use kube::core::Selector;

use super::plan::{self, Exclusions, Object, Plan};
use super::progress::crash_loop;
use super::progress::{self, Progress};
use crate::cluster::missed;
use crate::cluster::watch::{NamespaceEntry, key_of, to_typed};
use crate::crd::{Instrumentation, SpecHash};
use crate::engine::census::{self, PodRecord, Tally, Workload};
use crate::keys::{INJECTED_LABEL, OPT_OUT, OPT_OUT_LABEL, ROLLED_BACK_ANNOTATION};

mod workloads;

pub use workloads::{get, patch_template, restart, stamp_now};

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

/// What was read and decided for one Instrumentation.
#[derive(Clone, Debug)]
pub struct Census {
    /// `namespace/name`.
    pub key: String,
    pub spec: SpecHash,
    /// Its pods (injected or skipped for it), per workload.
    pub tally: Tally,
    pub plan: Plan,
}

/// Errors reading the cluster or starting the rollout, each naming the permission it needs.
#[derive(Debug, thiserror::Error)]
pub enum RolloutError {
    #[error(transparent)]
    Client(#[from] crate::cluster::ConnectError),
    #[error("{action}: {error} (rollout needs {permission})")]
    Api {
        action: String,
        permission: &'static str,
        error: kube::Error,
    },
    #[error("Instrumentation {0} not found")]
    NotFound(String),
    #[error("Instrumentation {key} cannot be read: {error}")]
    Unreadable { key: String, error: String },
}

const LIST_INSTRUMENTATIONS: &str = "list on instrumentations.opentelemetry.io in all namespaces";
const LIST_NAMESPACES: &str = "list on namespaces";
const LIST_PODS: &str = "list on pods in all namespaces";
const GET_WORKLOADS: &str = "get on deployments, statefulsets and daemonsets (group apps)";
const PATCH_WORKLOADS: &str = "patch on deployments, statefulsets and daemonsets (group apps)";
const LIST_WORKLOAD_PODS: &str = "list on pods of the restarted workloads' namespaces";

fn api_error(action: String, permission: &'static str) -> impl FnOnce(kube::Error) -> RolloutError {
    move |error| RolloutError::Api {
        action,
        permission,
        error,
    }
}

/// Reads what the plan for Instrumentation `namespace/name` needs and makes it. Namespaces
/// in `excluded` and those labeled `otel-injector/inject=disabled` are left alone.
pub async fn read_plan(
    client: &Client,
    namespace: &str,
    name: &str,
    excluded: &BTreeSet<String>,
) -> Result<Census, RolloutError> {
    let key = format!("{namespace}/{name}");
    let resource = ApiResource::erase::<Instrumentation>(&());
    let listed = Api::<DynamicObject>::all_with(client.clone(), &resource)
        .list(&ListParams::default())
        .await
        .map_err(api_error(
            "list Instrumentations".into(),
            LIST_INSTRUMENTATIONS,
        ))?;
    let mut existing = BTreeMap::new();
    let mut target = None;
    for o in &listed.items {
        let (ns, n) = key_of(o);
        let this = ns == namespace && n == name;
        match to_typed(o.clone()) {
            Ok(i) => {
                let hash = SpecHash::of(&i.spec);
                if this {
                    target = Some(Ok(hash));
                }
                existing.insert(format!("{ns}/{n}"), hash);
            }
            Err(e) if this => target = Some(Err(e)),
            Err(_) => {}
        }
    }
    let spec = match target {
        None => return Err(RolloutError::NotFound(key)),
        Some(Err(error)) => return Err(RolloutError::Unreadable { key, error }),
        Some(Ok(hash)) => hash,
    };
    let namespaces = Api::<Namespace>::all(client.clone())
        .list_metadata(&ListParams::default())
        .await
        .map_err(api_error("list namespaces".into(), LIST_NAMESPACES))?;
    let exclusions = Exclusions {
        names: excluded.clone(),
        disabled: namespaces
            .items
            .iter()
            .filter(|n| {
                n.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(OPT_OUT_LABEL))
                    .is_some_and(|v| v == OPT_OUT)
            })
            .filter_map(|n| n.metadata.name.clone())
            .collect(),
    };
    let pods = Api::<Pod>::all(client.clone())
        .list_metadata(&ListParams::default().labels(INJECTED_LABEL))
        .await
        .map_err(api_error(
            format!("list pods labeled {INJECTED_LABEL}"),
            LIST_PODS,
        ))?;
    let mut names = census::Interner::default();
    let mut records: Vec<PodRecord> = pods
        .items
        .iter()
        .filter_map(|p| PodRecord::from_meta(&p.metadata, &mut names))
        .collect();
    // And the pods that asked and were admitted without the webhook.
    let empty = Arc::default();
    let entries: HashMap<String, NamespaceEntry> = namespaces
        .items
        .into_iter()
        .map(|n| NamespaceEntry::of(n.metadata, &empty))
        .collect();
    records.extend(
        missed::list(client, &entries, excluded, &mut names)
            .await
            .map_err(api_error(
                "list the pods that asked for injection by label or namespace".into(),
                LIST_PODS,
            ))?,
    );
    let tally = census::census(&records, &existing)
        .remove(&key)
        .unwrap_or_default();
    let mut objects = BTreeMap::new();
    for w in plan::to_read(&tally, &exclusions) {
        let object = get(client, &w)
            .await
            .map_err(api_error(format!("get {w}"), GET_WORKLOADS))?;
        objects.insert(w, object);
    }
    let plan = plan::plan(&tally, &exclusions, &objects);
    Ok(Census {
        key,
        spec,
        tally,
        plan,
    })
}

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

struct InFlight {
    workload: Workload,
    /// The spec rolled out (`3f2a9c1b`).
    spec: String,
    stamp: String,
    selector: Option<String>,
    started: Instant,
}

enum Check {
    Waiting,
    Complete,
    Stop(StopReason, String),
}

fn forbidden(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 401 || s.code == 403)
}

/// Reads one restarted workload (and, while it is not complete, its new pods).
async fn check(client: &Client, f: &InFlight, timeout: Duration) -> Check {
    let object = match get(client, &f.workload).await {
        Ok(Some(o)) => o,
        Ok(None) => {
            return Check::Stop(
                StopReason::WorkloadGone,
                "deleted during its rollout".into(),
            );
        }
        Err(e) if forbidden(&e) => {
            return Check::Stop(
                StopReason::ApiError,
                format!("get: {e} (rollout needs {GET_WORKLOADS})"),
            );
        }
        // Anything else may pass; the timeout bounds it.
        Err(e) => {
            tracing::debug!(workload = %f.workload, error = %e, "reading a restarted workload");
            return timed_out(f, timeout, &format!("last read failed: {e}"));
        }
    };
    if let Some(m) = rolled_back_from(&object, &f.spec) {
        return Check::Stop(StopReason::RolledBack, m);
    }
    let waiting = match progress::progress(&object) {
        Progress::Complete => return Check::Complete,
        Progress::Failed(m) => return Check::Stop(StopReason::ProgressDeadlineExceeded, m),
        Progress::Waiting(m) => m,
    };
    if let Some(stop) = crashing(client, f, StopReason::CrashLoop).await {
        return stop;
    }
    timed_out(f, timeout, &waiting)
}

/// Whether the safety net rolled the workload back from `spec` while it rolled out: its pod
/// template's `otel-injector/rolled-back` names that spec.
fn rolled_back_from(object: &Object, spec: &str) -> Option<String> {
    let marker = object.template_annotations()?.get(ROLLED_BACK_ANNOTATION)?;
    crate::engine::rolled_back(marker)
        .any(|(_, h)| h == spec)
        .then(|| format!("rolled back by the safety net ({ROLLED_BACK_ANNOTATION}: {marker})"))
}

/// The canary during its soak: a stop when it was rolled back or a new pod crash-loops.
async fn soak_check(client: &Client, f: &InFlight) -> Option<(StopReason, String)> {
    if let Ok(Some(object)) = get(client, &f.workload).await
        && let Some(m) = rolled_back_from(&object, &f.spec)
    {
        return Some((StopReason::RolledBack, m));
    }
    match crashing(client, f, StopReason::CanaryFailed).await {
        Some(Check::Stop(reason, m)) => Some((reason, m)),
        _ => None,
    }
}

/// A stop for `reason` when a new pod of the restarted workload crash-loops (or its pods
/// cannot be listed for want of the permission).
async fn crashing(client: &Client, f: &InFlight, reason: StopReason) -> Option<Check> {
    let selector = f.selector.as_ref()?;
    let pods = Api::<Pod>::namespaced(client.clone(), &f.workload.namespace)
        .list(&ListParams::default().labels(selector))
        .await;
    match pods {
        Ok(pods) => crash_loop(&pods.items, &f.stamp).map(|m| Check::Stop(reason, m)),
        Err(e) if forbidden(&e) => Some(Check::Stop(
            StopReason::ApiError,
            format!("list its pods: {e} (rollout needs {LIST_WORKLOAD_PODS})"),
        )),
        Err(e) => {
            tracing::debug!(workload = %f.workload, error = %e, "listing a restarted workload's pods");
            None
        }
    }
}

fn timed_out(f: &InFlight, timeout: Duration, waiting: &str) -> Check {
    if f.started.elapsed() < timeout {
        return Check::Waiting;
    }
    Check::Stop(
        StopReason::Timeout,
        format!(
            "not complete within {}: {waiting}",
            crate::duration::format(timeout)
        ),
    )
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
                        spec: spec.to_string(),
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
