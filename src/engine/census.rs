//! What the pods that asked for injection say about each Instrumentation: how many run its
//! current spec, how many an older one (outdated), how many were skipped and why, how many
//! were missed (they asked, and were admitted without an outcome), and the workloads they
//! belong to. Computed from pod metadata alone (the `otel-injector/status` annotation, the
//! injection keys and the controller owner), for the status controller, `rollout` and
//! `explain`. Pure: the callers read the pods and the current spec digests.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use super::SkipReason;
use super::outcome::{Outcome, PodStatus};
use crate::agents::Language;
use crate::crd::SpecHash;
use crate::keys::{OPT_OUT, OPT_OUT_LABEL, STATUS_ANNOTATION};
use crate::pod::select::{Keys, Request, effective};

/// The workload a pod belongs to: its controller owner, a ReplicaSet named after a
/// Deployment (`<deployment>-<pod-template-hash>`) read as that Deployment.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Workload {
    pub namespace: String,
    pub kind: String,
    pub name: String,
}

impl std::fmt::Display for Workload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}/{}", self.kind, self.namespace, self.name)
    }
}

impl Workload {
    /// Whether `rollout` can restart it (through its pod template annotation).
    pub fn restartable(&self) -> bool {
        restartable_kind(&self.kind)
    }
}

/// Whether `rollout` restarts workloads of this kind.
pub fn restartable_kind(kind: &str) -> bool {
    matches!(kind, "Deployment" | "StatefulSet" | "DaemonSet")
}

/// A pod's controller: its `ownerReferences` entry with `controller: true` (what its
/// workload is, and what the Events of its skips are about).
pub fn controller(refs: Option<&[OwnerReference]>) -> Option<&OwnerReference> {
    refs?.iter().find(|r| r.controller == Some(true))
}

/// What the census counts of one entry of a pod's status annotation. A skip that names no
/// Instrumentation counts for none, and is not kept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Counted {
    Injected {
        instrumentation: Arc<str>,
        spec: SpecHash,
        language: Option<Language>,
    },
    Skipped {
        reason: SkipReason,
        /// `ns/name`, or `ns/*`.
        instrumentation: Arc<str>,
    },
    /// The pod asked for this Instrumentation (`ns/name`, or `ns/*`) and carries no
    /// outcome: it was admitted without the webhook.
    Missed { instrumentation: Arc<str> },
}

/// What the census reads of one pod: its workload and its counted entries, their names
/// shared through an [`Interner`] (a watch of 100,000 pods holds each namespace, workload
/// and Instrumentation name once). About 100 bytes per pod with one entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodRecord {
    /// `None` for a pod without a controller owner.
    pub workload: Option<Arc<Workload>>,
    pub entries: Box<[Counted]>,
    /// Why the pod is failing, when its container statuses say so (a watch of whole pods,
    /// `--detect-failures`; a metadata watch never knows).
    pub failure: Option<Box<Failure>>,
}

/// A container of a pod that is failing: waiting in `CrashLoopBackOff`, OOM-killed, or
/// restarted [`CRASH_RESTARTS`] times or more.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    pub pod: Box<str>,
    pub container: Box<str>,
    /// Its last termination's reason (`OOMKilled`, `Error`, ...), else its current one,
    /// else why it waits (`CrashLoopBackOff`); `None` when nothing says (it restarted).
    pub reason: Option<Box<str>>,
    pub exit_code: Option<i32>,
    pub restarts: i32,
}

/// A container restarted this often counts as failing, whatever its state now.
pub const CRASH_RESTARTS: i32 = 3;

