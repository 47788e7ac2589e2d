//! The status a census gives: counts, reasons, workloads, conditions and their times.

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::desired::*;
use super::*;
use crate::census::{Counts, Tally, Workload};
use crate::crd::InstrumentationSpec;
use crate::engine::SkipReason;
use crate::engine::{IndexEntry, ObjectKind, ObjectLookup};
use serde_json::json;

fn at(secs: i64) -> Time {
    Time(Timestamp::from_second(secs).unwrap())
}

fn inst(generation: i64) -> IndexEntry {
    let mut i = Instrumentation::new("java", InstrumentationSpec::default());
    i.metadata.namespace = Some("shop".into());
    i.metadata.generation = Some(generation);
    Ok(Arc::new(i))
}

fn workload(kind: &str, name: &str) -> Workload {
    Workload {
        namespace: "shop".into(),
        kind: kind.into(),
        name: name.into(),
    }
}

fn counts(current: u32, outdated: u32, skipped: &[(SkipReason, u32)]) -> Counts {
    Counts {
        current,
        outdated,
        skipped: skipped.iter().copied().collect(),
        missed: 0,
        failing: 0,
        selected: 0,
    }
}

const T0: i64 = 1_800_000_000;
const HASH: SpecHash = SpecHash([0x3f, 0x2a, 0x9c, 0x1b]);

/// Inputs about `entry` with the usual rest: the test hash, no pods, nothing missing or
/// verified, no previous status, at `T0`.
fn given(entry: &IndexEntry) -> Inputs<'_> {
    Inputs {
        entry,
        spec_hash: Some(HASH),
        tally: None,
        missing: &[],
        verified: false,
        detect_failures: false,
        rolled_back: &[],
        registration: None,
        previous: None,
        now: at(T0),
    }
}

#[test]
fn the_status_counts_reasons_workloads_and_conditions() {
    let missed = |mut c: Counts, n| {
        c.missed = n;
        c
    };
    let tally = Tally {
        failures: Default::default(),
        pods: missed(
            counts(
                3,
                2,
                &[
                    (SkipReason::InstrumentationNotFound, 1),
                    (SkipReason::ExporterTlsMissing, 4),
                ],
            ),
            1,
        ),
        workloads: [
            (workload("Deployment", "web"), missed(counts(3, 0, &[]), 1)),
            (workload("Deployment", "api"), counts(0, 2, &[])),
            (
                workload("DaemonSet", "agent"),
                counts(0, 0, &[(SkipReason::InstrumentationNotFound, 1)]),
            ),
        ]
        .into(),
    };
    let entry = inst(4);
    let s = desired(&Inputs {
        tally: Some(&tally),
        ..given(&entry)
    });
    assert_eq!(
        serde_json::to_value(&s).unwrap(),
        json!({
            "injected": 3, "outdated": 2, "skipped": 5, "missed": 1,
            "skippedReasons": [
                {"reason": "exporter_tls_missing", "pods": 4},
                {"reason": "instrumentation_not_found", "pods": 1}
            ],
            "workloads": [
                {"kind": "Deployment", "namespace": "shop", "name": "api", "injected": 0, "outdated": 2, "skipped": 0, "lastChangeTime": "2027-01-15T08:00:00Z"},
                {"kind": "DaemonSet", "namespace": "shop", "name": "agent", "injected": 0, "outdated": 0, "skipped": 1, "lastChangeTime": "2027-01-15T08:00:00Z"},
                {"kind": "Deployment", "namespace": "shop", "name": "web", "injected": 3, "outdated": 0, "skipped": 0, "missed": 1, "lastChangeTime": "2027-01-15T08:00:00Z"}
            ],
            "specHash": "3f2a9c1b",
            "observedGeneration": 4,
            "lastChangeTime": "2027-01-15T08:00:00Z",
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "Readable",
                 "message": "readable (exporter TLS references are checked with --verify-exporter-tls)",
                 "observedGeneration": 4, "lastTransitionTime": "2027-01-15T08:00:00Z"},
                {"type": "Degraded", "status": "False", "reason": "AsExpected",
                 "message": "no problem found",
                 "observedGeneration": 4, "lastTransitionTime": "2027-01-15T08:00:00Z"}
            ]
        })
    );

    // A minute later, one web pod more: the totals' and web's times move, the others' stay.
    let mut more = tally.clone();
    more.pods.current = 4;
    more.workloads
        .insert(workload("Deployment", "web"), missed(counts(4, 0, &[]), 1));
    let later = desired(&Inputs {
        tally: Some(&more),
        previous: Some(&s),
        now: at(T0 + 60),
        ..given(&entry)
    });
    assert_eq!(later.injected, Some(4));
    assert_eq!(later.last_change_time, Some(at(T0 + 60)));
    let times: Vec<_> = later
        .workloads
        .iter()
        .map(|w| (w.name.as_str(), w.last_change_time.clone().unwrap()))
        .collect();
    assert_eq!(
        times,
        [("api", at(T0)), ("agent", at(T0)), ("web", at(T0 + 60))]
    );
    assert_eq!(later.conditions, s.conditions, "nothing transitioned");
    // Unchanged input: the same status, so nothing is written.
    let again = desired(&Inputs {
        tally: Some(&more),
        previous: Some(&later),
        now: at(T0 + 120),
        ..given(&entry)
    });
    assert_eq!(again, later);
}

