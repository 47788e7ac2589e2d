//! The caches kept current by watches: the engine's index of Instrumentations (all
//! namespaces) and the namespaces in the engine's form, each updated in place from the watch
//! events (nothing else is kept of the objects); and, when exporter TLS references are
//! verified, reflector stores of Secret and ConfigMap names. The caches only read the
//! cluster; a writer that follows one (the namespace labeler) subscribes to its changes.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, PartialObjectMeta};
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, Event};
use serde::Deserialize as _;
use tokio::sync::{Notify, broadcast, watch};

use super::apiserver::{self, ServerInfo};
use super::labeler::NAMESPACE_LABEL;
use crate::agents::ANNOTATION_PREFIX;
use crate::crd::{Instrumentation, InstrumentationSpec};
use crate::engine::{Catalog, Instrumentations, NamespaceInfo, ObjectKind, ObjectLookup};
use crate::metrics::Metrics;

/// One watched kind kept in a reflector store: its reader side and whether it has synced.
struct Watched<K: kube::Resource + 'static>
where
    K::DynamicType: std::hash::Hash + Eq + Clone,
{
    store: Store<K>,
    synced: Arc<AtomicBool>,
}

impl<K: kube::Resource + Clone + 'static> Watched<K>
where
    K::DynamicType: std::hash::Hash + Eq + Clone + Default,
{
    fn new() -> (Self, reflector::store::Writer<K>, Arc<AtomicBool>) {
        let (store, writer) = reflector::store();
        let synced = Arc::new(AtomicBool::new(false));
        (
            Watched {
                store,
                synced: synced.clone(),
            },
            writer,
            synced,
        )
    }

    fn ready(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }
}

type Meta<K> = PartialObjectMeta<K>;

use crate::keys::LAST_APPLIED;

/// Objects per page of a watch's initial list. Each page is held whole while it is decoded
/// (the response text, serde's buffer of it, the decoded objects), so the page bounds the
/// peak of a (re)start; client-go's default is 500, which with 500 Instrumentations as
/// `kubectl apply` leaves them (a copy of the spec, managed fields) is megabytes.
const LIST_PAGE: u32 = 100;

/// The caches the watches keep; the readers exist before any client does, so the webhook
/// can answer (not ready) before the API server is reachable.
pub struct KubeCatalog {
    /// The engine's index of Instrumentations (and of unreadable ones), swapped whole on
    /// every change so that a request takes it with one `Arc` clone.
    index: Index,
    instrumentations_synced: Arc<AtomicBool>,
    /// The API server's version and feature gate, read once the client connects and again
    /// after a watch reconnects.
    server: Server,
    namespaces: NamespaceStore,
    namespaces_synced: Arc<AtomicBool>,
    /// Names of Secrets and ConfigMaps (metadata only), when exporter TLS references are
    /// verified.
    objects: Option<Objects>,
    namespace_changes: broadcast::Sender<NamespaceChange>,
    /// Counts the rebuilds of `index`, for a follower of the Instrumentations (the status
    /// controller).
    instrumentation_changes: watch::Sender<u64>,
}

/// A change of the namespace cache, sent once the cache holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NamespaceChange {
    /// This namespace was added or changed.
    Applied(String),
    /// The cache was (re)filled from a complete list: any namespace may have changed.
    Resynced,
}

/// Namespace changes a subscriber may fall behind by before it is told it lagged (and
/// rereads the whole cache).
const NAMESPACE_CHANGES: usize = 1024;

type Index = Arc<RwLock<Arc<Instrumentations>>>;
type Server = Arc<RwLock<Option<ServerInfo>>>;

/// What the cache keeps of a namespace: what the engine reads, ready to hand to a request,
/// and the labeler's own label.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NamespaceEntry {
    /// Its injection annotations and labels and its Pod Security level
    /// ([`NamespaceInfo::merge`] decides which).
    pub info: Arc<NamespaceInfo>,
    /// The value of its [`NAMESPACE_LABEL`], when set.
    pub label: Option<String>,
}

