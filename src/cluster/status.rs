//! The status controller: keeps `status` of every Instrumentation current with what its pods
//! say (injected with the current spec, with an older one, skipped and why, by workload) and
//! with its conditions (`Ready`, `Degraded`).
//!
//! The pods come from a metadata-only watch of the pods labeled `otel-injector/injected` (every
//! pod that asked for injection through this webhook); of each, only its [`PodRecord`] is kept,
//! so memory follows the instrumented pods, not the cluster. The Instrumentations come from the
//! catalog the webhook already watches. The watch runs on every replica (a new leader has a
//! warm cache); only the holder of the Lease writes, by server-side apply to the status
//! subresource under its own field manager, only the fields it owns, and only when they
//! changed, at most about once per [`DEBOUNCE`]. Nothing else waits on it: the webhook, the
//! metrics and `/readyz` work the same whether it runs, leads or fails.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, PartialObjectMeta, Patch, PatchParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tokio::sync::Notify;
use tokio::time::Instant;

use super::events::{EventSink, Reason, SkipEvent};
use super::missed::{Finder, SharedMissed};
use super::{KubeCatalog, Leadership};
use crate::agents::exporter_tls::ExporterTls;
use crate::crd::{
    API_VERSION, Instrumentation, InstrumentationStatus, KIND, SkippedReason, SpecHash,
    WorkloadStatus,
};
use crate::engine::census::{Interner, PodRecord, Tally, Workload, census};
use crate::engine::outcome::INJECTED_LABEL;
use crate::engine::{Catalog, Entry, Instrumentations, ObjectKind, ObjectLookup};
use crate::metrics::{Metrics, WriteResult};

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

/// The pods that asked for injection, as the watch last had them.
#[derive(Default)]
struct Pods {
    /// By [`pod_key`].
    records: HashMap<u128, PodRecord>,
    synced: bool,
}

type SharedPods = Arc<Mutex<Pods>>;

/// Runs the pod watch and, while this replica leads, the status writes.
pub struct StatusController {
    catalog: Arc<KubeCatalog>,
    leadership: Leadership,
    metrics: Arc<Metrics>,
    /// Namespaces excluded by name from the search for missed pods; `None`: no search.
    find_missed: Option<BTreeSet<String>>,
    events: EventSink,
    missed: SharedMissed,
}

