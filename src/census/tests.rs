//! Tests of `census`.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::tally::counted_for;
use super::*;
use crate::agents::Language;
use crate::crd::SpecHash;
use crate::engine::SkipReason;
use crate::keys::{INJECT_JAVA, INJECT_PYTHON, OPT_OUT, OPT_OUT_LABEL, STATUS_ANNOTATION};
use crate::pod::select::Keys;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

fn meta(name: &str, owner: Option<(&str, &str)>, hash: Option<&str>, status: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: Some("shop".into()),
        labels: hash.map(|h| [("pod-template-hash".to_owned(), h.to_owned())].into()),
        annotations: Some([(STATUS_ANNOTATION.to_owned(), status.to_owned())].into()),
        owner_references: owner.map(|(kind, name)| {
            vec![OwnerReference {
                api_version: "apps/v1".into(),
                kind: kind.into(),
                name: name.into(),
                uid: "u".into(),
                controller: Some(true),
                ..Default::default()
            }]
        }),
        ..Default::default()
    }
}

fn workload(kind: &str, name: &str) -> Workload {
    Workload {
        namespace: "shop".into(),
        kind: kind.into(),
        name: name.into(),
    }
}

#[test]
fn a_replica_set_named_after_its_template_hash_is_read_as_its_deployment() {
    let p = |owner, hash| {
        PodRecord::from_meta(
            &meta("p", owner, hash, "pod=skipped cache_not_ready"),
            &mut Interner::default(),
        )
        .unwrap()
        .workload
        .map(|w| Workload::clone(&w))
    };
    let cases = [
        (
            ("ReplicaSet", "web-7d9f"),
            Some("7d9f"),
            ("Deployment", "web"),
        ),
        (("ReplicaSet", "web-7d9f"), None, ("ReplicaSet", "web-7d9f")),
        (("ReplicaSet", "7d9f"), Some("7d9f"), ("ReplicaSet", "7d9f")),
        (("StatefulSet", "db"), None, ("StatefulSet", "db")),
    ];
    for (owner, hash, (kind, name)) in cases {
        assert_eq!(
            p(Some(owner), hash),
            Some(workload(kind, name)),
            "{owner:?}"
        );
    }
    assert_eq!(p(None, None), None);
    let names = &mut Interner::default();
    let mut unreadable = meta("p", None, None, "java=done");
    assert_eq!(PodRecord::from_meta(&unreadable, names), None);
    unreadable.annotations = None;
    assert_eq!(PodRecord::from_meta(&unreadable, names), None);
}

fn pod_meta(uid: Option<&str>, ns: &str, name: &str) -> ObjectMeta {
    ObjectMeta {
        uid: uid.map(str::to_owned),
        namespace: Some(ns.into()),
        name: Some(name.into()),
        ..Default::default()
    }
}

#[test]
fn pods_are_keyed_by_their_uid_as_sixteen_bytes() {
    assert_eq!(
        PodRecord::key(&pod_meta(
            Some("0f3c8a2e-4b71-4d7e-9a51-6c2d9e8b1f04"),
            "a",
            "b"
        )),
        0x0f3c8a2e_4b71_4d7e_9a51_6c2d9e8b1f04
    );
    // The same UID in another pod's metadata is the same pod (a Delete event's).
    assert_eq!(
        PodRecord::key(&pod_meta(
            Some("0f3c8a2e-4b71-4d7e-9a51-6c2d9e8b1f04"),
            "x",
            "y"
        )),
        0x0f3c8a2e_4b71_4d7e_9a51_6c2d9e8b1f04
    );
    // Not a UUID: a digest, stable, and different per pod.
    let odd = PodRecord::key(&pod_meta(Some("not-a-uuid"), "a", "b"));
    assert_eq!(odd, PodRecord::key(&pod_meta(Some("not-a-uuid"), "a", "b")));
    assert_ne!(odd, PodRecord::key(&pod_meta(Some("not-a-uuid"), "a", "c")));
    assert_ne!(
        PodRecord::key(&pod_meta(None, "a", "b")),
        PodRecord::key(&pod_meta(None, "b", "a"))
    );
    // 32 characters once the dashes are gone, but not hex: a digest too (which, unlike
    // a UUID's key, depends on the pod's name).
    let g = "0f3c8a2e-4b71-4d7e-9a51-6c2d9e8b1fzz";
    assert_ne!(
        PodRecord::key(&pod_meta(Some(g), "a", "b")),
        PodRecord::key(&pod_meta(Some(g), "a", "c"))
    );
}

