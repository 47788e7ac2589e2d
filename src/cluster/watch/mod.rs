//! The caches kept current by watches: the engine's index of Instrumentations (all
//! namespaces) and the namespaces in the engine's form, each updated in place from the watch
//! events (nothing else is kept of the objects); and, when exporter TLS references are
//! verified, reflector stores of Secret and ConfigMap names. The caches only read the
//! cluster; a writer that follows one (the namespace labeler) subscribes to its changes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, PartialObjectMeta};
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, Event};
use tokio::sync::{Notify, broadcast, watch};

mod instrumentations;
pub mod metrics;
mod namespaces;
#[cfg(test)]
mod tests;

use instrumentations::{InstrumentationCache, trim_instrumentation};
pub(crate) use instrumentations::{index_of, key_of, to_typed};
use metrics::Metrics;
use namespaces::{NAMESPACE_CHANGES, NamespaceCache};
pub use namespaces::{NamespaceChange, NamespaceEntry, NamespaceStore};

use super::apiserver::{self, ServerInfo};
use crate::crd::Instrumentation;
use crate::engine::{Catalog, Instrumentations, NamespaceInfo, ObjectKind, ObjectLookup};

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

type Index = Arc<RwLock<Arc<Instrumentations>>>;
type Server = Arc<RwLock<Option<ServerInfo>>>;

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

    /// Whether the namespace cache has completed its initial list.
    pub fn namespaces_synced(&self) -> bool {
        self.namespaces_synced.load(Ordering::Acquire)
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

    fn namespaces_asking(&self) -> Option<Vec<(String, Arc<NamespaceInfo>)>> {
        let entries = self.namespaces.read();
        Some(NamespaceInfo::asking(
            entries.iter().map(|(name, e)| (name, &e.info)),
        ))
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
    metrics: Arc<apiserver::Metrics>,
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
            keep_server_info(
                client.clone(),
                self.server,
                reconnected,
                metrics.apiserver.clone()
            ),
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
