//! Finds the pods that asked for injection and were admitted without an outcome: the
//! webhook was unreachable (`failurePolicy: Ignore` let them through) or not registered
//! yet when they were created. Every pod the webhook answers carries the label
//! `otel-injector/injected`; these do not.
//!
//! What can be seen without watching every pod of the cluster, and so what is watched
//! (metadata only, by label selectors the API server filters in its watch cache):
//! - pods that ask by **label** (`instrumentation.opentelemetry.io/inject-<lang>`): one
//!   watch per language, `inject-<lang>,!otel-injector/injected`, in all namespaces;
//! - pods of **namespaces that ask** (by annotation or label): one watch per such
//!   namespace, `!otel-injector/injected`, started and stopped as namespaces change.
//!
//! A pod that asks only by annotation, in a namespace that asks for nothing, cannot be
//! selected by the API server and is not found. Pods labeled `otel-injector/inject=disabled`,
//! of namespaces so labeled or excluded by name, and terminating pods are never counted.
//! Of each pod found, only its [`PodRecord`] (one `Missed` entry per language asked for) is
//! kept; normally there are none.

use std::collections::{BTreeSet, HashMap, HashSet};
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
use tokio::task::JoinHandle;

use super::labeler::wants_label;
use super::watch::{KubeCatalog, NamespaceChange};
use super::watch::{NamespaceEntry, NamespaceStore};
use crate::agents::{Language, LanguageSet};
use crate::census::{Interner, PodRecord};
use crate::engine::NamespaceInfo;
use crate::keys::INJECTED_LABEL;
use crate::keys::{OPT_OUT, OPT_OUT_LABEL};
use crate::metrics::registered;

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
                 controller's watches find them",
            ),
        }
    }
}

/// Where a record was found.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum RecordSource {
    Label(Language),
    Namespace(String),
}

/// The missed pods, per watch that found them (a pod may be found by several: a label in a
/// namespace that asks).
#[derive(Default)]
pub struct Missed {
    sources: HashMap<RecordSource, HashMap<u128, PodRecord>>,
}

impl Missed {
    /// Every missed pod once.
    pub fn records(&self) -> Vec<&PodRecord> {
        let mut seen = HashSet::new();
        self.sources
            .values()
            .flat_map(|m| m.iter())
            .filter(|(k, _)| seen.insert(**k))
            .map(|(_, r)| r)
            .collect()
    }

