//! The safety net's action (`--rollback`): a workload whose pods fail with the current spec
//! of an Instrumentation annotated `otel-injector/on-failure: rollback` gets the marker
//! `otel-injector/rolled-back: <lang>=<spec>` on its pod template. The template change makes
//! its controller replace the pods, and the engine leaves those languages out of the new
//! ones (`rolled_back`) for as long as that spec is current: a person removes the marker, or
//! a changed spec is tried again, once (it fails again: marked with the new spec). Run by the
//! Lease holder alone, inside the status controller's pass, at most [`PER_MINUTE`] patches a
//! minute and once per workload and spec: what was rolled back is recorded on the workload
//! itself (`otel-injector/rollback-tried`, read before every mark), so a restart, a new
//! Lease holder or a removed marker changes nothing. A workload whose controller would not
//! replace its pods after the mark (a paused Deployment, `OnDelete`, a partitioned
//! StatefulSet) is left alone, with the reason logged. A StatefulSet with `OrderedReady` pod
//! management waits forever on a pod that never became Ready: once its controller has seen
//! the marked template, its failing pods of the old revision are deleted (Kubernetes' forced
//! rollback; `delete` on pods, manifests/components/rollback).

use std::collections::{BTreeMap, BTreeSet, HashSet, VecDeque};
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use kube::Client;
use serde_json::json;
use tokio::time::Instant;

use super::LogLimit;
use super::metrics::{Metrics, WriteResult};
use crate::agents::Language;
use crate::census::{Failing, Tally, Workload};
use crate::cluster::events::{EventSink, Notice, Reason};
use crate::cluster::workloads::{delete_blocking_pods, get, merge_patch};
use crate::crd::{RolledBackWorkload, SpecHash};
use crate::engine::Instrumentations;
use crate::engine::outcome::RolledBack;
use crate::keys::{
    ON_FAILURE_ANNOTATION, ROLLBACK, ROLLBACK_TRIED_ANNOTATION, ROLLED_BACK_ANNOTATION,
};

/// The field manager of the markers' patches.
pub const FIELD_MANAGER: &str = "otel-injector-rollback";
/// At most this many workloads are rolled back a minute, cluster-wide.
pub const PER_MINUTE: usize = 10;
/// A StatefulSet's forced rollback waits at most this long for its controller to take the
/// marked template.
const FORCE_FOR: Duration = Duration::from_secs(600);

/// What the rollback remembers between passes.
#[derive(Default)]
pub struct Rollback {
    /// Workloads marked (Instrumentation `ns/name`, workload, spec): never patched twice.
    done: HashSet<(String, Workload, SpecHash)>,
    /// When the patches of the last minute were made.
    recent: VecDeque<Instant>,
    /// StatefulSets marked whose failing pods are still to be deleted, and until when to try.
    forced: BTreeMap<Workload, Instant>,
    failures: LogLimit,
}

/// The value of the marker with `languages` marked as rolled back from `spec`, the other
/// languages' entries kept (sorted by language).
pub fn marked(existing: Option<&str>, languages: &BTreeSet<Language>, spec: SpecHash) -> String {
    let mut marker = existing.map(RolledBack::parse).unwrap_or_default();
    for l in languages {
        marker.mark(*l, spec);
    }
    marker.to_string()
}

