//! Serving certificate: loaded (and checked) before anything binds, then reloaded from disk
//! when the files change, as a mounted Secret does on renewal. New connections get the new
//! certificate; open ones keep theirs; a broken pair on disk never replaces a good one.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rustls::crypto::CryptoProvider;
use rustls::server::danger::ClientCertVerifier;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::{ServerConfig, version};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use super::metrics::{Metrics, ReloadResult};

/// Errors loading the serving certificate.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("failed to read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("no PEM certificate in {0} (check --tls-cert-file)")]
    NoCertificate(PathBuf),
    #[error("invalid PEM certificate in {path}: {source}")]
    BadCertificate {
        path: PathBuf,
        source: rustls_pki_types::pem::Error,
    },
    #[error("no usable PEM private key in {path} (check --tls-key-file): {source}")]
    BadKey {
        path: PathBuf,
        source: rustls_pki_types::pem::Error,
    },
    #[error("private key in {path} is not supported: {source}")]
    UnsupportedKey {
        path: PathBuf,
        source: rustls::Error,
    },
    #[error("certificate {cert} and key {key} do not belong together: {source}")]
    Mismatch {
        cert: PathBuf,
        key: PathBuf,
        source: rustls::Error,
    },
    #[error("cannot read the validity (notAfter) of the certificate in {path}: {source}")]
    Validity {
        path: PathBuf,
        source: yasna::ASN1Error,
    },
    #[error("TLS configuration: {0}")]
    Config(#[from] rustls::Error),
}

/// The crypto provider used for serving (ring).
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_owned(),
        source,
    })
}

/// A pair that can be served, and the end of its certificate's validity (unix seconds).
#[derive(Debug)]
pub struct ServedPair {
    pub key: Arc<CertifiedKey>,
    pub not_after: i64,
}

/// Parses a PEM certificate chain and key and checks that they match and that the first
/// certificate's validity can be read.
pub fn certified_key(
    cert_pem: &[u8],
    key_pem: &[u8],
    cert_path: &Path,
    key_path: &Path,
    provider: &CryptoProvider,
) -> Result<ServedPair, TlsError> {
    let chain = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| TlsError::BadCertificate {
            path: cert_path.to_owned(),
            source,
        })?;
    if chain.is_empty() {
        return Err(TlsError::NoCertificate(cert_path.to_owned()));
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|source| TlsError::BadKey {
        path: key_path.to_owned(),
        source,
    })?;
    let signing = provider
        .key_provider
        .load_private_key(key)
        .map_err(|source| TlsError::UnsupportedKey {
            path: key_path.to_owned(),
            source,
        })?;
    let ck = CertifiedKey::new(chain, signing);
    ck.keys_match().map_err(|source| TlsError::Mismatch {
        cert: cert_path.to_owned(),
        key: key_path.to_owned(),
        source,
    })?;
    let not_after =
        super::validity::not_after(&ck.cert[0]).map_err(|source| TlsError::Validity {
            path: cert_path.to_owned(),
            source,
        })?;
    Ok(ServedPair {
        key: Arc::new(ck),
        not_after,
    })
}

/// Names for a pair held in memory, used in error messages.
fn memory_paths(label: &str) -> (PathBuf, PathBuf) {
    (
        PathBuf::from(format!("{label} (tls.crt)")),
        PathBuf::from(format!("{label} (tls.key)")),
    )
}

/// A certificate resolver whose key pair can be swapped while serving.
#[derive(Debug)]
pub struct ReloadingCert {
    cert_path: PathBuf,
    key_path: PathBuf,
    provider: Arc<CryptoProvider>,
    current: RwLock<ServedPair>,
    /// The file contents last seen, to notice changes cheaply.
    seen: RwLock<(Vec<u8>, Vec<u8>)>,
    /// The last read error, so a missing file is reported once, not on every poll.
    read_error: RwLock<Option<String>>,
}

impl ReloadingCert {
    /// Loads the pair; fails when it cannot be served.
    pub fn load(cert_path: &Path, key_path: &Path) -> Result<Arc<Self>, TlsError> {
        let provider = provider();
        let (c, k) = (read(cert_path)?, read(key_path)?);
        let ck = certified_key(&c, &k, cert_path, key_path, &provider)?;
        Ok(Arc::new(ReloadingCert {
            cert_path: cert_path.to_owned(),
            key_path: key_path.to_owned(),
            provider,
            current: RwLock::new(ck),
            seen: RwLock::new((c, k)),
            read_error: RwLock::new(None),
        }))
    }

    /// A pair held in memory, not read from files (built-in certificate mode); `label`
    /// names its source in errors. Swap it with [`ReloadingCert::set_pem`]; do not `watch`.
    pub fn from_pem(cert_pem: &[u8], key_pem: &[u8], label: &str) -> Result<Arc<Self>, TlsError> {
        let provider = provider();
        let (cert_path, key_path) = memory_paths(label);
        let ck = certified_key(cert_pem, key_pem, &cert_path, &key_path, &provider)?;
        Ok(Arc::new(ReloadingCert {
            cert_path,
            key_path,
            provider,
            current: RwLock::new(ck),
            seen: RwLock::new((cert_pem.to_vec(), key_pem.to_vec())),
            read_error: RwLock::new(None),
        }))
    }

    /// Swaps in a pair from memory when it differs from the last one set and is valid.
    /// Returns whether the served pair changed; a bad pair keeps the current one.
    pub fn set_pem(&self, cert_pem: &[u8], key_pem: &[u8]) -> Result<bool, TlsError> {
        {
            let seen = self.seen.read().unwrap_or_else(|e| e.into_inner());
            if seen.0 == cert_pem && seen.1 == key_pem {
                return Ok(false);
            }
        }
        let ck = certified_key(
            cert_pem,
            key_pem,
            &self.cert_path,
            &self.key_path,
            &self.provider,
        )?;
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = ck;
        *self.seen.write().unwrap_or_else(|e| e.into_inner()) =
            (cert_pem.to_vec(), key_pem.to_vec());
        Ok(true)
    }

