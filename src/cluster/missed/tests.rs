//! Tests of `missed`.

use super::*;
use crate::keys::INJECT_JAVA;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// [`record`] with no selector anywhere.
fn unselected(
    meta: &ObjectMeta,
    namespace: Option<&NamespaceEntry>,
    excluded: &BTreeSet<String>,
    names: &mut Interner,
) -> Option<PodRecord> {
    record(
        meta,
        namespace,
        excluded,
        &Instrumentations::default(),
        names,
    )
}

fn text(kv: &[(&str, &str)]) -> Option<std::collections::BTreeMap<String, String>> {
    Some(
        kv.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    )
}

/// A pod of `shop` with these labels and annotations.
fn pod_in_shop(labels: &[(&str, &str)], annotations: &[(&str, &str)]) -> ObjectMeta {
    ObjectMeta {
        namespace: Some("shop".into()),
        labels: text(labels),
        annotations: text(annotations),
        ..Default::default()
    }
}

fn namespace(annotations: &[(&str, &str)], labels: &[(&str, &str)]) -> NamespaceEntry {
    let meta = ObjectMeta {
        name: Some("x".into()),
        annotations: text(annotations),
        labels: text(labels),
        ..Default::default()
    };
    NamespaceEntry::of(meta, &Arc::default()).1
}

#[test]
fn a_namespace_is_read_again_only_when_what_it_adds_to_its_pods_changes() {
    let store = NamespaceStore::default();
    let put = |name: &str, e: NamespaceEntry| {
        store.put(name, Some(e));
    };
    put("nothing", namespace(&[], &[]));
    put("shop", namespace(&[(INJECT_JAVA, "true")], &[]));
    let mut seen = Seen::of(&store);
    assert_eq!(
        seen.0.keys().collect::<Vec<_>>(),
        ["shop"],
        "only namespaces that add anything are kept"
    );
    // Unchanged, or a namespace that still adds nothing: nothing to read.
    assert!(!seen.update(&store, "shop"));
    put("nothing", namespace(&[], &[("team", "a")]));
    assert!(!seen.update(&store, "nothing"));
    // Starts asking, is opted out, stops asking: each time its pods are read again.
    put("nothing", namespace(&[(INJECT_JAVA, "true")], &[]));
    assert!(seen.update(&store, "nothing"));
    put(
        "shop",
        namespace(&[(INJECT_JAVA, "true")], &[(OPT_OUT_LABEL, OPT_OUT)]),
    );
    assert!(seen.update(&store, "shop"));
    put("shop", namespace(&[], &[]));
    assert!(seen.update(&store, "shop"));
    assert!(!seen.update(&store, "shop"));
    // A resync reports every namespace that differs, added or removed, once.
    put("a", namespace(&[(INJECT_JAVA, "true")], &[]));
    put("b", namespace(&[(INJECT_JAVA, "b/java")], &[]));
    store.put("nothing", None);
    assert_eq!(seen.update_all(&store), ["a", "b", "nothing"]);
    assert_eq!(seen.update_all(&store), Vec::<String>::new());
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
    assert!(unselected(&pod("shop"), Some(&plain), &excluded, names).is_some());
    assert!(unselected(&pod("shop"), None, &excluded, names).is_some());
    assert!(unselected(&pod("kube-system"), Some(&plain), &excluded, names).is_none());
    let opted_out = namespace(&[], &[(OPT_OUT_LABEL, OPT_OUT)]);
    assert!(unselected(&pod("shop"), Some(&opted_out), &excluded, names).is_none());
    let mut terminating = pod("shop");
    terminating.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
    assert!(unselected(&terminating, Some(&plain), &excluded, names).is_none());
    // The namespace's keys count: a pod that says nothing in a namespace that asks.
    let asking = namespace(&[(INJECT_JAVA, "true")], &[]);
    let bare = ObjectMeta {
        namespace: Some("shop".into()),
        ..Default::default()
    };
    assert!(unselected(&bare, Some(&asking), &excluded, names).is_some());
    assert!(unselected(&bare, Some(&plain), &excluded, names).is_none());
}