impl Rollback {
    /// Rolls back the failing workloads of every opted-in Instrumentation; returns what was
    /// rolled back, by Instrumentation (`ns/name`). Pending ones wait for a later pass
    /// (the rate limit; a failed patch): `true` when some are left.
    pub async fn run(
        &mut self,
        client: &Client,
        tallies: &BTreeMap<String, Tally>,
        index: &Instrumentations,
        events: &EventSink,
        metrics: &Metrics,
        now: &Time,
    ) -> (BTreeMap<String, Vec<RolledBackWorkload>>, bool) {
        // Only the current specs' workloads are remembered (the set stays bounded).
        self.done.retain(|(key, _, spec)| {
            key.split_once('/')
                .and_then(|(ns, name)| index.spec_hash(ns, name))
                .is_some_and(|now| now == *spec)
        });
        let mut out: BTreeMap<String, Vec<RolledBackWorkload>> = BTreeMap::new();
        let mut left = self.force(client).await;
        for (key, tally) in tallies {
            let Some((ns, name)) = key.split_once('/') else {
                continue;
            };
            let (Some(Ok(inst)), Some(spec)) = (index.get(ns, name), index.spec_hash(ns, name))
            else {
                continue;
            };
            let opted_in = inst
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(ON_FAILURE_ANNOTATION))
                .is_some_and(|v| v.trim() == ROLLBACK);
            if !opted_in {
                continue;
            }
            for (workload, failing) in &tally.failures {
                let id = (key.clone(), workload.clone(), spec);
                if !workload.restartable()
                    || failing.languages.is_empty()
                    || self.done.contains(&id)
                {
                    continue;
                }
                if !self.allowed() {
                    left = true;
                    continue;
                }
                match self.mark(client, workload, failing, spec).await {
                    Ok(Handled::Tried) => {
                        // Rolled back from this spec before (by this or another holder):
                        // the marker was removed on purpose, or the workload reverted.
                        self.recent.pop_back();
                        self.done.insert(id);
                    }
                    Ok(Handled::NotRolled(why)) => {
                        self.recent.pop_back();
                        self.done.insert(id);
                        tracing::warn!(instrumentation = %key, workload = %workload, %why, "failing workload not rolled back: its controller would not replace its pods");
                    }
                    Ok(Handled::Marked(uid, forced)) => {
                        metrics.rollback(WriteResult::Success);
                        if forced {
                            self.forced
                                .insert(workload.clone(), Instant::now() + FORCE_FOR);
                            left = true;
                        }
                        self.done.insert(id);
                        let entry = entry(workload, failing, spec, now);
                        announce(events, key, workload, uid, &entry);
                        tracing::warn!(instrumentation = %key, workload = %workload, languages = %entry.languages, reason = %entry.reason, "workload rolled back");
                        out.entry(key.clone()).or_default().push(entry);
                    }
                    Err(e) => {
                        metrics.rollback(WriteResult::Error);
                        left = true;
                        if self.failures.due() {
                            let hint = match &e {
                                kube::Error::Api(s) if s.code == 403 => {
                                    " (get/patch on the workload: manifests/components/rollback)"
                                }
                                _ => "",
                            };
                            tracing::warn!(instrumentation = %key, workload = %workload, error = %e, "cannot roll the workload back; retrying{hint}");
                        }
                    }
                }
            }
        }
        (out, left)
    }

    /// Deletes the failing pods of the marked StatefulSets whose controller has seen the
    /// marked template; whether some are left for a later pass.
    async fn force(&mut self, client: &Client) -> bool {
        let now = Instant::now();
        let pending: Vec<Workload> = self.forced.keys().cloned().collect();
        for w in pending {
            match delete_blocking_pods(client, &w).await {
                Ok(Some(n)) => {
                    self.forced.remove(&w);
                    tracing::warn!(workload = %w, pods = n, "forced rollback: deleted the StatefulSet's failing pods of the old revision (OrderedReady would wait on them)");
                }
                Ok(None) if self.forced.get(&w).is_some_and(|until| now < *until) => {}
                Ok(None) => {
                    self.forced.remove(&w);
                    tracing::warn!(workload = %w, "forced rollback given up: the StatefulSet's controller did not take the marked template");
                }
                Err(e) => {
                    if self.failures.due() {
                        let hint = match &e {
                            kube::Error::Api(s) if s.code == 403 => {
                                " (list and delete on pods: manifests/components/rollback)"
                            }
                            _ => "",
                        };
                        tracing::warn!(workload = %w, error = %e, "cannot delete the StatefulSet's failing pods; retrying{hint}");
                    }
                    if self.forced.get(&w).is_some_and(|until| now >= *until) {
                        self.forced.remove(&w);
                    }
                }
            }
        }
        !self.forced.is_empty()
    }

    /// Whether one more patch fits in the last minute's budget (then counted).
    fn allowed(&mut self) -> bool {
        let now = Instant::now();
        while self
            .recent
            .front()
            .is_some_and(|t| now.duration_since(*t) >= Duration::from_secs(60))
        {
            self.recent.pop_front();
        }
        if self.recent.len() >= PER_MINUTE {
            return false;
        }
        self.recent.push_back(now);
        true
    }

    /// Sets the marker on the workload's pod template and records it as tried on the
    /// workload (both read first: other languages' entries are kept; already so: nothing
    /// written), unless [`decide`] says otherwise.
    async fn mark(
        &self,
        client: &Client,
        w: &Workload,
        failing: &Failing,
        spec: SpecHash,
    ) -> kube::Result<Handled> {
        let Some(object) = get(client, w).await? else {
            return Ok(Handled::Marked(None, false));
        };
        let uid = object.meta().uid.clone();
        let forced = object.needs_forced_rollback();
        let tried = object
            .meta()
            .annotations
            .as_ref()
            .and_then(|a| a.get(ROLLBACK_TRIED_ANNOTATION))
            .map(String::as_str);
        match decide(tried, object.not_rolled(), &failing.languages, spec) {
            Verdict::Tried => return Ok(Handled::Tried),
            Verdict::NotRolled(why) => return Ok(Handled::NotRolled(why)),
            Verdict::Mark => {}
        }
        let existing = object
            .template_annotations()
            .and_then(|a| a.get(ROLLED_BACK_ANNOTATION))
            .map(String::as_str);
        let value = marked(existing, &failing.languages, spec);
        let tried_value = marked(tried, &failing.languages, spec);
        if existing == Some(value.as_str()) && tried == Some(tried_value.as_str()) {
            return Ok(Handled::Marked(uid, forced));
        }
        let patch = json!({
            "metadata": {"annotations": {ROLLBACK_TRIED_ANNOTATION: tried_value}},
            "spec": {"template": {"metadata": {"annotations": {ROLLED_BACK_ANNOTATION: value}}}},
        });
        merge_patch(client, w, &patch, FIELD_MANAGER).await?;
        Ok(Handled::Marked(uid, forced))
    }
}

