//! The workloads the background writers act on (Deployments, StatefulSets, DaemonSets):
//! each read by kind ([`get`]) and its pod template's annotations set by a merge patch
//! ([`merge_patch`]), for the rollout's restarts and the safety net's rollback marker alike;
//! and a StatefulSet's forced rollback ([`delete_blocking_pods`]).

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde::de::DeserializeOwned;

use crate::census::Workload;

/// A workload as read from the API server.
#[derive(Clone, Debug, PartialEq)]
pub enum WorkloadObject {
    Deployment(Box<Deployment>),
    StatefulSet(Box<StatefulSet>),
    DaemonSet(Box<DaemonSet>),
}

impl WorkloadObject {
    pub fn meta(&self) -> &ObjectMeta {
        match self {
            WorkloadObject::Deployment(o) => &o.metadata,
            WorkloadObject::StatefulSet(o) => &o.metadata,
            WorkloadObject::DaemonSet(o) => &o.metadata,
        }
    }

    fn template(&self) -> &k8s_openapi::api::core::v1::PodTemplateSpec {
        match self {
            WorkloadObject::Deployment(o) => &o.spec.template,
            WorkloadObject::StatefulSet(o) => &o.spec.template,
            WorkloadObject::DaemonSet(o) => &o.spec.template,
        }
    }

    /// The pod template's labels.
    pub fn template_labels(&self) -> Option<&BTreeMap<String, String>> {
        self.template().metadata.as_ref()?.labels.as_ref()
    }

    /// The pod template's annotations.
    pub fn template_annotations(&self) -> Option<&BTreeMap<String, String>> {
        self.template().metadata.as_ref()?.annotations.as_ref()
    }

    /// The label selector of its pods.
    pub fn selector(&self) -> &LabelSelector {
        match self {
            WorkloadObject::Deployment(o) => &o.spec.selector,
            WorkloadObject::StatefulSet(o) => &o.spec.selector,
            WorkloadObject::DaemonSet(o) => &o.spec.selector,
        }
    }

    /// Whether a new pod template replaces a pod that never became Ready only once that pod
    /// is deleted: a StatefulSet with `OrderedReady` pod management (the default) and
    /// rolling updates (Kubernetes' "forced rollback").
    pub fn needs_forced_rollback(&self) -> bool {
        let WorkloadObject::StatefulSet(o) = self else {
            return false;
        };
        let ordered = o
            .spec
            .pod_management_policy
            .as_deref()
            .unwrap_or("OrderedReady");
        let rolling = o
            .spec
            .update_strategy
            .as_ref()
            .and_then(|s| s.type_.as_deref());
        ordered == "OrderedReady" && rolling.unwrap_or("RollingUpdate") == "RollingUpdate"
    }

    /// Why a new pod template would not replace its pods by itself, if so.
    pub fn not_rolled(&self) -> Option<String> {
        match self {
            WorkloadObject::Deployment(o) => {
                let spec = &o.spec;
                (spec.paused == Some(true)).then(|| "paused".into())
            }
            WorkloadObject::StatefulSet(o) => {
                let strategy = o.spec.update_strategy.as_ref()?;
                if strategy.type_.as_deref() == Some("OnDelete") {
                    return Some("updateStrategy OnDelete: pods change only when deleted".into());
                }
                let partition = strategy.rolling_update.as_ref()?.partition.unwrap_or(0);
                (partition > 0).then(|| {
                    format!("rollingUpdate.partition {partition}: not every pod would change")
                })
            }
            WorkloadObject::DaemonSet(o) => {
                let strategy = o.spec.update_strategy.as_ref()?;
                (strategy.type_.as_deref() == Some("OnDelete"))
                    .then(|| "updateStrategy OnDelete: pods change only when deleted".into())
            }
        }
    }
}

async fn get_as<K>(
    client: &Client,
    w: &Workload,
    wrap: fn(K) -> WorkloadObject,
) -> kube::Result<Option<WorkloadObject>>
where
    K: kube::Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + fmt::Debug,
{
    Ok(Api::<K>::namespaced(client.clone(), &w.namespace)
        .get_opt(&w.name)
        .await?
        .map(wrap))
}

/// The workload as stored; `None` when it does not exist (or is not a restartable kind).
pub async fn get(client: &Client, w: &Workload) -> kube::Result<Option<WorkloadObject>> {
    match w.kind.as_str() {
        "Deployment" => {
            get_as::<Deployment>(client, w, |o| WorkloadObject::Deployment(Box::new(o))).await
        }
        "StatefulSet" => {
            get_as::<StatefulSet>(client, w, |o| WorkloadObject::StatefulSet(Box::new(o))).await
        }
        "DaemonSet" => {
            get_as::<DaemonSet>(client, w, |o| WorkloadObject::DaemonSet(Box::new(o))).await
        }
        _ => Ok(None),
    }
}

async fn patch_as<K>(
    client: &Client,
    w: &Workload,
    patch: &serde_json::Value,
    field_manager: &str,
    wrap: fn(K) -> WorkloadObject,
) -> kube::Result<WorkloadObject>
where
    K: kube::Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + fmt::Debug,
{
    let params = PatchParams {
        field_manager: Some(field_manager.into()),
        ..Default::default()
    };
    Api::<K>::namespaced(client.clone(), &w.namespace)
        .patch(&w.name, &params, &Patch::Merge(patch))
        .await
        .map(wrap)
}

