//! Reading and restarting the workloads a rollout plans for (Deployments, StatefulSets,
//! DaemonSets), by kind.

use std::fmt;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use serde::de::DeserializeOwned;
use serde_json::json;

use super::FIELD_MANAGER;
use crate::cluster::rollout::plan::Object;
use crate::engine::census::Workload;
use crate::keys::RESTARTED_AT;

async fn get_as<K>(
    client: &Client,
    w: &Workload,
    wrap: fn(K) -> Object,
) -> kube::Result<Option<Object>>
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
pub async fn get(client: &Client, w: &Workload) -> kube::Result<Option<Object>> {
    match w.kind.as_str() {
        "Deployment" => get_as::<Deployment>(client, w, |o| Object::Deployment(Box::new(o))).await,
        "StatefulSet" => {
            get_as::<StatefulSet>(client, w, |o| Object::StatefulSet(Box::new(o))).await
        }
        "DaemonSet" => get_as::<DaemonSet>(client, w, |o| Object::DaemonSet(Box::new(o))).await,
        _ => Ok(None),
    }
}

async fn patch_template_as<K>(
    client: &Client,
    w: &Workload,
    annotations: &serde_json::Value,
    field_manager: &str,
    wrap: fn(K) -> Object,
) -> kube::Result<Object>
where
    K: kube::Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + fmt::Debug,
{
    let patch = json!({"spec": {"template": {"metadata": {"annotations": annotations}}}});
    let params = PatchParams {
        field_manager: Some(field_manager.into()),
        ..Default::default()
    };
    Api::<K>::namespaced(client.clone(), &w.namespace)
        .patch(&w.name, &params, &Patch::Merge(&patch))
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
) -> kube::Result<Option<Object>> {
    let (a, m) = (annotations, field_manager);
    let object = match w.kind.as_str() {
        "Deployment" => {
            patch_template_as::<Deployment>(client, w, a, m, |o| Object::Deployment(Box::new(o)))
                .await?
        }
        "StatefulSet" => {
            patch_template_as::<StatefulSet>(client, w, a, m, |o| Object::StatefulSet(Box::new(o)))
                .await?
        }
        "DaemonSet" => {
            patch_template_as::<DaemonSet>(client, w, a, m, |o| Object::DaemonSet(Box::new(o)))
                .await?
        }
        _ => return Ok(None),
    };
    Ok(Some(object))
}

/// Restarts a workload as `kubectl rollout restart` does: a merge patch of its pod
/// template's `kubectl.kubernetes.io/restartedAt` annotation. `None`: not a kind a rollout
/// restarts.
pub async fn restart(client: &Client, w: &Workload, stamp: &str) -> kube::Result<Option<Object>> {
    patch_template(client, w, &json!({RESTARTED_AT: stamp}), FIELD_MANAGER).await
}

/// Now, as `kubectl rollout restart` writes it (RFC 3339, whole seconds, UTC).
pub fn stamp_now() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}