impl NamespaceEntry {
    /// The entry of a namespace's metadata; `empty` is shared by every namespace that has
    /// nothing the engine reads (most of them).
    pub fn of(meta: ObjectMeta, empty: &Arc<NamespaceInfo>) -> (String, NamespaceEntry) {
        let mut labels = meta.labels.unwrap_or_default();
        let label = labels.remove(NAMESPACE_LABEL);
        let annotations = meta
            .annotations
            .unwrap_or_default()
            .into_iter()
            .filter(|(k, _)| k.starts_with(ANNOTATION_PREFIX));
        let mut info = NamespaceInfo::default();
        info.merge(annotations, labels);
        let info = if info == **empty {
            empty.clone()
        } else {
            Arc::new(info)
        };
        (
            meta.name.unwrap_or_default(),
            NamespaceEntry { info, label },
        )
    }
}

/// The namespaces by name, in the form the engine and the labeler read.
#[derive(Clone, Default)]
pub struct NamespaceStore(Arc<RwLock<HashMap<String, NamespaceEntry>>>);

impl NamespaceStore {
    /// One namespace's entry.
    pub fn get(&self, name: &str) -> Option<NamespaceEntry> {
        self.0
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
    }

    /// What the engine reads of one namespace (one `Arc` clone, under the read lock).
    pub fn info(&self, name: &str) -> Option<Arc<NamespaceInfo>> {
        self.0
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .map(|entry| entry.info.clone())
    }

    /// Every namespace's entry, read-locked: hold it briefly.
    pub fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, NamespaceEntry>> {
        self.0.read().unwrap_or_else(|e| e.into_inner())
    }

