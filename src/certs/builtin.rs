//! Built-in certificate mode (`--certificate-secret NAMESPACE/NAME`): the webhook makes its
//! own CA and serving certificate, keeps them in a `kubernetes.io/tls` Secret shared by all
//! replicas, and writes the CA into every entry of its MutatingWebhookConfiguration
//! (`caBundle`), and into the Instrumentation CRD's conversion webhook. No leader election: every replica runs the same loop, and the API server's
//! optimistic concurrency (create → 409, update with `resourceVersion` → 409) picks one
//! writer; the others read the winner's Secret.
//!
//! The pair itself, its validity and its Secret are in [`super::bundle`].

use std::fmt::Debug;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use base64::Engine as _;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, Resource, ResourceExt as _};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::sync::watch;

use super::metrics::{Metrics, ReloadResult};
use crate::certs::bundle::{Bundle, now};
use crate::certs::files::ReloadingCert;
use crate::retry;

/// How often the Secret is re-read (renewals by other replicas) when all is well.
const SECRET_POLL: Duration = Duration::from_secs(30);
/// How often the `caBundle` is re-checked when all is well.
const BUNDLE_POLL: Duration = Duration::from_secs(60);

/// Where the certificate lives and what it is for.
#[derive(Clone, Debug)]
pub struct Config {
    pub namespace: String,
    pub name: String,
    /// The MutatingWebhookConfiguration whose entries get the CA; `None` in policy mode,
    /// where no webhook is registered (the listener serves the CRD's conversion only).
    pub webhook_configuration: Option<String>,
    /// The CRD whose conversion webhook gets the CA too.
    pub conversion_crd: Option<String>,
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

/// What went wrong talking to the API server, with what to fix.
fn explain(verb: &str, what: &str, namespace: Option<&str>, e: &kube::Error) -> String {
    let (resource, verbs) = if what.starts_with("Secret") {
        ("secrets", "get/create/update")
    } else if what.starts_with("CustomResourceDefinition") {
        (
            "customresourcedefinitions (cluster scope, by name)",
            "get/patch",
        )
    } else {
        ("mutatingwebhookconfigurations (cluster scope)", "get/patch")
    };
    match e {
        kube::Error::Api(s) if s.is_forbidden() => format!(
            "cannot {verb} {what}: forbidden; grant {verbs} on {resource}{} \
             (see manifests/components/built-in)",
            namespace.map(|ns| format!(" in {ns}")).unwrap_or_default()
        ),
        kube::Error::Api(s) if s.is_not_found() && what.starts_with("Mutating") => format!(
            "cannot {verb} {what}: not found; apply manifests/base/webhook.yaml or set \
             --webhook-configuration to its name"
        ),
        kube::Error::Api(s) if s.is_not_found() => format!(
            "cannot {verb} {what}: not found; apply manifests/crd.yaml or set \
             --conversion-crd to its name (empty: none)"
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

/// What a `caBundle` sync writes: the patch and how many entries it changes (`None`: the
/// object is current).
type BundlePatch = Option<(Patch<Value>, usize)>;

/// Sets `caBundle` on every entry that lacks it (or has another one): one strategic merge
/// patch keyed by entry name, guarded by the `resourceVersion` read.
fn webhooks_patch(mwc: &MutatingWebhookConfiguration, want: &[u8]) -> BundlePatch {
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
    let entries = stale.len();
    let patch = json!({
        "metadata": {"resourceVersion": mwc.resource_version()},
        "webhooks": stale,
    });
    (entries > 0).then_some((Patch::Strategic(patch), entries))
}

/// Sets the `caBundle` of the CRD's conversion webhook when it differs, guarded by the
/// `resourceVersion` read. A CRD that converts some other way (or not at all) is left alone.
fn conversion_patch(crd: &CustomResourceDefinition, want: &[u8]) -> BundlePatch {
    let webhook = crd
        .spec
        .conversion
        .as_ref()
        .filter(|c| c.strategy == "Webhook")
        .and_then(|c| c.webhook.as_ref())?;
    let current = webhook
        .client_config
        .as_ref()
        .and_then(|c| c.ca_bundle.as_ref());
    if current.map(|b| b.0.as_slice()) == Some(want) {
        return None;
    }
    let patch = json!({
        "metadata": {"resourceVersion": crd.resource_version()},
        "spec": {"conversion": {"webhook": {"clientConfig": {
            "caBundle": base64::engine::general_purpose::STANDARD.encode(want)
        }}}},
    });
    Some((Patch::Merge(patch), 1))
}

/// One `caBundle` sync of the object `name`: reads it, asks `patch` what makes it carry
/// `ca_pem`, and applies that. Returns how many entries were changed.
async fn sync_bundle<K>(
    api: &Api<K>,
    name: &str,
    ca_pem: String,
    patch: fn(&K, &[u8]) -> BundlePatch,
) -> Result<usize, String>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    let what = format!("{} {name}", K::kind(&()));
    let object = api
        .get(name)
        .await
        .map_err(|e| explain("get", &what, None, &e))?;
    let Some((patch, changed)) = patch(&object, ca_pem.as_bytes()) else {
        return Ok(0);
    };
    api.patch(name, &PatchParams::default(), &patch)
        .await
        .map_err(|e| explain("patch", &what, None, &e))?;
    Ok(changed)
}

/// Keeps one `caBundle` current with the CA `ca_rx` publishes: `sync` when it changes, and
/// again every [`BUNDLE_POLL`] (someone may have reverted it).
async fn keep_ca_bundle<'a, F, Fut>(
    mut ca_rx: watch::Receiver<Option<String>>,
    target: Option<&'a str>,
    sync: F,
) where
    F: Fn(&'a str, String) -> Fut,
    Fut: std::future::Future<Output = Result<usize, String>>,
{
    let Some(target) = target else {
        return;
    };
    loop {
        let Some(ca) = ca_rx.borrow_and_update().clone() else {
            ca_changed(&mut ca_rx).await;
            continue;
        };
        let attempt = retry::until_ok(
            || sync(target, ca.clone()),
            |e, delay| tracing::error!(error = %e, "caBundle not set; retrying in {delay:?}"),
        );
        // A new CA while retrying: start over with it.
        let entries = tokio::select! {
            n = attempt => n,
            _ = ca_changed(&mut ca_rx) => continue,
        };
        if entries > 0 {
            tracing::info!(%target, entries, "caBundle set");
        }
        tokio::select! {
            _ = ca_changed(&mut ca_rx) => {}
            _ = tokio::time::sleep(BUNDLE_POLL) => {}
        }
    }
}

/// Runs the built-in certificate mode until dropped: keeps the Secret, swaps the served
/// pair to it (then sets `ready`), and keeps the `caBundle` of the webhook configuration and
/// of the CRD's conversion webhook.
pub async fn run(
    client: Client,
    cfg: Config,
    cert: Arc<ReloadingCert>,
    ready: Arc<AtomicBool>,
    metrics: Arc<Metrics>,
) {
    let (ca_tx, ca_rx) = watch::channel::<Option<String>>(None);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &cfg.namespace);
    let mwcs: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let crds: Api<CustomResourceDefinition> = Api::all(client);
    let secret = format!("{}/{}", cfg.namespace, cfg.name);
    let secret_loop = async {
        loop {
            let bundle = retry::until_ok(
                || sync_secret(&secrets, &cfg),
                |e, delay| {
                    tracing::error!(error = %e, "webhook certificate not synced; retrying in {delay:?}");
                },
            )
            .await;
            match cert.set_pem(bundle.cert.as_bytes(), bundle.key.as_bytes()) {
                Ok(true) => {
                    tracing::info!(%secret, "serving the certificate from the Secret");
                    metrics.reload(ReloadResult::Success);
                    metrics.served(cert.not_after());
                    ready.store(true, Ordering::Release);
                }
                Ok(false) => ready.store(true, Ordering::Release),
                Err(e) => {
                    tracing::error!(error = %e, %secret, "the Secret's certificate cannot be served; delete the Secret to have it made anew");
                    metrics.reload(ReloadResult::Error);
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
    };
    let bundle_loop = keep_ca_bundle(
        ca_rx.clone(),
        cfg.webhook_configuration.as_deref(),
        |name, ca| sync_bundle(&mwcs, name, ca, webhooks_patch),
    );
    let conversion_loop =
        keep_ca_bundle(ca_rx.clone(), cfg.conversion_crd.as_deref(), |name, ca| {
            sync_bundle(&crds, name, ca, conversion_patch)
        });
    tokio::join!(secret_loop, bundle_loop, conversion_loop);
}

/// Resolves when the CA to publish changes (never once its sender is gone).
async fn ca_changed(rx: &mut watch::Receiver<Option<String>>) {
    if rx.changed().await.is_err() {
        std::future::pending::<()>().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
