//! Tests of `plan`.

use super::*;
use k8s_openapi::api::apps::v1::{
    DaemonSet, DaemonSetSpec, DaemonSetUpdateStrategy, Deployment, DeploymentSpec,
    DeploymentStrategy, RollingUpdateStatefulSetStrategy, StatefulSet, StatefulSetSpec,
    StatefulSetUpdateStrategy,
};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

fn w(ns: &str, kind: &str, name: &str) -> Workload {
    Workload {
        namespace: ns.into(),
        kind: kind.into(),
        name: name.into(),
    }
}

fn counts(outdated: u32, skipped: &[(SkipReason, u32)]) -> Counts {
    Counts {
        current: 1,
        outdated,
        skipped: skipped.iter().copied().collect(),
        missed: 0,
        failing: 0,
        selected: 0,
    }
}

fn map(pairs: &[(&str, &str)]) -> std::collections::BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn template(labels: &[(&str, &str)]) -> PodTemplateSpec {
    PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(map(labels)),
            ..Default::default()
        }),
        spec: None,
    }
}

fn deployment(annotations: &[(&str, &str)], labels: &[(&str, &str)]) -> WorkloadObject {
    WorkloadObject::Deployment(Box::new(Deployment {
        metadata: ObjectMeta {
            annotations: Some(map(annotations)),
            ..Default::default()
        },
        spec: DeploymentSpec {
            template: template(labels),
            ..Default::default()
        },
        status: None,
    }))
}

#[test]
fn stale_restartable_workloads_are_restarted_in_order_and_the_rest_left_with_why() {
    use SkipReason::*;
    let tally = Tally {
        failures: Default::default(),
        pods: Counts::default(),
        workloads: [
            (
                w("shop", "Deployment", "web"),
                counts(2, &[(InstrumentationNotFound, 1), (LanguageDisabled, 4)]),
            ),
            (
                w("shop", "Deployment", "fresh"),
                counts(0, &[(LanguageDisabled, 1)]),
            ),
            (
                w("shop", "StatefulSet", "db"),
                counts(0, &[(NoInstrumentation, 3)]),
            ),
            (w("shop", "Job", "once"), counts(1, &[])),
            (w("shop", "Deployment", "quiet"), counts(1, &[])),
            (w("shop", "Deployment", "gone"), counts(1, &[])),
            (w("shop", "Deployment", "held"), counts(1, &[])),
            (w("shop", "DaemonSet", "agent"), counts(1, &[])),
            (w("kube-system", "Deployment", "dns"), counts(1, &[])),
            (w("off", "Deployment", "x"), counts(1, &[])),
        ]
        .into(),
    };
    let exclusions = Exclusions {
        names: ["kube-system".to_owned()].into(),
        disabled: ["off".to_owned()].into(),
    };
    let read = to_read(&tally, &exclusions);
    assert_eq!(
        read.iter().map(ToString::to_string).collect::<Vec<_>>(),
        [
            "DaemonSet/shop/agent",
            "Deployment/shop/gone",
            "Deployment/shop/held",
            "Deployment/shop/quiet",
            "Deployment/shop/web",
            "StatefulSet/shop/db",
        ]
    );
    let sts = WorkloadObject::StatefulSet(Box::new(StatefulSet {
        spec: StatefulSetSpec {
            template: template(&[]),
            ..Default::default()
        },
        ..Default::default()
    }));
    let objects: BTreeMap<Workload, Option<WorkloadObject>> = [
        (
            w("shop", "Deployment", "web"),
            Some(deployment(&[], &[("app", "web")])),
        ),
        (w("shop", "StatefulSet", "db"), Some(sts)),
        (
            w("shop", "Deployment", "quiet"),
            Some(deployment(&[(ROLLOUT_ANNOTATION, "disabled")], &[])),
        ),
        (w("shop", "Deployment", "gone"), None),
        (
            w("shop", "Deployment", "held"),
            Some(deployment(&[], &[(OPT_OUT_LABEL, "disabled")])),
        ),
        (
            w("shop", "DaemonSet", "agent"),
            Some(WorkloadObject::DaemonSet(Box::default())),
        ),
    ]
    .into();
    let p = plan(&tally, &exclusions, &objects);
    assert_eq!(
        p.restarts
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        [
            "DaemonSet/shop/agent: 1 outdated",
            "Deployment/shop/web: 2 outdated, 1 skipped (instrumentation_not_found)",
            "StatefulSet/shop/db: 3 skipped (no_instrumentation)",
        ]
    );
    assert_eq!(
        p.left.iter().map(ToString::to_string).collect::<Vec<_>>(),
        [
            "Deployment/kube-system/dns: namespace excluded",
            "Deployment/off/x: namespace labeled otel-injector/inject=disabled",
            "Deployment/shop/gone: not found",
            "Deployment/shop/held: pod template labeled otel-injector/inject=disabled",
            "Deployment/shop/quiet: annotated otel-injector/rollout: disabled",
            "Job/shop/once: a Job is not restarted by a rollout",
        ]
    );
}

