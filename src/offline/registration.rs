//! `static-webhook`: the webhook configuration in the API server's manifest form, for its
//! admission configuration's `staticManifestsDir` (Kubernetes 1.37, the
//! `ManifestBasedAdmissionControlConfig` gate, beta and on). The API server loads it at its
//! start, before it serves a request, re-reads the directory when it changes, and refuses API
//! writes to any configuration named `*.static.k8s.io`: a registration nobody can delete or
//! edit through the API. The entry is the default install's (`manifests/base/webhook.yaml`,
//! which a test ties it to), called by URL (the manifest form has no Service references).

use serde_json::{Value, json};

/// The suffix the API server reserves for manifest-based configurations.
pub const STATIC_SUFFIX: &str = ".static.k8s.io";

/// What the static configuration says beyond the default install's entry.
#[derive(Clone, Debug)]
pub struct StaticWebhook<'a> {
    /// Its name; must end with [`STATIC_SUFFIX`].
    pub name: &'a str,
    /// Where the API server calls the webhook (`https://…/mutate-v1-pod`).
    pub url: &'a str,
    /// PEM of the CA that signed the webhook's serving certificate (`caBundle`); `None`: the
    /// API server's system roots.
    pub ca_pem: Option<&'a str>,
    pub failure_policy: &'a str,
    pub timeout_seconds: u32,
    /// Namespaces never sent (besides those labeled `otel-injector/inject=disabled`).
    pub excluded_namespaces: &'a [String],
}

/// Why a static configuration cannot be rendered.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum StaticError {
    #[error("the name {0:?} must end with {STATIC_SUFFIX:?} (the API server loads no other)")]
    Name(String),
    #[error("the URL {0:?} must be https:// (the API server calls webhooks over TLS only)")]
    Url(String),
    #[error("no PEM certificate in the CA file")]
    NoCa,
}

/// The MutatingWebhookConfiguration of `s`.
pub fn static_webhook(s: &StaticWebhook<'_>) -> Result<Value, StaticError> {
    if !s.name.ends_with(STATIC_SUFFIX) || s.name.len() == STATIC_SUFFIX.len() {
        return Err(StaticError::Name(s.name.to_owned()));
    }
    if !s.url.starts_with("https://") {
        return Err(StaticError::Url(s.url.to_owned()));
    }
    let mut client = json!({"url": s.url});
    if let Some(pem) = s.ca_pem {
        if !pem.contains("-----BEGIN CERTIFICATE-----") {
            return Err(StaticError::NoCa);
        }
        use base64::Engine as _;
        client["caBundle"] = json!(base64::engine::general_purpose::STANDARD.encode(pem));
    }
    let disabled =
        json!({"key": "otel-injector/inject", "operator": "NotIn", "values": ["disabled"]});
    Ok(json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": s.name},
        "webhooks": [{
            "name": "pods.otel-injector.opentelemetry.io",
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": s.failure_policy,
            "timeoutSeconds": s.timeout_seconds,
            "reinvocationPolicy": "IfNeeded",
            "matchPolicy": "Equivalent",
            "clientConfig": client,
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                       "resources": ["pods"], "scope": "Namespaced"}],
            "namespaceSelector": {"matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                 "values": s.excluded_namespaces},
                disabled.clone(),
            ]},
            "objectSelector": {"matchExpressions": [disabled]},
        }]
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defaults<'a>(excluded: &'a [String]) -> StaticWebhook<'a> {
        StaticWebhook {
            name: "otel-injector.static.k8s.io",
            url: "https://10.96.0.20/mutate-v1-pod",
            ca_pem: None,
            failure_policy: "Ignore",
            timeout_seconds: 5,
            excluded_namespaces: excluded,
        }
    }

    #[test]
    fn the_entry_is_the_default_installs_called_by_url() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/manifests/base/webhook.yaml");
        let text = std::fs::read_to_string(path).unwrap();
        let base: Value = serde_saphyr::from_str(&text).unwrap();
        let excluded = ["kube-system".to_owned(), "otel-injector".to_owned()];
        let rendered = static_webhook(&defaults(&excluded)).unwrap();
        let mut want = base["webhooks"][0].clone();
        want["clientConfig"] = json!({"url": "https://10.96.0.20/mutate-v1-pod"});
        assert_eq!(rendered["webhooks"][0], want);
        assert_eq!(
            rendered["metadata"],
            json!({"name": "otel-injector.static.k8s.io"})
        );
        assert_eq!(rendered["kind"], base["kind"]);
    }

    #[test]
    fn a_name_the_api_server_would_not_load_or_a_plain_url_is_refused() {
        let mut s = defaults(&[]);
        s.name = "otel-injector";
        assert_eq!(
            static_webhook(&s),
            Err(StaticError::Name("otel-injector".into()))
        );
        s.name = ".static.k8s.io";
        assert!(static_webhook(&s).is_err());
        let mut s = defaults(&[]);
        s.url = "http://10.96.0.20/mutate-v1-pod";
        assert!(matches!(static_webhook(&s), Err(StaticError::Url(_))));
        let mut s = defaults(&[]);
        s.ca_pem = Some("not a certificate");
        assert_eq!(static_webhook(&s), Err(StaticError::NoCa));
        s.ca_pem = Some("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n");
        let r = static_webhook(&s).unwrap();
        assert!(r["webhooks"][0]["clientConfig"]["caBundle"].is_string());
    }
}
