//! The in-memory catalog the engine reads: reflector stores over Instrumentations (all
//! namespaces) and namespace metadata, or Instrumentations read from files. The request
//! path only reads these; it never calls the API server.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{Api, PartialObjectMeta};
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, Event};
use kube::{Client, Resource};

use crate::crd::{Instrumentation, parse_instrumentations};
use crate::inject::{Catalog, ObjectKind};
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

/// A fixed catalog: Instrumentations read once from YAML files (`--instrumentation-file`),
/// or built in memory (tests, the offline engine). Namespace annotations only when given.
#[derive(Debug)]
pub struct StaticCatalog {
    by_key: HashMap<(String, String), Arc<Instrumentation>>,
    namespaces: HashMap<String, Arc<BTreeMap<String, String>>>,
    /// Known Secrets and ConfigMaps as (kind, namespace, name); `None`: not tracked.
    objects: Option<Vec<(ObjectKind, String, String)>>,
    ready: bool,
}

impl Default for StaticCatalog {
    fn default() -> Self {
        StaticCatalog {
            by_key: HashMap::new(),
            namespaces: HashMap::new(),
            objects: None,
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
}

/// The write side of a [`KubeCatalog`], consumed by [`CatalogWriters::watch`].
pub struct CatalogWriters {
    instrumentations: (reflector::store::Writer<Instrumentation>, Arc<AtomicBool>),
    namespaces: (reflector::store::Writer<Meta<Namespace>>, Arc<AtomicBool>),
    secrets: Option<(reflector::store::Writer<Meta<Secret>>, Arc<AtomicBool>)>,
    config_maps: Option<(reflector::store::Writer<Meta<ConfigMap>>, Arc<AtomicBool>)>,
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
        (
            KubeCatalog {
                instrumentations,
                namespaces,
                secrets,
                config_maps,
            },
            CatalogWriters {
                instrumentations: (iw, is),
                namespaces: (nw, ns),
                secrets: sw,
                config_maps: cw,
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
        let inst = watcher::watcher(Api::<Instrumentation>::all(client.clone()), cfg.clone())
            .default_backoff()
            .reflect(iw);
        let (nw, ns_synced) = self.namespaces;
        let ns_reader = nw.as_reader();
        let ns = watcher::watcher(Api::<Meta<Namespace>>::all(client.clone()), cfg)
            .default_backoff()
            .modify(|o| o.metadata.managed_fields = None)
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
