//! Reflector stores kept current by watches: Instrumentations (all namespaces), namespace
//! metadata, and (when exporter TLS references are verified) Secret and ConfigMap names.
//! The stores only read the cluster; a writer that follows a store (the namespace labeler)
//! subscribes to its changes.

use std::collections::{BTreeMap, HashMap};
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
use tokio::sync::{Notify, broadcast, watch};

use super::POD_SECURITY_ENFORCE;
use super::apiserver::{self, ServerInfo};
use super::labeler::NAMESPACE_LABEL;
use crate::agents::ANNOTATION_PREFIX;
use crate::crd::Instrumentation;
use crate::engine::{Catalog, Instrumentations, NamespaceInfo, ObjectKind, ObjectLookup};
use crate::metrics::Metrics;

/// One watched kind: the reader side of a reflector store and whether it has synced.
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

/// kubectl's copy of the last applied object, kept as an annotation.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Reflector stores kept current by watches; the readers exist before any client does, so
/// the webhook can answer (not ready) before the API server is reachable.
pub struct KubeCatalog {
    instrumentations: Watched<Instrumentation>,
    /// The engine's index of `instrumentations` (and of unreadable ones), rebuilt whole on
    /// every change so that a request takes it with one `Arc` clone.
    index: Index,
    /// The API server's version and feature gate, read once the client connects and again
    /// after a watch reconnects.
    server: Server,
    namespaces: Watched<Meta<Namespace>>,
    /// Names of Secrets and ConfigMaps (metadata only), when exporter TLS references are
    /// verified.
    objects: Option<Objects>,
    namespace_changes: broadcast::Sender<NamespaceChange>,
    /// Counts the rebuilds of `index`, for a follower of the Instrumentations (the status
    /// controller).
    instrumentation_changes: watch::Sender<u64>,
}

/// A change of the namespace store, sent once the store holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NamespaceChange {
    /// This namespace was added or changed.
    Applied(String),
    /// The store was (re)filled from a complete list: any namespace may have changed.
    Resynced,
}

/// Namespace changes a subscriber may fall behind by before it is told it lagged (and
/// rereads the whole store).
const NAMESPACE_CHANGES: usize = 1024;

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
    instrumentations: (reflector::store::Writer<Instrumentation>, Arc<AtomicBool>),
    index: Index,
    server: Server,
    namespaces: (reflector::store::Writer<Meta<Namespace>>, Arc<AtomicBool>),
    secrets: Option<(reflector::store::Writer<Meta<Secret>>, Arc<AtomicBool>)>,
    config_maps: Option<(reflector::store::Writer<Meta<ConfigMap>>, Arc<AtomicBool>)>,
    broken: Broken,
    namespace_changes: broadcast::Sender<NamespaceChange>,
    instrumentation_changes: watch::Sender<u64>,
}

impl KubeCatalog {
    /// `track_tls_objects`: also watch Secret and ConfigMap names, to report exporter TLS
    /// references that do not exist.
    pub fn new(track_tls_objects: bool) -> (Self, CatalogWriters) {
        let (instrumentations, iw, is) = Watched::new();
        let (namespaces, nw, ns) = Watched::new();
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
        let server = Server::default();
        let (namespace_changes, _) = broadcast::channel(NAMESPACE_CHANGES);
        let (instrumentation_changes, _) = watch::channel(0);
        (
            KubeCatalog {
                instrumentations,
                index: index.clone(),
                server: server.clone(),
                namespaces,
                objects,
                namespace_changes: namespace_changes.clone(),
                instrumentation_changes: instrumentation_changes.clone(),
            },
            CatalogWriters {
                instrumentations: (iw, is),
                index,
                server,
                namespaces: (nw, ns),
                secrets: sw,
                config_maps: cw,
                broken: Broken::default(),
                namespace_changes,
                instrumentation_changes,
            },
        )
    }

    /// The namespace store (for the labeler).
    pub fn namespace_store(&self) -> Store<Meta<Namespace>> {
        self.namespaces.store.clone()
    }

