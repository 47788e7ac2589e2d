//! The in-memory catalog the engine reads: reflector stores over Instrumentations (all
//! namespaces) and namespace metadata, or Instrumentations read from files. The request
//! path only reads these; it never calls the API server.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{Api, ApiResource, DynamicObject, PartialObjectMeta};
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, Event};
use kube::{Client, Resource};

use crate::crd::{Instrumentation, parse_instrumentations};
use crate::inject::{Catalog, LanguageSet, ObjectKind};
use crate::metrics::Metrics;

/// Errors reading Instrumentation files.
#[derive(Debug, thiserror::Error)]
pub enum FileCatalogError {
    #[error("failed to read instrumentation file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("instrumentation file {path}: {source}")]
    Parse {
        path: PathBuf,
        source: crate::crd::CrdError,
    },
    #[error("instrumentation {0} is defined twice across --instrumentation-file files")]
    Duplicate(String),
}

/// The namespace label that sets the Pod Security Admission level enforced there.
pub const POD_SECURITY_ENFORCE: &str = "pod-security.kubernetes.io/enforce";

/// A fixed catalog: Instrumentations read once from YAML files (`--instrumentation-file`),
/// or built in memory (tests, the offline engine). Namespace annotations only when given.
#[derive(Debug)]
pub struct StaticCatalog {
    by_key: HashMap<(String, String), Arc<Instrumentation>>,
    namespaces: HashMap<String, Arc<BTreeMap<String, String>>>,
    /// Known Secrets and ConfigMaps as (kind, namespace, name); `None`: not tracked.
    objects: Option<Vec<(ObjectKind, String, String)>>,
    /// Instrumentations that exist but cannot be read, with the reason.
    unreadable: HashMap<(String, String), String>,
    /// Pod Security enforce level by namespace.
    pod_security: HashMap<String, String>,
    ready: bool,
}

impl Default for StaticCatalog {
    fn default() -> Self {
        StaticCatalog {
            by_key: HashMap::new(),
            namespaces: HashMap::new(),
            objects: None,
            unreadable: HashMap::new(),
            pod_security: HashMap::new(),
            ready: true,
        }
    }
}

impl StaticCatalog {
    /// Reads every file; fails on unreadable files, bad documents or duplicates.
    pub fn load(paths: &[impl AsRef<Path>]) -> Result<Self, FileCatalogError> {
        let mut catalog = StaticCatalog::default();
        for path in paths {
            let path = path.as_ref();
            let text = std::fs::read_to_string(path).map_err(|source| FileCatalogError::Read {
                path: path.to_owned(),
                source,
            })?;
            let items =
                parse_instrumentations(&text).map_err(|source| FileCatalogError::Parse {
                    path: path.to_owned(),
                    source,
                })?;
            catalog.extend(items)?;
        }
        Ok(catalog)
    }

    /// A catalog of these Instrumentations (from YAML text).
    pub fn from_yaml(yaml: &str) -> Result<Self, crate::crd::CrdError> {
        let mut c = StaticCatalog::default();
        for inst in parse_instrumentations(yaml)? {
            let key = (
                inst.metadata.namespace.clone().unwrap_or_default(),
                inst.metadata.name.clone().unwrap_or_default(),
            );
            c.by_key.insert(key, Arc::new(inst));
        }
        Ok(c)
    }

    fn extend(&mut self, items: Vec<Instrumentation>) -> Result<(), FileCatalogError> {
        for inst in items {
            let ns = inst.metadata.namespace.clone().unwrap_or_default();
            let name = inst.metadata.name.clone().unwrap_or_default();
            let key = format!("{ns}/{name}");
            if self.by_key.insert((ns, name), Arc::new(inst)).is_some() {
                return Err(FileCatalogError::Duplicate(key));
            }
        }
        Ok(())
    }

    /// Adds a namespace with these annotations.
    pub fn with_namespace(mut self, namespace: &str, annotations: &[(&str, &str)]) -> Self {
        let map = annotations
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        self.namespaces.insert(namespace.to_owned(), Arc::new(map));
        self
    }

    /// Tracks Secrets and ConfigMaps: these exist, any other does not.
    pub fn with_objects(mut self, objects: &[(ObjectKind, &str, &str)]) -> Self {
        let list = self.objects.get_or_insert_with(Vec::new);
        list.extend(
            objects
                .iter()
                .map(|(k, ns, n)| (*k, (*ns).to_owned(), (*n).to_owned())),
        );
        self
    }

    /// Sets the Pod Security level a namespace enforces.
    pub fn with_pod_security(mut self, namespace: &str, level: &str) -> Self {
        self.pod_security
            .insert(namespace.to_owned(), level.to_owned());
        self
    }