impl StatusController {
    pub fn new(catalog: Arc<KubeCatalog>, leadership: Leadership, metrics: Arc<Metrics>) -> Self {
        StatusController {
            catalog,
            leadership,
            events: EventSink::disabled(metrics.clone()),
            metrics,
            find_missed: None,
            missed: SharedMissed::default(),
        }
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
            metrics: self.metrics.clone(),
        });
        let catalog = self.catalog.clone();
        let find = async {
            match finder {
                Some(f) => f.run(client.clone(), &catalog).await,
                None => std::future::pending().await,
            }
        };
        tokio::join!(
            watch_pods(
                client.clone(),
                pods.clone(),
                dirty.clone(),
                self.metrics.clone()
            ),
            find,
            self.write(client.clone(), pods, dirty),
        );
    }

    async fn write(self, client: Client, pods: SharedPods, dirty: Arc<Notify>) {
        let mut changes = self.catalog.instrumentation_changes();
        let mut leadership = self.leadership.clone();
        let mut written: HashMap<(String, String), (Option<String>, InstrumentationStatus)> =
            HashMap::new();
        let mut retry_at: Option<Instant> = None;
        let mut failures = LogLimit::default();
        let mut announced = HashSet::new();
        loop {
            tokio::select! {
                _ = dirty.notified() => {}
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
                .write_all(&client, &pods, &mut written, &mut failures, &mut announced)
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
        announced: &mut HashSet<(String, Option<Workload>)>,
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
        self.announce_missed(&tallies, &index, announced);
        let lookup = self
            .catalog
            .objects_synced()
            .then(|| self.catalog.objects())
            .flatten();
        let now = now();
        let resource = ApiResource::erase::<Instrumentation>(&());
        let params = PatchParams::apply(FIELD_MANAGER).force();
        let mut failed = false;
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

impl StatusController {
    /// One Warning `InjectionMissed` Event per workload (and per Instrumentation for pods
    /// without a controller) when its missed pods are first counted; announced again only
    /// after it had none.
    fn announce_missed(
        &self,
        tallies: &BTreeMap<String, Tally>,
        index: &Instrumentations,
        announced: &mut HashSet<(String, Option<Workload>)>,
    ) {
        let mut now: HashSet<(String, Option<Workload>)> = HashSet::new();
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
                let id = (key.clone(), workload.cloned());
                now.insert(id.clone());
                if announced.contains(&id) {
                    continue;
                }
                let Some((namespace, owner)) = missed_regarding(key, workload, index) else {
                    continue;
                };
                let pods = if n == 1 { "pod" } else { "pods" };
                let of = workload.map_or(String::from(" without a controller"), |w| {
                    format!(" of {w}")
                });
                self.events.record(SkipEvent {
                    reason: Reason::Missed,
                    namespace,
                    owner,
                    instrumentation: Some(key.clone()),
                    language: None,
                    note: format!(
                        "{n} {pods}{of} asked for Instrumentation {key} and were admitted without \
                         injection: the webhook was unreachable or not registered when they were \
                         created; a restart injects them"
                    ),
                });
                tracing::warn!(instrumentation = %key, workload = ?workload.map(ToString::to_string), pods = n, "pods admitted without the webhook");
            }
        }
        *announced = now;
    }
}

/// The namespace and owner a missed-pods Event is about: the workload (its API version from
/// its kind), else the Instrumentation (through [`super::events::regarding`]'s fallback).
fn missed_regarding(
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

/// A pod's key in the watch's map ([`PodRecord::key`]).
fn pod_key(meta: &PartialObjectMeta<Pod>) -> u128 {
    PodRecord::key(&meta.metadata)
}

/// What is kept of a pod: its record, unless it is terminating (it no longer counts).
fn record(pod: &PartialObjectMeta<Pod>, names: &mut Interner) -> Option<PodRecord> {
    if pod.metadata.deletion_timestamp.is_some() {
        return None;
    }
    PodRecord::from_meta(&pod.metadata, names)
}

/// Removals after which the names no record holds any more are forgotten.
const COMPACT_EVERY: u32 = 1024;

/// Follows the pods labeled [`INJECTED_LABEL`] (metadata only) into `pods`, keeping only
/// their records; tells `dirty` when a record changed. Errors are retried with backoff.
async fn watch_pods(client: Client, pods: SharedPods, dirty: Arc<Notify>, metrics: Arc<Metrics>) {
    let config = watcher::Config::default().labels(INJECTED_LABEL);
    // `PartialObjectMeta` makes it a metadata-only list and watch.
    let stream = watcher::watcher(Api::<PartialObjectMeta<Pod>>::all(client), config)
        .backoff(crate::retry::WatchBackoff::default());
    let mut stream = std::pin::pin!(stream);
    let mut listing: HashMap<u128, PodRecord> = HashMap::new();
    // Only this task writes records, so the names live here, not under the lock.
    let mut names = Interner::default();
    let mut removals = 0u32;
    let mut failures = LogLimit::default();
    while let Some(ev) = stream.next().await {
        let changed = match ev {
            Ok(Event::Init) => {
                listing.clear();
                false
            }
            Ok(Event::InitApply(o)) => {
                if let Some(r) = record(&o, &mut names) {
                    listing.insert(pod_key(&o), r);
                }
                false
            }
            Ok(Event::InitDone) => {
                let mut p = pods.lock().unwrap_or_else(|e| e.into_inner());
                p.records = std::mem::take(&mut listing);
                p.records.shrink_to_fit();
                p.synced = true;
                let listed = p.records.len();
                drop(p);
                names.compact();
                tracing::info!(
                    pods = listed,
                    names = names.len(),
                    "status controller: pods listed"
                );
                true
            }
            Ok(Event::Apply(o)) => {
                let key = pod_key(&o);
                let r = record(&o, &mut names);
                let mut p = pods.lock().unwrap_or_else(|e| e.into_inner());
                match r {
                    Some(r) if p.records.get(&key) == Some(&r) => false,
                    Some(r) => {
                        p.records.insert(key, r);
                        true
                    }
                    None => {
                        removals += 1;
                        p.records.remove(&key).is_some()
                    }
                }
            }
            Ok(Event::Delete(o)) => {
                removals += 1;
                let mut p = pods.lock().unwrap_or_else(|e| e.into_inner());
                p.records.remove(&pod_key(&o)).is_some()
            }
            Err(e) => {
                if failures.due() {
                    let hint = match &e {
                        watcher::Error::InitialListFailed(kube::Error::Api(s))
                        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
                            if s.code == 403 =>
                        {
                            " (list/watch on pods: manifests/components/status)"
                        }
                        _ => "",
                    };
                    tracing::warn!(error = %e, "status controller: pod watch failed, retrying{hint}");
                }
                false
            }
        };
        if removals >= COMPACT_EVERY {
            removals = 0;
            names.compact();
            // A map emptied by a mass deletion gives its memory back.
            let mut p = pods.lock().unwrap_or_else(|e| e.into_inner());
            if p.records.capacity() > 2 * p.records.len() + 1024 {
                p.records.shrink_to_fit();
            }
        }
        if changed {
            let n = pods.lock().unwrap_or_else(|e| e.into_inner()).records.len();
            metrics
                .status_pods
                .set(i64::try_from(n).unwrap_or(i64::MAX));
            dirty.notify_one();
        }
    }
}

/// Secrets and ConfigMaps named by the exporter TLS section that do not exist in the
/// Instrumentation's namespace or in the namespace of a workload it counts
/// (`Kind ns/name`), sorted.
fn missing_references(
    inst: &Instrumentation,
    tally: Option<&Tally>,
    lookup: &dyn ObjectLookup,
) -> Vec<(ObjectKind, String)> {
    let Some(tls) = ExporterTls::of(&inst.spec) else {
        return Vec::new();
    };
    let mut namespaces: BTreeSet<&str> = BTreeSet::new();
    namespaces.insert(inst.metadata.namespace.as_deref().unwrap_or_default());
    namespaces.extend(
        tally
            .into_iter()
            .flat_map(|t| t.workloads.keys())
            .map(|w| w.namespace.as_str()),
    );
    let refs = [
        (ObjectKind::Secret, tls.secret()),
        (ObjectKind::ConfigMap, tls.config_map()),
    ];
    let mut out = Vec::new();
    for (kind, name) in refs {
        let Some(name) = name else { continue };
        for ns in &namespaces {
            if !lookup.exists(kind, ns, name) {
                out.push((kind, format!("{ns}/{name}")));
            }
        }
    }
    out
}

/// What [`desired`] reads.
pub struct Inputs<'a> {
    /// The Instrumentation, or why it cannot be read.
    pub entry: &'a Entry,
    pub spec_hash: Option<SpecHash>,
    /// Its pods (`None`: none asked for it).
    pub tally: Option<&'a Tally>,
    /// Referenced objects found missing (kind, `ns/name`).
    pub missing: &'a [(ObjectKind, String)],
    /// Whether references were checked at all (`--verify-exporter-tls`).
    pub verified: bool,
    /// The status as last written, for the times of what did not change.
    pub previous: Option<&'a InstrumentationStatus>,
    /// Now, in whole seconds (as the API server stores it).
    pub now: Time,
}

/// The part of a status this controller owns (and so compares).
pub fn owned(status: &InstrumentationStatus) -> InstrumentationStatus {
    InstrumentationStatus {
        injected: status.injected,
        outdated: status.outdated,
        skipped: status.skipped,
        missed: status.missed,
        skipped_reasons: status.skipped_reasons.clone(),
        workloads: status.workloads.clone(),
        workloads_omitted: status.workloads_omitted,
        spec_hash: status.spec_hash.clone(),
        observed_generation: status.observed_generation,
        last_change_time: status.last_change_time.clone(),
        conditions: status.conditions.clone(),
        ..InstrumentationStatus::default()
    }
}

fn count(n: u32) -> i64 {
    i64::from(n)
}

/// The status an Instrumentation should have: its counts, reasons, workloads and conditions.
/// Times are carried over from `previous` for whatever did not change.
pub fn desired(inputs: &Inputs<'_>) -> InstrumentationStatus {
    let previous = inputs.previous;
    let now = &inputs.now;
    let (inst, error) = match inputs.entry {
        Ok(inst) => (Some(inst), None),
        Err(e) => (None, Some(e.as_str())),
    };
    let generation = inst.and_then(|i| i.metadata.generation);
    let mut status = InstrumentationStatus {
        observed_generation: generation,
        spec_hash: inputs.spec_hash.map(|h| h.to_string()),
        ..InstrumentationStatus::default()
    };
    if inst.is_some() {
        let empty = Tally::default();
        let tally = inputs.tally.unwrap_or(&empty);
        let pods = &tally.pods;
        status.injected = Some(count(pods.current));
        status.outdated = Some(count(pods.outdated));
        status.skipped = Some(count(pods.skipped_total()));
        status.missed = Some(count(pods.missed));
        let mut reasons: Vec<SkippedReason> = pods
            .skipped
            .iter()
            .map(|(r, n)| SkippedReason {
                reason: r.as_str().to_owned(),
                pods: count(*n),
            })
            .collect();
        reasons.sort_by(|a, b| b.pods.cmp(&a.pods).then_with(|| a.reason.cmp(&b.reason)));
        reasons.truncate(MAX_REASONS);
        status.skipped_reasons = reasons;
        let same = previous.is_some_and(|p| {
            (p.injected, p.outdated, p.skipped, p.missed)
                == (
                    status.injected,
                    status.outdated,
                    status.skipped,
                    status.missed,
                )
        });
        status.last_change_time = match previous {
            Some(p) if same && p.last_change_time.is_some() => p.last_change_time.clone(),
            _ => Some(now.clone()),
        };
        let mut workloads: Vec<WorkloadStatus> = tally
            .workloads
            .iter()
            .map(|(w, c)| {
                let mut ws = WorkloadStatus {
                    kind: w.kind.clone(),
                    namespace: w.namespace.clone(),
                    name: w.name.clone(),
                    injected: count(c.current),
                    outdated: count(c.outdated),
                    skipped: count(c.skipped_total()),
                    missed: count(c.missed),
                    last_change_time: None,
                };
                let before = previous.and_then(|p| {
                    p.workloads.iter().find(|o| {
                        (&o.kind, &o.namespace, &o.name) == (&ws.kind, &ws.namespace, &ws.name)
                    })
                });
                ws.last_change_time = match before {
                    Some(o)
                        if (o.injected, o.outdated, o.skipped, o.missed)
                            == (ws.injected, ws.outdated, ws.skipped, ws.missed) =>
                    {
                        o.last_change_time.clone().or_else(|| Some(now.clone()))
                    }
                    _ => Some(now.clone()),
                };
                ws
            })
            .collect();
        // The most stale first; the census's order (namespace, kind, name) among equals.
        workloads.sort_by_key(|w| std::cmp::Reverse(w.outdated + w.skipped + w.missed));
        if workloads.len() > MAX_WORKLOADS {
            status.workloads_omitted = i64::try_from(workloads.len() - MAX_WORKLOADS).ok();
            workloads.truncate(MAX_WORKLOADS);
        }
        status.workloads = workloads;
    }
    // Conditions: the first problem found is the reason.
    let problem: Option<(&str, String)> = match error {
        Some(e) => Some((
            UNREADABLE,
            format!("the object cannot be read: {}", truncate(e, 1024)),
        )),
        None => inputs.missing.first().map(|(kind, _)| {
            let reason = match kind {
                ObjectKind::Secret => SECRET_MISSING,
                ObjectKind::ConfigMap => CONFIG_MAP_MISSING,
            };
            let list: Vec<String> = inputs
                .missing
                .iter()
                .map(|(k, n)| format!("{} {n}", k.as_str()))
                .collect();
            (
                reason,
                format!(
                    "spec.exporter.tls names objects that do not exist: {}; pods there are not \
                     injected",
                    list.join(", ")
                ),
            )
        }),
    };
    let ready_message = if inputs.verified {
        "readable; the Secret and ConfigMap of spec.exporter.tls exist"
    } else {
        "readable (exporter TLS references are checked with --verify-exporter-tls)"
    };
    let (ready, degraded) = match &problem {
        None => (
            ("True", "Readable", ready_message.to_owned()),
            ("False", "AsExpected", "no problem found".to_owned()),
        ),
        Some((reason, message)) => (
            ("False", *reason, message.clone()),
            ("True", *reason, message.clone()),
        ),
    };
    status.conditions = vec![
        condition(READY, ready, generation, previous, now),
        condition(DEGRADED, degraded, generation, previous, now),
    ];
    status
}

fn truncate(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// A condition; its transition time is the previous one's while the status stays.
fn condition(
    type_: &str,
    (status, reason, message): (&str, &str, String),
    generation: Option<i64>,
    previous: Option<&InstrumentationStatus>,
    now: &Time,
) -> Condition {
    let before = previous.and_then(|p| p.conditions.iter().find(|c| c.type_ == type_));
    let since = match before {
        Some(c) if c.status == status => c.last_transition_time.clone(),
        _ => now.clone(),
    };
    Condition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: reason.to_owned(),
        message,
        observed_generation: generation,
        last_transition_time: since,
    }
}

/// Now, in whole seconds: the API server keeps `metav1.Time` to the second, so a finer time
/// would never compare equal to what it stored.
fn now() -> Time {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or_default();
    Time(Timestamp::from_second(secs).unwrap_or(Timestamp::UNIX_EPOCH))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::InstrumentationSpec;
    use crate::engine::SkipReason;
    use crate::engine::census::{Counts, Workload};
    use serde_json::json;

    fn at(secs: i64) -> Time {
        Time(Timestamp::from_second(secs).unwrap())
    }

    fn inst(generation: i64) -> Entry {
        let mut i = Instrumentation::new("java", InstrumentationSpec::default());
        i.metadata.namespace = Some("shop".into());
        i.metadata.generation = Some(generation);
        Ok(Arc::new(i))
    }

    fn workload(kind: &str, name: &str) -> Workload {
        Workload {
            namespace: "shop".into(),
            kind: kind.into(),
            name: name.into(),
        }
    }

    fn counts(current: u32, outdated: u32, skipped: &[(SkipReason, u32)]) -> Counts {
        Counts {
            current,
            outdated,
            skipped: skipped.iter().copied().collect(),
            missed: 0,
        }
    }

    const T0: i64 = 1_800_000_000;
    const HASH: SpecHash = SpecHash([0x3f, 0x2a, 0x9c, 0x1b]);

    #[test]
    fn the_status_counts_reasons_workloads_and_conditions() {
        let missed = |mut c: Counts, n| {
            c.missed = n;
            c
        };
        let tally = Tally {
            pods: missed(
                counts(
                    3,
                    2,
                    &[
                        (SkipReason::InstrumentationNotFound, 1),
                        (SkipReason::ExporterTlsMissing, 4),
                    ],
                ),
                1,
            ),
            workloads: [
                (workload("Deployment", "web"), missed(counts(3, 0, &[]), 1)),
                (workload("Deployment", "api"), counts(0, 2, &[])),
                (
                    workload("DaemonSet", "agent"),
                    counts(0, 0, &[(SkipReason::InstrumentationNotFound, 1)]),
                ),
            ]
            .into(),
        };
        let entry = inst(4);
        let s = desired(&Inputs {
            entry: &entry,
            spec_hash: Some(HASH),
            tally: Some(&tally),
            missing: &[],
            verified: false,
            previous: None,
            now: at(T0),
        });
        assert_eq!(
            serde_json::to_value(&s).unwrap(),
            json!({
                "injected": 3, "outdated": 2, "skipped": 5, "missed": 1,
                "skippedReasons": [
                    {"reason": "exporter_tls_missing", "pods": 4},
                    {"reason": "instrumentation_not_found", "pods": 1}
                ],
                "workloads": [
                    {"kind": "Deployment", "namespace": "shop", "name": "api", "injected": 0, "outdated": 2, "skipped": 0, "lastChangeTime": "2027-01-15T08:00:00Z"},
                    {"kind": "DaemonSet", "namespace": "shop", "name": "agent", "injected": 0, "outdated": 0, "skipped": 1, "lastChangeTime": "2027-01-15T08:00:00Z"},
                    {"kind": "Deployment", "namespace": "shop", "name": "web", "injected": 3, "outdated": 0, "skipped": 0, "missed": 1, "lastChangeTime": "2027-01-15T08:00:00Z"}
                ],
                "specHash": "3f2a9c1b",
                "observedGeneration": 4,
                "lastChangeTime": "2027-01-15T08:00:00Z",
                "conditions": [
                    {"type": "Ready", "status": "True", "reason": "Readable",
                     "message": "readable (exporter TLS references are checked with --verify-exporter-tls)",
                     "observedGeneration": 4, "lastTransitionTime": "2027-01-15T08:00:00Z"},
                    {"type": "Degraded", "status": "False", "reason": "AsExpected",
                     "message": "no problem found",
                     "observedGeneration": 4, "lastTransitionTime": "2027-01-15T08:00:00Z"}
                ]
            })
        );

        // A minute later, one web pod more: the totals' and web's times move, the others' stay.
        let mut more = tally.clone();
        more.pods.current = 4;
        more.workloads
            .insert(workload("Deployment", "web"), missed(counts(4, 0, &[]), 1));
        let later = desired(&Inputs {
            entry: &entry,
            spec_hash: Some(HASH),
            tally: Some(&more),
            missing: &[],
            verified: false,
            previous: Some(&s),
            now: at(T0 + 60),
        });
        assert_eq!(later.injected, Some(4));
        assert_eq!(later.last_change_time, Some(at(T0 + 60)));
        let times: Vec<_> = later
            .workloads
            .iter()
            .map(|w| (w.name.as_str(), w.last_change_time.clone().unwrap()))
            .collect();
        assert_eq!(
            times,
            [("api", at(T0)), ("agent", at(T0)), ("web", at(T0 + 60))]
        );
        assert_eq!(later.conditions, s.conditions, "nothing transitioned");
        // Unchanged input: the same status, so nothing is written.
        let again = desired(&Inputs {
            entry: &entry,
            spec_hash: Some(HASH),
            tally: Some(&more),
            missing: &[],
            verified: false,
            previous: Some(&later),
            now: at(T0 + 120),
        });
        assert_eq!(again, later);
    }

    #[test]
    fn no_pods_count_zero_and_the_lists_are_bounded() {
        let entry = inst(1);
        let none = desired(&Inputs {
            entry: &entry,
            spec_hash: Some(HASH),
            tally: None,
            missing: &[],
            verified: true,
            previous: None,
            now: at(T0),
        });
        assert_eq!(
            (none.injected, none.outdated, none.skipped),
            (Some(0), Some(0), Some(0))
        );
        assert!(none.workloads.is_empty() && none.skipped_reasons.is_empty());
        assert_eq!(
            none.conditions[0].message,
            "readable; the Secret and ConfigMap of spec.exporter.tls exist"
        );

        let many = Tally {
            pods: counts(
                60,
                0,
                &SkipReason::ALL.iter().map(|r| (*r, 1)).collect::<Vec<_>>(),
            ),
            workloads: (0..60)
                .map(|i| {
                    (
                        workload("StatefulSet", &format!("db-{i:02}")),
                        counts(1, 0, &[]),
                    )
                })
                .collect(),
        };
        let s = desired(&Inputs {
            entry: &entry,
            spec_hash: Some(HASH),
            tally: Some(&many),
            missing: &[],
            verified: true,
            previous: None,
            now: at(T0),
        });
        assert_eq!(s.skipped_reasons.len(), MAX_REASONS);
        assert_eq!(s.workloads.len(), MAX_WORKLOADS);
        assert_eq!(s.workloads_omitted, Some(10));
        assert_eq!(s.workloads[0].name, "db-00");
        assert_eq!(s.workloads[49].name, "db-49");
    }

    #[test]
    fn a_missing_secret_or_an_unreadable_object_degrades() {
        let entry = inst(2);
        let missing = [
            (ObjectKind::Secret, "shop/otel-tls".to_owned()),
            (ObjectKind::ConfigMap, "shop/otel-ca".to_owned()),
        ];
        let ok = desired(&Inputs {
            entry: &entry,
            spec_hash: Some(HASH),
            tally: None,
            missing: &[],
            verified: true,
            previous: None,
            now: at(T0),
        });
        let s = desired(&Inputs {
            entry: &entry,
            spec_hash: Some(HASH),
            tally: None,
            missing: &missing,
            verified: true,
            previous: Some(&ok),
            now: at(T0 + 5),
        });
        let view: Vec<_> = s
            .conditions
            .iter()
            .map(|c| {
                (
                    c.type_.as_str(),
                    c.status.as_str(),
                    c.reason.as_str(),
                    c.last_transition_time.clone(),
                )
            })
            .collect();
        assert_eq!(
            view,
            [
                ("Ready", "False", SECRET_MISSING, at(T0 + 5)),
                ("Degraded", "True", SECRET_MISSING, at(T0 + 5)),
            ]
        );
        assert_eq!(
            s.conditions[1].message,
            "spec.exporter.tls names objects that do not exist: Secret shop/otel-tls, \
             ConfigMap shop/otel-ca; pods there are not injected"
        );

        let broken: Entry = Err("unknown variant `not_a_sampler`".into());
        let u = desired(&Inputs {
            entry: &broken,
            spec_hash: None,
            tally: None,
            missing: &[],
            verified: true,
            previous: None,
            now: at(T0),
        });
        assert_eq!(
            serde_json::to_value(&u).unwrap(),
            json!({"conditions": [
                {"type": "Ready", "status": "False", "reason": "Unreadable",
                 "message": "the object cannot be read: unknown variant `not_a_sampler`",
                 "lastTransitionTime": "2027-01-15T08:00:00Z"},
                {"type": "Degraded", "status": "True", "reason": "Unreadable",
                 "message": "the object cannot be read: unknown variant `not_a_sampler`",
                 "lastTransitionTime": "2027-01-15T08:00:00Z"}
            ]})
        );
    }

    struct Present(&'static [(&'static str, &'static str)]);
    impl ObjectLookup for Present {
        fn exists(&self, kind: ObjectKind, namespace: &str, name: &str) -> bool {
            kind == ObjectKind::Secret && self.0.contains(&(namespace, name))
        }
    }

    #[test]
    fn references_are_checked_where_the_instrumentation_is_used() {
        let mut i = Instrumentation::new("java", InstrumentationSpec::default());
        i.metadata.namespace = Some("shop".into());
        i.spec = serde_json::from_value(json!({"exporter": {
            "endpoint": "https://collector:4318", "tls": {"secretName": "otel-tls"}}}))
        .unwrap();
        let mut elsewhere = workload("Deployment", "web");
        elsewhere.namespace = "payments".into();
        let tally = Tally {
            pods: counts(1, 0, &[]),
            workloads: [(elsewhere, counts(1, 0, &[]))].into(),
        };
        let lookup = Present(&[("shop", "otel-tls")]);
        assert_eq!(
            missing_references(&i, Some(&tally), &lookup),
            [(ObjectKind::Secret, "payments/otel-tls".to_owned())]
        );
        assert_eq!(missing_references(&i, None, &lookup), []);
        i.spec.exporter = None;
        assert_eq!(missing_references(&i, Some(&tally), &lookup), []);
    }

    #[test]
    fn owned_leaves_out_the_operators_field() {
        let mut s = InstrumentationStatus {
            injected: Some(1),
            ..InstrumentationStatus::default()
        };
        s.upgrade_blocked_versions
            .insert("java".into(), "pinned".into());
        assert_eq!(
            owned(&s),
            InstrumentationStatus {
                injected: Some(1),
                ..InstrumentationStatus::default()
            }
        );
    }
}
