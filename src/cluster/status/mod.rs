//! The status controller: keeps `status` of every Instrumentation current with what its pods
//! say (injected with the current spec, with an older one, skipped and why, by workload) and
//! with its conditions (`Ready`, `Degraded`).
//!
//! The pods come from a metadata-only watch of the pods labeled `otel-injector/injected` (every
//! pod that asked for injection through this webhook; whole pods with `--detect-failures`,
//! which also tells the failing ones and, with `--rollback`, rolls their workloads back:
//! [`rollback`]); of each, only its [`PodRecord`](crate::census::PodRecord) is kept, so memory follows the
//! instrumented pods, not the cluster. The Instrumentations come from the
//! catalog the webhook already watches. The watch runs on every replica (a new leader has a
//! warm cache); only the holder of the Lease writes, by server-side apply to the status
//! subresource under its own field manager, only the fields it owns, and only when they
//! changed, at most about once per [`DEBOUNCE`]. Nothing else waits on it: the webhook, the
//! metrics and `/readyz` work the same whether it runs, leads or fails.

mod announce;
mod desired;
pub mod metrics;
mod pods;
pub mod rollback;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, PartialObjectMeta, Patch, PatchParams};
use tokio::sync::Notify;
use tokio::time::Instant;

use announce::Announced;
pub use desired::{Inputs, desired, owned};
use desired::{missing_references, now};
use metrics::{Metrics, WriteResult};
use pods::{SharedPods, watch_pods};

use super::events::{self, EventSink, Reason};
use super::lease::Leadership;
use super::missed::{Finder, SharedMissed};
use super::registration::SharedDrift;
use super::watch::KubeCatalog;
use crate::census::census;
use crate::crd::{API_VERSION, Instrumentation, InstrumentationStatus, KIND, SpecHash};
use crate::engine::Catalog;

/// The field manager of every status write; it owns only the fields written here.
pub const FIELD_MANAGER: &str = "otel-injector-status";
/// `status.skippedReasons` holds at most this many reasons.
pub const MAX_REASONS: usize = 5;
/// `status.workloads` holds at most this many workloads.
pub const MAX_WORKLOADS: usize = 50;
/// Changes are gathered this long before the statuses are computed and written.
pub const DEBOUNCE: Duration = Duration::from_millis(500);
/// Everything is computed (and written where it differs) again this often, whatever changed.
const RESYNC: Duration = Duration::from_secs(300);
/// A failed write is tried again after this (or at the next change).
const RETRY: Duration = Duration::from_secs(10);
/// The same kind of failure is logged at most once per this.
const LOG_EVERY: Duration = Duration::from_secs(60);

/// Condition types and reasons.
pub const READY: &str = "Ready";
pub const DEGRADED: &str = "Degraded";
pub const UNREADABLE: &str = "Unreadable";
pub const SECRET_MISSING: &str = "ExporterTLSSecretMissing";
pub const CONFIG_MAP_MISSING: &str = "ExporterTLSConfigMapMissing";
pub const FAILING: &str = "Failing";
pub const WORKLOADS_FAILING: &str = "WorkloadsFailing";
pub const REGISTERED: &str = "Registered";

/// Runs the pod watch and, while this replica leads, the status writes.
pub struct StatusController {
    catalog: Arc<KubeCatalog>,
    leadership: Leadership,
    metrics: Arc<Metrics>,
    /// Namespaces excluded by name from the search for missed pods; `None`: no search.
    find_missed: Option<BTreeSet<String>>,
    events: EventSink,
    missed: SharedMissed,
    /// Watch whole pods and tell the failing ones (`--detect-failures`).
    detect_failures: bool,
    /// Roll back the opted-in Instrumentations' failing workloads (`--rollback`).
    rollback: Option<rollback::Rollback>,
    /// What the check of the webhook configuration found (the `Registered` condition).
    registration: Option<SharedDrift>,
}

impl StatusController {
    pub fn new(catalog: Arc<KubeCatalog>, leadership: Leadership, metrics: Arc<Metrics>) -> Self {
        StatusController {
            catalog,
            leadership,
            events: EventSink::disabled(Arc::new(events::Metrics::unregistered())),
            metrics,
            find_missed: None,
            missed: SharedMissed::default(),
            detect_failures: false,
            rollback: None,
            registration: None,
        }
    }

