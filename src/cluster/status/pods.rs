//! The status controller's pod watch: the metadata of the pods labeled
//! `otel-injector/injected` (or the whole pods, `--detect-failures`), of each only its
//! [`PodRecord`], keyed by UID.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PartialObjectMeta};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::Notify;

use super::LogLimit;
use super::metrics::Metrics;
use crate::census::{Interner, PodFailure, PodRecord};
use crate::keys::INJECTED_LABEL;

/// The pods that asked for injection, as the watch last had them.
#[derive(Default)]
pub(super) struct Pods {
    /// By [`pod_key`].
    pub(super) records: HashMap<u128, PodRecord>,
    pub(super) synced: bool,
}

pub(super) type SharedPods = Arc<Mutex<Pods>>;

/// What the watch receives of a pod: its metadata alone (the default), or the whole pod
/// (`--detect-failures`: its container statuses too, of which only a [`PodFailure`] is kept).
pub(super) trait Observed:
    Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static
{
    /// What is kept of a pod: its record, unless it is terminating (it no longer counts).
    fn record(&self, names: &mut Interner) -> Option<PodRecord> {
        let meta = self.meta();
        if meta.deletion_timestamp.is_some() {
            return None;
        }
        let mut r = PodRecord::from_meta(meta, names)?;
        r.failure = self.failure().map(Box::new);
        Some(r)
    }

    fn failure(&self) -> Option<PodFailure>;
}

impl Observed for PartialObjectMeta<Pod> {
    fn failure(&self) -> Option<PodFailure> {
        None
    }
}

impl Observed for Pod {
    fn failure(&self) -> Option<PodFailure> {
        let name = self.metadata.name.as_deref().unwrap_or_default();
        PodFailure::of(name, self.status.as_ref()?)
    }
}

/// A pod's key in the watch's map ([`PodRecord::key`]).
fn pod_key(pod: &impl Observed) -> u128 {
    PodRecord::key(pod.meta())
}

/// Removals after which the names no record holds any more are forgotten.
const COMPACT_EVERY: u32 = 1024;

/// Follows the pods labeled [`INJECTED_LABEL`] into `pods`, keeping only their records;
/// tells `dirty` when a record changed. Errors are retried with backoff. `K`
/// `PartialObjectMeta<Pod>` makes it a metadata-only list and watch; `Pod`, whole pods.
pub(super) async fn watch_pods<K: Observed>(
    client: Client,
    pods: SharedPods,
    dirty: Arc<Notify>,
    metrics: Arc<Metrics>,
) {
    let config = watcher::Config::default().labels(INJECTED_LABEL);
    let stream = watcher::watcher(Api::<K>::all(client), config)
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
                if let Some(r) = o.record(&mut names) {
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
                let r = o.record(&mut names);
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
