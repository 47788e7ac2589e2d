//! The built-in certificate mode's CA and serving pair ([`Bundle`]) and its round trip
//! through the `kubernetes.io/tls` Secret that every replica shares.
//!
//! Validity: CA 10 years, serving certificate 1 year, renewed (from the same CA, so the
//! `caBundle` stays valid) when less than a third of its validity remains. The validity is
//! kept in Secret annotations written here ([`SERVING_NOT_BEFORE`], [`SERVING_NOT_AFTER`],
//! unix seconds): no X.509 parser is in the dependency tree.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt as _;
use rcgen::{Issuer, KeyPair};

use crate::certs::generate as certs;
use crate::keys::{SERVING_HOSTS, SERVING_NOT_AFTER, SERVING_NOT_BEFORE};

const DAY: u64 = 24 * 60 * 60;
/// Validity of the CA.
pub const CA_VALIDITY: Duration = Duration::from_secs(10 * 365 * DAY);
/// Validity of the serving certificate.
pub const SERVING_VALIDITY: Duration = Duration::from_secs(365 * DAY);
/// Certificates start this much in the past, for clocks that trail ours.
const BACKDATE: Duration = Duration::from_secs(60 * 60);
const CA_NAME: &str = "otel-injector webhook CA";

/// The CA and serving pair as kept in the Secret, PEM encoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bundle {
    pub ca_cert: String,
    pub ca_key: String,
    pub cert: String,
    pub key: String,
    /// Serving certificate validity, unix seconds.
    pub not_before: u64,
    pub not_after: u64,
    pub hosts: Vec<String>,
}

/// Seconds since the epoch.
pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl Bundle {
    /// A new CA (10 years) and a serving certificate (1 year) for `hosts`.
    pub fn generate(hosts: &[String], now: u64) -> Result<Bundle, rcgen::Error> {
        let start = now.saturating_sub(BACKDATE.as_secs());
        let ca_key = KeyPair::generate()?;
        let params = certs::ca_params(CA_NAME, Some((start, now + CA_VALIDITY.as_secs())))?;
        let ca_cert = params.self_signed(&ca_key)?;
        let issuer = Issuer::new(params, &ca_key);
        let not_after = now + SERVING_VALIDITY.as_secs();
        let (cert, key) = certs::serving(&issuer, hosts, Some((start, not_after)))?;
        Ok(Bundle {
            ca_cert: ca_cert.pem(),
            ca_key: ca_key.serialize_pem(),
            cert,
            key,
            not_before: start,
            not_after,
            hosts: hosts.to_vec(),
        })
    }

    /// A new serving certificate from the same CA (the `caBundle` stays valid).
    pub fn renew(&self, hosts: &[String], now: u64) -> Result<Bundle, rcgen::Error> {
        let ca_key = KeyPair::from_pem(&self.ca_key)?;
        // The issuer's subject and key are what a client checks against the CA.
        let issuer = Issuer::new(certs::ca_params(CA_NAME, None)?, ca_key);
        let start = now.saturating_sub(BACKDATE.as_secs());
        let not_after = now + SERVING_VALIDITY.as_secs();
        let (cert, key) = certs::serving(&issuer, hosts, Some((start, not_after)))?;
        Ok(Bundle {
            cert,
            key,
            not_before: start,
            not_after,
            hosts: hosts.to_vec(),
            ..self.clone()
        })
    }

    /// The hosts a renewal is made for: ours, plus the Secret's while some of ours are
    /// missing from it (so replicas of a rollout that changes `--certificate-host` do not
    /// take turns replacing each other's hosts).
    pub fn renewal_hosts(&self, hosts: &[String]) -> Vec<String> {
        let mut all = hosts.to_vec();
        if hosts.iter().any(|h| !self.hosts.contains(h)) {
            all.extend(self.hosts.iter().filter(|h| !hosts.contains(h)).cloned());
        }
        all
    }

    /// Why the serving certificate must be renewed at `now`, if it must: less than a third
    /// of its validity left, or not made for one of `hosts`.
    pub fn renewal_reason(&self, hosts: &[String], now: u64) -> Option<String> {
        let lifetime = self.not_after.saturating_sub(self.not_before);
        if now.saturating_add(lifetime / 3) >= self.not_after {
            return Some(format!(
                "less than a third of its validity left (expires at unix time {})",
                self.not_after
            ));
        }
        let missing: Vec<&String> = hosts.iter().filter(|h| !self.hosts.contains(h)).collect();
        if !missing.is_empty() {
            return Some(format!("not made for host(s) {missing:?}"));
        }
        None
    }

    /// The Secret holding this bundle.
    pub fn to_secret(&self, namespace: &str, name: &str) -> Secret {
        let data = [
            ("ca.crt", &self.ca_cert),
            ("ca.key", &self.ca_key),
            ("tls.crt", &self.cert),
            ("tls.key", &self.key),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), ByteString(v.as_bytes().to_vec())))
        .collect();
        let annotations = BTreeMap::from([
            (SERVING_NOT_BEFORE.to_owned(), self.not_before.to_string()),
            (SERVING_NOT_AFTER.to_owned(), self.not_after.to_string()),
            (SERVING_HOSTS.to_owned(), self.hosts.join(",")),
        ]);
        Secret {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                namespace: Some(namespace.to_owned()),
                labels: Some(BTreeMap::from([(
                    crate::keys::MANAGED_BY.to_owned(),
                    "otel-injector".to_owned(),
                )])),
                annotations: Some(annotations),
                ..ObjectMeta::default()
            },
            type_: Some("kubernetes.io/tls".to_owned()),
            data: Some(data),
            ..Secret::default()
        }
    }

    /// Reads a bundle back from its Secret.
    pub fn from_secret(secret: &Secret) -> Result<Bundle, String> {
        let data = secret.data.clone().unwrap_or_default();
        let key = |k: &str| -> Result<String, String> {
            let v = data.get(k).ok_or_else(|| format!("has no key {k}"))?;
            String::from_utf8(v.0.clone()).map_err(|_| format!("key {k} is not PEM text"))
        };
        let annotations = secret.annotations();
        let num = |k: &str| -> Result<u64, String> {
            annotations
                .get(k)
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| format!("has no numeric annotation {k}"))
        };
        Ok(Bundle {
            ca_cert: key("ca.crt")?,
            ca_key: key("ca.key")?,
            cert: key("tls.crt")?,
            key: key("tls.key")?,
            not_before: num(SERVING_NOT_BEFORE)?,
            not_after: num(SERVING_NOT_AFTER)?,
            hosts: annotations
                .get(SERVING_HOSTS)
                .map(|h| {
                    h.split(',')
                        .filter(|s| !s.is_empty())
                        .map(String::from)
                        .collect()
                })
                .unwrap_or_default(),
        })
    }
}