    /// Records an Instrumentation that exists but cannot be read.
    pub fn with_unreadable(mut self, namespace: &str, name: &str, error: &str) -> Self {
        self.unreadable
            .insert((namespace.to_owned(), name.to_owned()), error.to_owned());
        self
    }

    /// Marks the catalog as not (yet) synced.
    pub fn not_ready(mut self) -> Self {
        self.ready = false;
        self
    }

    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }
}

impl Catalog for StaticCatalog {
    fn ready(&self) -> bool {
        self.ready
    }

    fn instrumentation(&self, namespace: &str, name: &str) -> Option<Arc<Instrumentation>> {
        self.by_key
            .get(&(namespace.to_owned(), name.to_owned()))
            .cloned()
    }

    fn instrumentations_in(&self, namespace: &str) -> Vec<Arc<Instrumentation>> {
        let mut v: Vec<_> = self
            .by_key
            .iter()
            .filter(|((ns, _), _)| ns == namespace)
            .map(|(_, i)| i.clone())
            .collect();
        v.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        v
    }

    fn namespace_annotations(&self, namespace: &str) -> Option<Arc<BTreeMap<String, String>>> {
        self.namespaces.get(namespace).cloned()
    }

    fn pod_security_enforce(&self, namespace: &str) -> Option<String> {
        self.pod_security.get(namespace).cloned()
    }

    fn unreadable(&self, namespace: &str, name: &str) -> Option<String> {
        self.unreadable
            .get(&(namespace.to_owned(), name.to_owned()))
            .cloned()
    }

    fn object_exists(&self, kind: ObjectKind, namespace: &str, name: &str) -> Option<bool> {
        let objects = self.objects.as_ref()?;
        Some(
            objects
                .iter()
                .any(|(k, ns, n)| *k == kind && ns == namespace && n == name),
        )
    }
}

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

/// Reflector stores kept current by watches; the readers exist before any client does, so
/// the webhook can answer (not ready) before the API server is reachable.
pub struct KubeCatalog {
    instrumentations: Watched<Instrumentation>,
    namespaces: Watched<Meta<Namespace>>,
    /// Names of Secrets and ConfigMaps (metadata only), when exporter TLS references are
    /// verified.
    secrets: Option<Watched<Meta<Secret>>>,
    config_maps: Option<Watched<Meta<ConfigMap>>>,
    broken: Broken,
}

/// The write side of a [`KubeCatalog`], consumed by [`CatalogWriters::watch`].
pub struct CatalogWriters {
    instrumentations: (reflector::store::Writer<Instrumentation>, Arc<AtomicBool>),
    namespaces: (reflector::store::Writer<Meta<Namespace>>, Arc<AtomicBool>),
    secrets: Option<(reflector::store::Writer<Meta<Secret>>, Arc<AtomicBool>)>,
    config_maps: Option<(reflector::store::Writer<Meta<ConfigMap>>, Arc<AtomicBool>)>,
    broken: Broken,
}

impl KubeCatalog {
    /// `track_tls_objects`: also watch Secret and ConfigMap names, to report exporter TLS
    /// references that do not exist.
    pub fn new(track_tls_objects: bool) -> (Self, CatalogWriters) {
        let (instrumentations, iw, is) = Watched::new();
        let (namespaces, nw, ns) = Watched::new();
        let (secrets, sw) = if track_tls_objects {
            let (r, w, f) = Watched::new();
            (Some(r), Some((w, f)))
        } else {
            (None, None)
        };
        let (config_maps, cw) = if track_tls_objects {
            let (r, w, f) = Watched::new();
            (Some(r), Some((w, f)))
        } else {
            (None, None)
        };
        let broken = Broken::default();
        (
            KubeCatalog {
                instrumentations,
                namespaces,
                secrets,
                config_maps,
                broken: broken.clone(),
            },
            CatalogWriters {
                instrumentations: (iw, is),
                namespaces: (nw, ns),
                secrets: sw,
                config_maps: cw,
                broken,
            },
        )
    }
}

impl Catalog for KubeCatalog {
    fn ready(&self) -> bool {
        self.instrumentations.ready()
            && self.namespaces.ready()
            && self.secrets.as_ref().is_none_or(Watched::ready)
            && self.config_maps.as_ref().is_none_or(Watched::ready)
    }

    fn instrumentation(&self, namespace: &str, name: &str) -> Option<Arc<Instrumentation>> {
        self.instrumentations
            .store
            .get(&ObjectRef::new(name).within(namespace))
    }

    fn instrumentations_in(&self, namespace: &str) -> Vec<Arc<Instrumentation>> {
        let mut v: Vec<_> = self
            .instrumentations
            .store
            .state()
            .into_iter()
            .filter(|i| i.meta().namespace.as_deref() == Some(namespace))
            .collect();
        v.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        v
    }

