//! The status controller's Events: one Warning `InjectionMissed` per workload with missed
//! pods and one `InstrumentedPodsFailing` per failing workload, each announced once while it
//! lasts (again only after it ended), about the workload (else the Instrumentation).

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

    /// Announces each of `found` whose subject was not found in the previous pass, as a
    /// Warning Event of `reason`; returns how many subjects this pass found.
    pub(super) fn announce_new(
        &self,
        reason: Reason,
        found: Vec<Announcement>,
        index: &Instrumentations,
        once: &mut Once,
    ) -> usize {
        for f in found {
            if !once.first((f.key.clone(), f.workload.clone())) {
                continue;
            }
            let workload = f.workload.as_ref().map(ToString::to_string);
            tracing::warn!(instrumentation = %f.key, workload, pods = f.pods, reason = reason.as_str(), "{}", f.note);
            self.announce(reason, &f.key, f.workload.as_ref(), index, f.note);
        }
        once.end_pass()
    }
}

/// A subject a pass found to announce: its pods, and the Event's note.
pub(super) struct Announcement {
    key: String,
    workload: Option<Workload>,
    pods: u32,
    note: String,
}

/// `InjectionMissed`: per workload (and per Instrumentation for pods without a controller)
/// with missed pods.
pub(super) fn missed(tallies: &BTreeMap<String, Tally>) -> Vec<Announcement> {
    let mut found = Vec::new();
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
            let (pods, were) = if n == 1 {
                ("pod", "was")
            } else {
                ("pods", "were")
            };
            let of = workload.map_or(String::from(" without a controller"), |w| {
                format!(" of {w}")
            });
            found.push(Announcement {
                key: key.clone(),
                workload: workload.cloned(),
                pods: n,
                note: format!(
                    "{n} {pods}{of} asked for Instrumentation {key} and {were} admitted without \
                     injection: the webhook was unreachable or not registered when created; a \
                     restart injects {them}",
                    them = if n == 1 { "it" } else { "them" }
                ),
            });
        }
    }
    found
}

/// `InstrumentedPodsFailing`: per workload whose pods injected with an Instrumentation's
/// current spec fail, with one failure (the container's last termination reason).
pub(super) fn failing(tallies: &BTreeMap<String, Tally>) -> Vec<Announcement> {
    let mut found = Vec::new();
    for (key, tally) in tallies {
        for (workload, failing) in &tally.failures {
            let failure = &failing.failure;
            let n = tally.workloads.get(workload).map_or(0, |c| c.failing);
            found.push(Announcement {
                key: key.clone(),
                workload: Some(workload.clone()),
                pods: n,
                note: format!(
                    "{n} pod(s) of {workload} injected with the current spec of \
                     Instrumentation {key} are failing: {failure}"
                ),
            });
        }
    }
    found
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::census::Counts;

    #[test]
    fn missed_pods_are_announced_per_workload_and_the_rest_per_instrumentation() {
        let web = Workload {
            namespace: "shop".into(),
            kind: "Deployment".into(),
            name: "web".into(),
        };
        let mut tally = Tally::default();
        tally.pods.missed = 3;
        tally.workloads.insert(
            web.clone(),
            Counts {
                missed: 2,
                ..Counts::default()
            },
        );
        let quiet = Tally::default();
        let tallies = BTreeMap::from([("shop/java".into(), tally), ("shop/go".into(), quiet)]);
        let found: Vec<_> = missed(&tallies)
            .into_iter()
            .map(|f| (f.key, f.workload, f.pods, f.note))
            .collect();
        assert_eq!(
            found,
            [
                (
                    "shop/java".to_owned(),
                    Some(web),
                    2,
                    "2 pods of Deployment/shop/web asked for Instrumentation shop/java and were \
                     admitted without injection: the webhook was unreachable or not registered \
                     when created; a restart injects them"
                        .to_owned()
                ),
                (
                    "shop/java".to_owned(),
                    None,
                    1,
                    "1 pod without a controller asked for Instrumentation shop/java and was \
                     admitted without injection: the webhook was unreachable or not registered \
                     when created; a restart injects it"
                        .to_owned()
                ),
            ]
        );
        assert!(failing(&tallies).is_empty());
    }
}
