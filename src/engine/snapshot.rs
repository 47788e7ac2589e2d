//! What one decision reads, taken from the caches once per request: the Instrumentations,
//! the pod's namespace, and (when tracked) which exporter TLS objects exist. Catalogs are
//! in-memory caches; nothing here ever calls the API server.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::agents::{Delivery, Language};
use crate::crd::{Instrumentation, SpecHash};
use crate::keys::{ANNOTATION_PREFIX, DELIVERY_ANNOTATION, POD_SECURITY_ENFORCE};
use crate::pod::select::Keys;

mod bases;
mod selectors;

pub use bases::{Based, MAX_BASES};
pub use selectors::SelectedBy;
use selectors::Selectors;

use super::config::{AgentDelivery, EngineConfig, GoSidecar, auto_image_volumes};
use super::selector::NAMESPACE_NAME_LABEL;

/// A source of snapshots: a cache kept current by watches, or a fixed set read from files.
pub trait Catalog: Send + Sync {
    /// Whether the cache has synced; before that no decision is made.
    fn ready(&self) -> bool;
    /// Every Instrumentation, as an immutable index (swapped whole when one changes).
    fn instrumentations(&self) -> Arc<Instrumentations>;
    /// What the engine reads of a namespace, when namespaces are watched.
    fn namespace(&self, name: &str) -> Option<Arc<NamespaceInfo>>;
    /// The namespaces whose own keys ask for injection ([`NamespaceInfo::asks`]), sorted by
    /// name, when the catalog holds every namespace.
    fn namespaces_asking(&self) -> Option<Vec<(String, Arc<NamespaceInfo>)>> {
        None
    }
    /// Which Secrets and ConfigMaps exist, when the catalog tracks them.
    fn objects(&self) -> Option<&dyn ObjectLookup> {
        None
    }
    /// The API server's version (major, minor), once known.
    fn server_version(&self) -> Option<(u32, u32)> {
        None
    }
    /// Whether the API server's `ImageVolume` feature gate is on, when it could be read.
    fn image_volume_gate(&self) -> Option<bool> {
        None
    }
}

/// Objects an Instrumentation can reference from the pod's namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ObjectKind {
    Secret,
    ConfigMap,
}

impl ObjectKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ObjectKind::Secret => "Secret",
            ObjectKind::ConfigMap => "ConfigMap",
        }
    }
}

/// Existence of Secrets and ConfigMaps, read from a cache.
pub trait ObjectLookup: Send + Sync {
    fn exists(&self, kind: ObjectKind, namespace: &str, name: &str) -> bool;
}

/// One Instrumentation in the index: the object, or why it cannot be read.
pub type IndexEntry = Result<Arc<Instrumentation>, String>;

/// An entry as read, what the engine uses of it (laid over its bases when it names one:
/// `bases`) and, when readable, that one's digest: computed once, when it enters the index
/// or one of its bases changes.
#[derive(Clone, Debug)]
struct Indexed {
    own: IndexEntry,
    entry: IndexEntry,
    spec_hash: Option<SpecHash>,
    based: Option<Arc<Based>>,
}

/// Every Instrumentation by namespace and name (sorted, so `true` sees a stable order).
#[derive(Clone, Debug, Default)]
pub struct Instrumentations {
    by_namespace: BTreeMap<String, BTreeMap<String, Indexed>>,
    /// For each Instrumentation some stand on (`namespace/name`, present or not): those that
    /// do, at any depth, so that its change resolves them again and no other.
    dependents: BTreeMap<String, BTreeSet<String>>,
    /// The selectors (`otel-injector/selector`), for lookup by namespace.
    selectors: Selectors,
}

impl Instrumentations {
    /// Adds (or replaces) one, keyed by its metadata; returns whether it replaced another.
    pub fn insert(&mut self, inst: Instrumentation) -> bool {
        self.insert_shared(Arc::new(inst))
    }

    /// Adds (or replaces) one already shared.
    pub fn insert_shared(&mut self, inst: Arc<Instrumentation>) -> bool {
        let namespace = inst.metadata.namespace.clone().unwrap_or_default();
        let name = inst.metadata.name.clone().unwrap_or_default();
        self.insert_entry(namespace, name, Ok(inst))
    }

    /// Records one that exists but cannot be read, with the reason.
    pub fn insert_unreadable(&mut self, namespace: &str, name: &str, error: String) -> bool {
        self.insert_entry(namespace.to_owned(), name.to_owned(), Err(error))
    }

