//! The selectors in the index (`otel-injector/selector`), kept for lookup by a namespace's
//! labels: a request reads the few whose namespace side can match (those at home in the pod's
//! namespace, those keyed by one of its labels, the few with no label to key on), never all.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::super::selector::{NAMESPACE_NAME_LABEL, Selector};
use super::{IndexEntry, Instrumentations};
use crate::agents::Language;
use crate::keys::SELECTOR_ANNOTATION;

/// Every readable Instrumentation's selector, and the lookups.
#[derive(Clone, Debug, Default)]
pub(super) struct Selectors {
    /// By `namespace/name`: checked, or why it cannot be read.
    by_key: BTreeMap<String, Result<Arc<Selector>, String>>,
    /// Those with no `namespaceSelector`, by their own namespace.
    home: BTreeMap<String, BTreeSet<String>>,
    /// Those whose `namespaceSelector` has `matchLabels`, by its first pair (key, value).
    by_label: BTreeMap<String, BTreeMap<String, BTreeSet<String>>>,
    /// The others (`matchExpressions` only, or `{}`): read for every namespace.
    unkeyed: BTreeSet<String>,
}

/// Where a selector is found by lookup.
enum Lookup<'s> {
    /// No `namespaceSelector`: at home, in its own namespace.
    Home(&'s str),
    /// By the first pair of its `namespaceSelector`'s `matchLabels`.
    Label(&'s str, &'s str),
    /// Read for every namespace.
    Everywhere,
}

fn lookup<'s>(key: &'s str, s: &'s Selector) -> Lookup<'s> {
    match &s.namespace_selector {
        None => Lookup::Home(key.split_once('/').map_or("", |k| k.0)),
        Some(n) => match n.match_labels.iter().flatten().next() {
            Some((k, v)) => Lookup::Label(k, v),
            None => Lookup::Everywhere,
        },
    }
}

impl Selectors {
    /// Records (or forgets) the selector of `key` as `own` carries it.
    pub(super) fn update(&mut self, key: &str, own: Option<&IndexEntry>) {
        if let Some(Ok(old)) = self.by_key.remove(key) {
            self.set(&lookup(key, &old)).remove(key);
            self.prune(&lookup(key, &old));
        }
        let text = own
            .and_then(|o| o.as_ref().ok())
            .and_then(|i| i.metadata.annotations.as_ref()?.get(SELECTOR_ANNOTATION));
        let Some(text) = text else { return };
        let parsed = Selector::parse(text).map(Arc::new);
        if let Ok(s) = &parsed {
            self.set(&lookup(key, s)).insert(key.to_owned());
        }
        self.by_key.insert(key.to_owned(), parsed);
    }

    /// The keys found at `at`.
    fn set(&mut self, at: &Lookup<'_>) -> &mut BTreeSet<String> {
        match *at {
            Lookup::Home(ns) => self.home.entry(ns.to_owned()).or_default(),
            Lookup::Label(k, v) => self
                .by_label
                .entry(k.to_owned())
                .or_default()
                .entry(v.to_owned())
                .or_default(),
            Lookup::Everywhere => &mut self.unkeyed,
        }
    }

    /// Drops the set at `at` once empty.
    fn prune(&mut self, at: &Lookup<'_>) {
        match *at {
            Lookup::Home(ns) => {
                if self.home.get(ns).is_some_and(BTreeSet::is_empty) {
                    self.home.remove(ns);
                }
            }
            Lookup::Label(k, v) => {
                if let Some(values) = self.by_label.get_mut(k) {
                    if values.get(v).is_some_and(BTreeSet::is_empty) {
                        values.remove(v);
                    }
                    if values.is_empty() {
                        self.by_label.remove(k);
                    }
                }
            }
            Lookup::Everywhere => {}
        }
    }
}

