//! Finds the pods that asked for injection and were admitted without an outcome: the
//! webhook was unreachable (`failurePolicy: Ignore` let them through) or not registered
//! yet when they were created. Every pod the webhook answers carries the label
//! `otel-injector/injected`; these do not.
//!
//! One metadata-only watch, in all namespaces, of the pods without that label (and not
//! labeled `otel-injector/inject=disabled`): the API server filters it in its watch cache,
//! and it sees every way a pod asks: an `inject-*` annotation or label on the pod, or its
//! namespace's, or an Instrumentation's selector (`otel-injector/selector`; a change of the
//! selectors reads every pod again, as pods admitted before a selector are missed by it). The watch count does not grow with the namespaces that ask; its cost is
//! the metadata of the pods the webhook did not answer, read as they pass and dropped, of
//! which only a [`PodRecord`] (one `Missed` entry per language asked for) is kept for those
//! that asked, normally none. A namespace whose keys change has its pods read again (one
//! list of that namespace); more than [`RELIST_AT`] at once restart the watch instead.
//!
//! Pods of namespaces labeled `otel-injector/inject=disabled` or excluded by name, and
//! terminating pods, are never counted.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::{Api, ListParams, PartialObjectMeta};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::sync::{Notify, broadcast};

use super::watch::{KubeCatalog, NamespaceChange};
use super::watch::{NamespaceEntry, NamespaceStore};
use crate::census::{Interner, PodRecord};
use crate::engine::{Catalog as _, Instrumentations, NamespaceInfo};
use crate::keys::INJECTED_LABEL;
use crate::keys::{OPT_OUT, OPT_OUT_LABEL};
use crate::metrics::registered;

/// Namespaces changed at once (a resync of the namespace cache) above which the pod watch
/// is restarted (one list of the cluster) instead of one list per namespace.
pub const RELIST_AT: usize = 16;
/// Pods per page of a list.
const PAGE: u32 = 500;

/// The finder's series.
#[derive(Debug)]
pub struct Metrics {
    /// Pods found asking for injection without an outcome (admitted without the webhook).
    pub missed_pods: Gauge,
}

impl Metrics {
    /// The series, registered into `registry` (the status controller's).
    pub fn register(registry: &mut Registry) -> Self {
        Metrics {
            missed_pods: registered(
                registry,
                "pods_missed",
                "Pods that asked for injection and were admitted without an outcome (the webhook \
                 unreachable or not registered when they were created), as the status \
                 controller's watch finds them",
            ),
        }
    }
}

/// The missed pods, by [`PodRecord::key`], each with its namespace.
#[derive(Default)]
pub struct Missed {
    pods: HashMap<u128, (Arc<str>, PodRecord)>,
}

impl Missed {
    /// Every missed pod.
    pub fn records(&self) -> Vec<&PodRecord> {
        self.pods.values().map(|(_, r)| r).collect()
    }

    /// How many pods are missed.
    pub fn len(&self) -> usize {
        self.pods.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }

    /// Sets one pod's record (`None`: not missed); whether that changed anything.
    fn set(&mut self, key: u128, found: Option<(Arc<str>, PodRecord)>) -> bool {
        match found {
            Some(f) if self.pods.get(&key) == Some(&f) => false,
            Some(f) => {
                self.pods.insert(key, f);
                true
            }
            None => self.pods.remove(&key).is_some(),
        }
    }

    /// Replaces the records of one namespace with `found`; whether that changed anything.
    fn replace_namespace(&mut self, ns: &str, found: HashMap<u128, (Arc<str>, PodRecord)>) -> bool {
        let mut changed = false;
        self.pods.retain(|k, (n, r)| {
            let keep = &**n != ns || found.get(k).is_some_and(|(_, f)| f == r);
            changed |= !keep;
            keep
        });
        for (k, f) in found {
            changed |= self.pods.insert(k, f).is_none();
        }
        changed
    }
}

pub type SharedMissed = Arc<Mutex<Missed>>;

/// The label selector of the watch and of every list: the pods the webhook did not answer,
/// not opted out.
pub fn selector() -> String {
    format!("!{INJECTED_LABEL},{OPT_OUT_LABEL}!={OPT_OUT}")
}

/// The record of one pod, if it counts as missed: not terminating, not in a namespace
/// `excluded` by name or labeled `otel-injector/inject=disabled`, and asking for injection
/// (with `namespace`'s keys, or by a selector of `index`) without an outcome.
pub fn record(
    meta: &ObjectMeta,
    namespace: Option<&NamespaceEntry>,
    excluded: &BTreeSet<String>,
    index: &Instrumentations,
    names: &mut Interner,
) -> Option<PodRecord> {
    if meta.deletion_timestamp.is_some()
        || excluded.contains(meta.namespace.as_deref().unwrap_or_default())
        || namespace.is_some_and(|e| e.label.as_deref() == Some(OPT_OUT))
    {
        return None;
    }
    let empty = NamespaceInfo::default();
    let info = namespace.map_or(&empty, |e| &*e.info);
    let selected = || {
        let ns = meta.namespace.as_deref().unwrap_or_default();
        let by = index.selected_for(ns, &info.all_labels, meta.labels.as_ref());
        by.iter().map(|s| s.key.to_owned()).collect()
    };
    PodRecord::missed_from_meta(meta, info.keys(), selected, names)
}

