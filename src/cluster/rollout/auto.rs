//! The automatic mode of `serve` (`--rollout`), run by the Lease holder only: for every
//! Instrumentation annotated `otel-injector/rollout: automatic` whose current spec has not
//! been rolled out yet (`status.rollout.specHash` differs, or the rollout of that spec was
//! interrupted), it waits until the spec has been the same for [`DEBOUNCE`] (further edits,
//! and every replica's cache, settle), plans from a fresh list of the pods, restarts the
//! stale workloads with the cap and records `status.rollout` (server-side apply on the
//! status subresource, field manager `otel-injector-rollout`). A stop is recorded with the
//! workload and why, and a Warning Event `RolloutStopped` on the Instrumentation; it is not
//! retried for the same spec (a new spec, or the annotation removed and added again, starts
//! over). Removing the annotation removes `status.rollout`. One rollout at a time.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Client;
use kube::Resource as _;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use serde_json::json;

use super::run::{self, Ended, FIELD_MANAGER, Settings, Step, Stop};
use crate::census::Workload;
use crate::cluster::lease::Leadership;
use crate::cluster::watch::{index_of, key_of};
use crate::crd::{API_VERSION, Instrumentation, KIND, RolloutStatus, SpecHash};
use crate::keys::{AUTOMATIC, ROLLOUT_ANNOTATION};

mod missed;

use missed::restartable_missed;
pub use missed::{MISSED_RETRY, MissedTrigger};

/// A new spec is rolled out once it has stayed the same this long.
pub const DEBOUNCE: Duration = Duration::from_secs(5);
/// How often the Instrumentations are listed while nothing is pending.
pub const INTERVAL: Duration = Duration::from_secs(30);
/// `status.rollout.restarted` keeps this many names.
pub const RESTARTED_KEPT: usize = 50;
/// The reason of the Warning Event of a stopped rollout.
pub const STOPPED_EVENT: &str = "RolloutStopped";

pub const PROGRESSING: &str = "Progressing";
pub const COMPLETE: &str = "Complete";
pub const STOPPED: &str = "Stopped";

/// The automatic rollout's configuration.
#[derive(Clone, Debug)]
pub struct AutoRollout {
    pub settings: Settings,
    /// Namespaces never touched (the webhook's exclusions by name).
    pub excluded: BTreeSet<String>,
    /// This replica, for the Events' reporting instance.
    pub identity: String,
}

/// What an Instrumentation's annotation and status say about its rollout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Due {
    /// Not automatic, and no `status.rollout` to clear.
    Nothing,
    /// Not automatic any more: remove `status.rollout`.
    Clear,
    /// Automatic, and this spec is rolled out (complete or stopped).
    Done,
    /// Automatic, and this spec is to be rolled out.
    Roll(SpecHash),
}

/// What to do about one Instrumentation: `automatic` (its annotation), its current spec, its
/// `status.rollout` as stored.
pub fn due(automatic: bool, spec: SpecHash, recorded: Option<&RolloutStatus>) -> Due {
    match (automatic, recorded) {
        (false, None) => Due::Nothing,
        (false, Some(_)) => Due::Clear,
        (true, Some(r))
            if r.spec_hash == spec.to_string() && (r.state == COMPLETE || r.state == STOPPED) =>
        {
            Due::Done
        }
        (true, _) => Due::Roll(spec),
    }
}

/// The status of a rollout from its report so far.
pub fn status_of(
    spec: SpecHash,
    planned: usize,
    report: &Ended,
    finished: bool,
    now: &Time,
) -> RolloutStatus {
    let names: Vec<String> = report.restarted.iter().map(ToString::to_string).collect();
    let skip = names.len().saturating_sub(RESTARTED_KEPT);
    let restarted_count = names.len();
    let mut s = RolloutStatus {
        state: PROGRESSING.into(),
        spec_hash: spec.to_string(),
        restarted: names.into_iter().skip(skip).collect(),
        restarted_count: i64::try_from(restarted_count).unwrap_or(i64::MAX),
        pending: i64::try_from(planned.saturating_sub(restarted_count)).unwrap_or(i64::MAX),
        workload: None,
        reason: None,
        message: None,
        last_transition_time: Some(now.clone()),
    };
    match (&report.stopped, finished) {
        (Some(stop), _) => {
            s.state = STOPPED.into();
            s.workload = Some(stop.workload.to_string());
            s.reason = Some(stop.reason.as_str().into());
            s.message = Some(stop.message.clone());
        }
        (None, true) => {
            s.state = COMPLETE.into();
            s.message = Some(if planned == 0 {
                "nothing to restart".into()
            } else {
                format!("{restarted_count} workloads restarted and complete")
            });
        }
        (None, false) => {
            s.message = Some(format!(
                "{} of {planned} workloads restarted, {} complete",
                restarted_count,
                report.completed.len()
            ));
        }
    }
    s
}