impl Instrumentations {
    /// The selector of one, when it has one: checked, or why it cannot be read.
    pub fn selector(&self, namespace: &str, name: &str) -> Option<&Result<Arc<Selector>, String>> {
        self.selectors.by_key.get(&format!("{namespace}/{name}"))
    }

    /// Whether `other` holds the same selectors (what they select may differ otherwise).
    pub fn same_selectors(&self, other: &Instrumentations) -> bool {
        self.selectors.by_key == other.selectors.by_key
    }

    /// Every readable selector (`namespace/name` and the selector), by key.
    pub fn selectors(&self) -> impl Iterator<Item = (&str, &Selector)> {
        self.selectors
            .by_key
            .iter()
            .filter_map(|(k, s)| Some((k.as_str(), s.as_deref().ok()?)))
    }

    /// Whether any Instrumentation has a selector.
    pub fn has_selectors(&self) -> bool {
        !self.selectors.by_key.is_empty()
    }

    /// The selectors that select namespace `namespace` with `labels` (`namespace/name` and
    /// the selector): those of its own Instrumentations first, then by namespace and name.
    pub fn selecting<'s>(
        &'s self,
        namespace: &str,
        labels: &BTreeMap<String, String>,
    ) -> Vec<(&'s str, &'s Selector)> {
        let s = &self.selectors;
        if s.by_key.is_empty() {
            return Vec::new();
        }
        let mut keys: BTreeSet<&'s String> = s.unkeyed.iter().collect();
        keys.extend(s.home.get(namespace).into_iter().flatten());
        let pairs = labels.iter().map(|(k, v)| (k.as_str(), v.as_str()));
        for (k, v) in pairs.chain([(NAMESPACE_NAME_LABEL, namespace)]) {
            keys.extend(
                s.by_label
                    .get(k)
                    .and_then(|m| m.get(v))
                    .into_iter()
                    .flatten(),
            );
        }
        let mut out: Vec<(&'s str, &'s Selector)> = keys
            .into_iter()
            .filter_map(|k| match s.by_key.get(k) {
                Some(Ok(sel)) => Some((k.as_str(), sel.as_ref())),
                _ => None,
            })
            .filter(|(k, sel)| {
                let home = k.split_once('/').map_or("", |p| p.0);
                sel.selects_namespace(home, namespace, labels)
            })
            .collect();
        let home = format!("{namespace}/");
        out.sort_by_key(|(k, _)| (!k.starts_with(&home), *k));
        out
    }
}

/// The selector that asks for one language in a pod, and the next one that would have.
pub struct SelectedBy<'s> {
    pub language: Language,
    /// `namespace/name` of its Instrumentation.
    pub key: &'s str,
    pub selector: &'s Selector,
    /// The next selector that selects the pod for the language, when one does.
    pub also: Option<&'s str>,
}

impl Instrumentations {
    /// Per language, in the registry's order, the selector that asks for it in a pod of
    /// `namespace` (with `namespace_labels`) labeled `pod_labels`: the first of
    /// [`Self::selecting`]'s order. Whether the pod's keys let selectors ask at all is the
    /// caller's to decide (an explicit key decides for the whole pod).
    pub fn selected_for<'s>(
        &'s self,
        namespace: &str,
        namespace_labels: &BTreeMap<String, String>,
        pod_labels: Option<&BTreeMap<String, String>>,
    ) -> Vec<SelectedBy<'s>> {
        let selecting: Vec<(&'s str, &'s Selector)> = self
            .selecting(namespace, namespace_labels)
            .into_iter()
            .filter(|(_, s)| s.selects_pod(pod_labels))
            .collect();
        let mut out = Vec::new();
        for &language in Language::ALL {
            let mut matching = selecting
                .iter()
                .filter(|(_, s)| s.languages.contains(&language));
            if let Some(&(key, selector)) = matching.next() {
                out.push(SelectedBy {
                    language,
                    key,
                    selector,
                    also: matching.next().map(|(k, _)| *k),
                });
            }
        }
        out
    }
}