impl Failure {
    /// The first failing container of a pod (init containers first), if any.
    pub fn of(pod: &str, status: &k8s_openapi::api::core::v1::PodStatus) -> Option<Failure> {
        let all = status
            .init_container_statuses
            .iter()
            .flatten()
            .chain(status.container_statuses.iter().flatten());
        for c in all {
            let state = c.state.as_ref();
            let waiting = state
                .and_then(|s| s.waiting.as_ref())
                .and_then(|w| w.reason.as_deref());
            let ended = c
                .last_state
                .as_ref()
                .and_then(|s| s.terminated.as_ref())
                .or_else(|| state.and_then(|s| s.terminated.as_ref()));
            let oom = [
                c.last_state.as_ref().and_then(|s| s.terminated.as_ref()),
                state.and_then(|s| s.terminated.as_ref()),
            ]
            .into_iter()
            .flatten()
            .any(|t| t.reason.as_deref() == Some("OOMKilled"));
            let backoff = waiting == Some("CrashLoopBackOff");
            if !(oom || backoff || c.restart_count >= CRASH_RESTARTS) {
                continue;
            }
            let reason = match ended.and_then(|t| t.reason.as_deref()) {
                _ if oom => Some("OOMKilled"),
                Some(r) => Some(r),
                None => waiting,
            };
            return Some(Failure {
                pod: pod.into(),
                container: c.name.as_str().into(),
                reason: reason.map(Into::into),
                exit_code: ended.map(|t| t.exit_code),
                restarts: c.restart_count,
            });
        }
        None
    }
}

impl std::fmt::Display for Failure {
    /// `pod web-7d9f-x2x container app: OOMKilled (exit code 137), 4 restarts`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "pod {} container {}: ", self.pod, self.container)?;
        if let Some(reason) = &self.reason {
            write!(f, "{reason}")?;
            if let Some(code) = self.exit_code {
                write!(f, " (exit code {code})")?;
            }
            write!(f, ", ")?;
        }
        let s = if self.restarts == 1 { "" } else { "s" };
        write!(f, "{} restart{s}", self.restarts)
    }
}

/// The names the records share. Grows with the distinct names seen; [`Interner::compact`]
/// forgets those no record holds any more.
#[derive(Debug, Default)]
pub struct Interner {
    strings: HashSet<Arc<str>>,
    workloads: HashSet<Arc<Workload>>,
}

impl Interner {
    pub fn str(&mut self, s: &str) -> Arc<str> {
        if let Some(a) = self.strings.get(s) {
            return a.clone();
        }
        let a: Arc<str> = s.into();
        self.strings.insert(a.clone());
        a
    }

    fn workload(&mut self, w: Workload) -> Arc<Workload> {
        if let Some(a) = self.workloads.get(&w) {
            return a.clone();
        }
        let a = Arc::new(w);
        self.workloads.insert(a.clone());
        a
    }

    /// Forgets the names that only the interner still holds.
    pub fn compact(&mut self) {
        self.strings.retain(|a| Arc::strong_count(a) > 1);
        self.workloads.retain(|a| Arc::strong_count(a) > 1);
        self.strings.shrink_to_fit();
        self.workloads.shrink_to_fit();
    }