    /// Also writes the `Registered` condition from what [`crate::cluster::registration`]
    /// found (once it has read the configuration).
    pub fn checking_registration(mut self, found: SharedDrift) -> Self {
        self.registration = Some(found);
        self
    }

    /// Also rolls back the workloads that fail with the current spec of an Instrumentation
    /// annotated `otel-injector/on-failure: rollback` ([`rollback`]); implies detecting
    /// failures.
    pub fn rolling_back(mut self, events: EventSink) -> Self {
        self.rollback = Some(rollback::Rollback::default());
        self.detecting_failures(events)
    }

    /// Also tells the failing pods among those injected with an Instrumentation's current
    /// spec, from their container statuses (a watch of whole pods instead of their metadata;
    /// of each only a [`crate::census::PodFailure`] is kept): `status.failing`, the
    /// `Failing` condition, and one `InstrumentedPodsFailing` Event per workload through
    /// `events`.
    pub fn detecting_failures(mut self, events: EventSink) -> Self {
        self.detect_failures = true;
        self.events = events;
        self
    }

    /// Also finds the pods admitted without the webhook ([`super::missed`]), except in the
    /// namespaces `excluded`, counts them in `missed` and announces them through `events`
    /// (one `InjectionMissed` Event per workload while it has any).
    pub fn finding_missed(mut self, excluded: BTreeSet<String>, events: EventSink) -> Self {
        self.find_missed = Some(excluded);
        self.events = events;
        self
    }

    /// Runs until dropped.
    pub async fn run(self, client: Client) {
        let pods = SharedPods::default();
        let dirty = Arc::new(Notify::new());
        let finder = self.find_missed.clone().map(|excluded| Finder {
            namespaces: self.catalog.namespace_store(),
            excluded: Arc::new(excluded),
            missed: self.missed.clone(),
            dirty: dirty.clone(),
            metrics: self.metrics.missed.clone(),
        });
        let catalog = self.catalog.clone();
        let find = async {
            match finder {
                Some(f) => f.run(client.clone(), &catalog).await,
                None => std::future::pending().await,
            }
        };
        let (c, p, d, m) = (
            client.clone(),
            pods.clone(),
            dirty.clone(),
            self.metrics.clone(),
        );
        let detect = self.detect_failures;
        let watch = async move {
            match detect {
                true => watch_pods::<Pod>(c, p, d, m).await,
                false => watch_pods::<PartialObjectMeta<Pod>>(c, p, d, m).await,
            }
        };
        tokio::join!(watch, find, self.write(client.clone(), pods, dirty),);
    }

    async fn write(mut self, client: Client, pods: SharedPods, dirty: Arc<Notify>) {
        let mut rollback = self.rollback.take();
        let mut changes = self.catalog.instrumentation_changes();
        let mut leadership = self.leadership.clone();
        let mut written: HashMap<(String, String), (Option<String>, InstrumentationStatus)> =
            HashMap::new();
        let mut retry_at: Option<Instant> = None;
        let mut failures = LogLimit::default();
        let mut announced = Announced::default();
        let mut drift = self.registration.as_ref().map(|r| r.subscribe());
        loop {
            let drift_changed = async {
                let moved = match drift.as_mut() {
                    Some(rx) => rx.changed().await.is_ok(),
                    None => false,
                };
                if !moved {
                    std::future::pending::<()>().await;
                }
            };
            tokio::select! {
                _ = dirty.notified() => {}
                () = drift_changed => {}
                r = changes.changed() => if r.is_err() { return },
                leader = leadership.changed() => {
                    // Another replica may have written meanwhile: compare with the objects.
                    written.clear();
                    if !leader { continue }
                }
                _ = tokio::time::sleep(RESYNC) => written.clear(),
                _ = sleep_until(retry_at) => {}
            }
            tokio::time::sleep(DEBOUNCE).await;
            let synced = pods.lock().unwrap_or_else(|e| e.into_inner()).synced;
            if !self.leadership.is_leader() || !synced || !self.catalog.instrumentations_synced() {
                continue;
            }
            let failed = self
                .write_all(
                    &client,
                    &pods,
                    &mut written,
                    &mut failures,
                    &mut announced,
                    rollback.as_mut(),
                )
                .await;
            retry_at = failed.then(|| Instant::now() + RETRY);
        }
    }

