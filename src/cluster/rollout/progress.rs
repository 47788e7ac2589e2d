//! Whether a restarted workload's rollout is done, still going, or failed: the completion
//! rules `kubectl rollout status` applies, per kind, and crash-loop detection on the new
//! revision's pods. Pure functions of the objects as read.

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt as _;

use crate::cluster::workloads::WorkloadObject;
use crate::keys::RESTARTED_AT;

pub use crate::census::CRASH_RESTARTS;
use crate::census::PodFailure;

/// Where a restarted workload's rollout stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Progress {
    /// Every pod runs the new template and is available.
    Complete,
    /// Still going: what is awaited.
    Waiting(String),
    /// It will not complete by itself (the Deployment's own progress deadline passed).
    Failed(String),
}

fn gen_seen(generation: Option<i64>, observed: Option<i64>) -> Option<String> {
    let generation = generation.unwrap_or(0);
    let observed = observed.unwrap_or(0);
    (observed < generation).then(|| {
        format!("the controller has not seen generation {generation} yet (observed {observed})")
    })
}

/// The rollout's progress: a Deployment is complete when its controller has seen the new
/// generation and `updatedReplicas == replicas == availableReplicas` with no old pod left
/// (`status.replicas == updatedReplicas`); a StatefulSet when `updateRevision ==
/// currentRevision` and `readyReplicas == replicas`; a DaemonSet when
/// `updatedNumberScheduled == desiredNumberScheduled == numberAvailable`.
pub fn progress(object: &WorkloadObject) -> Progress {
    let generation = object.meta().generation;
    match object {
        WorkloadObject::Deployment(d) => {
            let status = d.status.clone().unwrap_or_default();
            if let Some(w) = gen_seen(generation, status.observed_generation) {
                return Progress::Waiting(w);
            }
            let deadline = status.conditions.iter().flatten().find(|c| {
                c.type_.as_deref() == Some("Progressing")
                    && c.status.as_deref() == Some("False")
                    && c.reason.as_deref() == Some("ProgressDeadlineExceeded")
            });
            if let Some(c) = deadline {
                return Progress::Failed(format!(
                    "ProgressDeadlineExceeded: {}",
                    c.message.as_deref().unwrap_or("")
                ));
            }
            let want = d.spec.replicas.unwrap_or(1);
            let updated = status.updated_replicas.unwrap_or(0);
            let available = status.available_replicas.unwrap_or(0);
            let total = status.replicas.unwrap_or(0);
            rolled(want, updated, total - updated, available)
        }
        WorkloadObject::StatefulSet(s) => {
            let status = s.status.clone().unwrap_or_default();
            if let Some(w) = gen_seen(generation, status.observed_generation) {
                return Progress::Waiting(w);
            }
            let want = s.spec.replicas.unwrap_or(1);
            let ready = status.ready_replicas.unwrap_or(0);
            let updated = status.updated_replicas.unwrap_or(0);
            if status.update_revision.is_some() && status.update_revision != status.current_revision
            {
                Progress::Waiting(format!("{updated} of {want} pods updated"))
            } else if ready < want {
                Progress::Waiting(format!("{ready} of {want} pods ready"))
            } else {
                Progress::Complete
            }
        }
        WorkloadObject::DaemonSet(d) => {
            let status = d.status.clone().unwrap_or_default();
            if let Some(w) = gen_seen(generation, status.observed_generation) {
                return Progress::Waiting(w);
            }
            let want = status.desired_number_scheduled;
            let updated = status.updated_number_scheduled.unwrap_or(0);
            let available = status.number_available.unwrap_or(0);
            rolled(want, updated, 0, available)
        }
    }
}