    fn insert_entry(&mut self, namespace: String, name: String, own: IndexEntry) -> bool {
        let key = format!("{namespace}/{name}");
        self.selectors.update(&key, Some(&own));
        let indexed = self.indexed(&namespace, &name, own);
        let based = indexed.based.clone();
        let replaced = self
            .by_namespace
            .entry(namespace)
            .or_default()
            .insert(name, indexed);
        let old = replaced.as_ref().and_then(|r| r.based.as_deref());
        self.relink(&key, old, based.as_deref());
        self.resolve_dependents(&key);
        replaced.is_some()
    }

    /// Removes one, readable or not; returns whether it was there.
    pub fn remove(&mut self, namespace: &str, name: &str) -> bool {
        let Some(names) = self.by_namespace.get_mut(namespace) else {
            return false;
        };
        let Some(removed) = names.remove(name) else {
            return false;
        };
        if names.is_empty() {
            self.by_namespace.remove(namespace);
        }
        let key = format!("{namespace}/{name}");
        self.relink(&key, removed.based.as_deref(), None);
        self.selectors.update(&key, None);
        self.resolve_dependents(&key);
        true
    }

    pub fn get(&self, namespace: &str, name: &str) -> Option<&IndexEntry> {
        Some(&self.by_namespace.get(namespace)?.get(name)?.entry)
    }

    /// The object as read, before it is laid over its bases.
    pub fn own(&self, namespace: &str, name: &str) -> Option<&IndexEntry> {
        Some(&self.by_namespace.get(namespace)?.get(name)?.own)
    }

    /// Its bases and what it takes from them, when it names one.
    pub fn based(&self, namespace: &str, name: &str) -> Option<&Based> {
        self.by_namespace
            .get(namespace)?
            .get(name)?
            .based
            .as_deref()
    }

    /// The digest of a readable one's spec (what the pods it injects record).
    pub fn spec_hash(&self, namespace: &str, name: &str) -> Option<SpecHash> {
        self.by_namespace.get(namespace)?.get(name)?.spec_hash
    }

    /// The names of a namespace's Instrumentations, readable or not, in order.
    pub fn names_in(&self, namespace: &str) -> Vec<&str> {
        self.by_namespace
            .get(namespace)
            .into_iter()
            .flat_map(BTreeMap::keys)
            .map(String::as_str)
            .collect()
    }

    /// Every one, readable or not, by namespace then name, with its spec's digest when
    /// readable.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str, &IndexEntry, Option<SpecHash>)> {
        self.by_namespace.iter().flat_map(|(ns, by_name)| {
            by_name
                .iter()
                .map(move |(name, i)| (ns.as_str(), name.as_str(), &i.entry, i.spec_hash))
        })
    }

    /// How many there are, readable or not.
    pub fn len(&self) -> usize {
        self.by_namespace.values().map(BTreeMap::len).sum()
    }

    /// How many can be read.
    pub fn readable_len(&self) -> usize {
        self.by_namespace
            .values()
            .flat_map(BTreeMap::values)
            .filter(|i| i.entry.is_ok())
            .count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl FromIterator<Instrumentation> for Instrumentations {
    fn from_iter<T: IntoIterator<Item = Instrumentation>>(iter: T) -> Self {
        let mut index = Instrumentations::default();
        for inst in iter {
            index.insert(inst);
        }
        index
    }
}

/// What the engine reads of a namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NamespaceInfo {
    pub annotations: BTreeMap<String, String>,
    /// Its labels under `instrumentation.opentelemetry.io/` (a label wins over an annotation).
    pub labels: BTreeMap<String, String>,
    /// The Pod Security Admission level it enforces (`pod-security.kubernetes.io/enforce`).
    pub pod_security_enforce: Option<String>,
    /// Every label, for the selectors' `namespaceSelector` (`otel-injector/selector`).
    pub all_labels: BTreeMap<String, String>,
}

impl NamespaceInfo {
    /// Lays a namespace's annotations and labels over what is known, key by key: every
    /// annotation; of the labels, those under `instrumentation.opentelemetry.io/` and the
    /// Pod Security `enforce` level. The one place that decides which labels count.
    pub fn merge(
        &mut self,
        annotations: impl IntoIterator<Item = (String, String)>,
        labels: impl IntoIterator<Item = (String, String)>,
    ) {
        self.annotations.extend(annotations);
        for (k, v) in labels {
            // Every namespace has its name label: kept, none would share the empty entry.
            if k != NAMESPACE_NAME_LABEL {
                self.all_labels.insert(k.clone(), v.clone());
            }
            if k == POD_SECURITY_ENFORCE {
                self.pod_security_enforce = Some(v);
            } else if k.starts_with(ANNOTATION_PREFIX) {
                self.labels.insert(k, v);
            }
        }
    }