    /// Computes every Instrumentation's status and writes those that changed; whether a
    /// write failed.
    async fn write_all(
        &self,
        client: &Client,
        pods: &SharedPods,
        written: &mut HashMap<(String, String), (Option<String>, InstrumentationStatus)>,
        failures: &mut LogLimit,
        announced: &mut Announced,
        rollback: Option<&mut rollback::Rollback>,
    ) -> bool {
        let index = self.catalog.instrumentations();
        let existing: BTreeMap<String, SpecHash> = index
            .iter()
            .filter_map(|(ns, name, _, hash)| Some((format!("{ns}/{name}"), hash?)))
            .collect();
        let tallies = {
            let pods = pods.lock().unwrap_or_else(|e| e.into_inner());
            let missed = self.missed.lock().unwrap_or_else(|e| e.into_inner());
            census(pods.records.values().chain(missed.records()), &existing)
        };
        let missed = announce::missed(&tallies);
        self.announce_new(Reason::Missed, missed, &index, &mut announced.missed);
        if self.detect_failures {
            let failing = announce::failing(&tallies);
            let workloads =
                self.announce_new(Reason::Failing, failing, &index, &mut announced.failing);
            self.metrics
                .failing_workloads
                .set(i64::try_from(workloads).unwrap_or(i64::MAX));
        }
        let lookup = self
            .catalog
            .objects_synced()
            .then(|| self.catalog.objects())
            .flatten();
        let now = now();
        let registration = self.registration.as_ref().and_then(|r| r.borrow().clone());
        let (rolled, mut failed) = match rollback {
            Some(r) => {
                r.run(client, &tallies, &index, &self.events, &self.metrics, &now)
                    .await
            }
            None => Default::default(),
        };
        let resource = ApiResource::erase::<Instrumentation>(&());
        let params = PatchParams::apply(FIELD_MANAGER).force();
        // Forget what was written for Instrumentations that are gone.
        written.retain(|(ns, name), _| index.get(ns, name).is_some());
        for (ns, name, entry, hash) in index.iter() {
            let key = (ns.to_owned(), name.to_owned());
            let tally = tallies.get(&format!("{ns}/{name}"));
            let (uid, stored) = match entry {
                Ok(inst) => (inst.metadata.uid.clone(), inst.status.as_ref()),
                Err(_) => (None, None),
            };
            let mine = written.get(&key).filter(|(u, _)| *u == uid).map(|(_, s)| s);
            let missing = match (entry, lookup) {
                (Ok(inst), Some(lookup)) => missing_references(inst, tally, lookup),
                _ => Vec::new(),
            };
            let desired = desired(&Inputs {
                entry,
                spec_hash: hash,
                tally,
                missing: &missing,
                verified: lookup.is_some(),
                detect_failures: self.detect_failures,
                rolled_back: rolled
                    .get(&format!("{ns}/{name}"))
                    .map_or(&[], Vec::as_slice),
                registration: registration.as_deref(),
                previous: mine.or(stored),
                now: now.clone(),
            });
            if mine == Some(&desired) || stored.map(owned) == Some(desired.clone()) {
                continue;
            }
            let api = Api::<DynamicObject>::namespaced_with(client.clone(), ns, &resource);
            let body = serde_json::json!({
                "apiVersion": API_VERSION, "kind": KIND,
                "metadata": {"name": name, "namespace": ns},
                "status": desired,
            });
            match api.patch_status(name, &params, &Patch::Apply(&body)).await {
                Ok(_) => {
                    self.metrics.status_write(WriteResult::Success);
                    tracing::debug!(namespace = ns, name, injected = ?desired.injected, outdated = ?desired.outdated, skipped = ?desired.skipped, "Instrumentation status written");
                    written.insert(key, (uid, desired));
                }
                Err(e) => {
                    self.metrics.status_write(WriteResult::Error);
                    failed = true;
                    if failures.due() {
                        let hint = match &e {
                            kube::Error::Api(s) if s.code == 403 => {
                                " (patch on instrumentations/status: manifests/components/status)"
                            }
                            _ => "",
                        };
                        tracing::warn!(namespace = ns, name, error = %e, "cannot write the Instrumentation's status; retrying in {RETRY:?}{hint}");
                    }
                }
            }
        }
        failed
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// At most one log line per [`LOG_EVERY`].
#[derive(Default)]
struct LogLimit {
    last: Option<Instant>,
}

impl LogLimit {
    fn due(&mut self) -> bool {
        let now = Instant::now();
        if self.last.is_some_and(|l| now.duration_since(l) < LOG_EVERY) {
            return false;
        }
        self.last = Some(now);
        true
    }
}