#[test]
fn no_pods_count_zero_and_the_lists_are_bounded() {
    let entry = inst(1);
    let none = desired(&Inputs {
        verified: true,
        ..given(&entry)
    });
    assert_eq!(
        (none.injected, none.outdated, none.skipped),
        (Some(0), Some(0), Some(0))
    );
    assert!(none.workloads.is_empty() && none.skipped_reasons.is_empty());
    assert_eq!(
        none.conditions[0].message,
        "readable; the Secret and ConfigMap of spec.exporter.tls exist"
    );

    let many = Tally {
        failures: Default::default(),
        pods: counts(
            60,
            0,
            &SkipReason::ALL.iter().map(|r| (*r, 1)).collect::<Vec<_>>(),
        ),
        workloads: (0..60)
            .map(|i| {
                (
                    workload("StatefulSet", &format!("db-{i:02}")),
                    counts(1, 0, &[]),
                )
            })
            .collect(),
    };
    let s = desired(&Inputs {
        tally: Some(&many),
        verified: true,
        ..given(&entry)
    });
    assert_eq!(s.skipped_reasons.len(), MAX_REASONS);
    assert_eq!(s.workloads.len(), MAX_WORKLOADS);
    assert_eq!(s.workloads_omitted, Some(10));
    assert_eq!(s.workloads[0].name, "db-00");
    assert_eq!(s.workloads[49].name, "db-49");
}

#[test]
fn a_missing_secret_or_an_unreadable_object_degrades() {
    let entry = inst(2);
    let missing = [
        (ObjectKind::Secret, "shop/otel-tls".to_owned()),
        (ObjectKind::ConfigMap, "shop/otel-ca".to_owned()),
    ];
    let ok = desired(&Inputs {
        verified: true,
        ..given(&entry)
    });
    let s = desired(&Inputs {
        missing: &missing,
        verified: true,
        previous: Some(&ok),
        now: at(T0 + 5),
        ..given(&entry)
    });
    let view: Vec<_> = s
        .conditions
        .iter()
        .map(|c| {
            (
                c.type_.as_str(),
                c.status.as_str(),
                c.reason.as_str(),
                c.last_transition_time.clone(),
            )
        })
        .collect();
    assert_eq!(
        view,
        [
            ("Ready", "False", SECRET_MISSING, at(T0 + 5)),
            ("Degraded", "True", SECRET_MISSING, at(T0 + 5)),
        ]
    );
    assert_eq!(
        s.conditions[1].message,
        "spec.exporter.tls names objects that do not exist: Secret shop/otel-tls, \
         ConfigMap shop/otel-ca; pods there are not injected"
    );

    let broken: IndexEntry = Err("unknown variant `not_a_sampler`".into());
    let u = desired(&Inputs {
        spec_hash: None,
        verified: true,
        ..given(&broken)
    });
    assert_eq!(
        serde_json::to_value(&u).unwrap(),
        json!({"conditions": [
            {"type": "Ready", "status": "False", "reason": "Unreadable",
             "message": "the object cannot be read: unknown variant `not_a_sampler`",
             "lastTransitionTime": "2027-01-15T08:00:00Z"},
            {"type": "Degraded", "status": "True", "reason": "Unreadable",
             "message": "the object cannot be read: unknown variant `not_a_sampler`",
             "lastTransitionTime": "2027-01-15T08:00:00Z"}
        ]})
    );
}