    fn namespace_annotations(&self, namespace: &str) -> Option<Arc<BTreeMap<String, String>>> {
        let ns = self.namespaces.store.get(&ObjectRef::new(namespace))?;
        ns.metadata.annotations.clone().map(Arc::new)
    }

    fn pod_security_enforce(&self, namespace: &str) -> Option<String> {
        let ns = self.namespaces.store.get(&ObjectRef::new(namespace))?;
        ns.metadata
            .labels
            .as_ref()?
            .get(POD_SECURITY_ENFORCE)
            .cloned()
    }

    fn unreadable(&self, namespace: &str, name: &str) -> Option<String> {
        let b = self.broken.read().unwrap_or_else(|e| e.into_inner());
        b.get(&(namespace.to_owned(), name.to_owned())).cloned()
    }

    fn object_exists(&self, kind: ObjectKind, namespace: &str, name: &str) -> Option<bool> {
        match kind {
            ObjectKind::Secret => {
                let s = self.secrets.as_ref()?;
                Some(
                    s.store
                        .get(&ObjectRef::new(name).within(namespace))
                        .is_some(),
                )
            }
            ObjectKind::ConfigMap => {
                let c = self.config_maps.as_ref()?;
                Some(
                    c.store
                        .get(&ObjectRef::new(name).within(namespace))
                        .is_some(),
                )
            }
        }
    }
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
                        if s.code == 403 =>
                    {
                        " (check the ClusterRole in manifests/otel-injector.yaml)"
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

fn key_of(o: &DynamicObject) -> (String, String) {
    (
        o.metadata.namespace.clone().unwrap_or_default(),
        o.metadata.name.clone().unwrap_or_default(),
    )
}

fn to_typed(o: &DynamicObject) -> Result<Instrumentation, String> {
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
    /// With `label_namespaces` (the enabled languages), namespaces whose annotations ask for
    /// one of them are labeled (see [`crate::labeler`]).
    pub async fn watch(
        self,
        client: Client,
        metrics: Arc<Metrics>,
        label_namespaces: Option<LanguageSet>,
    ) {
        let cfg = watcher::Config::default();
        let (iw, is) = self.instrumentations;
        let inst_reader = iw.as_reader();
        // Watched untyped and converted one by one, so that a single object this build
        // cannot read is reported for itself instead of failing the whole list.
        let resource = ApiResource::erase::<Instrumentation>(&());
        let broken = self.broken.clone();
        let mut pending = HashMap::new();
        let inst = watcher::watcher(
            Api::<DynamicObject>::all_with(client.clone(), &resource),
            cfg.clone(),
        )
        .default_backoff()
        .filter_map(move |ev| std::future::ready(typed_event(ev, &broken, &mut pending)))
        .reflect(iw);
        let (nw, ns_synced) = self.namespaces;
        let ns_reader = nw.as_reader();
        let (label_tx, label_rx) = tokio::sync::mpsc::unbounded_channel();
        let retry_tx = label_tx.clone();
        let label_client = client.clone();
        let label_store = nw.as_reader();
        let labeler = async move {
            if let Some(enabled) = label_namespaces {
                crate::labeler::run(label_client, label_store, enabled, retry_tx, label_rx).await;
            }
        };
        let ns = watcher::watcher(Api::<Meta<Namespace>>::all(client.clone()), cfg)
            .default_backoff()
            .modify(|o| o.metadata.managed_fields = None)
            .inspect(move |ev| {
                if let Ok(Event::Apply(o) | Event::InitApply(o)) = ev
                    && let Some(enabled) = label_namespaces
                    && crate::labeler::change_for(o, enabled).is_some()
                    && let Some(name) = &o.metadata.name
                {
                    let _ = label_tx.send(name.clone());
                }
            })
            .reflect(nw);
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
            drive("instrumentations", inst, inst_reader, is, metrics.clone()),
            drive("namespaces", ns, ns_reader, ns_synced, metrics.clone()),
            secrets,
            config_maps,
            labeler,
        );
    }
}

/// Builds a client, retrying with backoff while the configuration cannot be loaded, so a
/// missing kubeconfig leaves the webhook serving (not ready) instead of exiting.
pub async fn connect(kubeconfig: Option<PathBuf>) -> Client {
    let mut delay = Duration::from_millis(500);
    loop {
        match try_connect(kubeconfig.as_deref()).await {
            Ok(c) => return c,
            Err(e) => {
                tracing::error!(error = %e, "cannot build a Kubernetes client; retrying in {delay:?}");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(30));
            }
        }
    }
}

async fn try_connect(kubeconfig: Option<&Path>) -> anyhow::Result<Client> {
    let config = match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await?
        }
        None => kube::Config::infer().await?,
    };
    Ok(Client::try_from(config)?)
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