    /// Re-reads the files; swaps the served pair when they changed and are valid.
    /// Returns `None` when nothing changed.
    pub fn reload(&self) -> Option<Result<(), TlsError>> {
        let (c, k) = match (read(&self.cert_path), read(&self.key_path)) {
            (Ok(c), Ok(k)) => {
                *self.read_error.write().unwrap_or_else(|e| e.into_inner()) = None;
                (c, k)
            }
            (Err(e), _) | (_, Err(e)) => {
                let msg = e.to_string();
                let mut last = self.read_error.write().unwrap_or_else(|e| e.into_inner());
                if last.as_deref() == Some(msg.as_str()) {
                    return None;
                }
                *last = Some(msg);
                return Some(Err(e));
            }
        };
        {
            let seen = self.seen.read().unwrap_or_else(|e| e.into_inner());
            if seen.0 == c && seen.1 == k {
                return None;
            }
        }
        let result = certified_key(&c, &k, &self.cert_path, &self.key_path, &self.provider);
        // Remember what was seen either way, so a half-written pair is reported once and
        // retried when the files change again.
        *self.seen.write().unwrap_or_else(|e| e.into_inner()) = (c, k);
        Some(result.map(|ck| {
            *self.current.write().unwrap_or_else(|e| e.into_inner()) = ck;
        }))
    }

    /// The certificate chain served now.
    pub fn chain(&self) -> Vec<CertificateDer<'static>> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .key
            .cert
            .clone()
    }

    /// The `notAfter` (unix seconds) of the certificate served now.
    pub fn not_after(&self) -> i64 {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .not_after
    }

    /// Polls the files every `interval` until the task is dropped.
    pub async fn watch(self: Arc<Self>, interval: Duration, metrics: Arc<Metrics>) {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tick.tick().await;
            let this = self.clone();
            let outcome = tokio::task::spawn_blocking(move || this.reload()).await;
            match outcome {
                Ok(Some(Ok(()))) => {
                    tracing::info!(cert = %self.cert_path.display(), "serving certificate reloaded");
                    metrics.reload(ReloadResult::Success);
                    metrics.served(self.not_after());
                }
                Ok(Some(Err(e))) => {
                    tracing::warn!(error = %e, "serving certificate not reloaded; keeping the current one");
                    metrics.reload(ReloadResult::Error);
                }
                Ok(None) => {}
                Err(e) => tracing::error!(error = %e, "certificate reload task failed"),
            }
        }
    }

    /// The rustls server configuration: TLS 1.2 and 1.3, ALPN `http/1.1` only (the API
    /// server speaks HTTP/1.1 to webhooks), certificate from this resolver; client
    /// certificates verified by `clients` when given.
    pub fn server_config(
        self: &Arc<Self>,
        clients: Option<Arc<dyn ClientCertVerifier>>,
    ) -> Result<ServerConfig, TlsError> {
        let builder = ServerConfig::builder_with_provider(self.provider.clone())
            .with_protocol_versions(&[&version::TLS13, &version::TLS12])?;
        let builder = match clients {
            Some(v) => builder.with_client_cert_verifier(v),
            None => builder.with_no_client_auth(),
        };
        let mut cfg = builder.with_cert_resolver(self.clone());
        cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(cfg)
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(
            self.current
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .key
                .clone(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::certs::generate as certs;

    fn pair(dir: &Path) -> (PathBuf, PathBuf) {
        (dir.join("tls.crt"), dir.join("tls.key"))
    }

    #[test]
    fn reload_swaps_only_valid_changed_pairs_and_reports_a_missing_file_once() {
        let dir = tempfile::tempdir().unwrap();
        let hosts = ["127.0.0.1".to_owned()];
        let first = certs::generate("test CA", &hosts).unwrap();
        first.write_to(dir.path()).unwrap();
        let (c, k) = pair(dir.path());
        let cert = ReloadingCert::load(&c, &k).unwrap();
        let served = |r: &ReloadingCert| r.current.read().unwrap().key.cert[0].clone();
        let before = served(&cert);

        assert!(cert.reload().is_none(), "unchanged files");

        let second = first.reissue(&hosts).unwrap();
        second.write_to(dir.path()).unwrap();
        assert!(matches!(cert.reload(), Some(Ok(()))));
        assert_ne!(served(&cert), before);
        let after = served(&cert);

        // A key that does not belong to the certificate is refused; the old pair stays.
        std::fs::write(&k, &first.key).unwrap();
        assert!(matches!(
            cert.reload(),
            Some(Err(TlsError::Mismatch { .. }))
        ));
        assert_eq!(served(&cert), after);
        assert!(
            cert.reload().is_none(),
            "the same bad pair is reported once"
        );

        std::fs::remove_file(&k).unwrap();
        assert!(matches!(cert.reload(), Some(Err(TlsError::Read { .. }))));
        assert!(cert.reload().is_none(), "a missing file is reported once");
        assert_eq!(served(&cert), after);
    }

    #[test]
    fn bad_files_fail_fast_with_the_flag_to_fix() {
        let dir = tempfile::tempdir().unwrap();
        let (c, k) = pair(dir.path());
        std::fs::write(&c, "not pem").unwrap();
        std::fs::write(&k, "not pem").unwrap();
        let e = ReloadingCert::load(&c, &k).unwrap_err().to_string();
        assert!(e.contains("--tls-cert-file"), "{e}");
        let e = ReloadingCert::load(&dir.path().join("nope"), &k)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("failed to read"), "{e}");
    }
}