/// Applies the merge patch `patch` to a workload under `field_manager`. `None`: not a kind
/// that can be restarted.
pub async fn merge_patch(
    client: &Client,
    w: &Workload,
    patch: &serde_json::Value,
    field_manager: &str,
) -> kube::Result<Option<WorkloadObject>> {
    let (p, m) = (patch, field_manager);
    let object = match w.kind.as_str() {
        "Deployment" => {
            patch_as::<Deployment>(client, w, p, m, |o| WorkloadObject::Deployment(Box::new(o)))
                .await?
        }
        "StatefulSet" => {
            patch_as::<StatefulSet>(client, w, p, m, |o| {
                WorkloadObject::StatefulSet(Box::new(o))
            })
            .await?
        }
        "DaemonSet" => {
            patch_as::<DaemonSet>(client, w, p, m, |o| WorkloadObject::DaemonSet(Box::new(o)))
                .await?
        }
        _ => return Ok(None),
    };
    Ok(Some(object))
}

/// The StatefulSet's forced rollback, once its controller has seen the template it now has
/// (`None` until then): deletes its pods that are not Ready and not of its update revision,
/// which its controller would otherwise wait on forever; returns how many.
pub async fn delete_blocking_pods(client: &Client, w: &Workload) -> kube::Result<Option<usize>> {
    let sets = Api::<StatefulSet>::namespaced(client.clone(), &w.namespace);
    let Some(set) = sets.get_opt(&w.name).await? else {
        return Ok(Some(0));
    };
    let status = set.status.as_ref();
    let observed = status.and_then(|s| s.observed_generation) >= set.metadata.generation;
    let Some(revision) = status
        .and_then(|s| s.update_revision.as_deref())
        .filter(|_| observed)
    else {
        return Ok(None);
    };
    // The API server validates a StatefulSet's selector: it always converts.
    let Ok(selector) = kube::core::Selector::try_from(set.spec.selector.clone()) else {
        return Ok(Some(0));
    };
    let pods = Api::<Pod>::namespaced(client.clone(), &w.namespace);
    let listed = pods
        .list(&ListParams::default().labels_from(&selector))
        .await?;
    let mut deleted = 0;
    for pod in listed
        .items
        .iter()
        .filter(|p| blocks(p, set.metadata.uid.as_deref(), revision))
    {
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        pods.delete(name, &DeleteParams::default()).await?;
        deleted += 1;
    }
    Ok(Some(deleted))
}

/// Whether a pod of the StatefulSet `owner` holds its rollout: not Ready, not terminating,
/// and of another revision than `revision`.
fn blocks(pod: &Pod, owner: Option<&str>, revision: &str) -> bool {
    let owned = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && Some(o.uid.as_str()) == owner);
    let ready = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    let of = pod
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(crate::keys::CONTROLLER_REVISION_HASH));
    owned
        && !ready
        && pod.metadata.deletion_timestamp.is_none()
        && of.is_some_and(|r| r != revision)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::{StatefulSetSpec, StatefulSetUpdateStrategy};
    use k8s_openapi::api::core::v1::{PodCondition, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    fn set(policy: Option<&str>, strategy: Option<&str>) -> WorkloadObject {
        WorkloadObject::StatefulSet(Box::new(StatefulSet {
            spec: StatefulSetSpec {
                pod_management_policy: policy.map(Into::into),
                update_strategy: strategy.map(|s| StatefulSetUpdateStrategy {
                    type_: Some(s.into()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        }))
    }

    #[test]
    fn only_an_ordered_ready_rolling_stateful_set_needs_its_failing_pods_deleted() {
        assert!(set(None, None).needs_forced_rollback(), "the defaults");
        assert!(set(Some("OrderedReady"), Some("RollingUpdate")).needs_forced_rollback());
        assert!(!set(Some("Parallel"), None).needs_forced_rollback());
        assert!(!set(None, Some("OnDelete")).needs_forced_rollback());
        let d = WorkloadObject::Deployment(Box::default());
        assert!(!d.needs_forced_rollback());
    }

    #[test]
    fn a_pod_blocks_the_rollout_when_owned_not_ready_live_and_of_another_revision() {
        let pod = |owner: &str, ready: &str, revision: &str| Pod {
            metadata: ObjectMeta {
                owner_references: Some(vec![OwnerReference {
                    uid: owner.into(),
                    controller: Some(true),
                    ..Default::default()
                }]),
                labels: Some(
                    [(
                        crate::keys::CONTROLLER_REVISION_HASH.into(),
                        revision.into(),
                    )]
                    .into(),
                ),
                ..Default::default()
            },
            status: Some(PodStatus {
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: ready.into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(blocks(&pod("u1", "False", "db-old"), Some("u1"), "db-new"));
        assert!(
            !blocks(&pod("u1", "True", "db-old"), Some("u1"), "db-new"),
            "Ready"
        );
        assert!(
            !blocks(&pod("u1", "False", "db-new"), Some("u1"), "db-new"),
            "updated"
        );
        assert!(
            !blocks(&pod("u2", "False", "db-old"), Some("u1"), "db-new"),
            "another owner"
        );
        let mut terminating = pod("u1", "False", "db-old");
        terminating.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        assert!(!blocks(&terminating, Some("u1"), "db-new"), "terminating");
    }
}