#[test]
fn the_plan_is_described_one_line_per_workload() {
    let tally = Tally {
        failures: Default::default(),
        pods: Counts {
            current: 4,
            outdated: 3,
            skipped: [
                (SkipReason::NoInstrumentation, 2),
                (SkipReason::LanguageDisabled, 1),
            ]
            .into(),
            missed: 2,
            failing: 0,
            selected: 0,
        },
        workloads: BTreeMap::new(),
    };
    let plan = Plan {
        restarts: vec![
            Restart {
                workload: w("shop", "Deployment", "web"),
                outdated: 3,
                missed: 2,
                skipped: BTreeMap::new(),
            },
            Restart {
                workload: w("shop", "StatefulSet", "db"),
                outdated: 0,
                missed: 0,
                skipped: [(SkipReason::NoInstrumentation, 2)].into(),
            },
        ],
        left: vec![Left {
            workload: w("shop", "Deployment", "quiet"),
            why: "annotated otel-injector/rollout: disabled".into(),
        }],
    };
    assert_eq!(
        describe("shop/java", &tally, &plan),
        "Instrumentation shop/java: 4 pods current, 3 outdated, 2 missed, 2 skipped for want of it\n\
         to restart (2 workloads):\n\
         \x20 Deployment/shop/web: 3 outdated, 2 missed\n\
         \x20 StatefulSet/shop/db: 2 skipped (no_instrumentation)\n\
         left alone (1 workload):\n\
         \x20 Deployment/shop/quiet: annotated otel-injector/rollout: disabled\n"
    );
    assert_eq!(
        describe("shop/java", &Tally::default(), &Plan::default()),
        "Instrumentation shop/java: 0 pods current, 0 outdated, 0 missed, 0 skipped for want of it\n\
         nothing to restart\n"
    );
}

#[test]
fn workloads_a_new_template_would_not_replace_are_left() {
    let d = |paused: Option<bool>, strategy: Option<&str>| {
        WorkloadObject::Deployment(Box::new(Deployment {
            spec: DeploymentSpec {
                paused,
                strategy: strategy.map(|s| DeploymentStrategy {
                    type_: Some(s.into()),
                    rolling_update: None,
                }),
                ..Default::default()
            },
            ..Default::default()
        }))
    };
    let s = |type_: &str, partition: Option<i32>| {
        WorkloadObject::StatefulSet(Box::new(StatefulSet {
            spec: StatefulSetSpec {
                update_strategy: Some(StatefulSetUpdateStrategy {
                    type_: Some(type_.into()),
                    rolling_update: Some(RollingUpdateStatefulSetStrategy {
                        partition,
                        max_unavailable: None,
                    }),
                }),
                ..Default::default()
            },
            ..Default::default()
        }))
    };
    let ds = |type_: &str| {
        WorkloadObject::DaemonSet(Box::new(DaemonSet {
            spec: DaemonSetSpec {
                update_strategy: Some(DaemonSetUpdateStrategy {
                    type_: Some(type_.into()),
                    rolling_update: None,
                }),
                ..Default::default()
            },
            ..Default::default()
        }))
    };
    let cases: [(WorkloadObject, Option<&str>); 9] = [
        (d(None, None), None),
        (d(Some(false), Some("RollingUpdate")), None),
        (d(Some(true), None), Some("paused")),
        (d(None, Some("Recreate")), None),
        (s("RollingUpdate", Some(0)), None),
        (
            s("RollingUpdate", Some(2)),
            Some("rollingUpdate.partition 2: not every pod would change"),
        ),
        (
            s("OnDelete", None),
            Some("updateStrategy OnDelete: pods change only when deleted"),
        ),
        (ds("RollingUpdate"), None),
        (
            ds("OnDelete"),
            Some("updateStrategy OnDelete: pods change only when deleted"),
        ),
    ];
    for (object, want) in cases {
        assert_eq!(object.not_rolled().as_deref(), want, "{object:?}");
    }
}
