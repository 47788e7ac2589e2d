//! Instrumentations read once from YAML files (`--instrumentation-file`), or built in memory
//! (tests, the offline engine); namespace annotations, and what was read of an API server,
//! only when given.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use super::apiserver::ServerInfo;
use crate::crd::{Instrumentation, parse_instrumentations};
use crate::engine::{Catalog, Instrumentations, NamespaceInfo, ObjectKind, ObjectLookup};

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

/// A fixed catalog.
#[derive(Debug)]
pub struct StaticCatalog {
    instrumentations: Arc<Instrumentations>,
    namespaces: HashMap<String, Arc<NamespaceInfo>>,
    /// Known Secrets and ConfigMaps as (kind, namespace, name); `None`: not tracked.
    objects: Option<KnownObjects>,
    ready: bool,
    /// What the `auto` modes read of an API server, when one was read (offline commands).
    server: Option<ServerInfo>,
}

/// Known Secrets and ConfigMaps; any other does not exist.
#[derive(Debug, Default)]
struct KnownObjects(Vec<(ObjectKind, String, String)>);

impl ObjectLookup for KnownObjects {
    fn exists(&self, kind: ObjectKind, namespace: &str, name: &str) -> bool {
        self.0
            .iter()
            .any(|(k, ns, n)| *k == kind && ns == namespace && n == name)
    }
}

impl Default for StaticCatalog {
    fn default() -> Self {
        StaticCatalog {
            instrumentations: Arc::default(),
            namespaces: HashMap::new(),
            objects: None,
            ready: true,
            server: None,
        }
    }
}

impl StaticCatalog {
    /// Reads every file; fails on unreadable files, bad documents or duplicates.
    pub fn load(paths: &[impl AsRef<Path>]) -> Result<Self, FileCatalogError> {
        let mut index = Instrumentations::default();
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
            for inst in items {
                let key = format!(
                    "{}/{}",
                    inst.metadata.namespace.as_deref().unwrap_or(""),
                    inst.metadata.name.as_deref().unwrap_or("")
                );
                if index.insert(inst) {
                    return Err(FileCatalogError::Duplicate(key));
                }
            }
        }
        Ok(StaticCatalog {
            instrumentations: Arc::new(index),
            ..Default::default()
        })
    }

    /// A catalog of these Instrumentations (from YAML text).
    pub fn from_yaml(yaml: &str) -> Result<Self, crate::crd::CrdError> {
        Ok(Self::new(parse_instrumentations(yaml)?))
    }

    /// A catalog of these Instrumentations.
    pub fn new(items: impl IntoIterator<Item = Instrumentation>) -> Self {
        StaticCatalog {
            instrumentations: Arc::new(items.into_iter().collect()),
            ..Default::default()
        }
    }

    /// A catalog of one Instrumentation, `namespace/name`, with an empty spec.
    #[cfg(test)]
    pub fn one(namespace: &str, name: &str) -> Self {
        let mut inst = Instrumentation::new(name, crate::crd::InstrumentationSpec::default());
        inst.metadata.namespace = Some(namespace.to_owned());
        Self::new([inst])
    }

    fn index(&mut self) -> &mut Instrumentations {
        Arc::make_mut(&mut self.instrumentations)
    }

    /// Adds a namespace with these annotations.
    pub fn with_namespace(mut self, namespace: &str, annotations: &[(&str, &str)]) -> Self {
        let info = self.namespace_entry(namespace);
        info.annotations = annotations
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        self
    }

    /// Adds these labels to a namespace.
    pub fn with_namespace_labels(mut self, namespace: &str, labels: &[(&str, &str)]) -> Self {
        let info = self.namespace_entry(namespace);
        info.merge(
            [],
            labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
        );
        self
    }

    fn namespace_entry(&mut self, namespace: &str) -> &mut NamespaceInfo {
        let entry = self.namespaces.entry(namespace.to_owned()).or_default();
        Arc::make_mut(entry)
    }

    /// Tracks Secrets and ConfigMaps: these exist, any other does not.
    pub fn with_objects(mut self, objects: &[(ObjectKind, &str, &str)]) -> Self {
        let list = self.objects.get_or_insert_with(KnownObjects::default);
        list.0.extend(
            objects
                .iter()
                .map(|(k, ns, n)| (*k, (*ns).to_owned(), (*n).to_owned())),
        );
        self
    }

    /// Sets what the engine reads of a namespace.
    pub fn with_namespace_info(mut self, namespace: &str, info: NamespaceInfo) -> Self {
        self.namespaces.insert(namespace.to_owned(), Arc::new(info));
        self
    }

    /// Sets the Pod Security level a namespace enforces.
    pub fn with_pod_security(mut self, namespace: &str, level: &str) -> Self {
        self.namespace_entry(namespace).pod_security_enforce = Some(level.to_owned());
        self
    }

    /// Records an Instrumentation that exists but cannot be read.
    pub fn with_unreadable(mut self, namespace: &str, name: &str, error: &str) -> Self {
        self.index()
            .insert_unreadable(namespace, name, error.to_owned());
        self
    }

    /// What the `auto` modes decide by: this API server's version and feature gate.
    pub fn with_server(mut self, server: ServerInfo) -> Self {
        self.server = Some(server);
        self
    }

    /// Marks the catalog as not (yet) synced.
    pub fn not_ready(mut self) -> Self {
        self.ready = false;
        self
    }

    pub fn len(&self) -> usize {
        self.instrumentations.len()
    }

    pub fn is_empty(&self) -> bool {
        self.instrumentations.is_empty()
    }
}

