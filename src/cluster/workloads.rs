//! The workloads the background writers act on (Deployments, StatefulSets, DaemonSets):
//! each read by kind ([`get`]) and its pod template's annotations patched ([`patch_template`]),
//! for the rollout's restarts and the safety net's rollback marker alike.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use serde::de::DeserializeOwned;
use serde_json::json;

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

/// Sets `annotations` on a workload's pod template by a merge patch under `field_manager`
/// (which makes its controller replace its pods). `None`: not a kind that can be restarted.
pub async fn patch_template(
    client: &Client,
    w: &Workload,
    annotations: &serde_json::Value,
    field_manager: &str,
) -> kube::Result<Option<WorkloadObject>> {
    let patch = json!({"spec": {"template": {"metadata": {"annotations": annotations}}}});
    merge_patch(client, w, &patch, field_manager).await
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
