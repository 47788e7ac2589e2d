//! The CA the webhook listener verifies its callers' client certificates against
//! (`--webhook-client-ca-file`): the API server presents one when its admission
//! configuration's kubeconfig names it. Re-read when the file changes, as the serving pair is;
//! a bad file keeps the CA in force. A client that presents no certificate still completes
//! the handshake, so that it can be answered 401 and counted (or let in by a token); one that
//! presents a certificate this CA did not sign is refused in the handshake.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, UnixTime};

use super::files::{TlsError, provider};

/// The callers' CA, swappable while serving.
pub struct ClientCa {
    path: PathBuf,
    provider: Arc<CryptoProvider>,
    current: RwLock<Arc<dyn ClientCertVerifier>>,
    /// The file's contents last seen, to notice changes cheaply.
    seen: RwLock<Vec<u8>>,
}

impl std::fmt::Debug for ClientCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientCa")
            .field("path", &self.path)
            .finish()
    }
}

/// A verifier of client certificates signed by the CAs in `pem`.
fn verifier(
    pem: &[u8],
    path: &Path,
    provider: &Arc<CryptoProvider>,
) -> Result<Arc<dyn ClientCertVerifier>, TlsError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| TlsError::BadCertificate {
            path: path.to_owned(),
            source,
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate(path.to_owned()));
    }
    let mut roots = RootCertStore::empty();
    for c in certs {
        roots.add(c)?;
    }
    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .allow_unauthenticated()
        .build()
        .map_err(|e| TlsError::ClientCa {
            path: path.to_owned(),
            reason: e.to_string(),
        })
}

impl ClientCa {
    /// Loads the CA; fails when it cannot verify anything.
    pub fn load(path: &Path) -> Result<Arc<Self>, TlsError> {
        let provider = provider();
        let pem = std::fs::read(path).map_err(|source| TlsError::Read {
            path: path.to_owned(),
            source,
        })?;
        let current = verifier(&pem, path, &provider)?;
        Ok(Arc::new(ClientCa {
            path: path.to_owned(),
            provider,
            current: RwLock::new(current),
            seen: RwLock::new(pem),
        }))
    }

    fn current(&self) -> Arc<dyn ClientCertVerifier> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Re-reads the file; swaps the CA when it changed and is valid. `None`: unchanged.
    pub fn reload(&self) -> Option<Result<(), TlsError>> {
        let pem = match std::fs::read(&self.path) {
            Ok(p) => p,
            Err(source) => {
                return Some(Err(TlsError::Read {
                    path: self.path.clone(),
                    source,
                }));
            }
        };
        if *self.seen.read().unwrap_or_else(|e| e.into_inner()) == pem {
            return None;
        }
        let result = verifier(&pem, &self.path, &self.provider);
        *self.seen.write().unwrap_or_else(|e| e.into_inner()) = pem;
        Some(result.map(|v| *self.current.write().unwrap_or_else(|e| e.into_inner()) = v))
    }

    /// Polls the file every `interval` until the task is dropped.
    pub async fn watch(self: Arc<Self>, interval: Duration) {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        let mut failed = None;
        loop {
            tick.tick().await;
            match self.reload() {
                Some(Ok(())) => {
                    failed = None;
                    tracing::info!(file = %self.path.display(), "client CA reloaded");
                }
                Some(Err(e)) => {
                    let text = e.to_string();
                    if failed.as_ref() != Some(&text) {
                        tracing::warn!(error = %text, "client CA not reloaded; keeping the current one");
                        failed = Some(text);
                    }
                }
                None => {}
            }
        }
    }
}

impl ClientCertVerifier for ClientCa {
    fn offer_client_auth(&self) -> bool {
        true
    }

    /// Not in the handshake: a caller without a certificate is answered 401 (or let in by
    /// its token) by the route.
    fn client_auth_mandatory(&self) -> bool {
        false
    }

    /// No hints (they would be borrowed from a CA that may be swapped): the API server sends
    /// the one certificate its kubeconfig names whatever the hints say.
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.current()
            .verify_client_cert(end_entity, intermediates, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.current().verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.current().verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.current().supported_verify_schemes()
    }
}
