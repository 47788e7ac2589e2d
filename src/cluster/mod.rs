//! The caches the engine reads: kept current by watches ([`watch`]), or
//! Instrumentations read from files ([`files`]); what the `auto` modes read of the API
//! server ([`apiserver`]); the cluster listed once for the offline commands ([`list`]); and
//! the namespace labeler of the targeted install ([`labeler`]), a writer of its own that
//! reads the namespace cache; the Events about skipped injections ([`events`]), queued by the
//! request path and published by a worker; the Lease that elects one replica for the
//! leader-only background writers ([`lease`]) and the first of them, the status controller
//! that keeps each Instrumentation's `status` current from its pods ([`status`]), with its
//! finder of the pods admitted without the webhook ([`missed`]); the rollouts that restart
//! workloads ([`rollout`]), and the workload reads and pod-template patches they and the
//! status controller's rollback share ([`workloads`]); each component's series, gathered
//! ([`metrics`]). The request path only reads the caches and queues; it never calls the API
//! server.

pub mod apiserver;
pub mod events;
pub mod files;
pub mod labeler;
pub mod lease;
pub mod list;
pub mod metrics;
pub mod missed;
pub mod registration;
pub mod rollout;
pub mod status;
pub mod watch;
pub mod workloads;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use kube::Client;

pub use apiserver::ServerInfo;
pub use files::{FileCatalog, FileCatalogError, StaticCatalog};
pub use labeler::Labeler;
pub use lease::{Leadership, LeaseConfig, elect};
pub use list::ClusterView;
pub use metrics::Metrics;
pub use status::StatusController;
pub use watch::{CatalogWriters, KubeCatalog, NamespaceChange};

use crate::engine::Catalog;
use crate::retry;

/// Where the engine's Instrumentations and namespaces come from.
pub enum Caches {
    /// Instrumentations read from files once, after the listeners are bound; no API call
    /// at all.
    Files(Arc<FileCatalog>),
    /// The cluster's, kept current by the writers' watches once they run.
    Watched(Arc<KubeCatalog>, Box<CatalogWriters>),
}

impl Caches {
    /// Empty stores for the cluster's objects (`track_tls_objects`: see [`KubeCatalog::new`]).
    pub fn watched(track_tls_objects: bool) -> Self {
        let (catalog, writers) = KubeCatalog::new(track_tls_objects);
        Caches::Watched(Arc::new(catalog), Box::new(writers))
    }

    /// The engine's view of the caches.
    pub fn catalog(&self) -> Arc<dyn Catalog + Send + Sync> {
        match self {
            Caches::Files(c) => c.clone(),
            Caches::Watched(c, _) => c.clone(),
        }
    }
}

/// Builds a client, retrying with backoff while the configuration cannot be loaded, so a
/// missing kubeconfig leaves the webhook serving (not ready) instead of exiting.
pub async fn connect(kubeconfig: Option<PathBuf>) -> Client {
    retry::until_ok(
        || try_connect(kubeconfig.as_deref()),
        |e, delay| {
            tracing::error!(error = %e, "cannot build a Kubernetes client; retrying in {delay:?}");
        },
    )
    .await
}

/// A client could not be built, from `kubeconfig` (` from PATH`; empty for the default).
#[derive(Debug, thiserror::Error)]
#[error("cannot build a Kubernetes client{from}: {error}")]
pub struct ConnectError {
    from: String,
    error: String,
}

/// Builds a client once, for the commands that read the cluster and end.
pub async fn connect_once(kubeconfig: Option<&Path>) -> Result<Client, ConnectError> {
    try_connect(kubeconfig).await.map_err(|e| ConnectError {
        from: kubeconfig
            .map(|p| format!(" from {}", p.display()))
            .unwrap_or_default(),
        error: format!("{e:#}"),
    })
}

async fn try_connect(kubeconfig: Option<&Path>) -> anyhow::Result<Client> {
    let config = match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await?
        }
        None => kube::Config::infer().await?,
    };
    Ok(Client::try_from(config)?)
}
