//! Built-in certificate mode (`--certificate-secret NAMESPACE/NAME`): the webhook makes its
//! own CA and serving certificate, keeps them in a `kubernetes.io/tls` Secret shared by all
//! replicas, and writes the CA into every entry of its MutatingWebhookConfiguration
//! (`caBundle`). No leader election: every replica runs the same loop, and the API server's
//! optimistic concurrency (create → 409, update with `resourceVersion` → 409) picks one
//! writer; the others read the winner's Secret.
//!
//! Validity: CA 10 years, serving certificate 1 year, renewed (from the same CA, so the
//! `caBundle` stays valid) when less than a third of its validity remains. The validity is
//! kept in Secret annotations written here ([`NOT_BEFORE`], [`NOT_AFTER`], unix seconds):
//! no X.509 parser is in the dependency tree.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt as _};
use rcgen::{Issuer, KeyPair};
use serde_json::json;
use tokio::sync::watch;

use crate::certs::files::ReloadingCert;
use crate::certs::generate as certs;
use crate::metrics::{Metrics, ReloadResult};

/// Annotation: start of the serving certificate's validity (unix seconds).
pub const NOT_BEFORE: &str = "otel-injector.opentelemetry.io/serving-not-before";
/// Annotation: end of the serving certificate's validity (unix seconds).
pub const NOT_AFTER: &str = "otel-injector.opentelemetry.io/serving-not-after";
/// Annotation: the hosts (comma-separated) the serving certificate was made for.
pub const HOSTS: &str = "otel-injector.opentelemetry.io/serving-hosts";

const DAY: u64 = 24 * 60 * 60;
/// Validity of the CA.
pub const CA_VALIDITY: Duration = Duration::from_secs(10 * 365 * DAY);
/// Validity of the serving certificate.
pub const SERVING_VALIDITY: Duration = Duration::from_secs(365 * DAY);
/// Certificates start this much in the past, for clocks that trail ours.
const BACKDATE: Duration = Duration::from_secs(60 * 60);
const CA_NAME: &str = "otel-injector webhook CA";

/// How often the Secret is re-read (renewals by other replicas) when all is well.
const SECRET_POLL: Duration = Duration::from_secs(30);
/// How often the `caBundle` is re-checked when all is well.
const BUNDLE_POLL: Duration = Duration::from_secs(60);
const BACKOFF_MIN: Duration = Duration::from_millis(500);
const BACKOFF_MAX: Duration = Duration::from_secs(30);

/// Where the certificate lives and what it is for.
#[derive(Clone, Debug)]
pub struct Config {
    pub namespace: String,
    pub name: String,
    pub webhook_configuration: String,
    pub hosts: Vec<String>,
}