/// Lists the pods without an outcome, page by page, through `found` (metadata only).
async fn list_pages(
    api: &Api<PartialObjectMeta<Pod>>,
    mut found: impl FnMut(&ObjectMeta),
) -> kube::Result<()> {
    let mut params = ListParams::default().labels(&selector()).limit(PAGE);
    loop {
        let page = api.list_metadata(&params).await?;
        for pod in &page.items {
            found(&pod.metadata);
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(c) => params = params.continue_token(&c),
            None => return Ok(()),
        }
    }
}

/// The missed pods as listed now (for a rollout's plan): one paged list of the cluster.
pub async fn list(
    client: &Client,
    namespaces: &HashMap<String, NamespaceEntry>,
    excluded: &BTreeSet<String>,
    index: &Instrumentations,
    names: &mut Interner,
) -> kube::Result<Vec<PodRecord>> {
    let mut found = Vec::new();
    list_pages(&Api::all(client.clone()), |meta| {
        let ns = meta.namespace.as_deref().unwrap_or_default();
        found.extend(record(meta, namespaces.get(ns), excluded, index, names));
    })
    .await?;
    Ok(found)
}

/// What a namespace adds to its pods' requests, when anything: compared to tell whether
/// its pods must be read again.
/// Its other labels do not count: the finder looks for pods that asked by key, and
/// selectors (which read them) are not among what it finds.
fn significant(entry: Option<NamespaceEntry>) -> Option<NamespaceEntry> {
    entry
        .map(|mut e| {
            if !e.info.all_labels.is_empty() {
                let mut info = NamespaceInfo::clone(&e.info);
                info.all_labels.clear();
                e.info = std::sync::Arc::new(info);
            }
            e
        })
        .filter(|e| e.label.is_some() || *e.info != NamespaceInfo::default())
}

/// The namespaces as the records were made: those that add anything.
#[derive(Default)]
struct Seen(HashMap<String, NamespaceEntry>);

impl Seen {
    fn of(store: &NamespaceStore) -> Self {
        let read = store.read();
        Seen(
            read.iter()
                .filter_map(|(n, e)| Some((n.clone(), significant(Some(e.clone()))?)))
                .collect(),
        )
    }

    /// Takes `name`'s entry from `store`; whether it differs from the one seen.
    fn update(&mut self, store: &NamespaceStore, name: &str) -> bool {
        let now = significant(store.get(name));
        if self.0.get(name) == now.as_ref() {
            return false;
        }
        match now {
            Some(e) => self.0.insert(name.to_owned(), e),
            None => self.0.remove(name),
        };
        true
    }

    /// Takes every entry from `store`; the names of those that differ.
    fn update_all(&mut self, store: &NamespaceStore) -> Vec<String> {
        let now = Seen::of(store);
        let mut changed: Vec<String> = now
            .0
            .iter()
            .filter(|(n, e)| self.0.get(*n) != Some(*e))
            .chain(self.0.iter().filter(|(n, _)| !now.0.contains_key(*n)))
            .map(|(n, _)| n.clone())
            .collect();
        changed.sort();
        changed.dedup();
        *self = now;
        changed
    }
}

/// What the finder reads and where it writes.
#[derive(Clone)]
pub struct Finder {
    pub namespaces: NamespaceStore,
    /// Namespaces the webhook configuration excludes by name.
    pub excluded: Arc<BTreeSet<String>>,
    pub missed: SharedMissed,
    /// Told after every change of the records.
    pub dirty: Arc<Notify>,
    pub metrics: Arc<Metrics>,
}

/// One run of the watch: the list being read, and what is logged once.
#[derive(Default)]
struct Watching {
    listing: HashMap<u128, (Arc<str>, PodRecord)>,
    /// The Instrumentations, for their selectors.
    index: Arc<Instrumentations>,
    names: Interner,
    logged: bool,
    failed: bool,
}

impl Finder {
    fn found(&self, meta: &ObjectMeta, w: &mut Watching) -> Option<(Arc<str>, PodRecord)> {
        let ns = meta.namespace.as_deref().unwrap_or_default();
        let entry = self.namespaces.get(ns);
        let r = record(meta, entry.as_ref(), &self.excluded, &w.index, &mut w.names)?;
        Some((w.names.str(ns), r))
    }

    fn changed(&self, update: impl FnOnce(&mut Missed) -> bool) {
        // Counted only on a change: most events (a pod's status moving) change nothing.
        let n = {
            let mut m = self.missed.lock().unwrap_or_else(|e| e.into_inner());
            update(&mut m).then(|| m.len())
        };
        if let Some(n) = n {
            self.metrics
                .missed_pods
                .set(i64::try_from(n).unwrap_or(i64::MAX));
            self.dirty.notify_one();
        }
    }

