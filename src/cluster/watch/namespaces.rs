//! The namespace cache: each namespace in the engine's form, and the changes it tells.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::watcher::Event;
use tokio::sync::broadcast;

use super::Meta;
use crate::engine::NamespaceInfo;
use crate::keys::{ANNOTATION_PREFIX, OPT_OUT_LABEL};

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
pub(super) const NAMESPACE_CHANGES: usize = 1024;

/// What the cache keeps of a namespace: what the engine reads, ready to hand to a request,
/// and the labeler's own label.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NamespaceEntry {
    /// Its injection annotations and labels and its Pod Security level
    /// ([`NamespaceInfo::merge`] decides which).
    pub info: Arc<NamespaceInfo>,
    /// The value of its [`OPT_OUT_LABEL`], when set.
    pub label: Option<String>,
}

impl NamespaceEntry {
    /// The entry of a namespace's metadata; `empty` is shared by every namespace that has
    /// nothing the engine reads (most of them).
    pub fn of(meta: ObjectMeta, empty: &Arc<NamespaceInfo>) -> (String, NamespaceEntry) {
        let mut labels = meta.labels.unwrap_or_default();
        let label = labels.remove(OPT_OUT_LABEL);
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

    /// Sets (`Some`) or removes one namespace's entry, as the cache would (for tests).
    #[cfg(test)]
    pub fn put(&self, name: &str, entry: Option<NamespaceEntry>) {
        let mut map = self.0.write().unwrap_or_else(|e| e.into_inner());
        match entry {
            Some(e) => map.insert(name.to_owned(), e),
            None => map.remove(name),
        };
    }

    pub fn len(&self) -> usize {
        self.0.read().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The namespace cache kept current by the namespace watch: each namespace in the engine's
/// form ([`NamespaceEntry`]), changed in place; the namespaces of a list go into a fresh map
/// that replaces the cache when the list is complete.
pub(super) struct NamespaceCache {
    pub(super) store: NamespaceStore,
    pub(super) listing: Option<HashMap<String, NamespaceEntry>>,
    /// The entry of every namespace with nothing the engine reads.
    pub(super) empty: Arc<NamespaceInfo>,
    pub(super) changes: broadcast::Sender<NamespaceChange>,
}

impl NamespaceCache {
    pub(super) fn apply(&mut self, ev: Event<Meta<Namespace>>) {
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