    /// The names of the namespaces whose entries match `filter`.
    pub fn names_where(&self, filter: impl Fn(&NamespaceEntry) -> bool) -> Vec<String> {
        self.0
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|(_, entry)| filter(entry))
            .map(|(name, _)| name.clone())
            .collect()
    }

    pub fn len(&self) -> usize {
        self.0.read().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

struct Objects {
    secrets: Watched<Meta<Secret>>,
    config_maps: Watched<Meta<ConfigMap>>,
}

impl ObjectLookup for Objects {
    fn exists(&self, kind: ObjectKind, namespace: &str, name: &str) -> bool {
        match kind {
            ObjectKind::Secret => {
                let key = ObjectRef::new(name).within(namespace);
                self.secrets.store.get(&key).is_some()
            }
            ObjectKind::ConfigMap => {
                let key = ObjectRef::new(name).within(namespace);
                self.config_maps.store.get(&key).is_some()
            }
        }
    }
}

/// The write side of a [`KubeCatalog`], consumed by [`CatalogWriters::watch`].
pub struct CatalogWriters {
    index: Index,
    instrumentations_synced: Arc<AtomicBool>,
    server: Server,
    namespaces: NamespaceStore,
    namespaces_synced: Arc<AtomicBool>,
    secrets: Option<(reflector::store::Writer<Meta<Secret>>, Arc<AtomicBool>)>,
    config_maps: Option<(reflector::store::Writer<Meta<ConfigMap>>, Arc<AtomicBool>)>,
    namespace_changes: broadcast::Sender<NamespaceChange>,
    instrumentation_changes: watch::Sender<u64>,
}

impl KubeCatalog {
    /// `track_tls_objects`: also watch Secret and ConfigMap names, to report exporter TLS
    /// references that do not exist.
    pub fn new(track_tls_objects: bool) -> (Self, CatalogWriters) {
        let (objects, sw, cw) = if track_tls_objects {
            let (secrets, sw, sf) = Watched::new();
            let (config_maps, cw, cf) = Watched::new();
            let objects = Objects {
                secrets,
                config_maps,
            };
            (Some(objects), Some((sw, sf)), Some((cw, cf)))
        } else {
            (None, None, None)
        };
        let index = Index::default();
        let instrumentations_synced = Arc::new(AtomicBool::new(false));
        let server = Server::default();
        let namespaces = NamespaceStore::default();
        let namespaces_synced = Arc::new(AtomicBool::new(false));
        let (namespace_changes, _) = broadcast::channel(NAMESPACE_CHANGES);
        let (instrumentation_changes, _) = watch::channel(0);
        (
            KubeCatalog {
                index: index.clone(),
                instrumentations_synced: instrumentations_synced.clone(),
                server: server.clone(),
                namespaces: namespaces.clone(),
                namespaces_synced: namespaces_synced.clone(),
                objects,
                namespace_changes: namespace_changes.clone(),
                instrumentation_changes: instrumentation_changes.clone(),
            },
            CatalogWriters {
                index,
                instrumentations_synced,
                server,
                namespaces,
                namespaces_synced,
                secrets: sw,
                config_maps: cw,
                namespace_changes,
                instrumentation_changes,
            },
        )
    }

    /// The namespace cache (for the labeler).
    pub fn namespace_store(&self) -> NamespaceStore {
        self.namespaces.clone()
    }

    /// What was last read of the API server.
    pub fn server_info(&self) -> Option<ServerInfo> {
        *self.server.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Changes of the Instrumentation index: the value (a count of changes) moves after
    /// each change, once [`Catalog::instrumentations`] returns the new index.
    pub fn instrumentation_changes(&self) -> watch::Receiver<u64> {
        self.instrumentation_changes.subscribe()
    }

    /// Whether the Instrumentation index has completed its initial list.
    pub fn instrumentations_synced(&self) -> bool {
        self.instrumentations_synced.load(Ordering::Acquire)
    }

    /// Whether the Secret and ConfigMap names are watched (`--verify-exporter-tls`) and
    /// synced: only then does [`Catalog::objects`] say what is missing.
    pub fn objects_synced(&self) -> bool {
        self.objects
            .as_ref()
            .is_some_and(|o| o.secrets.ready() && o.config_maps.ready())
    }

    /// Changes of the namespace cache from now on, each sent after the cache applied it.
    pub fn namespace_changes(&self) -> broadcast::Receiver<NamespaceChange> {
        self.namespace_changes.subscribe()
    }
}

impl Catalog for KubeCatalog {
    fn ready(&self) -> bool {
        // The version (and gate) decide `auto` modes: no decision before they are read.
        self.server_version().is_some()
            && self.instrumentations_synced.load(Ordering::Acquire)
            && self.namespaces_synced.load(Ordering::Acquire)
            && self
                .objects
                .as_ref()
                .is_none_or(|o| o.secrets.ready() && o.config_maps.ready())
    }

    fn instrumentations(&self) -> Arc<Instrumentations> {
        self.index.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn namespace(&self, name: &str) -> Option<Arc<NamespaceInfo>> {
        self.namespaces.info(name)
    }

    fn objects(&self) -> Option<&dyn ObjectLookup> {
        self.objects.as_ref().map(|o| o as &dyn ObjectLookup)
    }

    fn server_version(&self) -> Option<(u32, u32)> {
        self.server_info().map(|s| s.version)
    }

    fn image_volume_gate(&self) -> Option<bool> {
        self.server_info().and_then(|s| s.image_volume_gate)
    }
}

/// Reads the API server's version and `ImageVolume` gate into `server` (retrying until the
/// version is known), then again each time a watch reconnects (the API server may have been
/// restarted or upgraded meanwhile); the last reading stays in force during a re-read.
async fn keep_server_info(
    client: Client,
    server: Server,
    reconnected: Arc<Notify>,
    metrics: Arc<Metrics>,
) {
    loop {
        let found = apiserver::read_until_known(&client, &metrics).await;
        *server.write().unwrap_or_else(|e| e.into_inner()) = Some(found);
        reconnected.notified().await;
        tracing::info!("a watch reconnected; reading the API server's version and gate again");
    }
}

/// Tells `reconnected` when a watch starts over (a new list after its first one) or works
/// again after an error.
fn reconnect_signal(reconnected: Arc<Notify>) -> impl FnMut(bool, bool) {
    let (mut listed, mut failed) = (false, false);
    move |is_init, is_err| {
        if is_err {
            failed = true;
            return;
        }
        if (is_init && listed) || failed {
            reconnected.notify_one();
        }
        listed |= is_init;
        failed = false;
    }
}

/// Drives one watch whose events have been applied to their cache (`len`: the objects it
/// holds), keeping the metrics and the synced flag current.
async fn drive<K, S>(
    name: &'static str,
    stream: S,
    len: impl Fn() -> usize,
    synced: Arc<AtomicBool>,
    metrics: Arc<Metrics>,
) where
    S: Stream<Item = Result<Event<K>, watcher::Error>>,
{
    let mut stream = std::pin::pin!(stream);
    metrics.store(name, 0, false);
    while let Some(ev) = stream.next().await {
        match ev {
            Ok(Event::InitDone) => {
                synced.store(true, Ordering::Release);
                tracing::info!(store = name, objects = len(), "store synced");
                metrics.store(name, len(), true);
            }
            Ok(Event::Apply(_) | Event::Delete(_)) => {
                metrics.store(name, len(), synced.load(Ordering::Acquire));
            }
            Ok(Event::Init | Event::InitApply(_)) => {}
            Err(e) => {
                let hint = match &e {
                    watcher::Error::InitialListFailed(kube::Error::Api(s))
                    | watcher::Error::WatchStartFailed(kube::Error::Api(s))
                        if s.code == 404 =>
                    {
                        " (is the Instrumentation CRD installed? apply manifests/crd.yaml)"
                    }
                    watcher::Error::InitialListFailed(kube::Error::Api(s))
                    | watcher::Error::WatchStartFailed(kube::Error::Api(s))
                        if s.code == 403 && matches!(name, "secrets" | "configmaps") =>
                    {
                        " (--verify-exporter-tls needs the ClusterRole in manifests/components/verify-exporter-tls)"
                    }
                    watcher::Error::InitialListFailed(kube::Error::Api(s))
                    | watcher::Error::WatchStartFailed(kube::Error::Api(s))
                        if s.code == 403 =>
                    {
                        " (check the ClusterRole in manifests/base/otel-injector.yaml)"
                    }
                    _ => "",
                };
                tracing::warn!(store = name, error = %e, "watch failed, retrying{hint}");
            }
        }
    }
}

/// The kind of a watch event, its object gone into a cache.
fn shape<K>(ev: &Event<K>) -> Event<()> {
    match ev {
        Event::Apply(_) => Event::Apply(()),
        Event::Delete(_) => Event::Delete(()),
        Event::Init => Event::Init,
        Event::InitApply(_) => Event::InitApply(()),
        Event::InitDone => Event::InitDone,
    }
}

pub(super) fn key_of(o: &DynamicObject) -> (String, String) {
    (
        o.metadata.namespace.clone().unwrap_or_default(),
        o.metadata.name.clone().unwrap_or_default(),
    )
}

/// The typed Instrumentation of an untyped object, moved out of it (no copy of its JSON);
/// the error says why it cannot be read.
pub(super) fn to_typed(o: DynamicObject) -> Result<Instrumentation, String> {
    let DynamicObject {
        metadata, mut data, ..
    } = o;
    let mut field = |name: &str| data.get_mut(name).map(serde_json::Value::take);
    let spec = field("spec").ok_or_else(|| "missing field `spec`".to_owned())?;
    let status = field("status");
    let spec = InstrumentationSpec::deserialize(spec).map_err(|e| e.to_string())?;
    let status = match status {
        Some(s) => serde_json::from_value(s).map_err(|e| e.to_string())?,
        None => None,
    };
    Ok(Instrumentation {
        metadata,
        spec,
        status,
    })
}

/// The engine's index kept current by the Instrumentation watch: each event is decoded into
/// the typed object and goes into the index, readable or not. A change makes a new index
/// from the current one (a request keeps the index it took); the objects of a list go into a
/// fresh one, published when the list is complete.
struct InstrumentationCache {
    index: Index,
    /// The index being filled by a list in progress.
    listing: Option<Instrumentations>,
}

impl InstrumentationCache {
    fn current(&self) -> Arc<Instrumentations> {
        self.index.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn publish(&self, fresh: Instrumentations) {
        *self.index.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(fresh);
    }

    /// Puts one object into `index`: typed, or recorded as unreadable with the reason.
    fn put(index: &mut Instrumentations, o: DynamicObject) {
        let (namespace, name) = key_of(&o);
        match to_typed(o) {
            Ok(inst) => {
                index.insert(inst);
            }
            Err(e) => {
                tracing::warn!(%namespace, %name, error = %e, "Instrumentation cannot be read; ignored");
                index.insert_unreadable(&namespace, &name, e);
            }
        }
    }

    fn apply(&mut self, ev: Event<DynamicObject>) {
        match ev {
            Event::Init => self.listing = Some(Instrumentations::default()),
            Event::InitApply(o) => Self::put(self.listing.get_or_insert_default(), o),
            Event::InitDone => {
                let fresh = self.listing.take().unwrap_or_default();
                self.publish(fresh);
            }
            Event::Apply(o) => {
                let mut next = Instrumentations::clone(&self.current());
                Self::put(&mut next, o);
                self.publish(next);
            }
            Event::Delete(o) => {
                let (namespace, name) = key_of(&o);
                let mut next = Instrumentations::clone(&self.current());
                if next.remove(&namespace, &name) {
                    self.publish(next);
                }
            }
        }
    }
}

/// The namespace cache kept current by the namespace watch: each namespace in the engine's
/// form ([`NamespaceEntry`]), changed in place; the namespaces of a list go into a fresh map
/// that replaces the cache when the list is complete.
struct NamespaceCache {
    store: NamespaceStore,
    listing: Option<HashMap<String, NamespaceEntry>>,
    /// The entry of every namespace with nothing the engine reads.
    empty: Arc<NamespaceInfo>,
    changes: broadcast::Sender<NamespaceChange>,
}

impl NamespaceCache {
    fn apply(&mut self, ev: Event<Meta<Namespace>>) {
        let change = match ev {
            Event::Init => {
                self.listing = Some(HashMap::new());
                None
            }
            Event::InitApply(o) => {
                let (name, entry) = NamespaceEntry::of(o.metadata, &self.empty);
                self.listing.get_or_insert_default().insert(name, entry);
                None
            }
            Event::InitDone => {
                let mut fresh = self.listing.take().unwrap_or_default();
                fresh.shrink_to_fit();
                *self.store.0.write().unwrap_or_else(|e| e.into_inner()) = fresh;
                Some(NamespaceChange::Resynced)
            }
            Event::Apply(o) => {
                let (name, entry) = NamespaceEntry::of(o.metadata, &self.empty);
                let mut store = self.store.0.write().unwrap_or_else(|e| e.into_inner());
                store.insert(name.clone(), entry);
                Some(NamespaceChange::Applied(name))
            }
            Event::Delete(o) => {
                let name = o.metadata.name.unwrap_or_default();
                self.store
                    .0
                    .write()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&name);
                None
            }
        };
        // Sent after the cache holds the change, so a subscriber that reads it sees it. No
        // subscriber (the labeler is off): nothing to tell.
        if let Some(change) = change {
            let _ = self.changes.send(change);
        }
    }
}

/// What is kept of an Instrumentation: all but its managed fields and kubectl's copy of
/// the last applied object (a second copy of the whole spec).
fn trim_instrumentation(o: &mut DynamicObject) {
    o.metadata.managed_fields = None;
    if let Some(a) = o.metadata.annotations.as_mut() {
        a.remove(LAST_APPLIED);
    }
}

/// Watches one kind of object's metadata into a store, without the fields the engine never
/// reads (managed fields, annotations and labels make up most of their size).
async fn watch_names<K>(
    name: &'static str,
    client: Client,
    (writer, synced): (reflector::store::Writer<Meta<K>>, Arc<AtomicBool>),
    metrics: Arc<Metrics>,
) where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let reader = writer.as_reader();
    let config = watcher::Config::default().page_size(LIST_PAGE);
    let stream = watcher::watcher(Api::<Meta<K>>::all(client), config)
        .backoff(crate::retry::WatchBackoff::default())
        .modify(|o| {
            o.metadata.managed_fields = None;
            o.metadata.annotations = None;
            o.metadata.labels = None;
        })
        .reflect(writer);
    drive(name, stream, || reader.len(), synced, metrics).await;
}

impl CatalogWriters {
    /// Watches Instrumentations in all namespaces and namespace metadata (and, when
    /// tracked, Secret and ConfigMap names) until the process ends. Errors are retried with
    /// backoff; the caches keep their last content meanwhile.
    pub async fn watch(self, client: Client, metrics: Arc<Metrics>) {
        let cfg = watcher::Config::default().page_size(LIST_PAGE);
        // Watched untyped and converted one by one, so that a single object this build
        // cannot read is reported for itself instead of failing the whole list.
        let resource = ApiResource::erase::<Instrumentation>(&());
        let index = self.index.clone();
        let mut instrumentations = InstrumentationCache {
            index: self.index,
            listing: None,
        };
        let changed = self.instrumentation_changes;
        let reconnected = Arc::new(Notify::new());
        let mut signal = reconnect_signal(reconnected.clone());
        let inst = watcher::watcher(
            Api::<DynamicObject>::all_with(client.clone(), &resource),
            cfg.clone(),
        )
        .backoff(crate::retry::WatchBackoff::default())
        .modify(trim_instrumentation)
        .map(move |ev| {
            signal(matches!(ev, Ok(Event::Init)), ev.is_err());
            ev.map(|ev| {
                let shape = shape(&ev);
                // The index is published when the list completes and at each change after.
                let published = matches!(ev, Event::InitDone | Event::Apply(_) | Event::Delete(_));
                instrumentations.apply(ev);
                if published {
                    changed.send_modify(|n| *n = n.wrapping_add(1));
                }
                shape
            })
        });
        let ns_store = self.namespaces.clone();
        let mut namespaces = NamespaceCache {
            store: self.namespaces,
            listing: None,
            empty: Arc::default(),
            changes: self.namespace_changes,
        };
        let ns = watcher::watcher(Api::<Meta<Namespace>>::all(client.clone()), cfg)
            .backoff(crate::retry::WatchBackoff::default())
            .map(move |ev| {
                ev.map(|ev| {
                    let shape = shape(&ev);
                    namespaces.apply(ev);
                    shape
                })
            });
        let secrets = async {
            if let Some(w) = self.secrets {
                watch_names::<Secret>("secrets", client.clone(), w, metrics.clone()).await;
            }
        };
        let config_maps = async {
            if let Some(w) = self.config_maps {
                watch_names::<ConfigMap>("configmaps", client.clone(), w, metrics.clone()).await;
            }
        };
        let inst_len = move || {
            index
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .readable_len()
        };
        tokio::join!(
            keep_server_info(client.clone(), self.server, reconnected, metrics.clone()),
            drive(
                "instrumentations",
                inst,
                inst_len,
                self.instrumentations_synced,
                metrics.clone()
            ),
            drive(
                "namespaces",
                ns,
                || ns_store.len(),
                self.namespaces_synced,
                metrics.clone()
            ),
            secrets,
            config_maps,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::collections::BTreeMap;

    fn dynamic(name: &str, spec: serde_json::Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "opentelemetry.io/v1alpha1", "kind": "Instrumentation",
            "metadata": {"name": name, "namespace": "shop"}, "spec": spec
        }))
        .unwrap()
    }

    #[test]
    fn the_namespace_cache_keeps_only_what_the_engine_and_the_labeler_read() {
        let ns: PartialObjectMeta<Namespace> = serde_json::from_value(json!({
            "apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
            "metadata": {
                "name": "shop", "uid": "6f1c", "resourceVersion": "812",
                "creationTimestamp": "2026-11-30T08:00:00Z",
                "labels": {
                    "kubernetes.io/metadata.name": "shop", "team": "payments",
                    "instrumentation.opentelemetry.io/inject-python": "true",
                    "pod-security.kubernetes.io/enforce": "baseline",
                    "pod-security.kubernetes.io/warn": "restricted",
                    "otel-injector/inject": "true"
                },
                "annotations": {
                    "instrumentation.opentelemetry.io/inject-java": "true",
                    "instrumentation.opentelemetry.io/container-names": "app",
                    "kubectl.kubernetes.io/last-applied-configuration": "{\"apiVersion\":\"v1\"}",
                    "owner": "payments@example.com"
                },
                "managedFields": [{"manager": "kubectl", "operation": "Apply", "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {}}}],
                "finalizers": ["example.com/keep"]
            }
        }))
        .unwrap();
        let empty = Arc::new(NamespaceInfo::default());
        let (name, entry) = NamespaceEntry::of(ns.metadata, &empty);
        let text = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        };
        assert_eq!(name, "shop");
        assert_eq!(
            entry,
            NamespaceEntry {
                info: Arc::new(NamespaceInfo {
                    annotations: text(&[
                        ("instrumentation.opentelemetry.io/inject-java", "true"),
                        ("instrumentation.opentelemetry.io/container-names", "app"),
                    ]),
                    labels: text(&[("instrumentation.opentelemetry.io/inject-python", "true")]),
                    pod_security_enforce: Some("baseline".to_owned()),
                }),
                label: Some("true".to_owned()),
            }
        );
        assert!(!Arc::ptr_eq(&entry.info, &empty));

        let plain: PartialObjectMeta<Namespace> = serde_json::from_value(json!({
            "apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
            "metadata": {"name": "plain", "labels": {"kubernetes.io/metadata.name": "plain"},
                         "annotations": {"owner": "x"}}
        }))
        .unwrap();
        let (name, entry) = NamespaceEntry::of(plain.metadata, &empty);
        assert_eq!(name, "plain");
        assert_eq!(entry.label, None);
        // Nothing the engine reads: the shared empty entry, no allocation of its own.
        assert!(Arc::ptr_eq(&entry.info, &empty));
    }

    #[test]
    fn the_namespace_cache_follows_lists_and_changes_and_tells_after_applying() {
        let meta = |name: &str, java: Option<&str>| -> Meta<Namespace> {
            let mut m = PartialObjectMeta::<Namespace>::default();
            m.metadata.name = Some(name.to_owned());
            m.metadata.annotations = java.map(|v| {
                BTreeMap::from([(
                    "instrumentation.opentelemetry.io/inject-java".to_owned(),
                    v.to_owned(),
                )])
            });
            m
        };
        let (changes, mut told) = broadcast::channel(16);
        let store = NamespaceStore::default();
        let mut cache = NamespaceCache {
            store: store.clone(),
            listing: None,
            empty: Arc::default(),
            changes,
        };
        let java = |store: &NamespaceStore, n: &str| {
            store.info(n).and_then(|i| {
                i.annotations
                    .get("instrumentation.opentelemetry.io/inject-java")
                    .cloned()
            })
        };
        cache.apply(Event::Init);
        cache.apply(Event::InitApply(meta("a", Some("true"))));
        cache.apply(Event::InitApply(meta("b", None)));
        // A list reaches the cache whole, at its end.
        assert!(store.is_empty());
        cache.apply(Event::InitDone);
        assert_eq!(told.try_recv().unwrap(), NamespaceChange::Resynced);
        assert_eq!(store.len(), 2);
        assert_eq!(java(&store, "a").as_deref(), Some("true"));
        assert_eq!(java(&store, "b"), None);

        cache.apply(Event::Apply(meta("b", Some("my-inst"))));
        assert_eq!(
            told.try_recv().unwrap(),
            NamespaceChange::Applied("b".to_owned())
        );
        assert_eq!(java(&store, "b").as_deref(), Some("my-inst"));
        cache.apply(Event::Delete(meta("a", None)));
        assert_eq!(store.info("a"), None);
        assert_eq!(store.len(), 1);

        // A relist replaces the cache: what it no longer lists is gone.
        cache.apply(Event::Init);
        cache.apply(Event::InitApply(meta("c", None)));
        assert_eq!(store.len(), 1, "the old content serves until the list ends");
        cache.apply(Event::InitDone);
        assert_eq!(store.names_where(|_| true), ["c"]);
    }

    #[test]
    fn the_instrumentation_cache_drops_managed_fields_and_the_last_applied_copy() {
        let mut o = dynamic("java", json!({"exporter": {"endpoint": "http://c:4318"}}));
        o.metadata.managed_fields = Some(vec![Default::default()]);
        o.metadata.annotations = Some(BTreeMap::from([
            (LAST_APPLIED.to_owned(), "{\"spec\":{}}".to_owned()),
            (
                crate::engine::CROSS_NAMESPACE_ANNOTATION.to_owned(),
                "allowed".to_owned(),
            ),
        ]));
        trim_instrumentation(&mut o);
        assert_eq!(o.metadata.managed_fields, None);
        assert_eq!(
            o.metadata.annotations,
            Some(BTreeMap::from([(
                crate::engine::CROSS_NAMESPACE_ANNOTATION.to_owned(),
                "allowed".to_owned()
            )]))
        );
    }

    #[test]
    fn one_unreadable_instrumentation_does_not_fail_the_others() {
        let index = Index::default();
        let mut cache = InstrumentationCache {
            index: index.clone(),
            listing: None,
        };
        let good = dynamic("good", json!({"exporter": {"endpoint": "http://c:4318"}}));
        let bad = dynamic("bad", json!({"sampler": {"type": "not_a_sampler"}}));
        let now = || index.read().unwrap().clone();
        let reason = |n: &str| now().get("shop", n).and_then(|e| e.clone().err());
        let readable = |n: &str| now().get("shop", n).is_some_and(|e| e.is_ok());

        cache.apply(Event::Init);
        cache.apply(Event::InitApply(good.clone()));
        cache.apply(Event::InitApply(bad.clone()));
        assert!(now().is_empty(), "a list is published when complete");
        cache.apply(Event::InitDone);
        assert!(reason("bad").unwrap().contains("not_a_sampler"));
        assert!(readable("good"));
        assert_eq!((now().len(), now().readable_len()), (2, 1));
        assert!(now().spec_hash("shop", "good").is_some());
        assert_eq!(now().spec_hash("shop", "bad"), None);

        // A good object turning bad is recorded as unreadable; fixed, readable again.
        let taken = now();
        let worse = dynamic("good", json!({"env": "not-a-list"}));
        cache.apply(Event::Apply(worse));
        assert!(reason("good").is_some());
        assert!(
            taken.get("shop", "good").unwrap().is_ok(),
            "a request keeps the index it took"
        );
        cache.apply(Event::Apply(good));
        assert!(readable("good"));
        cache.apply(Event::Delete(bad));
        assert!(now().get("shop", "bad").is_none());
        assert_eq!(now().len(), 1);

        // An object without a spec is unreadable too.
        let mut bare = dynamic("bare", json!({}));
        bare.data = json!({});
        cache.apply(Event::Apply(bare));
        assert_eq!(reason("bare").as_deref(), Some("missing field `spec`"));
    }
}