fn rollout_of(o: &DynamicObject) -> Option<RolloutStatus> {
    serde_json::from_value(o.data.get("status")?.get("rollout")?.clone()).ok()
}

fn now() -> Time {
    Time(k8s_openapi::jiff::Timestamp::now())
}

impl AutoRollout {
    /// Runs until dropped: while this replica holds the Lease, rolls out what is due; it
    /// stops a rollout in progress at once when it loses the Lease (the next holder
    /// continues it: `Progressing` is not done). `changes` moves with every change of the
    /// Instrumentation cache, which wakes it.
    pub async fn run(
        self,
        client: Client,
        mut leadership: Leadership,
        mut changes: tokio::sync::watch::Receiver<u64>,
    ) {
        let resource = ApiResource::erase::<Instrumentation>(&());
        let api = Api::<DynamicObject>::all_with(client.clone(), &resource);
        let reporter = Reporter {
            controller: "otel-injector".into(),
            instance: Some(self.identity.clone()),
        };
        let recorder = Recorder::new(client.clone(), reporter);
        // Per Instrumentation: the spec last seen due and since when.
        let mut seen: BTreeMap<String, (SpecHash, Instant)> = BTreeMap::new();
        let mut missed = MissedTrigger::default();
        loop {
            if !leadership.is_leader() {
                seen.clear();
                while !leadership.changed().await {}
                tracing::info!(
                    "rollout: this replica holds the Lease; following automatic Instrumentations"
                );
            }
            let wait = match self.pass(&client, &api, &mut seen, &mut missed).await {
                Ok(Some((inst, spec))) => {
                    tokio::select! {
                        () = self.roll(&client, &recorder, &inst, spec) => {}
                        lost = leadership.changed() => if !lost {
                            tracing::warn!(instrumentation = %key(&inst), "rollout: lost the Lease; the next holder continues this rollout");
                        },
                    }
                    Duration::ZERO
                }
                Ok(None) => seen
                    .values()
                    .map(|(_, t)| DEBOUNCE.saturating_sub(t.elapsed()))
                    .chain(missed.next(Instant::now()))
                    .min()
                    .unwrap_or(INTERVAL),
                Err(e) => {
                    tracing::warn!(error = %e, "rollout: cannot list Instrumentations (needs list on instrumentations.opentelemetry.io); retrying");
                    INTERVAL
                }
            };
            // An Instrumentation changed in the cache: look at once (a new one, an edit, the
            // annotation); else after the debounce or the interval.
            leadership.next_pass(&mut changes, wait).await;
        }
    }

