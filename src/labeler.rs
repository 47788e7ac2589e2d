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
use kube::api::{Api, PartialObjectMeta, Patch, PatchParams};
use tokio::sync::mpsc;

use crate::inject::lang::ANNOTATION_PREFIX;

/// The label kept on namespaces that ask for injection through an annotation.
pub const NAMESPACE_LABEL: &str = "otel-injector/inject";
const FIELD_MANAGER: &str = "otel-injector";

/// Whether a namespace's annotations ask for any injection (`inject-*`, not `false`).
pub fn wants_label(annotations: Option<&BTreeMap<String, String>>) -> bool {
    annotations.is_some_and(|a| {
        a.iter().any(|(k, v)| {
            k.strip_prefix(ANNOTATION_PREFIX).is_some_and(|rest| {
                rest.starts_with("inject-") && !rest.ends_with("-container-names")
            }) && crate::inject::select::Request::parse(Some(v))
                != crate::inject::select::Request::No
        })
    })
}

fn has_label(ns: &PartialObjectMeta<Namespace>) -> bool {
    ns.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(NAMESPACE_LABEL))
        .is_some_and(|v| v == "true")
}

/// What the labeler must do for a namespace, if anything: `Some(true)` add, `Some(false)`
/// remove.
pub fn change_for(ns: &PartialObjectMeta<Namespace>) -> Option<bool> {
    let want = wants_label(ns.metadata.annotations.as_ref());
    (want != has_label(ns)).then_some(want)
}

/// Applies label changes sent on `rx` until the channel closes. A failed write is retried
/// after a delay (a later event for the namespace also retries it).
pub async fn run(
    client: Client,
    tx: mpsc::UnboundedSender<PartialObjectMeta<Namespace>>,
    mut rx: mpsc::UnboundedReceiver<PartialObjectMeta<Namespace>>,
) {
    let api = Api::<Namespace>::all(client);
    let params = PatchParams::apply(FIELD_MANAGER).force();
    while let Some(ns) = rx.recv().await {
        let Some(add) = change_for(&ns) else { continue };
        let Some(name) = ns.metadata.name.clone() else {
            continue;
        };
        // Applying without the label releases (and so removes) the one we own.
        let labels = if add {
            serde_json::json!({ NAMESPACE_LABEL: "true" })
        } else {
            serde_json::json!({})
        };
        let body = serde_json::json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": labels}
        });
        match api.patch(&name, &params, &Patch::Apply(&body)).await {
            Ok(_) => {
                tracing::info!(namespace = %name, label = NAMESPACE_LABEL, add, "namespace label updated")
            }
            Err(e) => {
                tracing::warn!(namespace = %name, error = %e, "cannot update namespace label; retrying in 10s");
                let tx = tx.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_secs(10)).await;
                    let _ = tx.send(ns);
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns(annotations: &[(&str, &str)], labelled: bool) -> PartialObjectMeta<Namespace> {
        let mut n = PartialObjectMeta::<Namespace>::default();
        n.metadata.name = Some("shop".into());
        n.metadata.annotations = Some(
            annotations
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        );
        if labelled {
            n.metadata.labels = Some(BTreeMap::from([(NAMESPACE_LABEL.into(), "true".into())]));
        }
        n
    }

    #[test]
    fn label_follows_the_inject_annotations() {
        let java = "instrumentation.opentelemetry.io/inject-java";
        assert_eq!(change_for(&ns(&[(java, "true")], false)), Some(true));
        assert_eq!(change_for(&ns(&[(java, "my-inst")], true)), None);
        assert_eq!(change_for(&ns(&[(java, "false")], true)), Some(false));
        assert_eq!(change_for(&ns(&[], true)), Some(false));
        assert_eq!(change_for(&ns(&[], false)), None);
        let names = "instrumentation.opentelemetry.io/inject-nginx-container-names";
        assert_eq!(change_for(&ns(&[(names, "web")], false)), None);
        let other = "instrumentation.opentelemetry.io/container-names";
        assert_eq!(change_for(&ns(&[(other, "app")], false)), None);
    }
}