    fn event(&self, ev: watcher::Result<Event<PartialObjectMeta<Pod>>>, w: &mut Watching) {
        match ev {
            Ok(Event::Init) => w.listing.clear(),
            Ok(Event::InitApply(o)) => {
                if let Some(f) = self.found(&o.metadata, w) {
                    w.listing.insert(PodRecord::key(&o.metadata), f);
                }
            }
            Ok(Event::InitDone) => {
                let listed = std::mem::take(&mut w.listing);
                if !listed.is_empty() {
                    tracing::info!(pods = listed.len(), "missed pods found");
                }
                self.changed(|m| {
                    let changed = m.pods != listed;
                    m.pods = listed;
                    changed
                });
                w.names.compact();
            }
            Ok(Event::Apply(o)) => {
                let found = self.found(&o.metadata, w);
                if let Some((ns, r)) = &found
                    && !w.logged
                {
                    tracing::warn!(namespace = &**ns, pod = o.metadata.name.as_deref().unwrap_or_default(), workload = ?r.workload.as_deref().map(ToString::to_string), "a pod that asked for injection was admitted without the webhook (unreachable, or not registered); counted as missed");
                    w.logged = true;
                }
                self.changed(|m| m.set(PodRecord::key(&o.metadata), found));
            }
            Ok(Event::Delete(o)) => self.changed(|m| m.set(PodRecord::key(&o.metadata), None)),
            Err(e) if !w.failed => {
                w.failed = true;
                tracing::warn!(error = %e, "missed-pod watch failed, retrying (list/watch on pods: manifests/components/status)");
            }
            Err(e) => tracing::debug!(error = %e, "missed-pod watch failed, retrying"),
        }
    }

    /// Reads the pods of one namespace again (its keys changed), into the records and into
    /// the watch's list if one is being read (it may hold records made with the old keys).
    async fn reread(&self, client: &Client, ns: &str, w: &mut Watching) {
        let mut found = HashMap::new();
        let listed = list_pages(&Api::namespaced(client.clone(), ns), |meta| {
            if let Some(f) = self.found(meta, w) {
                found.insert(PodRecord::key(meta), f);
            }
        })
        .await;
        match listed {
            Ok(()) => {
                if !w.listing.is_empty() {
                    w.listing.retain(|_, (n, _)| &**n != ns);
                    w.listing.extend(found.clone());
                }
                self.changed(|m| m.replace_namespace(ns, found));
            }
            // The watch's next relist, or the namespace's next change, reads them.
            Err(e) => {
                tracing::warn!(namespace = ns, error = %e, "could not read the pods of a namespace whose keys changed")
            }
        }
    }

    /// Runs the watch until dropped, reading a namespace's pods again when its keys change.
    pub async fn run(self, client: Client, catalog: &KubeCatalog) {
        let mut changes = catalog.namespace_changes();
        let mut instrumentations = catalog.instrumentation_changes();
        // Records made before the namespaces are known would all be read again. (The flag is
        // set just after the cache's first `Resynced`, so it is polled.)
        while !catalog.namespaces_synced() {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        loop {
            let mut seen = Seen::of(&self.namespaces);
            let api = Api::<PartialObjectMeta<Pod>>::all(client.clone());
            let config = watcher::Config::default()
                .labels(&selector())
                .page_size(PAGE);
            let stream =
                watcher::watcher(api, config).backoff(crate::retry::WatchBackoff::default());
            let mut stream = std::pin::pin!(stream);
            let mut w = Watching {
                index: catalog.instrumentations(),
                ..Watching::default()
            };
            loop {
                tokio::select! {
                    ev = stream.next() => match ev {
                        Some(ev) => self.event(ev, &mut w),
                        None => break,
                    },
                    changed = instrumentations.changed() => {
                        if changed.is_err() {
                            return std::future::pending().await;
                        }
                        let index = catalog.instrumentations();
                        let selectors_changed = !index.same_selectors(&w.index);
                        w.index = index;
                        // A selector added or changed may ask for pods admitted long ago.
                        if selectors_changed {
                            tracing::info!("a selector changed: reading every pod without an outcome again");
                            break;
                        }
                    }
                    change = changes.recv() => {
                        // With selectors, any label of a namespace may change what asks.
                        let labels_count = w.index.has_selectors();
                        let changed = match change {
                            Ok(NamespaceChange::Applied(n)) => match seen.update(&self.namespaces, &n) || labels_count {
                                true => vec![n],
                                false => vec![],
                            },
                            Ok(NamespaceChange::Resynced)
                            | Err(broadcast::error::RecvError::Lagged(_)) => seen.update_all(&self.namespaces),
                            Err(broadcast::error::RecvError::Closed) => return std::future::pending().await,
                        };
                        if changed.len() > RELIST_AT {
                            tracing::info!(namespaces = changed.len(), "many namespaces changed: reading every pod without an outcome again");
                            break;
                        }
                        for ns in changed.iter().filter(|n| !self.excluded.contains(*n)) {
                            self.reread(&client, ns, &mut w).await;
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
