//! Certificates: generating them (development CA, serving pairs), loading and hot-reloading
//! the served pair from files, and the built-in mode that keeps a CA and serving pair in a
//! Secret and the webhook configuration's `caBundle` current. [`ServingCert`] is the served
//! pair together with whichever of those keeps it current; [`validity`] reads its expiry.

pub mod bound_tokens;
pub mod builtin;
pub mod bundle;
pub mod client_ca;
pub mod files;
pub mod generate;
pub mod metrics;
pub mod reloading;
pub mod validity;

use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::Context as _;
use kube::Client;
use tokio_rustls::TlsAcceptor;

pub use files::{ReloadingCert, TlsError};
pub use generate::{DevCerts, generate};
pub use metrics::Metrics;

/// The certificate the webhook serves, and what keeps it current.
pub struct ServingCert {
    cert: Arc<ReloadingCert>,
    keeper: Keeper,
}

enum Keeper {
    /// Re-read the files at this interval.
    Files(Duration),
    /// Built-in certificate mode: keep the Secret and the `caBundle`.
    Builtin(builtin::Config),
}

impl ServingCert {
    /// The pair in these files (checked now), re-read every `interval`.
    pub fn from_files(cert: &Path, key: &Path, interval: Duration) -> Result<Self, TlsError> {
        Ok(ServingCert {
            cert: ReloadingCert::load(cert, key)?,
            keeper: Keeper::Files(interval),
        })
    }

    /// Built-in certificate mode: a throwaway self-signed pair (no client trusts it) lets
    /// the listener bind at once; the Secret's pair replaces it once read.
    pub fn builtin(config: builtin::Config) -> anyhow::Result<Self> {
        let (crt, key) = bundle::throwaway(&config.hosts)
            .context("cannot make the start-up certificate (check --certificate-host)")?;
        let label = format!("Secret {}/{}", config.namespace, config.name);
        Ok(ServingCert {
            cert: ReloadingCert::from_pem(crt.as_bytes(), key.as_bytes(), &label)?,
            keeper: Keeper::Builtin(config),
        })
    }

    /// The `notAfter` (unix seconds) of the certificate served now.
    pub fn not_after(&self) -> i64 {
        self.cert.not_after()
    }

    /// The served pair, whichever keeps it current.
    pub fn served(&self) -> Arc<ReloadingCert> {
        self.cert.clone()
    }

    /// Whether the pair served from the start is the one to serve: not in built-in mode,
    /// where `/readyz` waits for the Secret's.
    pub fn ready_at_start(&self) -> bool {
        matches!(self.keeper, Keeper::Files(_))
    }

    /// The TLS acceptor of the webhook listener, resolving to the current pair; verifying
    /// callers' certificates against `clients` when given.
    pub fn acceptor(
        &self,
        clients: Option<Arc<client_ca::ClientCa>>,
    ) -> Result<TlsAcceptor, TlsError> {
        let clients = clients.map(|c| c as Arc<dyn rustls::server::danger::ClientCertVerifier>);
        Ok(TlsAcceptor::from(Arc::new(
            self.cert.server_config(clients)?,
        )))
    }

    /// Keeps the served pair current until dropped. `client` is awaited only in built-in
    /// mode, which sets `ready` once the Secret's pair is served.
    pub async fn keep(
        self,
        client: impl Future<Output = Client>,
        ready: Arc<AtomicBool>,
        metrics: Arc<Metrics>,
    ) {
        match self.keeper {
            Keeper::Files(interval) => self.cert.watch(interval, metrics).await,
            Keeper::Builtin(config) => {
                builtin::run(client.await, config, self.cert, ready, metrics).await;
            }
        }
    }
}