/// What became of a failing workload.
enum Handled {
    /// Marked (or already so); its UID, for the Event (so that `kubectl describe` finds it),
    /// and whether its failing pods must be deleted ([`Rollback::force`]).
    Marked(Option<String>, bool),
    /// Rolled back from this spec before: left as it is.
    Tried,
    /// Its controller would not replace its pods: left as it is, for this reason.
    NotRolled(String),
}

/// What to do with a failing workload.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    Mark,
    Tried,
    NotRolled(String),
}

/// Whether to mark a workload failing with `languages` from `spec`: not when its record
/// `tried` (`otel-injector/rollback-tried`) names every one of them with that spec, nor when
/// `not_rolled` says why its controller would not replace its pods.
fn decide(
    tried: Option<&str>,
    not_rolled: Option<String>,
    languages: &BTreeSet<Language>,
    spec: SpecHash,
) -> Verdict {
    let tried = tried.map(RolledBack::parse).unwrap_or_default();
    if languages.iter().all(|l| tried.names(*l, spec)) {
        return Verdict::Tried;
    }
    match not_rolled {
        Some(why) => Verdict::NotRolled(why),
        None => Verdict::Mark,
    }
}

fn entry(w: &Workload, failing: &Failing, spec: SpecHash, now: &Time) -> RolledBackWorkload {
    let languages: Vec<&str> = failing.languages.iter().map(|l| l.as_str()).collect();
    RolledBackWorkload {
        kind: w.kind.clone(),
        namespace: w.namespace.clone(),
        name: w.name.clone(),
        languages: languages.join(","),
        spec_hash: spec.to_string(),
        reason: failing.failure.to_string(),
        time: now.clone(),
    }
}

/// The Warning `InstrumentationRolledBack` Event on the workload.
fn announce(
    events: &EventSink,
    key: &str,
    w: &Workload,
    uid: Option<String>,
    e: &RolledBackWorkload,
) {
    events.record(Notice {
        reason: Reason::RolledBack,
        namespace: w.namespace.clone(),
        owner: Some(OwnerReference {
            api_version: "apps/v1".into(),
            kind: w.kind.clone(),
            name: w.name.clone(),
            uid: uid.unwrap_or_default(),
            ..Default::default()
        }),
        instrumentation: Some(key.to_owned()),
        language: None,
        note: format!(
            "rolled back {} of Instrumentation {key} (spec {}): its pods failed with it ({}); \
             they are replaced without the agent. Remove the pod template's annotation \
             {ROLLED_BACK_ANNOTATION}, or change the Instrumentation, to try again",
            e.languages, e.spec_hash, e.reason
        ),
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workload_is_marked_once_per_language_and_spec_whoever_reads_it() {
        let java: BTreeSet<Language> = [Language::Java].into();
        let both: BTreeSet<Language> = [Language::Java, Language::Python].into();
        let spec = SpecHash([0x3f, 0x2a, 0x9c, 0x1b]);
        let other = SpecHash([1, 2, 3, 4]);
        let paused = || Some("paused".to_owned());
        // (the workload's marker, why its controller would not replace the pods, the failing
        // languages, the current spec) → the verdict.
        let cases = [
            (None, None, &java, spec, Verdict::Mark),
            (Some("java=3f2a9c1b"), None, &java, spec, Verdict::Tried),
            // Tried with it before, under another spec, or not for every failing language.
            (Some("java=3f2a9c1b"), None, &java, other, Verdict::Mark),
            (Some("java=3F2A9C1B"), None, &both, spec, Verdict::Mark),
            (
                Some("python=3f2a9c1b,java=3f2a9c1b"),
                None,
                &both,
                spec,
                Verdict::Tried,
            ),
            // A controller that would not replace the pods: left alone, once tried or not.
            (
                None,
                paused(),
                &java,
                spec,
                Verdict::NotRolled("paused".into()),
            ),
            (Some("java=3f2a9c1b"), paused(), &java, spec, Verdict::Tried),
        ];
        for (marker, not_rolled, langs, hash, want) in cases {
            let got = decide(marker, not_rolled.clone(), langs, hash);
            assert_eq!(got, want, "{marker:?} {not_rolled:?} {langs:?} {hash:?}");
        }
    }

    #[test]
    fn the_marker_keeps_other_languages_and_replaces_the_spec_of_its_own() {
        let java: BTreeSet<Language> = [Language::Java].into();
        let spec = SpecHash([0x3f, 0x2a, 0x9c, 0x1b]);
        assert_eq!(marked(None, &java, spec), "java=3f2a9c1b");
        assert_eq!(
            marked(Some("python=01020304, java=00000000"), &java, spec),
            "java=3f2a9c1b,python=01020304"
        );
        let both: BTreeSet<Language> = [Language::Python, Language::Java].into();
        assert_eq!(
            marked(Some("junk"), &both, spec),
            "java=3f2a9c1b,python=3f2a9c1b"
        );
    }
}