    /// Lists the Instrumentations; clears `status.rollout` of those no longer automatic and
    /// returns the first whose spec is due and settled, else the first rolled out whose
    /// status counts missed pods in restartable workloads (once per [`MISSED_RETRY`]).
    async fn pass(
        &self,
        client: &Client,
        api: &Api<DynamicObject>,
        seen: &mut BTreeMap<String, (SpecHash, Instant)>,
        trigger: &mut MissedTrigger,
    ) -> kube::Result<Option<(Instrumentation, SpecHash)>> {
        let list = api.list(&ListParams::default()).await?;
        let index = index_of(list.items.iter().cloned());
        let mut present = BTreeSet::new();
        let mut ready = None;
        let mut missed = None;
        for o in &list.items {
            let (ns, name) = key_of(o);
            let k = format!("{ns}/{name}");
            let automatic = o
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(ROLLOUT_ANNOTATION))
                .is_some_and(|v| v == AUTOMATIC);
            // The spec laid over its bases: a base's change is a new spec to roll out.
            let (Some(Ok(inst)), Some(spec)) = (index.get(&ns, &name), index.spec_hash(&ns, &name))
            else {
                continue;
            };
            let inst = Instrumentation::clone(inst);
            match due(automatic, spec, rollout_of(o).as_ref()) {
                Due::Nothing => {}
                Due::Done => {
                    let count = inst.status.as_ref().and_then(|s| s.missed).unwrap_or(0);
                    let due = trigger.due(&k, count, restartable_missed(&inst), Instant::now());
                    if missed.is_none() && due {
                        missed = Some((inst, spec));
                    }
                }
                Due::Clear => {
                    if let Err(e) = apply_status(client, &inst, None).await {
                        tracing::warn!(instrumentation = %k, error = %e, "rollout: cannot remove status.rollout");
                    }
                }
                Due::Roll(spec) => {
                    present.insert(k.clone());
                    match seen.get(&k) {
                        Some((s, t)) if *s == spec => {
                            if t.elapsed() >= DEBOUNCE && ready.is_none() {
                                ready = Some((inst, spec));
                            }
                        }
                        _ => {
                            seen.insert(k, (spec, Instant::now()));
                        }
                    }
                }
            }
        }
        seen.retain(|k, _| present.contains(k));
        if let Some((inst, _)) = &ready {
            seen.remove(&key(inst));
            return Ok(ready);
        }
        if let Some((inst, _)) = &missed {
            tracing::info!(instrumentation = %key(inst), "rollout: restarting the workloads of pods admitted without the webhook");
            trigger.tried(&key(inst), Instant::now());
        }
        Ok(missed)
    }

    /// Plans from a fresh list of the pods and rolls out, recording each step in
    /// `status.rollout`.
    async fn roll(
        &self,
        client: &Client,
        recorder: &Recorder,
        inst: &Instrumentation,
        spec: SpecHash,
    ) {
        let k = key(inst);
        let ns = inst.metadata.namespace.clone().unwrap_or_default();
        let name = inst.metadata.name.clone().unwrap_or_default();
        let census = match run::read_plan(client, &ns, &name, &self.excluded).await {
            Ok(c) if c.spec == spec => c,
            // Changed since: the next pass sees the new spec.
            Ok(_) => return,
            Err(e) => {
                tracing::warn!(instrumentation = %k, error = %e, "rollout: cannot plan");
                let stop = Stop {
                    workload: Workload {
                        namespace: ns.clone(),
                        kind: KIND.into(),
                        name: name.clone(),
                    },
                    reason: run::StopReason::ApiError,
                    message: e.to_string(),
                };
                let report = Ended {
                    stopped: Some(stop),
                    ..Ended::default()
                };
                self.finish(client, recorder, inst, spec, 0, &report).await;
                return;
            }
        };
        let planned = census.plan.restarts.len();
        tracing::info!(instrumentation = %k, spec = %spec, workloads = planned, "rollout: starting");
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<RolloutStatus>();
        let mut so_far = Ended::default();
        let this = k.clone();
        // Owns the sender: the writer below ends when the executor is done with it.
        let mut on = move |step: Step<'_>| {
            let k = &this;
            match step {
                Step::Restarted { workload, stamp } => {
                    tracing::info!(instrumentation = %k, %workload, restarted_at = stamp, "rollout: restarted");
                    so_far.restarted.push(workload.clone());
                }
                Step::Complete { workload, took } => {
                    tracing::info!(instrumentation = %k, %workload, took = ?took, "rollout: complete");
                    so_far.completed.push(workload.clone());
                }
                Step::Soaking { workload, soak } => {
                    tracing::info!(instrumentation = %k, %workload, soak = ?soak, "rollout: canary complete; soaking before the others");
                    return;
                }
                Step::Soaked { workload } => {
                    tracing::info!(instrumentation = %k, %workload, "rollout: canary soaked; continuing");
                    return;
                }
                Step::Stopped(_) => return,
            }
            let _ = tx.send(status_of(spec, planned, &so_far, false, &now()));
        };
        let first = status_of(spec, planned, &Ended::default(), planned == 0, &now());
        if let Err(e) = apply_status(client, inst, Some(&first)).await {
            tracing::warn!(instrumentation = %k, error = %e, "rollout: cannot write status.rollout (needs patch on instrumentations/status)");
        }
        if planned == 0 {
            return;
        }
        let execute = async move {
            let on = &mut on;
            run::execute(client, &census.plan, census.spec, &self.settings, on).await
        };
        let write = async {
            while let Some(mut status) = rx.recv().await {
                // Only the latest matters.
                while let Ok(next) = rx.try_recv() {
                    status = next;
                }
                if let Err(e) = apply_status(client, inst, Some(&status)).await {
                    tracing::warn!(instrumentation = %k, error = %e, "rollout: cannot write status.rollout");
                }
            }
        };
        let (report, ()) = futures::join!(execute, write);
        self.finish(client, recorder, inst, spec, planned, &report)
            .await;
    }

    async fn finish(
        &self,
        client: &Client,
        recorder: &Recorder,
        inst: &Instrumentation,
        spec: SpecHash,
        planned: usize,
        report: &Ended,
    ) {
        let k = key(inst);
        let status = status_of(spec, planned, report, true, &now());
        if let Err(e) = apply_status(client, inst, Some(&status)).await {
            tracing::warn!(instrumentation = %k, error = %e, "rollout: cannot write status.rollout (needs patch on instrumentations/status)");
        }
        let Some(stop) = &report.stopped else {
            tracing::info!(instrumentation = %k, restarted = report.restarted.len(), "rollout: complete");
            return;
        };
        tracing::warn!(instrumentation = %k, workload = %stop.workload, reason = stop.reason.as_str(), message = %stop.message, "rollout: stopped");
        let secondary = (stop.workload.kind != KIND).then(|| ObjectReference {
            api_version: Some("apps/v1".into()),
            kind: Some(stop.workload.kind.clone()),
            namespace: Some(stop.workload.namespace.clone()),
            name: Some(stop.workload.name.clone()),
            ..ObjectReference::default()
        });
        let event = Event {
            type_: EventType::Warning,
            reason: STOPPED_EVENT.into(),
            note: Some(truncate(&format!("{stop}"), 1024)),
            action: "Rollout".into(),
            secondary,
        };
        if let Err(e) = recorder.publish(&event, &inst.object_ref(&())).await {
            tracing::warn!(instrumentation = %k, error = %e, "rollout: cannot record the Event (needs create on events.events.k8s.io)");
        }
    }
}

