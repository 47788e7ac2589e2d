//! The caches' tests: what each keeps of an object, and how lists and events fill them.

use super::*;
use crate::keys::LAST_APPLIED;
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
                // Every label a selector may read, but the name's (always there).
                all_labels: text(&[
                    ("team", "payments"),
                    ("instrumentation.opentelemetry.io/inject-python", "true"),
                    ("pod-security.kubernetes.io/enforce", "baseline"),
                    ("pod-security.kubernetes.io/warn", "restricted"),
                ]),
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
            crate::keys::CROSS_NAMESPACE_ANNOTATION.to_owned(),
            "allowed".to_owned(),
        ),
    ]));
    trim_instrumentation(&mut o);
    assert_eq!(o.metadata.managed_fields, None);
    assert_eq!(
        o.metadata.annotations,
        Some(BTreeMap::from([(
            crate::keys::CROSS_NAMESPACE_ANNOTATION.to_owned(),
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
