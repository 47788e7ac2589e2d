//! What the census keeps of one pod ([`PodRecord`]): its workload and the entries of its
//! outcome (or what it asked for, when it was admitted without one), their names shared
//! through an [`Interner`].

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::failure::PodFailure;
use super::workload::Workload;
use crate::agents::Language;
use crate::crd::SpecHash;
use crate::engine::SkipReason;
use crate::engine::outcome::{Outcome, PodStatus, SelectorMark};
use crate::keys::{OPT_OUT, OPT_OUT_LABEL, SELECTED_BY_ANNOTATION, STATUS_ANNOTATION};
use crate::pod::info::controller;
use crate::pod::select::{Keys, Request, effective};

/// What the census counts of one entry of a pod's status annotation. A skip that names no
/// Instrumentation counts for none, and is not kept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CountedEntry {
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
    pub entries: Box<[CountedEntry]>,
    /// The Instrumentations whose selector asked for the pod (`otel-injector/selected-by`,
    /// or the selectors that select a pod admitted without an outcome); usually none.
    pub selected_by: Box<[Arc<str>]>,
    /// Why the pod is failing, when its container statuses say so (a watch of whole pods,
    /// `--detect-failures`; a metadata watch never knows).
    pub failure: Option<Box<PodFailure>>,
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

    pub(super) fn workload(&mut self, w: Workload) -> Arc<Workload> {
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
        let annotations = meta.annotations.as_ref()?;
        let status: PodStatus = annotations.get(STATUS_ANNOTATION)?.parse().ok()?;
        let selected_by: Box<[Arc<str>]> = annotations
            .get(SELECTED_BY_ANNOTATION)
            .map(|v| SelectorMark::parse(v))
            .unwrap_or_default()
            .instrumentations()
            .into_iter()
            .map(|i| names.str(i))
            .collect();
        let workload = workload_of(meta, names);
        let entries = status
            .entries
            .into_iter()
            .filter_map(|e| match e.outcome {
                Outcome::Injected {
                    instrumentation,
                    spec,
                } => Some(CountedEntry::Injected {
                    instrumentation: names.str(&instrumentation),
                    spec,
                    language: e.language,
                }),
                Outcome::Skipped {
                    reason,
                    instrumentation: Some(target),
                } => Some(CountedEntry::Skipped {
                    reason,
                    instrumentation: names.str(&target),
                }),
                Outcome::Skipped { .. } => None,
            })
            .collect();
        Some(PodRecord {
            workload,
            entries,
            selected_by,
            failure: None,
        })
    }

    /// The record of a pod that asked for injection (by its labels and annotations, and its
    /// namespace's `namespace` keys, with the webhook's precedence, or, when neither sets a
    /// key, by the selectors: `selected` gives the Instrumentations they name) and carries no
    /// outcome; `None` when it carries one, asks for nothing, or opted out by the label
    /// `otel-injector/inject=disabled`. One entry per language asked for.
    pub fn missed_from_meta(
        meta: &ObjectMeta,
        namespace: Keys<'_>,
        selected: impl FnOnce() -> Vec<String>,
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
        let entries: Box<[CountedEntry]> = Language::ALL
            .iter()
            .filter_map(|l| {
                let key = l.inject_annotation();
                let target = match Request::parse(effective(namespace.get(key), pod.get(key))) {
                    Request::No => return None,
                    Request::Default => format!("{ns}/*"),
                    Request::Named(name) => format!("{ns}/{name}"),
                    Request::Qualified { namespace, name } => format!("{namespace}/{name}"),
                };
                Some(CountedEntry::Missed {
                    instrumentation: names.str(&target),
                })
            })
            .collect();
        let keyed = Language::ALL.iter().any(|l| {
            let key = l.inject_annotation();
            effective(namespace.get(key), pod.get(key)).is_some_and(|v| !v.trim().is_empty())
        });
        let (entries, selected_by) = if keyed {
            (entries, Box::default())
        } else {
            let by: Box<[Arc<str>]> = selected().iter().map(|t| names.str(t)).collect();
            let entries = by
                .iter()
                .map(|target| CountedEntry::Missed {
                    instrumentation: target.clone(),
                })
                .collect();
            (entries, by)
        };
        if entries.is_empty() {
            return None;
        }
        Some(PodRecord {
            workload: workload_of(meta, names),
            entries,
            selected_by,
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
