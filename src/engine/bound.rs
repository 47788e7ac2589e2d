//! The size bound, owned here whole: no pod is grown past `max_pod_bytes` (the API server
//! could not store it, and a pod of many tiny containers must not make the answer many times
//! the request). Three checks, one rule: the estimate before any work ([`estimate`], a
//! stage of the plan), the exact check of the patch the admission layer writes for the plan
//! ([`fit`], the last stage of [`super::decide_within`]), and the refusal of a pod too large to
//! decode ([`refuse_undecoded`]). When the plan does not fit, the pod gets its outcome
//! alone (`pod=skipped pod_too_large`) where that still fits, and a warning.
//!
//! The engine writes no patch: the caller passes the writer, the engine measures what it
//! wrote.

use std::fmt::Display;

use k8s_openapi::api::core::v1::Pod;

use super::decision::{Report, Skip, SkipReason};
use super::outcome::PodStatus;
use super::{MIN_PATCH_BYTES_PER_TARGET, Snapshot};
use crate::keys::INJECTED_ANNOTATION;
use crate::pod::plan::PodPlan;

/// The engine's answer for one pod with the patch that carries it, measured.
#[derive(Debug)]
pub struct Bounded<'p, P> {
    /// The plan the patch carries; `None` when nothing is injected.
    pub plan: Option<PodPlan<'p>>,
    /// The outcome the patch records, when it records one.
    pub status: Option<PodStatus>,
    /// The patch, within the bound; `None` when the pod is admitted unchanged.
    pub patch: Option<P>,
    /// What happened and why.
    pub report: Report,
}

/// The plan check: the patch for `plan` and `report`'s outcome, kept when the pod it makes
/// stays within the bound. Otherwise nothing is injected (`pod_too_large`) and the pod gets
/// its outcome alone when that fits; when even the outcome alone does not fit a pod that
/// asked for nothing new to be injected, nothing is written.
pub(super) fn fit<'p, P, E>(
    snapshot: &Snapshot<'_>,
    pod: &'p Pod,
    plan: Option<PodPlan<'p>>,
    mut report: Report,
    write: &impl Fn(&Pod, Option<&PodPlan<'_>>, Option<&PodStatus>) -> Result<Option<P>, E>,
) -> Bounded<'p, P>
where
    P: AsRef<[u8]>,
    E: Display,
{
    let status = report.status();
    let patch = match write(pod, plan.as_ref(), status.as_ref()) {
        Ok(patch) => patch,
        Err(e) => {
            // No k8s-openapi type fails to serialize: this is never expected to happen, and
            // then nothing, not even the outcome, is written.
            report.clear_injected();
            report.warn(format!(
                "otel-injector: the patch could not be encoded ({e}); not injected"
            ));
            return Bounded::nothing(report);
        }
    };
    let max = snapshot.config.max_pod_bytes;
    let grown = grown(snapshot, patch.as_ref());
    if grown <= max {
        return Bounded {
            plan,
            status,
            patch,
            report,
        };
    }
    if report.injected.is_empty() {
        // Only the outcome, and even that would take the pod past the bound (it is there
        // already): nothing is written; the report says why.
        return Bounded::nothing(report);
    }
    report.clear_injected();
    report.add(too_large(grown, max));
    outcome_only(snapshot, pod, report, write)
}

/// The estimate made before any work: every instrumented container costs the patch at least
/// [`MIN_PATCH_BYTES_PER_TARGET`].
pub(super) fn estimate(snapshot: &Snapshot<'_>, targeted: usize) -> Result<(), Skip> {
    let max = snapshot.config.max_pod_bytes;
    let estimate = snapshot
        .pod_bytes
        .saturating_add(targeted.saturating_mul(MIN_PATCH_BYTES_PER_TARGET));
    if estimate > max {
        return Err(too_large(estimate, max));
    }
    Ok(())
}

/// The answer for a pod that asks for injection but has too many containers for its size to
/// be decoded (decoding costs about a `Container` per container, far more than the JSON of
/// a tiny one). `meta` holds its annotations and labels when they could be read: then, unless
/// it had been injected already, it gets its outcome where that fits.
pub fn refuse_undecoded<'p, P, E>(
    snapshot: &Snapshot<'_>,
    meta: Option<&'p Pod>,
    write: impl Fn(&Pod, Option<&PodPlan<'_>>, Option<&PodStatus>) -> Result<Option<P>, E>,
) -> Bounded<'p, P>
where
    P: AsRef<[u8]>,
    E: Display,
{
    let mut report = Report {
        requested: true,
        ..Report::default()
    };
    report.add(Skip::new(
        None,
        SkipReason::PodTooLarge,
        None,
        format!(
            "otel-injector: the pod has too many containers for its size ({} bytes); not injected",
            snapshot.pod_bytes
        ),
    ));
    let Some(pod) = meta else {
        return Bounded::nothing(report);
    };
    if pod
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(INJECTED_ANNOTATION))
    {
        report.already_injected = true;
        return Bounded::nothing(report);
    }
    outcome_only(snapshot, pod, report, &write)
}

/// The patch that records `report`'s outcome alone, when it keeps the pod within the bound.
fn outcome_only<'p, P, E>(
    snapshot: &Snapshot<'_>,
    pod: &Pod,
    report: Report,
    write: &impl Fn(&Pod, Option<&PodPlan<'_>>, Option<&PodStatus>) -> Result<Option<P>, E>,
) -> Bounded<'p, P>
where
    P: AsRef<[u8]>,
{
    let status = report.status();
    // Only strings are serialized: this cannot fail.
    let patch = status
        .as_ref()
        .and_then(|s| write(pod, None, Some(s)).ok().flatten())
        .filter(|p| grown(snapshot, Some(p)) <= snapshot.config.max_pod_bytes);
    Bounded {
        plan: None,
        status: status.filter(|_| patch.is_some()),
        patch,
        report,
    }
}

/// The size of the pod once `patch` is applied, bounded from above by the pod plus the
/// patch's text (an `add` writes at most its value; a `remove` or `move` writes less).
fn grown<P: AsRef<[u8]>>(snapshot: &Snapshot<'_>, patch: Option<&P>) -> usize {
    snapshot
        .pod_bytes
        .saturating_add(patch.map_or(0, |p| p.as_ref().len()))
}

/// The skip of a pod that would grow past `max` bytes.
fn too_large(bytes: usize, max: usize) -> Skip {
    Skip::new(
        None,
        SkipReason::PodTooLarge,
        None,
        format!(
            "otel-injector: the injected pod would be over {bytes} bytes (limit {max}); not injected"
        ),
    )
}

impl<P> Bounded<'_, P> {
    /// Nothing written; `report` says why.
    fn nothing(report: Report) -> Self {
        Bounded {
            plan: None,
            status: None,
            patch: None,
            report,
        }
    }
}