/// A throwaway self-signed pair for `hosts`, so the listener can bind before the Secret is
/// read. No client trusts it.
pub fn throwaway(hosts: &[String]) -> Result<(String, String), rcgen::Error> {
    let b = Bundle::generate(hosts, now())?;
    Ok((b.cert, b.key))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::certs::files::ReloadingCert;

    fn hosts() -> Vec<String> {
        vec![
            "127.0.0.1".to_owned(),
            "otel-injector.otel-injector.svc".to_owned(),
        ]
    }

    #[test]
    fn renewal_is_due_in_the_last_third_or_for_other_hosts() {
        let b = Bundle {
            ca_cert: String::new(),
            ca_key: String::new(),
            cert: String::new(),
            key: String::new(),
            not_before: 1_000,
            not_after: 1_000 + 300,
            hosts: hosts(),
        };
        assert!(b.renewal_reason(&hosts(), 1_000).is_none());
        assert!(b.renewal_reason(&hosts(), 1_199).is_none());
        assert!(b.renewal_reason(&hosts(), 1_200).is_some(), "a third left");
        assert!(b.renewal_reason(&hosts(), 5_000).is_some(), "expired");
        let other = vec!["other.svc".to_owned()];
        assert!(
            b.renewal_reason(&other, 1_000)
                .unwrap()
                .contains("other.svc")
        );
        assert!(b.renewal_reason(&hosts()[..1], 1_000).is_none(), "a subset");
        let mut union = other.clone();
        union.extend(hosts());
        assert_eq!(b.renewal_hosts(&other), union);
        assert_eq!(b.renewal_hosts(&hosts()[..1]), &hosts()[..1]);
    }

    #[test]
    fn a_fresh_bundle_round_trips_through_its_secret_and_renews_from_the_same_ca() {
        let t = 1_800_000_000;
        let b = Bundle::generate(&hosts(), t).unwrap();
        assert_eq!(b.not_after - t, SERVING_VALIDITY.as_secs());
        assert!(b.renewal_reason(&hosts(), t).is_none());
        // Two thirds of a year later it is due.
        assert!(
            b.renewal_reason(&hosts(), t + 2 * SERVING_VALIDITY.as_secs() / 3)
                .is_some()
        );
        let s = b.to_secret("ns", "name");
        assert_eq!(s.type_.as_deref(), Some("kubernetes.io/tls"));
        let keys: Vec<_> = s.data.as_ref().unwrap().keys().cloned().collect();
        assert_eq!(keys, ["ca.crt", "ca.key", "tls.crt", "tls.key"]);
        assert_eq!(Bundle::from_secret(&s).unwrap(), b);

        let later = t + 300 * DAY;
        let r = b.renew(&hosts(), later).unwrap();
        assert_eq!(r.ca_cert, b.ca_cert);
        assert_ne!(r.cert, b.cert);
        assert!(r.renewal_reason(&hosts(), later).is_none());

        // Swapped in only when it changed and the key matches.
        let cert = ReloadingCert::from_pem(b.cert.as_bytes(), b.key.as_bytes(), "test").unwrap();
        assert!(matches!(
            cert.set_pem(r.cert.as_bytes(), r.key.as_bytes()),
            Ok(true)
        ));
        assert!(matches!(
            cert.set_pem(r.cert.as_bytes(), r.key.as_bytes()),
            Ok(false)
        ));
        assert!(cert.set_pem(r.cert.as_bytes(), b.key.as_bytes()).is_err());
    }

    #[test]
    fn a_secret_without_the_keys_says_what_is_missing() {
        let mut s = Bundle::generate(&hosts(), now())
            .unwrap()
            .to_secret("ns", "n");
        s.data.as_mut().unwrap().remove("ca.key");
        assert!(Bundle::from_secret(&s).unwrap_err().contains("ca.key"));
    }
}