    /// What was last read of the API server.
    pub fn server_info(&self) -> Option<ServerInfo> {
        *self.server.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Changes of the Instrumentation index: the value (a count of rebuilds) changes after
    /// each rebuild, once [`Catalog::instrumentations`] returns the new index.
    pub fn instrumentation_changes(&self) -> watch::Receiver<u64> {
        self.instrumentation_changes.subscribe()
    }

    /// Whether the Instrumentation store has completed its initial list.
    pub fn instrumentations_synced(&self) -> bool {
        self.instrumentations.ready()
    }

    /// Whether the Secret and ConfigMap names are watched (`--verify-exporter-tls`) and
    /// synced: only then does [`Catalog::objects`] say what is missing.
    pub fn objects_synced(&self) -> bool {
        self.objects
            .as_ref()
            .is_some_and(|o| o.secrets.ready() && o.config_maps.ready())
    }

    /// Changes of the namespace store from now on, each sent after the store applied it.
    pub fn namespace_changes(&self) -> broadcast::Receiver<NamespaceChange> {
        self.namespace_changes.subscribe()
    }
}

impl Catalog for KubeCatalog {
    fn ready(&self) -> bool {
        // The version (and gate) decide `auto` modes: no decision before they are read.
        self.server_version().is_some()
            && self.instrumentations.ready()
            && self.namespaces.ready()
            && self
                .objects
                .as_ref()
                .is_none_or(|o| o.secrets.ready() && o.config_maps.ready())
    }

