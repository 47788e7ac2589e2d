//! Keeps a label on every namespace whose annotations ask for injection, so that the
//! webhook configuration can select those namespaces: `namespaceSelector` sees only labels,
//! and `namespaceObject` is always null in a webhook's `matchConditions`. Without it the API
//! server would have to send every pod of the cluster to the webhook.
//!
//! Every replica runs it; the writes are idempotent server-side applies under one field
//! manager, so replicas agree without leader election.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use tokio::sync::{broadcast, mpsc};

use super::watch::{KubeCatalog, NamespaceChange};
use super::watch::{NamespaceEntry, NamespaceStore};
use crate::agents::{Language, LanguageSet};
use crate::keys::{ANNOTATION_PREFIX, OPT_OUT, OPT_OUT_LABEL};
use crate::pod::select::Request;

const FIELD_MANAGER: &str = "otel-injector";
/// A failed write is tried again after this (or at the namespace's next change).
const RETRY: Duration = Duration::from_secs(10);

/// Whether a namespace's annotations ask for the injection of a language this webhook
/// injects (`inject-<lang>` not empty or `false`).
pub fn wants_label(annotations: Option<&BTreeMap<String, String>>, enabled: LanguageSet) -> bool {
    annotations.is_some_and(|a| {
        a.iter().any(|(k, v)| {
            k.strip_prefix(ANNOTATION_PREFIX)
                .and_then(|rest| rest.strip_prefix("inject-"))
                .and_then(|lang| lang.parse::<Language>().ok())
                .is_some_and(|lang| enabled.contains(lang))
                && Request::parse(Some(v)) != Request::No
        })
    })
}

/// What the labeler must do for a namespace, if anything: `Some(true)` add, `Some(false)`
/// remove.
pub fn change_for(ns: &NamespaceEntry, enabled: LanguageSet) -> Option<bool> {
    // A namespace its owner opted out (`otel-injector/inject=disabled`) is never relabeled.
    let label = ns.label.as_deref();
    if label == Some(OPT_OUT) {
        return None;
    }
    // The injection keys may be labels too (a label wins over an annotation).
    let want = wants_label(Some(&ns.info.labels), enabled)
        || wants_label(Some(&ns.info.annotations), enabled);
    (want != (label == Some("true"))).then_some(want)
}

/// The namespace labeler: follows the namespace cache of a [`KubeCatalog`] and writes
/// the label. Started on its own (the cache itself never writes).
pub struct Labeler {
    store: NamespaceStore,
    changes: broadcast::Receiver<NamespaceChange>,
    enabled: LanguageSet,
}

impl Labeler {
    /// Subscribes to the catalog's namespace changes at once, so none made before
    /// [`Labeler::run`] is missed. `enabled`: the languages this webhook injects.
    pub fn new(catalog: &KubeCatalog, enabled: LanguageSet) -> Self {
        Labeler {
            store: catalog.namespace_store(),
            changes: catalog.namespace_changes(),
            enabled,
        }
    }

    /// Brings the label of each changed namespace in line with its annotations, as the
    /// namespace store has it when the change is taken (never an older event's view); after
    /// a complete list, every namespace. A failed write is retried after a delay; so does
    /// any later change of that namespace. Runs until dropped.
    pub async fn run(mut self, client: Client) {
        let api = Api::<Namespace>::all(client);
        let params = PatchParams::apply(FIELD_MANAGER).force();
        let (retry_tx, mut retry_rx) = mpsc::unbounded_channel();
        loop {
            let names = tokio::select! {
                change = self.changes.recv() => match change {
                    Ok(NamespaceChange::Applied(name)) => vec![name],
                    Ok(NamespaceChange::Resynced) => self.due(),
                    Err(broadcast::error::RecvError::Lagged(missed)) => {
                        tracing::debug!(missed, "namespace changes missed; checking every namespace");
                        self.due()
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                },
                Some(name) = retry_rx.recv() => vec![name],
            };
            for name in names {
                self.label(&api, &params, name, &retry_tx).await;
            }
        }
    }

    /// Every namespace of the cache whose label does not match its annotations.
    fn due(&self) -> Vec<String> {
        self.store
            .names_where(|ns| change_for(ns, self.enabled).is_some())
    }

    async fn label(
        &self,
        api: &Api<Namespace>,
        params: &PatchParams,
        name: String,
        retry: &mpsc::UnboundedSender<String>,
    ) {
        let Some(ns) = self.store.get(&name) else {
            return;
        };
        let Some(add) = change_for(&ns, self.enabled) else {
            return;
        };
        // Applying without the label releases (and so removes) the one we own.
        let labels = if add {
            serde_json::json!({ OPT_OUT_LABEL: "true" })
        } else {
            serde_json::json!({})
        };
        let body = serde_json::json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": labels}
        });
        match api.patch(&name, params, &Patch::Apply(&body)).await {
            Ok(_) => {
                tracing::info!(namespace = %name, label = OPT_OUT_LABEL, add, "namespace label updated")
            }
            Err(e) => {
                tracing::warn!(namespace = %name, error = %e, "cannot update namespace label; retrying in {RETRY:?}");
                let retry = retry.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(RETRY).await;
                    let _ = retry.send(name);
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns(annotations: &[(&str, &str)], labelled: bool) -> NamespaceEntry {
        let mut info = crate::engine::NamespaceInfo::default();
        info.merge(
            annotations
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
            [],
        );
        NamespaceEntry {
            info: std::sync::Arc::new(info),
            label: labelled.then(|| "true".to_owned()),
        }
    }

    #[test]
    fn label_follows_the_inject_annotations_of_enabled_languages() {
        let all = LanguageSet::all();
        let java = "instrumentation.opentelemetry.io/inject-java";
        assert_eq!(change_for(&ns(&[(java, "true")], false), all), Some(true));
        assert_eq!(change_for(&ns(&[(java, "my-inst")], true), all), None);
        assert_eq!(change_for(&ns(&[(java, "false")], true), all), Some(false));
        assert_eq!(change_for(&ns(&[], true), all), Some(false));
        assert_eq!(change_for(&ns(&[], false), all), None);
        let names = "instrumentation.opentelemetry.io/inject-nginx-container-names";
        assert_eq!(change_for(&ns(&[(names, "web")], false), all), None);
        let other = "instrumentation.opentelemetry.io/container-names";
        assert_eq!(change_for(&ns(&[(other, "app")], false), all), None);
        let apache = "instrumentation.opentelemetry.io/inject-apache-httpd";
        assert_eq!(change_for(&ns(&[(apache, "true")], false), all), Some(true));
        let mut no_go = all;
        no_go.remove(Language::Go);
        let go = "instrumentation.opentelemetry.io/inject-go";
        assert_eq!(change_for(&ns(&[(go, "true")], false), no_go), None);
        assert_eq!(change_for(&ns(&[(go, "true")], true), no_go), Some(false));
    }

    #[test]
    fn an_opted_out_namespace_is_never_relabeled() {
        let java = "instrumentation.opentelemetry.io/inject-java";
        let mut n = ns(&[(java, "true")], false);
        n.label = Some(OPT_OUT.to_owned());
        assert_eq!(change_for(&n, LanguageSet::all()), None);
    }
}
