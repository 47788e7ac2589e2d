//! Whether the registered MutatingWebhookConfiguration (`--webhook-configuration`, kept in the
//! API) still sends pods to this webhook as the replicas expect: it exists, an entry calls
//! `/mutate-v1-pod` for pod CREATEs, the API server's TLS check of the certificate served now
//! passes with that entry's `caBundle` and host, and its `failurePolicy` is the one expected
//! (`--registration-failure-policy`). Read every `--registration-check-interval` (`get` on
//! that one object); what
//! differs is the gauge `otel_injector_registration_drift{aspect}` and the Instrumentations'
//! `Registered` condition (written by the status controller), and is logged when it changes.
//! Deleting or editing the configuration otherwise turns instrumentation off in silence.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use k8s_openapi::api::admissionregistration::v1::{MutatingWebhook, MutatingWebhookConfiguration};
use kube::Client;
use kube::api::Api;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::ServerCertVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};

use crate::metrics::label_enum;

/// The webhook's path for pods.
const PATH: &str = "/mutate-v1-pod";

label_enum! {
    /// What differs from what the replicas expect.
    Aspect {
        /// The configuration does not exist.
        Missing => "missing",
        /// No entry calls this webhook for pod CREATEs.
        Rules => "rules",
        /// The API server's TLS check of the certificate served now fails with an entry's
        /// `caBundle` and host.
        CaBundle => "ca_bundle",
        /// An entry's `failurePolicy` is not the one expected.
        FailurePolicy => "failure_policy",
    }
}

/// What the last read found: `None` before the first, or when it could not be read. A
/// channel: the status writer wakes when it changes (the `Registered` condition follows at
/// once, not at its next resync).
pub type SharedDrift = Arc<tokio::sync::watch::Sender<Option<Vec<Aspect>>>>;

/// The check's series.
#[derive(Debug)]
pub struct Metrics {
    drift: Family<[(&'static str, &'static str); 1], Gauge>,
}

impl Metrics {
    /// The series, registered into `registry`, every aspect created at zero.
    pub fn register(registry: &mut Registry) -> Self {
        let drift = Family::default();
        registry.register(
            "registration_drift",
            "1 when the registered MutatingWebhookConfiguration differs from what the replicas \
             expect, by aspect (missing, rules, ca_bundle, failure_policy)",
            drift.clone(),
        );
        let m = Metrics { drift };
        m.set(&[]);
        m
    }

    fn set(&self, found: &[Aspect]) {
        for a in Aspect::ALL {
            self.drift
                .get_or_create(&[("aspect", a.as_str())])
                .set(i64::from(found.contains(&a)));
        }
    }
}

/// What the replicas expect of the configuration.
#[derive(Clone, Debug)]
pub struct Expected {
    /// Its name.
    pub name: String,
    /// The failure policy every entry calling this webhook has; `None`: any.
    pub failure_policy: Option<String>,
    /// How often it is read.
    pub every: Duration,
}

/// Whether an entry calls this webhook for pods: its path, by Service or URL.
fn calls_us(w: &MutatingWebhook) -> bool {
    let c = &w.client_config;
    let by_service = c
        .service
        .as_ref()
        .is_some_and(|s| s.path.as_deref() == Some(PATH));
    let by_url = c.url.as_deref().is_some_and(|u| {
        u.strip_prefix("https://")
            .and_then(|rest| rest.find('/').map(|i| &rest[i..]))
            .is_some_and(|p| p.split('?').next() == Some(PATH))
    });
    by_service || by_url
}

/// Whether an entry's rules send pod CREATEs.
fn sends_pod_creates(w: &MutatingWebhook) -> bool {
    let any =
        |v: &Option<Vec<String>>, want: &str| v.iter().flatten().any(|x| x == want || x == "*");
    w.rules.iter().flatten().any(|r| {
        any(&r.api_groups, "")
            && any(&r.api_versions, "v1")
            && any(&r.operations, "CREATE")
            && r.resources
                .iter()
                .flatten()
                .any(|x| x == "pods" || x == "*")
    })
}