#[test]
fn records_share_their_names_and_compaction_forgets_unheld_ones() {
    let names = &mut Interner::default();
    let status = "java=injected shop/java 01020304; python=skipped cache_not_ready; \
                  nodejs=skipped no_instrumentation shop/*";
    let a = PodRecord::from_meta(
        &meta("a", Some(("ReplicaSet", "web-h1")), Some("h1"), status),
        names,
    )
    .unwrap();
    let b = PodRecord::from_meta(
        &meta("b", Some(("ReplicaSet", "web-h1")), Some("h1"), status),
        names,
    )
    .unwrap();
    // The skip without an Instrumentation counts for none and is not kept.
    assert_eq!(
        a.entries[..],
        [
            CountedEntry::Injected {
                instrumentation: "shop/java".into(),
                spec: SpecHash([1, 2, 3, 4]),
                language: Some(Language::Java),
            },
            CountedEntry::Skipped {
                reason: SkipReason::NoInstrumentation,
                instrumentation: "shop/*".into()
            },
        ]
    );
    let (
        CountedEntry::Injected {
            instrumentation: ia,
            ..
        },
        CountedEntry::Injected {
            instrumentation: ib,
            ..
        },
    ) = (&a.entries[0], &b.entries[0])
    else {
        panic!("{a:?} {b:?}");
    };
    assert!(Arc::ptr_eq(ia, ib), "one name, held once");
    assert!(Arc::ptr_eq(
        a.workload.as_ref().unwrap(),
        b.workload.as_ref().unwrap()
    ));
    // Two strings and one workload.
    assert_eq!(names.len(), 3);
    drop(a);
    names.compact();
    assert_eq!(names.len(), 3, "b still holds them");
    drop(b);
    names.compact();
    assert!(names.is_empty());
}

#[test]
fn pods_are_counted_as_current_outdated_or_skipped_per_instrumentation_and_workload() {
    let current = SpecHash([1, 2, 3, 4]);
    let existing: BTreeMap<String, SpecHash> = [
        ("shop/java".to_owned(), current),
        ("solo/only".to_owned(), current),
    ]
    .into();
    let pods: Vec<PodRecord> = [
        meta(
            "a",
            Some(("ReplicaSet", "web-h1")),
            Some("h1"),
            "java=injected shop/java 01020304",
        ),
        meta(
            "b",
            Some(("ReplicaSet", "web-h1")),
            Some("h1"),
            "java=injected shop/java 0a0b0c0d",
        ),
        meta(
            "c",
            Some(("DaemonSet", "agent")),
            None,
            "java=skipped instrumentation_not_found shop/java",
        ),
        meta(
            "d",
            None,
            None,
            "java=injected shop/java 01020304; python=skipped instrumentation_not_found shop/py",
        ),
        meta("e", None, None, "java=injected gone/old 01020304"),
        meta(
            "f",
            Some(("StatefulSet", "db")),
            None,
            "nodejs=skipped no_instrumentation solo/*",
        ),
        meta("g", None, None, "pod=skipped cache_not_ready"),
    ]
    .iter()
    .filter_map(|m| PodRecord::from_meta(m, &mut Interner::default()))
    .collect();
    let c = census(&pods, &existing);
    assert_eq!(c.keys().collect::<Vec<_>>(), ["shop/java", "solo/only"]);
    let java = &c["shop/java"];
    assert_eq!(
        java.pods,
        Counts {
            current: 2,
            outdated: 1,
            skipped: [(SkipReason::InstrumentationNotFound, 1)].into(),
            missed: 0,
            failing: 0,
            selected: 0,
        }
    );
    assert_eq!(
        java.workloads[&workload("Deployment", "web")],
        Counts {
            current: 1,
            outdated: 1,
            skipped: BTreeMap::new(),
            missed: 0,
            failing: 0,
            selected: 0,
        }
    );
    let stale: Vec<_> = java.stale_workloads().map(|(w, _)| w.to_string()).collect();
    assert_eq!(stale, ["DaemonSet/shop/agent", "Deployment/shop/web"]);
    let solo = &c["solo/only"];
    assert_eq!(solo.pods.skipped_for_want_of_it(), 1);
    assert_eq!(
        solo.stale_workloads()
            .map(|(w, _)| w.to_string())
            .collect::<Vec<_>>(),
        ["StatefulSet/shop/db"]
    );
}

