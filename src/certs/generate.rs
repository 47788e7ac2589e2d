//! Development certificates: a CA and a serving certificate signed by it, made with rcgen.
//! Used by `otel-injector dev-certs`, the demo and the tests; production uses cert-manager.

use std::net::IpAddr;
use std::path::Path;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

/// A CA and a serving certificate, PEM encoded.
#[derive(Clone, Debug)]
pub struct DevCerts {
    pub ca_name: String,
    pub ca_cert: String,
    pub ca_key: String,
    pub cert: String,
    pub key: String,
}

/// Errors making certificates.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("failed to generate a certificate: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("failed to write {path}: {source}")]
    Write {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
}

/// A fresh CA named `ca_name` and a serving certificate for `hosts` (DNS names or IPs).
pub fn generate(ca_name: &str, hosts: &[String]) -> Result<DevCerts, CertError> {
    let ca_key = KeyPair::generate()?;
    let ca = ca_params(ca_name, None)?;
    let ca_cert = ca.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca, &ca_key);
    let (cert, key) = serving(&issuer, hosts, None)?;
    Ok(DevCerts {
        ca_name: ca_name.to_owned(),
        ca_cert: ca_cert.pem(),
        ca_key: ca_key.serialize_pem(),
        cert,
        key,
    })
}

/// Validity of a certificate in unix seconds (from, to); `None`: rcgen's default.
pub type Validity = Option<(u64, u64)>;

fn apply_validity(params: &mut CertificateParams, validity: Validity) {
    if let Some((from, to)) = validity {
        let at = |s: u64| rcgen::date_time_ymd(1970, 1, 1) + std::time::Duration::from_secs(s);
        params.not_before = at(from);
        params.not_after = at(to);
    }
}

/// The parameters of a CA named `ca_name`. Re-creating them with the CA's key gives an
/// issuer that signs certificates the CA certificate verifies (same subject, same key).
pub fn ca_params(ca_name: &str, validity: Validity) -> Result<CertificateParams, rcgen::Error> {
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.distinguished_name.push(DnType::CommonName, ca_name);
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    apply_validity(&mut ca, validity);
    Ok(ca)
}

/// A serving certificate for `hosts` (DNS names or IPs) signed by `issuer`:
/// (cert PEM, key PEM).
pub fn serving(
    issuer: &Issuer<'_, impl rcgen::SigningKey>,
    hosts: &[String],
    validity: Validity,
) -> Result<(String, String), rcgen::Error> {
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.distinguished_name.push(
        DnType::CommonName,
        hosts.first().map(String::as_str).unwrap_or("otel-injector"),
    );
    for h in hosts {
        params.subject_alt_names.push(match h.parse::<IpAddr>() {
            Ok(ip) => SanType::IpAddress(ip),
            Err(_) => SanType::DnsName(h.clone().try_into()?),
        });
    }
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    apply_validity(&mut params, validity);
    let cert = params.signed_by(&key, issuer)?;
    Ok((cert.pem(), key.serialize_pem()))
}

impl DevCerts {
    /// A new serving certificate from the same CA (a rotation, as cert-manager does).
    pub fn reissue(&self, hosts: &[String]) -> Result<DevCerts, CertError> {
        // The same subject and key as the CA certificate: what a client checks.
        let ca_key = KeyPair::from_pem(&self.ca_key)?;
        let issuer = Issuer::new(ca_params(&self.ca_name, None)?, ca_key);
        let (cert, key) = serving(&issuer, hosts, None)?;
        Ok(DevCerts {
            cert,
            key,
            ..self.clone()
        })
    }

    /// A client certificate named `name` (its common name) signed by this CA, for a caller
    /// of a webhook that verifies callers against it (`--webhook-client-ca-file`), such as
    /// the API server: (cert PEM, key PEM).
    pub fn client(&self, name: &str) -> Result<(String, String), CertError> {
        let ca_key = KeyPair::from_pem(&self.ca_key)?;
        let issuer = Issuer::new(ca_params(&self.ca_name, None)?, ca_key);
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name.push(DnType::CommonName, name);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        let cert = params.signed_by(&key, &issuer)?;
        Ok((cert.pem(), key.serialize_pem()))
    }

    /// Writes `ca.crt`, `ca.key`, `tls.crt`, `tls.key` into `dir` (the names a Kubernetes TLS
    /// Secret mounts).
    pub fn write_to(&self, dir: &Path) -> Result<(), CertError> {
        std::fs::create_dir_all(dir).map_err(|source| CertError::Write {
            path: dir.to_owned(),
            source,
        })?;
        for (name, body) in [
            ("ca.crt", &self.ca_cert),
            ("ca.key", &self.ca_key),
            ("tls.crt", &self.cert),
            ("tls.key", &self.key),
        ] {
            let path = dir.join(name);
            // Write then rename, so a reader never sees half a file.
            let tmp = dir.join(format!(".{name}.tmp"));
            std::fs::write(&tmp, body)
                .and_then(|_| std::fs::rename(&tmp, &path))
                .map_err(|source| CertError::Write { path, source })?;
        }
        Ok(())
    }
}
