//! The CA the webhook listener verifies its callers' client certificates against
//! (`--webhook-client-ca-file`): the API server presents one when its admission
//! configuration's kubeconfig names it. Re-read when the file changes, as the serving pair is;
//! a bad file keeps the CA in force. A client that presents no certificate still completes
//! the handshake, so that it can be answered 401 and counted (or let in by a token); one that
//! presents a certificate this CA did not sign is refused in the handshake.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, UnixTime};

use super::files::provider;
use super::reloading::Reloading;

/// The callers' CA, swappable while serving.
pub struct ClientCa(Arc<Reloading<Arc<dyn ClientCertVerifier>>>);

impl std::fmt::Debug for ClientCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClientCa")
    }
}

/// A verifier of client certificates signed by the CAs in `pem`.
fn verifier(path: &Path, pem: &[u8]) -> Result<Arc<dyn ClientCertVerifier>, String> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("invalid PEM certificate in {}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("no PEM certificate in {}", path.display()));
    }
    let mut roots = RootCertStore::empty();
    for c in certs {
        roots
            .add(c)
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
        .allow_unauthenticated()
        .build()
        .map_err(|e| {
            format!(
                "cannot verify client certificates against {}: {e}",
                path.display()
            )
        })
}

impl ClientCa {
    /// Loads the CA; fails when it cannot verify anything.
    pub fn load(path: &Path) -> Result<Arc<Self>, String> {
        let file = Reloading::load(path, "client CA", verifier)?;
        Ok(Arc::new(ClientCa(Arc::new(file))))
    }

    fn current(&self) -> Arc<dyn ClientCertVerifier> {
        Arc::clone(&*self.0.get())
    }

    /// Re-reads the file every `interval` until the task is dropped (a bad file keeps the
    /// CA in force).
    pub async fn watch(self: Arc<Self>, interval: Duration) {
        self.0.clone().watch(interval).await;
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
