//! The census proper: pods' records tallied per Instrumentation and per workload, as current,
//! outdated, skipped (by reason), missed and failing.

use std::collections::BTreeMap;

use super::failure::PodFailure;
use super::record::{CountedEntry, PodRecord};
use super::workload::Workload;
use crate::agents::Language;
use crate::crd::SpecHash;
use crate::engine::SkipReason;

/// How one group of pods (an Instrumentation's, or one workload's of it) stands.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Injected with the Instrumentation's current spec.
    pub current: u32,
    /// Injected with an earlier spec.
    pub outdated: u32,
    /// Skipped, by reason (a pod is counted once per skipped language).
    pub skipped: BTreeMap<SkipReason, u32>,
    /// Asked for it and admitted without an outcome (the webhook unreachable, or not yet
    /// registered when the pod was created); a restart injects them.
    pub missed: u32,
    /// Of `current`, those failing ([`PodFailure`]).
    pub failing: u32,
    /// Of the injected and missed, those its selector (`otel-injector/selector`) asked for,
    /// not a key.
    pub selected: u32,
}

impl Counts {
    /// Whether a restart would bring some of these pods to the current spec.
    pub fn stale(&self) -> bool {
        self.outdated > 0 || self.missed > 0 || self.skipped_for_want_of_it() > 0
    }

    pub fn skipped_total(&self) -> u32 {
        self.skipped.values().sum()
    }

    /// Skipped because the Instrumentation did not exist (yet) when the pod was created:
    /// creating it since makes a restart inject them.
    pub fn skipped_for_want_of_it(&self) -> u32 {
        [
            SkipReason::InstrumentationNotFound,
            SkipReason::NoInstrumentation,
        ]
        .iter()
        .filter_map(|r| self.skipped.get(r))
        .sum()
    }
}

/// One Instrumentation's pods.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    pub pods: Counts,
    /// The same counts per workload (pods without a controller owner are not listed).
    pub workloads: BTreeMap<Workload, Counts>,
    /// Per workload with failing pods of the current spec: the failure of one of them, and
    /// the languages they were injected with.
    pub failures: BTreeMap<Workload, Failing>,
}

/// One workload's failing pods of an Instrumentation's current spec.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failing {
    /// The first found.
    pub failure: PodFailure,
    pub languages: std::collections::BTreeSet<Language>,
}

impl Tally {
    /// Workloads `rollout` would restart: restartable ones with outdated or missed pods or
    /// pods skipped for want of the Instrumentation.
    pub fn stale_workloads(&self) -> impl Iterator<Item = (&Workload, &Counts)> {
        self.workloads
            .iter()
            .filter(|(w, c)| w.restartable() && c.stale())
    }
}

/// The Instrumentation (`ns/name`) a pod's skipped entry counts for, given those that exist
/// now: the named one; for `ns/*`, the namespace's only one.
pub(super) fn counted_for<'a>(
    target: &'a str,
    existing: &'a BTreeMap<String, SpecHash>,
) -> Option<&'a str> {
    match target.strip_suffix("/*") {
        None => existing.contains_key(target).then_some(target),
        Some(ns) => {
            let prefix = format!("{ns}/");
            let mut found = existing
                .range(prefix.clone()..)
                .take_while(|(k, _)| k.starts_with(&prefix));
            match (found.next(), found.next()) {
                (Some((only, _)), None) => Some(only.as_str()),
                _ => None,
            }
        }
    }
}

/// Tallies `pods` per existing Instrumentation (`ns/name` → its current spec digest). Pods
/// of Instrumentations that no longer exist are not counted.
pub fn census<'a>(
    pods: impl IntoIterator<Item = &'a PodRecord>,
    existing: &BTreeMap<String, SpecHash>,
) -> BTreeMap<String, Tally> {
    let mut out: BTreeMap<String, Tally> = BTreeMap::new();
    for pod in pods {
        for entry in &pod.entries {
            let (key, apply): (&str, &dyn Fn(&mut Counts)) = match entry {
                CountedEntry::Injected {
                    instrumentation,
                    spec,
                    language,
                } => {
                    let Some(now) = existing.get(&**instrumentation) else {
                        continue;
                    };
                    match (now == spec, &pod.failure) {
                        (false, _) => (instrumentation, &|c: &mut Counts| c.outdated += 1),
                        (true, None) => (instrumentation, &|c: &mut Counts| c.current += 1),
                        (true, Some(f)) => {
                            if let Some(w) = &pod.workload {
                                let tally = out.entry(instrumentation.to_string()).or_default();
                                tally
                                    .failures
                                    .entry(Workload::clone(w))
                                    .or_insert_with(|| Failing {
                                        failure: PodFailure::clone(f),
                                        languages: Default::default(),
                                    })
                                    .languages
                                    .extend(*language);
                            }
                            (instrumentation, &|c: &mut Counts| {
                                c.current += 1;
                                c.failing += 1;
                            })
                        }
                    }
                }
                CountedEntry::Missed { instrumentation } => {
                    let Some(key) = counted_for(instrumentation, existing) else {
                        continue;
                    };
                    (key, &|c: &mut Counts| c.missed += 1)
                }
                CountedEntry::Skipped {
                    reason,
                    instrumentation,
                } => {
                    let Some(key) = counted_for(instrumentation, existing) else {
                        continue;
                    };
                    let reason = *reason;
                    let tally = out.entry(key.to_owned()).or_default();
                    *tally.pods.skipped.entry(reason).or_default() += 1;
                    if let Some(w) = &pod.workload {
                        *tally
                            .workloads
                            .entry(Workload::clone(w))
                            .or_default()
                            .skipped
                            .entry(reason)
                            .or_default() += 1;
                    }
                    continue;
                }
            };
            let selected = pod.selected_by.iter().any(|s| **s == *key);
            let count = |c: &mut Counts| {
                apply(c);
                if selected {
                    c.selected += 1;
                }
            };
            let tally = out.entry(key.to_owned()).or_default();
            count(&mut tally.pods);
            if let Some(w) = &pod.workload {
                count(tally.workloads.entry(Workload::clone(w)).or_default());
            }
        }
    }
    out
}