    /// How many pods are missed.
    pub fn len(&self) -> usize {
        let keys: HashSet<&u128> = self.sources.values().flat_map(|m| m.keys()).collect();
        keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

pub type SharedMissed = Arc<Mutex<Missed>>;

/// Whether a namespace's pods all ask (its annotations or labels ask, and it is not opted
/// out). The languages do not matter: the webhook answers, and labels, a pod that asks for a
/// language it does not inject too.
fn asks(entry: &NamespaceEntry) -> bool {
    entry.label.as_deref() != Some(OPT_OUT)
        && (wants_label(Some(&entry.info.labels), LanguageSet::all())
            || wants_label(Some(&entry.info.annotations), LanguageSet::all()))
}

/// The label selector of the watch of one source.
fn selector(source: &RecordSource) -> String {
    let not_answered = format!("!{INJECTED_LABEL},{OPT_OUT_LABEL}!={OPT_OUT}");
    match source {
        RecordSource::Label(l) => format!("{},{not_answered}", l.inject_annotation()),
        RecordSource::Namespace(_) => not_answered,
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

/// The record of one pod, if it counts as missed: not terminating, not in a namespace
/// `excluded` by name or labeled `otel-injector/inject=disabled`, and asking for injection
/// (with `namespace`'s keys) without an outcome.
pub fn record(
    meta: &ObjectMeta,
    namespace: Option<&NamespaceEntry>,
    excluded: &BTreeSet<String>,
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
    PodRecord::missed_from_meta(meta, info.keys(), names)
}

/// Every source to look in, given the namespaces.
fn sources<'a>(
    namespaces: impl IntoIterator<Item = (&'a String, &'a NamespaceEntry)>,
    excluded: &BTreeSet<String>,
) -> Vec<RecordSource> {
    let labels = Language::ALL.iter().map(|l| RecordSource::Label(*l));
    let asking = namespaces
        .into_iter()
        .filter(|(name, e)| asks(e) && !excluded.contains(*name))
        .map(|(name, _)| RecordSource::Namespace(name.clone()));
    labels.chain(asking).collect()
}

fn api(client: Client, source: &RecordSource) -> Api<PartialObjectMeta<Pod>> {
    match source {
        RecordSource::Label(_) => Api::all(client),
        RecordSource::Namespace(ns) => Api::namespaced(client, ns),
    }
}

/// The missed pods as listed now (for a rollout's plan): one list per source, each pod once.
pub async fn list(
    client: &Client,
    namespaces: &HashMap<String, NamespaceEntry>,
    excluded: &BTreeSet<String>,
    names: &mut Interner,
) -> kube::Result<Vec<PodRecord>> {
    let mut found: HashMap<u128, PodRecord> = HashMap::new();
    for source in sources(namespaces, excluded) {
        let params = ListParams::default().labels(&selector(&source));
        for pod in api(client.clone(), &source).list(&params).await? {
            let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
            if let Some(r) = record(&pod.metadata, namespaces.get(ns), excluded, names) {
                found.insert(PodRecord::key(&pod.metadata), r);
            }
        }
    }
    Ok(found.into_values().collect())
}

impl Finder {
    fn record(&self, pod: &PartialObjectMeta<Pod>, names: &mut Interner) -> Option<PodRecord> {
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        let entry = self.namespaces.get(ns);
        record(&pod.metadata, entry.as_ref(), &self.excluded, names)
    }

    fn changed(&self, update: impl FnOnce(&mut Missed) -> bool) {
        // Counted only on a change: most events (a missed pod's status moving) change nothing.
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

    /// Follows one source until dropped (aborted), keeping its records.
    async fn follow(self, client: Client, source: RecordSource) {
        let api = api(client, &source);
        let config = watcher::Config::default().labels(&selector(&source));
        let stream = watcher::watcher(api, config).backoff(crate::retry::WatchBackoff::default());
        let mut stream = std::pin::pin!(stream);
        let mut listing: HashMap<u128, PodRecord> = HashMap::new();
        let mut names = Interner::default();
        // The first pod found and the first failure of each watch are logged; the rest are
        // in the metric and the status.
        let (mut logged, mut failed) = (false, false);
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(Event::Init) => listing.clear(),
                Ok(Event::InitApply(o)) => {
                    if let Some(r) = self.record(&o, &mut names) {
                        listing.insert(PodRecord::key(&o.metadata), r);
                    }
                }
                Ok(Event::InitDone) => {
                    let listed = std::mem::take(&mut listing);
                    if !listed.is_empty() {
                        tracing::info!(?source, pods = listed.len(), "missed pods found");
                    }
                    self.changed(|m| {
                        let before = m.sources.insert(source.clone(), listed);
                        before.as_ref() != m.sources.get(&source)
                    });
                    names.compact();
                }
                Ok(Event::Apply(o)) => {
                    let key = PodRecord::key(&o.metadata);
                    let r = self.record(&o, &mut names);
                    if let Some(r) = &r
                        && !logged
                    {
                        tracing::warn!(namespace = o.metadata.namespace.as_deref().unwrap_or_default(), pod = o.metadata.name.as_deref().unwrap_or_default(), workload = ?r.workload.as_deref().map(ToString::to_string), "a pod that asked for injection was admitted without the webhook (unreachable, or not registered); counted as missed");
                        logged = true;
                    }
                    self.changed(|m| {
                        let records = m.sources.entry(source.clone()).or_default();
                        match r {
                            Some(r) if records.get(&key) == Some(&r) => false,
                            Some(r) => {
                                records.insert(key, r);
                                true
                            }
                            None => records.remove(&key).is_some(),
                        }
                    });
                }
                Ok(Event::Delete(o)) => {
                    let key = PodRecord::key(&o.metadata);
                    self.changed(|m| {
                        m.sources
                            .get_mut(&source)
                            .is_some_and(|r| r.remove(&key).is_some())
                    });
                }
                Err(e) if !failed => {
                    failed = true;
                    tracing::warn!(?source, error = %e, "missed-pod watch failed, retrying (list/watch on pods: manifests/components/status)");
                }
                Err(e) => tracing::debug!(?source, error = %e, "missed-pod watch failed, retrying"),
            }
        }
    }

    /// Runs the watches until dropped: one per language label, and one per namespace that
    /// asks, following the catalog's namespace cache.
    pub async fn run(self, client: Client, catalog: &KubeCatalog) {
        let mut changes = catalog.namespace_changes();
        let mut watches: HashMap<RecordSource, JoinHandle<()>> = HashMap::new();
        // Stops every task when this future is dropped.
        struct AbortAll<'a>(&'a mut HashMap<RecordSource, JoinHandle<()>>);
        impl Drop for AbortAll<'_> {
            fn drop(&mut self) {
                for t in self.0.values() {
                    t.abort();
                }
            }
        }
        let guard = AbortAll(&mut watches);
        loop {
            let wanted: HashSet<RecordSource> = {
                let store = self.namespaces.read();
                sources(store.iter(), &self.excluded).into_iter().collect()
            };
            let gone: Vec<RecordSource> = guard
                .0
                .keys()
                .filter(|s| !wanted.contains(*s))
                .cloned()
                .collect();
            for s in gone {
                if let Some(t) = guard.0.remove(&s) {
                    t.abort();
                    // Gone once this returns: it cannot write its records after the removal.
                    let _ = t.await;
                }
                tracing::debug!(?s, "missed-pod watch stopped: the namespace no longer asks");
                self.changed(|m| m.sources.remove(&s).is_some_and(|r| !r.is_empty()));
            }
            for s in wanted {
                if let std::collections::hash_map::Entry::Vacant(e) = guard.0.entry(s) {
                    let source = e.key().clone();
                    e.insert(tokio::spawn(self.clone().follow(client.clone(), source)));
                }
            }
            // Any change may start or stop a namespace's watch; a lag rereads them all.
            match changes.recv().await {
                Ok(NamespaceChange::Applied(_) | NamespaceChange::Resynced)
                | Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => {
                    std::future::pending::<()>().await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::INJECT_JAVA;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn namespace(annotations: &[(&str, &str)], labels: &[(&str, &str)]) -> NamespaceEntry {
        let text = |kv: &[(&str, &str)]| {
            Some(
                kv.iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            )
        };
        let meta = ObjectMeta {
            name: Some("x".into()),
            annotations: text(annotations),
            labels: text(labels),
            ..Default::default()
        };
        NamespaceEntry::of(meta, &Arc::default()).1
    }

    #[test]
    fn namespaces_that_ask_are_watched_unless_excluded_or_opted_out() {
        let entries: HashMap<String, NamespaceEntry> = [
            ("shop".to_owned(), namespace(&[(INJECT_JAVA, "true")], &[])),
            (
                "by-label".to_owned(),
                namespace(&[], &[(INJECT_JAVA, "java")]),
            ),
            (
                "quiet".to_owned(),
                namespace(&[(INJECT_JAVA, "false")], &[]),
            ),
            ("nothing".to_owned(), namespace(&[], &[])),
            (
                "opted-out".to_owned(),
                namespace(&[(INJECT_JAVA, "true")], &[(OPT_OUT_LABEL, OPT_OUT)]),
            ),
            (
                "kube-system".to_owned(),
                namespace(&[(INJECT_JAVA, "true")], &[]),
            ),
        ]
        .into();
        let excluded: BTreeSet<String> = ["kube-system".to_owned()].into();
        let mut found: Vec<String> = sources(&entries, &excluded)
            .into_iter()
            .filter_map(|s| match s {
                RecordSource::Namespace(n) => Some(n),
                RecordSource::Label(_) => None,
            })
            .collect();
        found.sort();
        assert_eq!(found, ["by-label", "shop"]);
        assert_eq!(
            sources(&HashMap::new(), &excluded).len(),
            Language::ALL.len(),
            "one watch per language label, always"
        );
    }

    #[test]
    fn pods_of_excluded_or_opted_out_namespaces_and_terminating_pods_are_not_missed() {
        let names = &mut Interner::default();
        let pod = |ns: &str| ObjectMeta {
            namespace: Some(ns.into()),
            labels: Some([(INJECT_JAVA.to_owned(), "true".to_owned())].into()),
            ..Default::default()
        };
        let excluded: BTreeSet<String> = ["kube-system".to_owned()].into();
        let plain = namespace(&[], &[]);
        assert!(record(&pod("shop"), Some(&plain), &excluded, names).is_some());
        assert!(record(&pod("shop"), None, &excluded, names).is_some());
        assert!(record(&pod("kube-system"), Some(&plain), &excluded, names).is_none());
        let opted_out = namespace(&[], &[(OPT_OUT_LABEL, OPT_OUT)]);
        assert!(record(&pod("shop"), Some(&opted_out), &excluded, names).is_none());
        let mut terminating = pod("shop");
        terminating.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        assert!(record(&terminating, Some(&plain), &excluded, names).is_none());
        // The namespace's keys count: a pod that says nothing in a namespace that asks.
        let asking = namespace(&[(INJECT_JAVA, "true")], &[]);
        let bare = ObjectMeta {
            namespace: Some("shop".into()),
            ..Default::default()
        };
        assert!(record(&bare, Some(&asking), &excluded, names).is_some());
        assert!(record(&bare, Some(&plain), &excluded, names).is_none());
    }

    #[test]
    fn records_of_several_sources_count_each_pod_once() {
        let r = PodRecord {
            workload: None,
            entries: Box::new([]),
            failure: None,
        };
        let mut m = Missed::default();
        m.sources.insert(
            RecordSource::Label(Language::Java),
            [(1, r.clone()), (2, r.clone())].into(),
        );
        m.sources.insert(
            RecordSource::Namespace("shop".into()),
            [(2, r.clone()), (3, r)].into(),
        );
        assert_eq!(m.len(), 3);
        assert_eq!(m.records().len(), 3);
    }

    #[test]
    fn each_source_selects_the_pods_the_webhook_did_not_answer() {
        assert_eq!(
            selector(&RecordSource::Label(Language::Java)),
            "instrumentation.opentelemetry.io/inject-java,!otel-injector/injected,otel-injector/inject!=disabled"
        );
        assert_eq!(
            selector(&RecordSource::Namespace("shop".into())),
            "!otel-injector/injected,otel-injector/inject!=disabled"
        );
    }
}