    fn instrumentations(&self) -> Arc<Instrumentations> {
        self.index.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn namespace(&self, name: &str) -> Option<Arc<NamespaceInfo>> {
        let ns = self.namespaces.store.get(&ObjectRef::new(name))?;
        let meta = &ns.metadata;
        let mut info = NamespaceInfo::default();
        info.merge(
            meta.annotations.clone().into_iter().flatten(),
            meta.labels.clone().into_iter().flatten(),
        );
        Some(Arc::new(info))
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

/// `(major, minor)` of a version as the API server reports it (`"1"`, `"37+"`).
pub fn parse_version(major: &str, minor: &str) -> Option<(u32, u32)> {
    let number = |s: &str| -> Option<u32> {
        let digits: String = s.chars().take_while(char::is_ascii_digit).collect();
        digits.parse().ok()
    };
    Some((number(major)?, number(minor)?))
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

/// Rebuilds the engine's index from the store and the unreadable objects.
fn rebuild(store: &Store<Instrumentation>, broken: &Broken, index: &Index) {
    let mut fresh = Instrumentations::default();
    for inst in store.state() {
        fresh.insert_shared(inst);
    }
    for ((ns, name), error) in broken.read().unwrap_or_else(|e| e.into_inner()).iter() {
        fresh.insert_unreadable(ns, name, error.clone());
    }
    *index.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(fresh);
}

/// Drives one watch into its store, keeping the metrics and the synced flag current.
async fn drive<K, S>(
    name: &'static str,
    stream: S,
    store: Store<K>,
    synced: Arc<AtomicBool>,
    metrics: Arc<Metrics>,
) where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: std::hash::Hash + Eq + Clone,
    S: Stream<Item = Result<Event<K>, watcher::Error>>,
{
    let mut stream = std::pin::pin!(stream);
    metrics.store(name, 0, false);
    while let Some(ev) = stream.next().await {
        match ev {
            Ok(Event::InitDone) => {
                synced.store(true, Ordering::Release);
                tracing::info!(store = name, objects = store.len(), "store synced");
                metrics.store(name, store.len(), true);
            }
            Ok(Event::Apply(_) | Event::Delete(_)) => {
                metrics.store(name, store.len(), synced.load(Ordering::Acquire));
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

/// Errors of Instrumentations that could not be read, by (namespace, name).
pub type Broken = Arc<RwLock<HashMap<(String, String), String>>>;

pub(super) fn key_of(o: &DynamicObject) -> (String, String) {
    (
        o.metadata.namespace.clone().unwrap_or_default(),
        o.metadata.name.clone().unwrap_or_default(),
    )
}

pub(super) fn to_typed(o: &DynamicObject) -> Result<Instrumentation, String> {
    serde_json::to_value(o)
        .and_then(serde_json::from_value)
        .map_err(|e| e.to_string())
}

/// An Instrumentation that carries only the metadata of `o` (to delete it from the store).
fn tombstone(o: DynamicObject) -> Instrumentation {
    Instrumentation {
        metadata: o.metadata,
        spec: Default::default(),
        status: None,
    }
}

/// Converts one untyped watch event; unreadable objects are recorded in `broken` (and
/// dropped, or deleted from the store if an earlier version was readable).
fn typed_event(
    ev: Result<Event<DynamicObject>, watcher::Error>,
    broken: &Broken,
    pending: &mut HashMap<(String, String), String>,
) -> Option<Result<Event<Instrumentation>, watcher::Error>> {
    let set = |key: (String, String), err: Option<String>| {
        let mut b = broken.write().unwrap_or_else(|e| e.into_inner());
        match err {
            Some(e) => {
                tracing::warn!(namespace = %key.0, name = %key.1, error = %e, "Instrumentation cannot be read; ignored");
                b.insert(key, e);
            }
            None => {
                b.remove(&key);
            }
        }
    };
    Some(Ok(match ev {
        Err(e) => return Some(Err(e)),
        Ok(Event::Init) => {
            pending.clear();
            Event::Init
        }
        Ok(Event::InitApply(o)) => match to_typed(&o) {
            Ok(i) => Event::InitApply(i),
            Err(e) => {
                tracing::warn!(namespace = ?o.metadata.namespace, name = ?o.metadata.name, error = %e, "Instrumentation cannot be read; ignored");
                pending.insert(key_of(&o), e);
                return None;
            }
        },
        Ok(Event::InitDone) => {
            *broken.write().unwrap_or_else(|e| e.into_inner()) = std::mem::take(pending);
            Event::InitDone
        }
        Ok(Event::Apply(o)) => match to_typed(&o) {
            Ok(i) => {
                set(key_of(&o), None);
                Event::Apply(i)
            }
            Err(e) => {
                set(key_of(&o), Some(e));
                Event::Delete(tombstone(o))
            }
        },
        Ok(Event::Delete(o)) => {
            set(key_of(&o), None);
            Event::Delete(tombstone(o))
        }
    }))
}

/// What the namespace store keeps of a namespace: its name, and the annotations and labels
/// that the engine and the labeler read (the injection keys, the Pod Security level, the
/// labeler's own label). Everything else, managed fields and kubectl's copy of the last
/// applied object above all, is dropped as each event arrives.
fn trim_namespace(o: &mut PartialObjectMeta<Namespace>) {
    fn kept(
        map: Option<BTreeMap<String, String>>,
        keep: impl Fn(&str) -> bool,
    ) -> Option<BTreeMap<String, String>> {
        let mut map = map?;
        map.retain(|k, _| keep(k));
        (!map.is_empty()).then_some(map)
    }
    let m = &mut o.metadata;
    let engine_key = |k: &str| k.starts_with(ANNOTATION_PREFIX);
    *m = ObjectMeta {
        name: m.name.take(),
        annotations: kept(m.annotations.take(), engine_key),
        labels: kept(m.labels.take(), |k| {
            engine_key(k) || k == POD_SECURITY_ENFORCE || k == NAMESPACE_LABEL
        }),
        ..ObjectMeta::default()
    };
}

/// What the store keeps of an Instrumentation: all but its managed fields and kubectl's
/// copy of the last applied object (a second copy of the whole spec).
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
    let stream = watcher::watcher(Api::<Meta<K>>::all(client), watcher::Config::default())
        .default_backoff()
        .modify(|o| {
            o.metadata.managed_fields = None;
            o.metadata.annotations = None;
            o.metadata.labels = None;
        })
        .reflect(writer);
    drive(name, stream, reader, synced, metrics).await;
}

impl CatalogWriters {
    /// Watches Instrumentations in all namespaces and namespace metadata (and, when
    /// tracked, Secret and ConfigMap names) until the process ends. Errors are retried with
    /// backoff; the stores keep their last content meanwhile.
    pub async fn watch(self, client: Client, metrics: Arc<Metrics>) {
        let cfg = watcher::Config::default();
        let (iw, is) = self.instrumentations;
        let inst_reader = iw.as_reader();
        // Watched untyped and converted one by one, so that a single object this build
        // cannot read is reported for itself instead of failing the whole list.
        let resource = ApiResource::erase::<Instrumentation>(&());
        let broken = self.broken.clone();
        let mut pending = HashMap::new();
        let (index, rebuild_store, rebuild_broken) =
            (self.index, inst_reader.clone(), self.broken.clone());
        let rebuilt = self.instrumentation_changes;
        let reconnected = Arc::new(Notify::new());
        let mut signal = reconnect_signal(reconnected.clone());
        let inst = watcher::watcher(
            Api::<DynamicObject>::all_with(client.clone(), &resource),
            cfg.clone(),
        )
        .default_backoff()
        .modify(trim_instrumentation)
        .filter_map(move |ev| std::future::ready(typed_event(ev, &broken, &mut pending)))
        .reflect(iw)
        .inspect(move |ev| {
            signal(matches!(ev, Ok(Event::Init)), ev.is_err());
            // The store is current here; during the initial list, rebuild once at the end.
            if let Ok(Event::InitDone | Event::Apply(_) | Event::Delete(_)) = ev {
                rebuild(&rebuild_store, &rebuild_broken, &index);
                rebuilt.send_modify(|n| *n = n.wrapping_add(1));
            }
        });
        let (nw, ns_synced) = self.namespaces;
        let ns_reader = nw.as_reader();
        let changes = self.namespace_changes;
        let ns = watcher::watcher(Api::<Meta<Namespace>>::all(client.clone()), cfg)
            .default_backoff()
            .modify(trim_namespace)
            .reflect(nw)
            .inspect(move |ev| {
                // After `reflect`: a subscriber that reads the store sees this change. (Objects
                // of a list reach the store together, at its end.)
                let change = match ev {
                    Ok(Event::Apply(o)) => o.metadata.name.clone().map(NamespaceChange::Applied),
                    Ok(Event::InitDone) => Some(NamespaceChange::Resynced),
                    _ => None,
                };
                if let Some(change) = change {
                    // No subscriber (the labeler is off): nothing to tell.
                    let _ = changes.send(change);
                }
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
        tokio::join!(
            keep_server_info(client.clone(), self.server, reconnected, metrics.clone()),
            drive("instrumentations", inst, inst_reader, is, metrics.clone()),
            drive("namespaces", ns, ns_reader, ns_synced, metrics.clone()),
            secrets,
            config_maps,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn dynamic(name: &str, spec: serde_json::Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "opentelemetry.io/v1alpha1", "kind": "Instrumentation",
            "metadata": {"name": name, "namespace": "shop"}, "spec": spec
        }))
        .unwrap()
    }

    fn kind(ev: &Option<Result<Event<Instrumentation>, watcher::Error>>) -> &'static str {
        match ev {
            Some(Ok(Event::Apply(_))) => "apply",
            Some(Ok(Event::Delete(_))) => "delete",
            Some(Ok(Event::Init)) => "init",
            Some(Ok(Event::InitApply(_))) => "init-apply",
            Some(Ok(Event::InitDone)) => "init-done",
            Some(Err(_)) => "error",
            None => "dropped",
        }
    }

    #[test]
    fn the_namespace_store_keeps_only_what_the_engine_and_the_labeler_read() {
        let mut ns: PartialObjectMeta<Namespace> = serde_json::from_value(json!({
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
        trim_namespace(&mut ns);
        assert_eq!(
            serde_json::to_value(&ns.metadata).unwrap(),
            json!({
                "name": "shop",
                "labels": {
                    "instrumentation.opentelemetry.io/inject-python": "true",
                    "pod-security.kubernetes.io/enforce": "baseline",
                    "otel-injector/inject": "true"
                },
                "annotations": {
                    "instrumentation.opentelemetry.io/inject-java": "true",
                    "instrumentation.opentelemetry.io/container-names": "app"
                }
            })
        );

        let mut plain: PartialObjectMeta<Namespace> = serde_json::from_value(json!({
            "apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
            "metadata": {"name": "plain", "labels": {"kubernetes.io/metadata.name": "plain"},
                         "annotations": {"owner": "x"}}
        }))
        .unwrap();
        trim_namespace(&mut plain);
        assert_eq!(
            serde_json::to_value(&plain.metadata).unwrap(),
            json!({"name": "plain"})
        );
    }

    #[test]
    fn the_instrumentation_store_drops_managed_fields_and_the_last_applied_copy() {
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
        let broken = Broken::default();
        let mut pending = HashMap::new();
        let good = dynamic("good", json!({"exporter": {"endpoint": "http://c:4318"}}));
        let bad = dynamic("bad", json!({"sampler": {"type": "not_a_sampler"}}));
        let mut step = |ev| typed_event(Ok(ev), &broken, &mut pending);

        assert_eq!(kind(&step(Event::Init)), "init");
        assert_eq!(kind(&step(Event::InitApply(good.clone()))), "init-apply");
        assert_eq!(kind(&step(Event::InitApply(bad.clone()))), "dropped");
        assert_eq!(kind(&step(Event::InitDone)), "init-done");
        let reason = |b: &Broken, n: &str| {
            b.read()
                .unwrap()
                .get(&("shop".to_owned(), n.to_owned()))
                .cloned()
        };
        assert!(reason(&broken, "bad").unwrap().contains("not_a_sampler"));
        assert_eq!(reason(&broken, "good"), None);

        // A good object turning bad is removed from the store and recorded; fixed, restored.
        let worse = dynamic("good", json!({"env": "not-a-list"}));
        assert_eq!(kind(&step(Event::Apply(worse))), "delete");
        assert!(reason(&broken, "good").is_some());
        assert_eq!(kind(&step(Event::Apply(good))), "apply");
        assert_eq!(reason(&broken, "good"), None);
        assert_eq!(kind(&step(Event::Delete(bad))), "delete");
        assert_eq!(reason(&broken, "bad"), None);
    }
}