#[test]
fn a_pod_that_asks_only_by_annotation_in_a_namespace_that_asks_for_nothing_is_missed() {
    let names = &mut Interner::default();
    let excluded = BTreeSet::new();
    let pod = |annotations: &[(&str, &str)]| pod_in_shop(&[], annotations);
    let plain = namespace(&[], &[]);
    let r = record(
        &pod(&[(INJECT_JAVA, "true")]),
        Some(&plain),
        &excluded,
        &Instrumentations::default(),
        names,
    )
    .expect("asks by annotation");
    assert_eq!(r.entries.len(), 1);
    assert!(
        unselected(
            &pod(&[(INJECT_JAVA, "false")]),
            Some(&plain),
            &excluded,
            names
        )
        .is_none()
    );
    // Answered (an outcome) or no request: not missed.
    let answered = pod(&[
        (INJECT_JAVA, "true"),
        (crate::keys::STATUS_ANNOTATION, "java=skipped"),
    ]);
    assert!(unselected(&answered, Some(&plain), &excluded, names).is_none());
    assert!(unselected(&pod(&[]), Some(&plain), &excluded, names).is_none());
}

#[test]
fn a_namespace_read_again_replaces_only_its_own_records() {
    let r = |ns: &str, w: Option<&str>| {
        let names = &mut Interner::default();
        let meta = ObjectMeta {
            namespace: Some(ns.into()),
            labels: Some([(INJECT_JAVA.to_owned(), w.unwrap_or("true").to_owned())].into()),
            ..Default::default()
        };
        (
            Arc::<str>::from(ns),
            record(
                &meta,
                None,
                &BTreeSet::new(),
                &Instrumentations::default(),
                names,
            )
            .unwrap(),
        )
    };
    let mut m = Missed::default();
    assert!(m.set(1, Some(r("shop", None))));
    assert!(
        !m.set(1, Some(r("shop", None))),
        "the same record is no change"
    );
    assert!(m.set(2, Some(r("shop", None))));
    assert!(m.set(3, Some(r("other", None))));
    assert_eq!(m.len(), 3);
    // Same records: no change; one gone and one new: changed, `other` untouched.
    assert!(!m.replace_namespace("shop", [(1, r("shop", None)), (2, r("shop", None))].into()));
    assert!(m.replace_namespace("shop", [(1, r("shop", None)), (4, r("shop", None))].into()));
    let mut keys: Vec<u128> = m.pods.keys().copied().collect();
    keys.sort();
    assert_eq!(keys, [1, 3, 4]);
    // A changed record counts as a change.
    assert!(m.replace_namespace(
        "shop",
        [(1, r("shop", Some("java"))), (4, r("shop", None))].into()
    ));
    assert!(m.replace_namespace("shop", HashMap::new()));
    assert_eq!(m.len(), 1);
    assert!(m.set(3, None));
    assert!(m.is_empty() && m.records().is_empty());
}

#[test]
fn the_watch_selects_the_pods_the_webhook_did_not_answer() {
    assert_eq!(
        selector(),
        "!otel-injector/injected,otel-injector/inject!=disabled"
    );
}

#[test]
fn a_pod_a_selector_asks_for_is_missed_unless_a_key_decides() {
    let names = &mut Interner::default();
    let excluded = BTreeSet::new();
    let index: Instrumentations = crate::crd::parse_instrumentations(
        "apiVersion: opentelemetry.io/v1alpha1\nkind: Instrumentation\nmetadata:\n  name: java\n  namespace: platform\n  annotations:\n    otel-injector/selector: '{\"languages\": [\"java\"], \"namespaceSelector\": {\"matchLabels\": {\"env\": \"prod\"}}, \"podSelector\": {\"matchLabels\": {\"tier\": \"backend\"}}}'\nspec: {}\n",
    )
    .unwrap()
    .into_iter()
    .collect();
    let pod = pod_in_shop;
    let prod = namespace(&[], &[("env", "prod")]);
    let dev = namespace(&[], &[("env", "dev")]);
    let backend = pod(&[("tier", "backend")], &[]);
    let r = record(&backend, Some(&prod), &excluded, &index, names).expect("selected");
    assert_eq!(r.entries.len(), 1);
    assert_eq!(
        r.entries[0],
        crate::census::CountedEntry::Missed {
            instrumentation: names.str("platform/java")
        }
    );
    assert!(record(&backend, Some(&dev), &excluded, &index, names).is_none());
    assert!(
        record(
            &pod(&[("tier", "web")], &[]),
            Some(&prod),
            &excluded,
            &index,
            names
        )
        .is_none()
    );
    let off = pod(&[("tier", "backend")], &[(INJECT_JAVA, "false")]);
    assert!(
        record(&off, Some(&prod), &excluded, &index, names).is_none(),
        "a key decides"
    );
}