#[test]
fn a_pod_that_asks_without_an_outcome_is_missed_for_what_it_asks() {
    let names = &mut Interner::default();
    let map = |kv: &[(&str, &str)]| -> Option<BTreeMap<String, String>> {
        (!kv.is_empty()).then(|| {
            kv.iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        })
    };
    let pod = |labels: &[(&str, &str)], annotations: &[(&str, &str)]| ObjectMeta {
        namespace: Some("shop".into()),
        labels: map(labels),
        annotations: map(annotations),
        owner_references: meta("p", Some(("ReplicaSet", "web-h1")), None, "").owner_references,
        ..Default::default()
    };
    let none = BTreeMap::new();
    let no_keys = Keys {
        labels: None,
        annotations: None,
    };
    let missed = |m: &ObjectMeta, ns: Keys<'_>, names: &mut Interner| {
        PodRecord::missed_from_meta(m, ns, Vec::new, names).map(|r| {
            r.entries
                .iter()
                .map(|e| match e {
                    CountedEntry::Missed { instrumentation } => instrumentation.to_string(),
                    other => panic!("{other:?}"),
                })
                .collect::<Vec<_>>()
        })
    };
    // By label: `true` is the namespace's one, a name is in the pod's namespace, `ns/name`
    // is qualified; every language asked for is an entry.
    assert_eq!(
        missed(
            &pod(&[(INJECT_JAVA, "true"), (INJECT_PYTHON, "obs/py")], &[]),
            no_keys,
            names
        ),
        Some(vec!["shop/*".to_owned(), "obs/py".to_owned()])
    );
    assert_eq!(
        missed(&pod(&[], &[(INJECT_JAVA, "java")]), no_keys, names),
        Some(vec!["shop/java".to_owned()])
    );
    // The workload is the pod's controller, as for the counted pods.
    let r = PodRecord::missed_from_meta(
        &pod(&[(INJECT_JAVA, "true")], &[]),
        no_keys,
        Vec::new,
        names,
    )
    .unwrap();
    assert_eq!(
        r.workload.as_deref(),
        Some(&workload("ReplicaSet", "web-h1"))
    );
    // The namespace asks; the pod says nothing, or a name of its own, or `false`.
    let ns_annotations: BTreeMap<String, String> =
        [(INJECT_JAVA.to_owned(), "default".to_owned())].into();
    let asking = Keys {
        labels: Some(&none),
        annotations: Some(&ns_annotations),
    };
    assert_eq!(
        missed(&pod(&[], &[]), asking, names),
        Some(vec!["shop/default".to_owned()])
    );
    assert_eq!(
        missed(&pod(&[], &[(INJECT_JAVA, "mine")]), asking, names),
        Some(vec!["shop/mine".to_owned()])
    );
    assert_eq!(
        missed(&pod(&[], &[(INJECT_JAVA, "false")]), asking, names),
        None
    );
    // A label wins over the annotation of the same key.
    assert_eq!(
        missed(
            &pod(&[(INJECT_JAVA, "false")], &[(INJECT_JAVA, "true")]),
            no_keys,
            names
        ),
        None
    );
    // Asking for nothing; opted out; or answered by the webhook (an outcome): not missed.
    assert_eq!(missed(&pod(&[], &[]), no_keys, names), None);
    assert_eq!(
        missed(
            &pod(&[(INJECT_JAVA, "true"), (OPT_OUT_LABEL, OPT_OUT)], &[]),
            no_keys,
            names
        ),
        None
    );
    assert_eq!(
        missed(
            &pod(
                &[(INJECT_JAVA, "true")],
                &[(STATUS_ANNOTATION, "pod=skipped cache_not_ready")]
            ),
            no_keys,
            names
        ),
        None
    );
}