/// Parses `NAMESPACE/NAME`.
pub fn parse_secret_ref(v: &str) -> Result<(String, String), String> {
    match v.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok((ns.to_owned(), name.to_owned()))
        }
        _ => Err(format!("expected NAMESPACE/NAME, got {v:?}")),
    }
}

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
            (NOT_BEFORE.to_owned(), self.not_before.to_string()),
            (NOT_AFTER.to_owned(), self.not_after.to_string()),
            (HOSTS.to_owned(), self.hosts.join(",")),
        ]);
        Secret {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                namespace: Some(namespace.to_owned()),
                labels: Some(BTreeMap::from([(
                    "app.kubernetes.io/managed-by".to_owned(),
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
            not_before: num(NOT_BEFORE)?,
            not_after: num(NOT_AFTER)?,
            hosts: annotations
                .get(HOSTS)
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

/// What went wrong talking to the API server, with what to fix.
fn explain(verb: &str, what: &str, namespace: Option<&str>, e: &kube::Error) -> String {
    let resource = if what.starts_with("Secret") {
        "secrets"
    } else {
        "mutatingwebhookconfigurations (cluster scope)"
    };
    match e {
        kube::Error::Api(s) if s.is_forbidden() => format!(
            "cannot {verb} {what}: forbidden; grant get/create/update on {resource}{} \
             (see manifests/self-signed.yaml)",
            namespace.map(|ns| format!(" in {ns}")).unwrap_or_default()
        ),
        kube::Error::Api(s) if s.is_not_found() && what.starts_with("Mutating") => format!(
            "cannot {verb} {what}: not found; apply manifests/webhook.yaml or set \
             --webhook-configuration to its name"
        ),
        e => format!("cannot {verb} {what}: {e}"),
    }
}

fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.is_conflict() || s.is_already_exists())
}

/// One pass over the Secret: read it, create it if missing, renew it if due. Returns the
/// bundle to serve.
async fn sync_secret(api: &Api<Secret>, cfg: &Config) -> Result<Bundle, String> {
    let what = format!("Secret {}/{}", cfg.namespace, cfg.name);
    let ns = Some(cfg.namespace.as_str());
    // A few rounds: each conflict means another replica wrote first; read theirs.
    for _ in 0..5 {
        let existing = api
            .get_opt(&cfg.name)
            .await
            .map_err(|e| explain("get", &what, ns, &e))?;
        let Some(secret) = existing else {
            let bundle = Bundle::generate(&cfg.hosts, now()).map_err(|e| e.to_string())?;
            match api
                .create(
                    &PostParams::default(),
                    &bundle.to_secret(&cfg.namespace, &cfg.name),
                )
                .await
            {
                Ok(_) => {
                    tracing::info!(secret = %what, "created the webhook CA and serving certificate");
                    return Ok(bundle);
                }
                Err(e) if is_conflict(&e) => {
                    tracing::info!(secret = %what, "another replica created the certificate first; using theirs");
                    continue;
                }
                Err(e) => return Err(explain("create", &what, ns, &e)),
            }
        };
        let bundle = Bundle::from_secret(&secret).map_err(|e| {
            format!(
                "{what} {e}; delete it to let the webhook make a new one (it then also \
                 rewrites the caBundle)"
            )
        })?;
        let Some(reason) = bundle.renewal_reason(&cfg.hosts, now()) else {
            return Ok(bundle);
        };
        tracing::info!(secret = %what, %reason, "renewing the serving certificate");
        let renewed = bundle
            .renew(&bundle.renewal_hosts(&cfg.hosts), now())
            .map_err(|e| format!("{what}: cannot renew from its CA: {e}"))?;
        let mut updated = renewed.to_secret(&cfg.namespace, &cfg.name);
        // Optimistic concurrency: only if nobody wrote since we read.
        updated.metadata.resource_version = secret.resource_version();
        match api
            .replace(&cfg.name, &PostParams::default(), &updated)
            .await
        {
            Ok(_) => return Ok(renewed),
            Err(e) if is_conflict(&e) => continue,
            Err(e) => return Err(explain("update", &what, ns, &e)),
        }
    }
    Err(format!(
        "{what}: still conflicting after 5 rounds; retrying"
    ))
}

/// Sets `caBundle` on every entry that lacks it (or has another one): one strategic merge
/// patch keyed by entry name, guarded by the `resourceVersion` read. Returns how many
/// entries were changed.
async fn sync_ca_bundle(
    api: &Api<MutatingWebhookConfiguration>,
    name: &str,
    ca_pem: &str,
) -> Result<usize, String> {
    let what = format!("MutatingWebhookConfiguration {name}");
    let mwc = api
        .get(name)
        .await
        .map_err(|e| explain("get", &what, None, &e))?;
    let want = ca_pem.as_bytes();
    let stale: Vec<_> = mwc
        .webhooks
        .iter()
        .flatten()
        .filter(|w| w.client_config.ca_bundle.as_ref().map(|b| b.0.as_slice()) != Some(want))
        .map(|w| {
            json!({
                "name": w.name,
                "clientConfig": {
                    "caBundle": base64::engine::general_purpose::STANDARD.encode(want)
                }
            })
        })
        .collect();
    if stale.is_empty() {
        return Ok(0);
    }
    let patch = json!({
        "metadata": {"resourceVersion": mwc.resource_version()},
        "webhooks": stale,
    });
    api.patch(name, &PatchParams::default(), &Patch::Strategic(&patch))
        .await
        .map_err(|e| explain("patch", &what, None, &e))?;
    Ok(stale.len())
}

/// Runs the built-in certificate mode until dropped: keeps the Secret, swaps the served
/// pair to it (then sets `ready`), and keeps the `caBundle` of the webhook configuration.
pub async fn run(
    client: Client,
    cfg: Config,
    cert: Arc<ReloadingCert>,
    ready: Arc<AtomicBool>,
    metrics: Arc<Metrics>,
) {
    let (ca_tx, ca_rx) = watch::channel::<Option<String>>(None);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &cfg.namespace);
    let mwcs: Api<MutatingWebhookConfiguration> = Api::all(client);
    let secret_loop = async {
        let mut delay = BACKOFF_MIN;
        loop {
            match sync_secret(&secrets, &cfg).await {
                Ok(bundle) => {
                    delay = BACKOFF_MIN;
                    match cert.set_pem(bundle.cert.as_bytes(), bundle.key.as_bytes()) {
                        Ok(true) => {
                            tracing::info!(secret = %format!("{}/{}", cfg.namespace, cfg.name), "serving the certificate from the Secret");
                            metrics.cert_reload(ReloadResult::success);
                            ready.store(true, Ordering::Release);
                        }
                        Ok(false) => ready.store(true, Ordering::Release),
                        Err(e) => {
                            tracing::error!(error = %e, secret = %format!("{}/{}", cfg.namespace, cfg.name), "the Secret's certificate cannot be served; delete the Secret to have it made anew");
                            metrics.cert_reload(ReloadResult::error);
                        }
                    }
                    ca_tx.send_if_modified(|ca| {
                        let changed = ca.as_deref() != Some(bundle.ca_cert.as_str());
                        if changed {
                            *ca = Some(bundle.ca_cert.clone());
                        }
                        changed
                    });
                    tokio::time::sleep(SECRET_POLL).await;
                }
                Err(e) => {
                    tracing::error!(error = %e, "webhook certificate not synced; retrying in {delay:?}");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(BACKOFF_MAX);
                }
            }
        }
    };
    let bundle_loop = async {
        let mut ca_rx = ca_rx;
        let mut delay = BACKOFF_MIN;
        loop {
            let ca = ca_rx.borrow_and_update().clone();
            let wait = match ca {
                None => None,
                Some(ca) => match sync_ca_bundle(&mwcs, &cfg.webhook_configuration, &ca).await {
                    Ok(n) => {
                        if n > 0 {
                            tracing::info!(webhook_configuration = %cfg.webhook_configuration, entries = n, "caBundle set");
                        }
                        delay = BACKOFF_MIN;
                        Some(BUNDLE_POLL)
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "caBundle not set; retrying in {delay:?}");
                        let d = delay;
                        delay = (delay * 2).min(BACKOFF_MAX);
                        Some(d)
                    }
                },
            };
            let changed = async {
                if ca_rx.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            };
            match wait {
                None => changed.await,
                Some(d) => {
                    tokio::select! {
                        _ = changed => {}
                        _ = tokio::time::sleep(d) => {}
                    }
                }
            }
        }
    };
    tokio::join!(secret_loop, bundle_loop);
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn secret_refs_need_a_namespace_and_a_name() {
        assert_eq!(
            parse_secret_ref("ns/name").unwrap(),
            ("ns".to_owned(), "name".to_owned())
        );
        for bad in ["name", "/name", "ns/", "a/b/c"] {
            assert!(parse_secret_ref(bad).is_err(), "{bad}");
        }
    }
}