/// A Deployment's or DaemonSet's progress from its counts: `want` pods, `updated` of them on
/// the new template, `old` still running the previous one, `available` updated and available.
fn rolled(want: i32, updated: i32, old: i32, available: i32) -> Progress {
    if updated < want {
        Progress::Waiting(format!("{updated} of {want} pods updated"))
    } else if old > 0 {
        Progress::Waiting(format!("{old} old pods still running"))
    } else if available < want {
        Progress::Waiting(format!("{available} of {want} updated pods available"))
    } else {
        Progress::Complete
    }
}

/// The first container of a new pod (one whose `kubectl.kubernetes.io/restartedAt` is
/// `stamp`: made from the restarted template) that crash-loops, as the status controller
/// tells failing pods ([`PodFailure`]): waiting in `CrashLoopBackOff`, OOM-killed, or restarted
/// [`CRASH_RESTARTS`] times or more. Described as
/// `pod web-7d9f-x2x container app: CrashLoopBackOff, 4 restarts`.
pub fn crash_loop(pods: &[Pod], stamp: &str) -> Option<String> {
    pods.iter()
        .filter(|pod| {
            pod.annotations()
                .get(RESTARTED_AT)
                .is_some_and(|v| v == stamp)
        })
        .find_map(|pod| {
            let name = pod.metadata.name.as_deref().unwrap_or("");
            PodFailure::of(name, pod.status.as_ref()?)
        })
        .map(|f| f.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::{
        DaemonSet, DaemonSetStatus, Deployment, DeploymentCondition, DeploymentSpec,
        DeploymentStatus, StatefulSet, StatefulSetSpec, StatefulSetStatus,
    };
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateWaiting, ContainerStatus, PodStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn meta(generation: i64) -> ObjectMeta {
        ObjectMeta {
            generation: Some(generation),
            ..Default::default()
        }
    }

    fn deployment(
        replicas: i32,
        observed: i64,
        total: i32,
        updated: i32,
        available: i32,
    ) -> WorkloadObject {
        WorkloadObject::Deployment(Box::new(Deployment {
            metadata: meta(2),
            spec: DeploymentSpec {
                replicas: Some(replicas),
                ..Default::default()
            },
            status: Some(DeploymentStatus {
                observed_generation: Some(observed),
                replicas: Some(total),
                updated_replicas: Some(updated),
                available_replicas: Some(available),
                ..Default::default()
            }),
        }))
    }

    fn waiting(s: &str) -> Progress {
        Progress::Waiting(s.into())
    }

    #[test]
    fn a_deployment_is_complete_when_every_pod_is_updated_and_available_and_no_old_one_is_left() {
        let cases = [
            (
                deployment(3, 1, 3, 3, 3),
                waiting("the controller has not seen generation 2 yet (observed 1)"),
            ),
            (deployment(3, 2, 4, 1, 3), waiting("1 of 3 pods updated")),
            (
                deployment(3, 2, 4, 3, 3),
                waiting("1 old pods still running"),
            ),
            (
                deployment(3, 2, 3, 3, 2),
                waiting("2 of 3 updated pods available"),
            ),
            (deployment(3, 2, 3, 3, 3), Progress::Complete),
            (deployment(0, 2, 0, 0, 0), Progress::Complete),
        ];
        for (d, want) in cases {
            assert_eq!(progress(&d), want, "{d:?}");
        }
        let mut d = Deployment {
            metadata: meta(1),
            ..Default::default()
        };
        d.status = Some(DeploymentStatus {
            observed_generation: Some(1),
            conditions: Some(vec![DeploymentCondition {
                type_: Some("Progressing".into()),
                status: Some("False".into()),
                reason: Some("ProgressDeadlineExceeded".into()),
                message: Some("ReplicaSet \"web-5f\" has timed out progressing.".into()),
                ..Default::default()
            }]),
            ..Default::default()
        });
        assert_eq!(
            progress(&WorkloadObject::Deployment(Box::new(d))),
            Progress::Failed(
                "ProgressDeadlineExceeded: ReplicaSet \"web-5f\" has timed out progressing.".into()
            )
        );
    }

    #[test]
    fn a_stateful_set_is_complete_when_its_revisions_agree_and_every_pod_is_ready() {
        let s = |observed: i64, current: &str, update: &str, ready: i32| {
            WorkloadObject::StatefulSet(Box::new(StatefulSet {
                metadata: meta(2),
                spec: StatefulSetSpec {
                    replicas: Some(2),
                    ..Default::default()
                },
                status: Some(StatefulSetStatus {
                    observed_generation: Some(observed),
                    current_revision: Some(current.into()),
                    update_revision: Some(update.into()),
                    ready_replicas: Some(ready),
                    updated_replicas: Some(1),
                    ..Default::default()
                }),
            }))
        };
        let cases = [
            (
                s(1, "a", "a", 2),
                waiting("the controller has not seen generation 2 yet (observed 1)"),
            ),
            (s(2, "a", "b", 2), waiting("1 of 2 pods updated")),
            (s(2, "b", "b", 1), waiting("1 of 2 pods ready")),
            (s(2, "b", "b", 2), Progress::Complete),
        ];
        for (o, want) in cases {
            assert_eq!(progress(&o), want, "{o:?}");
        }
    }

    #[test]
    fn a_daemon_set_is_complete_when_every_scheduled_pod_is_updated_and_available() {
        let d = |observed: i64, desired: i32, updated: i32, available: i32| {
            WorkloadObject::DaemonSet(Box::new(DaemonSet {
                metadata: meta(3),
                spec: Default::default(),
                status: Some(DaemonSetStatus {
                    observed_generation: Some(observed),
                    desired_number_scheduled: desired,
                    updated_number_scheduled: Some(updated),
                    number_available: Some(available),
                    ..Default::default()
                }),
            }))
        };
        let cases = [
            (
                d(2, 1, 1, 1),
                waiting("the controller has not seen generation 3 yet (observed 2)"),
            ),
            (d(3, 2, 1, 2), waiting("1 of 2 pods updated")),
            (d(3, 2, 2, 1), waiting("1 of 2 updated pods available")),
            (d(3, 2, 2, 2), Progress::Complete),
        ];
        for (o, want) in cases {
            assert_eq!(progress(&o), want, "{o:?}");
        }
    }

    fn pod(name: &str, stamp: &str, restarts: i32, reason: Option<&str>) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                annotations: Some([(RESTARTED_AT.to_owned(), stamp.to_owned())].into()),
                ..Default::default()
            },
            spec: None,
            status: Some(PodStatus {
                container_statuses: Some(vec![ContainerStatus {
                    name: "app".into(),
                    restart_count: restarts,
                    state: Some(ContainerState {
                        waiting: reason.map(|r| ContainerStateWaiting {
                            reason: Some(r.into()),
                            message: None,
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn only_a_new_pods_crash_loop_counts() {
        let now = "2026-12-01T06:00:00Z";
        let old = "2026-11-30T06:00:00Z";
        let cases: [(Vec<Pod>, Option<&str>); 6] = [
            (
                vec![
                    pod("a", now, 0, None),
                    pod("b", now, 2, Some("ContainerCreating")),
                ],
                None,
            ),
            (vec![pod("a", old, 9, Some("CrashLoopBackOff"))], None),
            (
                vec![pod("a", now, 1, Some("CrashLoopBackOff"))],
                Some("pod a container app: CrashLoopBackOff, 1 restart"),
            ),
            (
                vec![pod("a", now, 0, None), pod("b", now, 3, None)],
                Some("pod b container app: 3 restarts"),
            ),
            (
                vec![
                    pod("a", old, 5, None),
                    pod("b", now, 4, Some("CrashLoopBackOff")),
                ],
                Some("pod b container app: CrashLoopBackOff, 4 restarts"),
            ),
            (vec![], None),
        ];
        for (pods, want) in cases {
            assert_eq!(crash_loop(&pods, now).as_deref(), want, "{pods:?}");
        }
    }
}