#[test]
fn missed_pods_count_for_the_instrumentation_they_asked_for_and_make_a_workload_stale() {
    let h = SpecHash([0; 4]);
    let existing: BTreeMap<String, SpecHash> = [("shop/java".to_owned(), h)].into();
    let names = &mut Interner::default();
    let deployment = Some(names.workload(workload("Deployment", "web")));
    let job = Some(names.workload(workload("Job", "once")));
    let record = |w: &Option<Arc<Workload>>, target: &str, names: &mut Interner| PodRecord {
        failure: None,
        workload: w.clone(),
        entries: [CountedEntry::Missed {
            instrumentation: names.str(target),
        }]
        .into(),
        selected_by: Box::default(),
    };
    let pods = [
        record(&deployment, "shop/*", names),
        record(&deployment, "shop/java", names),
        record(&job, "shop/java", names),
        record(&None, "shop/java", names),
        record(&None, "shop/gone", names),
    ];
    let c = census(&pods, &existing);
    let java = &c["shop/java"];
    assert_eq!(java.pods.missed, 4);
    assert_eq!(
        java.pods.current + java.pods.outdated + java.pods.skipped_total(),
        0
    );
    assert_eq!(java.workloads[&workload("Deployment", "web")].missed, 2);
    assert_eq!(
        java.stale_workloads()
            .map(|(w, _)| w.to_string())
            .collect::<Vec<_>>(),
        ["Deployment/shop/web"],
        "a Job is not restarted"
    );
}

#[test]
fn a_namespace_wildcard_counts_only_when_one_instrumentation_is_there() {
    let h = SpecHash([0; 4]);
    let two: BTreeMap<String, SpecHash> = [("ns/a".to_owned(), h), ("ns/b".to_owned(), h)].into();
    assert_eq!(counted_for("ns/*", &two), None);
    assert_eq!(counted_for("ns/a", &two), Some("ns/a"));
    assert_eq!(counted_for("ns/c", &two), None);
    let one: BTreeMap<String, SpecHash> = [("ns/a".to_owned(), h), ("nsx/b".to_owned(), h)].into();
    assert_eq!(counted_for("ns/*", &one), Some("ns/a"));
}

mod failures;

#[test]
fn pods_a_selector_asked_for_are_counted_as_selected_for_its_instrumentation() {
    let h = SpecHash([0; 4]);
    let existing: BTreeMap<String, SpecHash> = [
        ("platform/java".to_owned(), h),
        ("shop/python".to_owned(), h),
    ]
    .into();
    let names = &mut Interner::default();
    let status = format!("java=injected platform/java {h}; python=injected shop/python {h}");
    let mut selected = meta("a", Some(("StatefulSet", "db")), None, &status);
    selected.annotations.as_mut().unwrap().insert(
        crate::keys::SELECTED_BY_ANNOTATION.into(),
        "java=platform/java".into(),
    );
    let keyed = meta("b", Some(("StatefulSet", "db")), None, &status);
    let records: Vec<PodRecord> = [selected, keyed]
        .iter()
        .map(|m| PodRecord::from_meta(m, names).unwrap())
        .collect();
    assert_eq!(
        records[0]
            .selected_by
            .iter()
            .map(|s| &**s)
            .collect::<Vec<_>>(),
        ["platform/java"]
    );
    let tallies = census(&records, &existing);
    let db = workload("StatefulSet", "db");
    let java = &tallies["platform/java"];
    assert_eq!((java.pods.current, java.pods.selected), (2, 1));
    assert_eq!(java.workloads[&db].selected, 1);
    // The other language of the same pod was asked for by a key.
    assert_eq!(tallies["shop/python"].workloads[&db].selected, 0);

    // A pod admitted without an outcome that a selector selects: missed, and selected.
    let mut bare = meta("c", Some(("StatefulSet", "db")), None, "");
    bare.annotations = None;
    let missed = PodRecord::missed_from_meta(
        &bare,
        Keys::default(),
        || vec!["platform/java".to_owned()],
        names,
    )
    .unwrap();
    let tallies = census(std::slice::from_ref(&missed), &existing);
    let c = &tallies["platform/java"].workloads[&db];
    assert_eq!((c.missed, c.selected), (1, 1));
}
