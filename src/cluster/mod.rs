//! The caches the engine reads: reflector stores kept current by watches ([`watch`]), or
//! Instrumentations read from files ([`files`]); and the namespace labeler of the targeted
//! install. The request path only reads these; it never calls the API server.

pub mod files;
pub mod labeler;
pub mod watch;

use std::path::{Path, PathBuf};
use std::time::Duration;

use kube::Client;

pub use files::{FileCatalogError, StaticCatalog};
pub use watch::{CatalogWriters, KubeCatalog};

/// The namespace label that sets the Pod Security Admission level enforced there.
pub const POD_SECURITY_ENFORCE: &str = "pod-security.kubernetes.io/enforce";

/// Builds a client, retrying with backoff while the configuration cannot be loaded, so a
/// missing kubeconfig leaves the webhook serving (not ready) instead of exiting.
pub async fn connect(kubeconfig: Option<PathBuf>) -> Client {
    let mut delay = Duration::from_millis(500);
    loop {
        match try_connect(kubeconfig.as_deref()).await {
            Ok(c) => return c,
            Err(e) => {
                tracing::error!(error = %e, "cannot build a Kubernetes client; retrying in {delay:?}");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(30));
            }
        }
    }
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