/// The host the API server checks the served certificate against.
fn host(w: &MutatingWebhook) -> Option<String> {
    let c = &w.client_config;
    if let Some(s) = &c.service {
        return Some(format!("{}.{}.svc", s.name, s.namespace));
    }
    let rest = c.url.as_deref()?.strip_prefix("https://")?;
    let authority = rest.split('/').next()?;
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next()?,
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    };
    Some(host.to_owned())
}

/// Whether the API server's TLS check of `chain` passes with the entry's `caBundle`.
fn trusted(w: &MutatingWebhook, chain: &[CertificateDer<'static>]) -> bool {
    let (Some(leaf), Some(bundle), Some(host)) =
        (chain.first(), w.client_config.ca_bundle.as_ref(), host(w))
    else {
        return false;
    };
    // The API object holds the PEM; some clients hand it base64-encoded once more.
    let pem = match std::str::from_utf8(&bundle.0) {
        Ok(text) if text.contains("-----BEGIN") => bundle.0.clone(),
        _ => match base64::engine::general_purpose::STANDARD.decode(&bundle.0) {
            Ok(decoded) => decoded,
            Err(_) => return false,
        },
    };
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(&pem).flatten() {
        let _ = roots.add(c);
    }
    if roots.is_empty() {
        return false;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let Ok(verifier) =
        WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider).build()
    else {
        return false;
    };
    let Ok(name) = ServerName::try_from(host) else {
        return false;
    };
    verifier
        .verify_server_cert(leaf, &chain[1..], &name, &[], UnixTime::now())
        .is_ok()
}

/// What differs between the configuration as read and what is `expected`, given the chain
/// served now.
pub fn drift(
    config: Option<&MutatingWebhookConfiguration>,
    expected: &Expected,
    chain: &[CertificateDer<'static>],
) -> Vec<Aspect> {
    let Some(config) = config else {
        return vec![Aspect::Missing];
    };
    let ours: Vec<&MutatingWebhook> = config
        .webhooks
        .iter()
        .flatten()
        .filter(|w| calls_us(w))
        .collect();
    let mut found = Vec::new();
    if !ours.iter().any(|w| sends_pod_creates(w)) {
        found.push(Aspect::Rules);
    }
    if ours.is_empty() || !ours.iter().all(|w| trusted(w, chain)) {
        found.push(Aspect::CaBundle);
    }
    if let Some(want) = &expected.failure_policy
        && ours
            .iter()
            .any(|w| w.failure_policy.as_deref().unwrap_or("Fail") != want)
    {
        found.push(Aspect::FailurePolicy);
    }
    found
}

/// Reads the configuration every [`Expected::every`] until dropped, keeping `shared` and the gauge
/// current; `chain` gives the certificate chain served now.
pub async fn run(
    client: Client,
    expected: Expected,
    chain: Arc<dyn Fn() -> Vec<CertificateDer<'static>> + Send + Sync>,
    shared: SharedDrift,
    metrics: Arc<Metrics>,
) {
    let api = Api::<MutatingWebhookConfiguration>::all(client);
    let mut last: Option<Result<Vec<Aspect>, String>> = None;
    loop {
        let now = match api.get_opt(&expected.name).await {
            Ok(config) => Ok(drift(config.as_ref(), &expected, &chain())),
            Err(e) => Err(e.to_string()),
        };
        if last.as_ref() != Some(&now) {
            match &now {
                Ok(found) if found.is_empty() => {
                    tracing::info!(configuration = %expected.name, "the webhook configuration sends pods to this webhook as expected")
                }
                Ok(found) => {
                    tracing::warn!(configuration = %expected.name, drift = ?found.iter().map(|a| a.as_str()).collect::<Vec<_>>(), "the webhook configuration differs from what the replicas expect: pods may be admitted without injection")
                }
                Err(e) => {
                    tracing::warn!(configuration = %expected.name, error = %e, "cannot read the webhook configuration (get on mutatingwebhookconfigurations: manifests/base)")
                }
            }
        }
        let state = now.as_ref().ok().cloned();
        metrics.set(state.as_deref().unwrap_or(&[]));
        shared.send_if_modified(|held| {
            let changed = *held != state;
            *held = state;
            changed
        });
        last = Some(now);
        tokio::time::sleep(expected.every).await;
    }
}

#[cfg(test)]
mod tests;