impl Catalog for StaticCatalog {
    fn ready(&self) -> bool {
        self.ready
    }

    fn instrumentations(&self) -> Arc<Instrumentations> {
        self.instrumentations.clone()
    }

    fn namespace(&self, name: &str) -> Option<Arc<NamespaceInfo>> {
        self.namespaces.get(name).cloned()
    }

    fn namespaces_asking(&self) -> Option<Vec<(String, Arc<NamespaceInfo>)>> {
        Some(NamespaceInfo::asking(self.namespaces.iter()))
    }

    fn objects(&self) -> Option<&dyn ObjectLookup> {
        self.objects.as_ref().map(|o| o as &dyn ObjectLookup)
    }

    fn server_version(&self) -> Option<(u32, u32)> {
        self.server.map(|s| s.version)
    }

    fn image_volume_gate(&self) -> Option<bool> {
        self.server.and_then(|s| s.image_volume_gate)
    }
}

/// Instrumentation files that `serve` reads once its listeners are bound: not ready, and
/// empty, until [`FileCatalog::load`] has read them all.
#[derive(Debug)]
pub struct FileCatalog {
    paths: Vec<PathBuf>,
    loaded: OnceLock<StaticCatalog>,
}

impl FileCatalog {
    /// A catalog of these files, none read yet.
    pub fn new(paths: Vec<PathBuf>) -> Self {
        FileCatalog {
            paths,
            loaded: OnceLock::new(),
        }
    }

    pub fn paths(&self) -> &[PathBuf] {
        &self.paths
    }

    /// Reads every file (blocking); the catalog is ready once this returns `Ok`. Returns the
    /// number of Instrumentations read. A second call reads nothing.
    pub fn load(&self) -> Result<usize, FileCatalogError> {
        self.load_then(|_| {})
    }

    /// [`FileCatalog::load`], calling `announce` with the number read just before the
    /// catalog becomes ready (so what it records, a metric, is there when `/readyz` says so).
    pub fn load_then(&self, announce: impl FnOnce(usize)) -> Result<usize, FileCatalogError> {
        if let Some(c) = self.loaded.get() {
            return Ok(c.len());
        }
        let catalog = StaticCatalog::load(&self.paths)?;
        let n = catalog.len();
        announce(n);
        let _ = self.loaded.set(catalog);
        Ok(n)
    }
}

impl Catalog for FileCatalog {
    fn ready(&self) -> bool {
        self.loaded.get().is_some_and(StaticCatalog::ready)
    }

    fn instrumentations(&self) -> Arc<Instrumentations> {
        self.loaded
            .get()
            .map_or_else(Arc::default, StaticCatalog::instrumentations)
    }

    fn namespace(&self, name: &str) -> Option<Arc<NamespaceInfo>> {
        self.loaded.get()?.namespace(name)
    }
}
