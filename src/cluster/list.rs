//! The cluster as the offline commands read it (`inject`/`explain --cluster`): every
//! Instrumentation and every namespace's metadata listed once (no watch), and what the
//! `auto` modes read of the API server. The same conversions as the webhook's watches: an
//! Instrumentation this build cannot read is recorded with its error, not dropped.

use std::collections::BTreeMap;
use std::path::Path;

use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, ListParams};

use super::apiserver::{self, ServerInfo};
use super::watch::{key_of, to_typed};
use crate::crd::Instrumentation;

/// A namespace's metadata, as the engine reads it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListedNamespace {
    pub name: String,
    pub annotations: BTreeMap<String, String>,
    pub labels: BTreeMap<String, String>,
}

/// What was read of the cluster.
#[derive(Clone, Debug)]
pub struct ClusterView {
    pub instrumentations: Vec<Instrumentation>,
    /// Instrumentations that exist but cannot be read: (namespace, name, error).
    pub unreadable: Vec<(String, String, String)>,
    pub namespaces: Vec<ListedNamespace>,
    pub server: ServerInfo,
    /// Why the `ImageVolume` gate could not be read (`auto` then follows the version).
    pub gate_error: Option<String>,
}

/// Errors reading the cluster, each naming what to grant or fix.
#[derive(Debug, thiserror::Error)]
pub enum ListError {
    #[error(transparent)]
    Client(#[from] super::ConnectError),
    #[error(
        "list {what} in all namespaces: {error} (the offline commands need list on \
         instrumentations.opentelemetry.io and namespaces, as in manifests/base/otel-injector.yaml)"
    )]
    List {
        what: &'static str,
        error: kube::Error,
    },
    #[error("read the API server's version: {0}")]
    Version(anyhow::Error),
}

/// Reads the cluster of `kubeconfig` (else the in-cluster config, else `$KUBECONFIG` /
/// `~/.kube/config`) once.
pub async fn read(kubeconfig: Option<&Path>) -> Result<ClusterView, ListError> {
    let client = super::connect_once(kubeconfig).await?;
    read_with(&client).await
}

/// The error of a list of `what`.
fn list_error(what: &'static str) -> impl FnOnce(kube::Error) -> ListError {
    move |error| ListError::List { what, error }
}

/// [`read`] with a client.
pub async fn read_with(client: &Client) -> Result<ClusterView, ListError> {
    let resource = ApiResource::erase::<Instrumentation>(&());
    let objects = Api::<DynamicObject>::all_with(client.clone(), &resource)
        .list(&ListParams::default())
        .await
        .map_err(list_error("instrumentations.opentelemetry.io"))?;
    let mut instrumentations = Vec::new();
    let mut unreadable = Vec::new();
    for o in objects.items {
        let (ns, name) = key_of(&o);
        match to_typed(o) {
            Ok(i) => instrumentations.push(i),
            Err(e) => unreadable.push((ns, name, e)),
        }
    }
    let listed = Api::<Namespace>::all(client.clone())
        .list_metadata(&ListParams::default())
        .await
        .map_err(list_error("namespaces"))?;
    let namespaces = listed
        .items
        .into_iter()
        .map(|n| ListedNamespace {
            name: n.metadata.name.unwrap_or_default(),
            annotations: n.metadata.annotations.unwrap_or_default(),
            labels: n.metadata.labels.unwrap_or_default(),
        })
        .collect();
    let (server, gate_error) = apiserver::read_explained(client)
        .await
        .map_err(ListError::Version)?;
    Ok(ClusterView {
        instrumentations,
        unreadable,
        namespaces,
        server,
        gate_error: gate_error.map(|e| e.to_string()),
    })
}