    /// Whether its own keys may ask for injection: an `inject-*` annotation or label (`"false"`
    /// included; what it asks is the engine's to read). A namespace without one asks for
    /// nothing, so its pods that have no key of their own need not be read.
    pub fn asks(&self) -> bool {
        (self.annotations.keys().chain(self.labels.keys()))
            .any(|k| k.starts_with(crate::keys::INJECT_PREFIX))
    }

    /// Of `namespaces`, those whose own keys ask ([`Self::asks`]), sorted by name: what a
    /// catalog that holds every namespace answers [`Catalog::namespaces_asking`] with.
    pub fn asking<'a>(
        namespaces: impl Iterator<Item = (&'a String, &'a Arc<NamespaceInfo>)>,
    ) -> Vec<(String, Arc<NamespaceInfo>)> {
        let mut asking: Vec<(String, Arc<NamespaceInfo>)> = namespaces
            .filter(|(_, info)| info.asks())
            .map(|(name, info)| (name.clone(), info.clone()))
            .collect();
        asking.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        asking
    }

    /// Whether its own keys may ask for `lang`: its `inject-<lang>` annotation or label
    /// (`"false"` included).
    pub fn asks_for(&self, lang: Language) -> bool {
        let key = lang.inject_annotation();
        self.annotations.contains_key(key) || self.labels.contains_key(key)
    }

    /// Its injection keys, labels winning over annotations.
    pub fn keys(&self) -> Keys<'_> {
        Keys {
            labels: Some(&self.labels),
            annotations: Some(&self.annotations),
        }
    }
}

/// Everything one decision reads, taken once per request.
pub struct Snapshot<'a> {
    /// The request's namespace (the pod's own may be empty on CREATE).
    pub namespace: &'a str,
    pub config: &'a EngineConfig,
    pub ready: bool,
    pub instrumentations: Arc<Instrumentations>,
    pub namespace_info: Option<Arc<NamespaceInfo>>,
    pub objects: Option<&'a dyn ObjectLookup>,
    /// Size of the pod's JSON as received (0 when unknown), for the size bound.
    pub pod_bytes: usize,
    /// The API server's version (major, minor), when known (for `auto` modes).
    pub server_version: Option<(u32, u32)>,
    /// The API server's `ImageVolume` feature gate, when it could be read (for `auto`).
    pub image_volume_gate: Option<bool>,
}

impl<'a> Snapshot<'a> {
    /// Reads the catalog once for a pod created in `namespace`.
    pub fn take(catalog: &'a dyn Catalog, namespace: &'a str, config: &'a EngineConfig) -> Self {
        Snapshot {
            namespace,
            config,
            ready: catalog.ready(),
            instrumentations: catalog.instrumentations(),
            namespace_info: catalog.namespace(namespace),
            objects: catalog.objects(),
            pod_bytes: 0,
            server_version: catalog.server_version(),
            image_volume_gate: catalog.image_volume_gate(),
        }
    }

    /// The same snapshot for a pod whose JSON is `bytes` long.
    pub fn with_pod_bytes(mut self, bytes: usize) -> Self {
        self.pod_bytes = bytes;
        self
    }

    /// Whether a Secret or ConfigMap exists in the pod's namespace; `None`: not tracked.
    pub fn object_exists(&self, kind: ObjectKind, name: &str) -> Option<bool> {
        Some(self.objects?.exists(kind, self.namespace, name))
    }

    /// The delivery for agents of `inst`: its annotation, else the flag; `auto` by the feature
    /// gate, else by version ([`auto_image_volumes`]).
    pub(super) fn delivery(&self, inst: &Instrumentation) -> Delivery {
        let config = self.config;
        let annotated = inst
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(DELIVERY_ANNOTATION))
            .and_then(|v| <AgentDelivery as clap::ValueEnum>::from_str(v.trim(), true).ok());
        let at_least = |minor: u32| self.server_version.is_some_and(|v| v >= (1, minor));
        let image_volumes = match annotated.unwrap_or(config.delivery) {
            AgentDelivery::InitContainer => false,
            AgentDelivery::ImageVolume => true,
            AgentDelivery::Auto => auto_image_volumes(self.server_version, self.image_volume_gate),
        };
        let native_sidecar = match config.go_sidecar {
            GoSidecar::Native => true,
            GoSidecar::Classic => false,
            GoSidecar::Auto => at_least(29),
        };
        Delivery {
            image_volumes,
            native_sidecar,
        }
    }
}
