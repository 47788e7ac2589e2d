//! MutatingWebhookConfigurations: the shipped manifests' entries registered for a test's
//! webhook, created and replaced.

use std::path::Path;

use axum::http::Method;
use kube::Client;
use serde_json::{Value, json};

use super::{delete_doc, read_yaml_docs, send};

/// How a webhook configuration made from a shipped manifest differs from it.
pub struct Registration<'a> {
    /// The manifest whose entries are registered: [`webhook_manifest_path`] or
    /// [`targeted_webhook_manifest_path`].
    pub manifest: &'a Path,
    /// Name of the MutatingWebhookConfiguration (configurations run in name order).
    pub name: &'a str,
    /// `https://127.0.0.1:PORT/mutate-v1-pod`.
    pub url: &'a str,
    pub ca_pem: &'a str,
    /// `Ignore` or `Fail`.
    pub failure_policy: &'a str,
    pub timeout_seconds: i32,
    /// Restrict to namespaces carrying this label (tests sharing one control plane).
    pub scope: Option<(&'a str, &'a str)>,
}

/// The default webhook configuration: `$E2E_WEBHOOK_MANIFEST`, or `manifests/base/webhook.yaml`.
pub fn webhook_manifest_path() -> std::path::PathBuf {
    std::env::var_os("E2E_WEBHOOK_MANIFEST")
        .map(Into::into)
        .unwrap_or_else(|| super::super::tools::root().join("manifests/base/webhook.yaml"))
}

/// The targeted variant's webhook configuration: `$E2E_TARGETED_WEBHOOK_MANIFEST`, or
/// `manifests/components/targeted/webhook-targeted.yaml`.
pub fn targeted_webhook_manifest_path() -> std::path::PathBuf {
    std::env::var_os("E2E_TARGETED_WEBHOOK_MANIFEST")
        .map(Into::into)
        .unwrap_or_else(|| {
            super::super::tools::root().join("manifests/components/targeted/webhook-targeted.yaml")
        })
}

/// The MutatingWebhookConfiguration of `r.manifest` with every one of its webhook entries
/// (`pods.…` in the default one; `pods.…` and `namespaces.…` in the targeted one), each
/// keeping its own name, rules, matchPolicy, reinvocationPolicy, sideEffects,
/// admissionReviewVersions, namespaceSelector, objectSelector and matchConditions, pointed
/// at `url` with the test CA, the given failure policy and timeout, and optionally scoped
/// by a namespace label added to each entry's namespaceSelector.
pub fn webhook_configuration(r: &Registration<'_>) -> Result<Value, String> {
    let path = r.manifest;
    let doc = read_yaml_docs(path)?
        .into_iter()
        .find(|d| d["kind"] == "MutatingWebhookConfiguration")
        .ok_or_else(|| format!("{}: no MutatingWebhookConfiguration", path.display()))?;
    let mut webhooks = doc["webhooks"]
        .as_array()
        .cloned()
        .ok_or_else(|| format!("{}: no webhooks", path.display()))?;
    for wh in &mut webhooks {
        wh["clientConfig"] = json!({
            "url": r.url,
            "caBundle": base64_of(r.ca_pem.as_bytes()),
        });
        wh["failurePolicy"] = json!(r.failure_policy);
        wh["timeoutSeconds"] = json!(r.timeout_seconds);
        if let Some((k, v)) = r.scope {
            // Added to the entry's own selector (its matchExpressions are kept): the
            // requirements are ANDed.
            if !wh["namespaceSelector"].is_object() {
                wh["namespaceSelector"] = json!({});
            }
            if !wh["namespaceSelector"]["matchLabels"].is_object() {
                wh["namespaceSelector"]["matchLabels"] = json!({});
            }
            wh["namespaceSelector"]["matchLabels"][k] = json!(v);
        }
    }
    Ok(json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": r.name},
        "webhooks": webhooks,
    }))
}

/// Creates a MutatingWebhookConfiguration.
pub async fn create_webhook_configuration(client: &Client, config: &Value) -> Result<(), String> {
    let r = send(
        client,
        Method::POST,
        "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
        Some(config),
    )
    .await?;
    if r.status != 201 {
        return Err(format!(
            "create MutatingWebhookConfiguration {}: HTTP {}: {}",
            config["metadata"]["name"],
            r.status,
            r.message()
        ));
    }
    Ok(())
}

/// Creates a MutatingWebhookConfiguration, replacing one of the same name.
pub async fn replace_webhook_configuration(client: &Client, config: &Value) -> Result<(), String> {
    delete_doc(client, config).await?;
    create_webhook_configuration(client, config).await
}

pub fn base64_of(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}