fn key(inst: &Instrumentation) -> String {
    format!(
        "{}/{}",
        inst.metadata.namespace.as_deref().unwrap_or(""),
        inst.metadata.name.as_deref().unwrap_or("")
    )
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_owned()
}

/// Server-side applies `status.rollout` with the rollout's own field manager, leaving every
/// other status field to its owner. `None` removes it with a merge patch (`rollout: null`):
/// an apply of an empty status would leave `status: null` when nothing else is in it, which
/// the schema refuses.
async fn apply_status(
    client: &Client,
    inst: &Instrumentation,
    rollout: Option<&RolloutStatus>,
) -> kube::Result<()> {
    let ns = inst.metadata.namespace.as_deref().unwrap_or("");
    let name = inst.metadata.name.as_deref().unwrap_or("");
    let api = Api::<Instrumentation>::namespaced(client.clone(), ns);
    match rollout {
        Some(r) => {
            let patch = json!({"apiVersion": API_VERSION, "kind": KIND, "status": {"rollout": r}});
            api.patch_status(
                name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&patch),
            )
            .await
        }
        None => {
            let params = PatchParams {
                field_manager: Some(FIELD_MANAGER.into()),
                ..PatchParams::default()
            };
            api.patch_status(
                name,
                &params,
                &Patch::Merge(&json!({"status": {"rollout": null}})),
            )
            .await
        }
    }
    .map(|_| ())
}

#[cfg(test)]
mod tests;