    /// Names and workloads held.
    pub fn len(&self) -> usize {
        self.strings.len() + self.workloads.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl PodRecord {
    /// A pod's key in a map of records: its UID (the API server's UUID) as 16 bytes, so
    /// that no name is kept per pod. A UID that is not a UUID (never from a real API
    /// server) is keyed by a digest of it with the pod's namespace and name.
    pub fn key(meta: &ObjectMeta) -> u128 {
        let uid = meta.uid.as_deref().unwrap_or_default();
        let hex: String = uid.chars().filter(|c| *c != '-').collect();
        if hex.len() == 32
            && let Ok(k) = u128::from_str_radix(&hex, 16)
        {
            return k;
        }
        let id = format!(
            "{uid}/{}/{}",
            meta.namespace.as_deref().unwrap_or_default(),
            meta.name.as_deref().unwrap_or_default()
        );
        let digest = ring::digest::digest(&ring::digest::SHA256, id.as_bytes());
        let mut k = [0u8; 16];
        k.copy_from_slice(&digest.as_ref()[..16]);
        u128::from_be_bytes(k)
    }

    /// The record of a pod from its metadata; `None` when it has no readable status
    /// annotation (it did not go through this webhook, or the text was changed by hand).
    pub fn from_meta(meta: &ObjectMeta, names: &mut Interner) -> Option<PodRecord> {
        let status: PodStatus = meta
            .annotations
            .as_ref()?
            .get(STATUS_ANNOTATION)?
            .parse()
            .ok()?;
        let workload = workload_of(meta, names);
        let entries = status
            .entries
            .into_iter()
            .filter_map(|e| match e.outcome {
                Outcome::Injected {
                    instrumentation,
                    spec,
                } => Some(Counted::Injected {
                    instrumentation: names.str(&instrumentation),
                    spec,
                    language: e.language,
                }),
                Outcome::Skipped {
                    reason,
                    instrumentation: Some(target),
                } => Some(Counted::Skipped {
                    reason,
                    instrumentation: names.str(&target),
                }),
                Outcome::Skipped { .. } => None,
            })
            .collect();
        Some(PodRecord {
            workload,
            entries,
            failure: None,
        })
    }

    /// The record of a pod that asked for injection (by its labels and annotations, and its
    /// namespace's `namespace` keys, with the webhook's precedence) and carries no outcome;
    /// `None` when it carries one, asks for nothing, or opted out by the label
    /// `otel-injector/inject=disabled`. One entry per language asked for.
    pub fn missed_from_meta(
        meta: &ObjectMeta,
        namespace: Keys<'_>,
        names: &mut Interner,
    ) -> Option<PodRecord> {
        let has = |m: &Option<BTreeMap<String, String>>, k: &str, v: Option<&str>| {
            m.as_ref()
                .and_then(|m| m.get(k))
                .is_some_and(|x| v.is_none_or(|v| x == v))
        };
        if has(&meta.annotations, STATUS_ANNOTATION, None)
            || has(&meta.labels, OPT_OUT_LABEL, Some(OPT_OUT))
        {
            return None;
        }
        let pod = Keys {
            labels: meta.labels.as_ref(),
            annotations: meta.annotations.as_ref(),
        };
        let ns = meta.namespace.as_deref().unwrap_or_default();
        let entries: Box<[Counted]> = Language::ALL
            .iter()
            .filter_map(|l| {
                let key = l.inject_annotation();
                let target = match Request::parse(effective(namespace.get(key), pod.get(key))) {
                    Request::No => return None,
                    Request::Default => format!("{ns}/*"),
                    Request::Named(name) => format!("{ns}/{name}"),
                    Request::Qualified { namespace, name } => format!("{namespace}/{name}"),
                };
                Some(Counted::Missed {
                    instrumentation: names.str(&target),
                })
            })
            .collect();
        if entries.is_empty() {
            return None;
        }
        Some(PodRecord {
            workload: workload_of(meta, names),
            entries,
            failure: None,
        })
    }
}

/// A pod's workload, from its controller owner (a ReplicaSet named after its template hash
/// read as its Deployment).
fn workload_of(meta: &ObjectMeta, names: &mut Interner) -> Option<Arc<Workload>> {
    let namespace = meta.namespace.as_deref().unwrap_or_default();
    let owner = controller(meta.owner_references.as_deref())?;
    let hash = meta
        .labels
        .as_ref()
        .and_then(|l| l.get(crate::keys::POD_TEMPLATE_HASH));
    let deployment = (owner.kind == "ReplicaSet" && owner.api_version == "apps/v1")
        .then(|| hash.and_then(|h| owner.name.strip_suffix(h.as_str())?.strip_suffix('-')))
        .flatten()
        .filter(|d| !d.is_empty());
    let (kind, name) = match deployment {
        Some(d) => ("Deployment".to_owned(), d.to_owned()),
        None => (owner.kind.clone(), owner.name.clone()),
    };
    Some(names.workload(Workload {
        namespace: namespace.to_owned(),
        kind,
        name,
    }))
}

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
    /// Of `current`, those failing ([`Failure`]).
    pub failing: u32,
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
    pub failure: Failure,
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
fn counted_for<'a>(target: &'a str, existing: &'a BTreeMap<String, SpecHash>) -> Option<&'a str> {
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
                Counted::Injected {
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
                                        failure: Failure::clone(f),
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
                Counted::Missed { instrumentation } => {
                    let Some(key) = counted_for(instrumentation, existing) else {
                        continue;
                    };
                    (key, &|c: &mut Counts| c.missed += 1)
                }
                Counted::Skipped {
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
            let tally = out.entry(key.to_owned()).or_default();
            apply(&mut tally.pods);
            if let Some(w) = &pod.workload {
                apply(tally.workloads.entry(Workload::clone(w)).or_default());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests;
