//! Following one restarted workload: read it (and its new pods) until it completes, fails,
//! crash-loops, is rolled back by the safety net or times out; and the canary's soak.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, ListParams};

use super::{GET_WORKLOADS, LIST_WORKLOAD_PODS, StopReason};
use crate::census::Workload;
use crate::cluster::rollout::progress::{self, Progress, crash_loop};
use crate::cluster::workloads::{WorkloadObject, get};
use crate::crd::SpecHash;
use crate::engine::outcome::RolledBack;
use crate::keys::ROLLED_BACK_ANNOTATION;

pub(super) struct InFlight {
    pub(super) workload: Workload,
    /// The spec rolled out.
    pub(super) spec: SpecHash,
    pub(super) stamp: String,
    pub(super) selector: Option<String>,
    pub(super) started: Instant,
}

pub(super) enum Check {
    Waiting,
    Complete,
    Stop(StopReason, String),
}

fn forbidden(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 401 || s.code == 403)
}

/// Reads one restarted workload (and, while it is not complete, its new pods).
pub(super) async fn check(client: &Client, f: &InFlight, timeout: Duration) -> Check {
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
    if let Some(m) = rolled_back_from(&object, f.spec) {
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
fn rolled_back_from(object: &WorkloadObject, spec: SpecHash) -> Option<String> {
    let marker = object.template_annotations()?.get(ROLLED_BACK_ANNOTATION)?;
    RolledBack::parse(marker)
        .from_spec(spec)
        .then(|| format!("rolled back by the safety net ({ROLLED_BACK_ANNOTATION}: {marker})"))
}

/// The canary during its soak: a stop when it was rolled back or a new pod crash-loops.
pub(super) async fn soak_check(client: &Client, f: &InFlight) -> Option<(StopReason, String)> {
    if let Ok(Some(object)) = get(client, &f.workload).await
        && let Some(m) = rolled_back_from(&object, f.spec)
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
