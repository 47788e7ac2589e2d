//! The status controller's Events: one Warning `InjectionMissed` per workload with missed
//! pods and one `InstrumentedPodsFailing` per failing workload, each announced once while it
//! lasts, about the workload (else the Instrumentation).

use std::collections::{BTreeMap, HashSet};

use super::StatusController;
use crate::census::{Tally, Workload};
use crate::cluster::events::{Notice, Reason};
use crate::engine::Instrumentations;

/// What an Event is about: an Instrumentation (`ns/name`) and one of its workloads (`None`:
/// its pods without a controller).
type Subject = (String, Option<Workload>);

/// Announces each subject once while its condition lasts: [`Once::first`] is true for a
/// subject not seen in the previous pass; [`Once::end_pass`] forgets the ones not seen in
/// this one, so a condition that ends and comes back is announced again.
#[derive(Default)]
pub(super) struct Once {
    before: HashSet<Subject>,
    now: HashSet<Subject>,
}

impl Once {
    fn first(&mut self, subject: Subject) -> bool {
        let new = !self.before.contains(&subject);
        self.now.insert(subject);
        new
    }

    /// Ends a pass; returns how many subjects it saw.
    fn end_pass(&mut self) -> usize {
        self.before = std::mem::take(&mut self.now);
        self.before.len()
    }
}

/// The Events' memory of what each pass announced.
#[derive(Default)]
pub(super) struct Announced {
    pub(super) missed: Once,
    pub(super) failing: Once,
}

impl StatusController {
    /// A Warning Event of `reason` about `workload` of Instrumentation `key` (about the
    /// Instrumentation for pods without a controller).
    fn announce(
        &self,
        reason: Reason,
        key: &str,
        workload: Option<&Workload>,
        index: &Instrumentations,
        note: String,
    ) {
        let Some((namespace, owner)) = regarding(key, workload, index) else {
            return;
        };
        self.events.record(Notice {
            reason,
            namespace,
            owner,
            instrumentation: Some(key.to_owned()),
            language: None,
            note,
        });
    }

    /// One Warning `InjectionMissed` Event per workload (and per Instrumentation for pods
    /// without a controller) when its missed pods are first counted; announced again only
    /// after it had none.
    pub(super) fn announce_missed(
        &self,
        tallies: &BTreeMap<String, Tally>,
        index: &Instrumentations,
        once: &mut Once,
    ) {
        for (key, tally) in tallies {
            if tally.pods.missed == 0 {
                continue;
            }
            let in_workloads: u32 = tally.workloads.values().map(|c| c.missed).sum();
            let groups = tally
                .workloads
                .iter()
                .filter(|(_, c)| c.missed > 0)
                .map(|(w, c)| (Some(w), c.missed))
                .chain(
                    (tally.pods.missed > in_workloads)
                        .then_some((None, tally.pods.missed - in_workloads)),
                );
            for (workload, n) in groups {
                if !once.first((key.clone(), workload.cloned())) {
                    continue;
                }
                let pods = if n == 1 { "pod" } else { "pods" };
                let of = workload.map_or(String::from(" without a controller"), |w| {
                    format!(" of {w}")
                });
                self.announce(
                    Reason::Missed,
                    key,
                    workload,
                    index,
                    format!(
                        "{n} {pods}{of} asked for Instrumentation {key} and were admitted without \
                         injection: the webhook was unreachable or not registered when they were \
                         created; a restart injects them"
                    ),
                );
                tracing::warn!(instrumentation = %key, workload = ?workload.map(ToString::to_string), pods = n, "pods admitted without the webhook");
            }
        }
        once.end_pass();
    }

    /// One Warning `InstrumentedPodsFailing` Event per workload whose pods injected with an
    /// Instrumentation's current spec fail, with one failure (the container's last
    /// termination reason), when first found; again only after it recovered. Sets the
    /// failing-workloads gauge.
    pub(super) fn announce_failing(
        &self,
        tallies: &BTreeMap<String, Tally>,
        index: &Instrumentations,
        once: &mut Once,
    ) {
        for (key, tally) in tallies {
            for (workload, failing) in &tally.failures {
                if !once.first((key.clone(), Some(workload.clone()))) {
                    continue;
                }
                let failure = &failing.failure;
                let n = tally.workloads.get(workload).map_or(0, |c| c.failing);
                self.announce(
                    Reason::Failing,
                    key,
                    Some(workload),
                    index,
                    format!(
                        "{n} pod(s) of {workload} injected with the current spec of \
                         Instrumentation {key} are failing: {failure}"
                    ),
                );
                tracing::warn!(instrumentation = %key, workload = %workload, pods = n, failure = %failure, "instrumented pods failing");
            }
        }
        let workloads = once.end_pass();
        self.metrics
            .failing_workloads
            .set(i64::try_from(workloads).unwrap_or(i64::MAX));
    }
}

/// The namespace and owner an Event of the status controller is about: the workload (its
/// API version from its kind), else the Instrumentation (through
/// [`super::events::regarding`]'s fallback).
fn regarding(
    key: &str,
    workload: Option<&Workload>,
    index: &Instrumentations,
) -> Option<(
    String,
    Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference>,
)> {
    let (ns, name) = key.split_once('/')?;
    index.get(ns, name)?;
    let Some(w) = workload else {
        return Some((ns.to_owned(), None));
    };
    let api_version = match w.kind.as_str() {
        "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet" => "apps/v1",
        "Job" | "CronJob" => "batch/v1",
        _ => return Some((ns.to_owned(), None)),
    };
    Some((
        w.namespace.clone(),
        Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                api_version: api_version.into(),
                kind: w.kind.clone(),
                name: w.name.clone(),
                ..Default::default()
            },
        ),
    ))
}