struct Present(&'static [(&'static str, &'static str)]);
impl ObjectLookup for Present {
    fn exists(&self, kind: ObjectKind, namespace: &str, name: &str) -> bool {
        kind == ObjectKind::Secret && self.0.contains(&(namespace, name))
    }
}

#[test]
fn references_are_checked_where_the_instrumentation_is_used() {
    let mut i = Instrumentation::new("java", InstrumentationSpec::default());
    i.metadata.namespace = Some("shop".into());
    i.spec = serde_json::from_value(json!({"exporter": {
        "endpoint": "https://collector:4318", "tls": {"secretName": "otel-tls"}}}))
    .unwrap();
    let mut elsewhere = workload("Deployment", "web");
    elsewhere.namespace = "payments".into();
    let tally = Tally {
        failures: Default::default(),
        pods: counts(1, 0, &[]),
        workloads: [(elsewhere, counts(1, 0, &[]))].into(),
    };
    let lookup = Present(&[("shop", "otel-tls")]);
    assert_eq!(
        missing_references(&i, Some(&tally), &lookup),
        [(ObjectKind::Secret, "payments/otel-tls".to_owned())]
    );
    assert_eq!(missing_references(&i, None, &lookup), []);
    i.spec.exporter = None;
    assert_eq!(missing_references(&i, Some(&tally), &lookup), []);
}

#[test]
fn owned_leaves_out_the_operators_field() {
    let mut s = InstrumentationStatus {
        injected: Some(1),
        ..InstrumentationStatus::default()
    };
    s.upgrade_blocked_versions
        .insert("java".into(), "pinned".into());
    assert_eq!(
        owned(&s),
        InstrumentationStatus {
            injected: Some(1),
            ..InstrumentationStatus::default()
        }
    );
}

#[test]
fn detected_failures_are_counted_and_named_in_the_failing_condition() {
    use crate::census::{Failing, PodFailure};
    let entry = inst(2);
    let failing = |mut c: Counts, n| {
        c.failing = n;
        c
    };
    let failure = |pod: &str| Failing {
        failure: PodFailure {
            pod: pod.into(),
            container: "app".into(),
            reason: Some("OOMKilled".into()),
            exit_code: Some(137),
            restarts: 3,
        },
        languages: [crate::agents::Language::Java].into(),
    };
    let tally = Tally {
        pods: failing(counts(5, 0, &[]), 3),
        workloads: [
            (workload("Deployment", "web"), failing(counts(3, 0, &[]), 2)),
            (workload("StatefulSet", "db"), failing(counts(1, 0, &[]), 1)),
            (workload("Deployment", "ok"), counts(1, 0, &[])),
        ]
        .into(),
        failures: [
            (workload("Deployment", "web"), failure("web-1")),
            (workload("StatefulSet", "db"), failure("db-0")),
        ]
        .into(),
    };
    let detected = |tally| {
        desired(&Inputs {
            tally,
            detect_failures: true,
            ..given(&entry)
        })
    };
    let s = detected(Some(&tally));
    assert_eq!(s.failing, Some(3));
    // The failing first.
    let order: Vec<(&str, i64)> = s
        .workloads
        .iter()
        .map(|w| (w.name.as_str(), w.failing))
        .collect();
    assert_eq!(order, [("web", 2), ("db", 1), ("ok", 0)]);
    let c = s
        .conditions
        .iter()
        .find(|c| c.type_ == FAILING)
        .expect("Failing");
    assert_eq!(
        (c.status.as_str(), c.reason.as_str(), c.message.as_str()),
        (
            "True",
            WORKLOADS_FAILING,
            "pods injected with the current spec are failing: Deployment shop/web: pod web-1 \
             container app: OOMKilled (exit code 137), 3 restarts; StatefulSet shop/db: pod db-0 \
             container app: OOMKilled (exit code 137), 3 restarts"
        )
    );
    let healthy = detected(None);
    assert_eq!(healthy.failing, Some(0));
    let c = healthy
        .conditions
        .iter()
        .find(|c| c.type_ == FAILING)
        .expect("Failing");
    assert_eq!((c.status.as_str(), c.reason.as_str()), ("False", "Healthy"));
    // Without detection: neither the count nor the condition.
    let off = desired(&Inputs {
        tally: Some(&tally),
        ..given(&entry)
    });
    assert_eq!(off.failing, None);
    assert!(off.conditions.iter().all(|c| c.type_ != FAILING));
}

#[test]
fn rolled_back_workloads_stay_listed_while_in_force() {
    use crate::crd::RolledBackWorkload;
    let entry = inst(1);
    let rb = |name: &str, spec: &str, at_secs: i64| RolledBackWorkload {
        kind: "Deployment".into(),
        namespace: "shop".into(),
        name: name.into(),
        languages: "java".into(),
        spec_hash: spec.into(),
        reason: "pod x container app: OOMKilled (exit code 137), 4 restarts".into(),
        time: at(at_secs),
    };
    let previous = InstrumentationStatus {
        rolled_back: vec![
            // Its pods say so: kept, however old.
            rb("web", "3f2a9c1b", T0 - 3600),
            // Another spec: the engine injects again, no longer in force.
            rb("api", "00000000", T0 - 60),
            // Old, and no pod says so (the marker removed by hand): dropped.
            rb("gone", "3f2a9c1b", T0 - 3600),
            // Just rolled back, its new pods not made yet: kept.
            rb("new", "3f2a9c1b", T0 - 60),
        ],
        ..InstrumentationStatus::default()
    };
    let tally = Tally {
        workloads: [(
            workload("Deployment", "web"),
            counts(0, 0, &[(SkipReason::RolledBack, 2)]),
        )]
        .into(),
        ..Tally::default()
    };
    let again = [rb("new", "3f2a9c1b", T0)];
    let s = desired(&Inputs {
        tally: Some(&tally),
        previous: Some(&previous),
        rolled_back: &again,
        ..given(&entry)
    });
    let listed: Vec<(&str, i64)> = s
        .rolled_back
        .iter()
        .map(|e| (e.name.as_str(), e.time.0.as_second()))
        .collect();
    assert_eq!(listed, [("web", T0 - 3600), ("new", T0)]);
}

#[test]
fn the_registered_condition_says_what_differs_in_the_webhook_configuration() {
    use crate::cluster::registration::Aspect;
    let entry = inst(1);
    let registered = |s: &InstrumentationStatus| {
        s.conditions
            .iter()
            .find(|c| c.type_ == REGISTERED)
            .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
    };
    assert_eq!(registered(&desired(&given(&entry))), None, "not checked");
    let fine = desired(&Inputs {
        registration: Some(&[]),
        ..given(&entry)
    });
    assert_eq!(
        registered(&fine),
        Some((
            "True".into(),
            "AsExpected".into(),
            "the webhook configuration sends pods to the webhook as the replicas expect".into()
        ))
    );
    let drifted = desired(&Inputs {
        registration: Some(&[Aspect::CaBundle, Aspect::FailurePolicy]),
        ..given(&entry)
    });
    assert_eq!(
        registered(&drifted),
        Some((
            "False".into(),
            "RegistrationDrift".into(),
            "the webhook configuration differs from what the replicas expect: its caBundle \
             does not verify the certificate served now; its failurePolicy is not the one \
             expected; pods may be admitted without injection"
                .into()
        ))
    );
}
