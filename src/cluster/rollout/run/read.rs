//! Reading what a rollout's plan needs: the Instrumentations, the namespaces, the pods that
//! asked for injection (by their label, and those admitted without the webhook), each stale
//! workload; then the plan made of them.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use kube::{Client, ResourceExt as _};

use super::{GET_WORKLOADS, LIST_INSTRUMENTATIONS, LIST_NAMESPACES, LIST_PODS};
use crate::census::{self, PodRecord, Tally};
use crate::cluster::missed;
use crate::cluster::rollout::plan::{self, Exclusions, Plan};
use crate::cluster::watch::{NamespaceEntry, index_of};
use crate::cluster::workloads::get;
use crate::crd::{Instrumentation, SpecHash};
use crate::keys::INJECTED_LABEL;
use crate::keys::{OPT_OUT, OPT_OUT_LABEL};

/// What was read and decided for one Instrumentation.
#[derive(Clone, Debug)]
pub struct Census {
    /// `namespace/name`.
    pub key: String,
    pub spec: SpecHash,
    /// Its pods (injected or skipped for it), per workload.
    pub tally: Tally,
    pub plan: Plan,
}

/// Errors reading the cluster or starting the rollout, each naming the permission it needs.
#[derive(Debug, thiserror::Error)]
pub enum RolloutError {
    #[error(transparent)]
    Client(#[from] crate::cluster::ConnectError),
    #[error("{action}: {error} (rollout needs {permission})")]
    Api {
        action: String,
        permission: &'static str,
        error: kube::Error,
    },
    #[error("Instrumentation {0} not found")]
    NotFound(String),
    #[error("Instrumentation {key} cannot be read: {error}")]
    Unreadable { key: String, error: String },
}

fn api_error(action: String, permission: &'static str) -> impl FnOnce(kube::Error) -> RolloutError {
    move |error| RolloutError::Api {
        action,
        permission,
        error,
    }
}

/// Reads what the plan for Instrumentation `namespace/name` needs and makes it. Namespaces
/// in `excluded` and those labeled `otel-injector/inject=disabled` are left alone.
pub async fn read_plan(
    client: &Client,
    namespace: &str,
    name: &str,
    excluded: &BTreeSet<String>,
) -> Result<Census, RolloutError> {
    let key = format!("{namespace}/{name}");
    let resource = ApiResource::erase::<Instrumentation>(&());
    let listed = Api::<DynamicObject>::all_with(client.clone(), &resource)
        .list(&ListParams::default())
        .await
        .map_err(api_error(
            "list Instrumentations".into(),
            LIST_INSTRUMENTATIONS,
        ))?;
    // The specs laid over their bases, as the webhook injects them.
    let index = index_of(listed.items);
    let mut existing = BTreeMap::new();
    let mut target = None;
    for (ns, n, entry, hash) in index.iter() {
        let this = ns == namespace && n == name;
        match (entry, hash) {
            (Ok(_), Some(hash)) => {
                if this {
                    target = Some(Ok(hash));
                }
                existing.insert(format!("{ns}/{n}"), hash);
            }
            (Err(e), _) if this => target = Some(Err(e.clone())),
            _ => {}
        }
    }
    let spec = match target {
        None => return Err(RolloutError::NotFound(key)),
        Some(Err(error)) => return Err(RolloutError::Unreadable { key, error }),
        Some(Ok(hash)) => hash,
    };
    let namespaces = Api::<Namespace>::all(client.clone())
        .list_metadata(&ListParams::default())
        .await
        .map_err(api_error("list namespaces".into(), LIST_NAMESPACES))?;
    let exclusions = Exclusions {
        names: excluded.clone(),
        disabled: namespaces
            .items
            .iter()
            .filter(|n| n.labels().get(OPT_OUT_LABEL).is_some_and(|v| v == OPT_OUT))
            .filter_map(|n| n.metadata.name.clone())
            .collect(),
    };
    let pods = Api::<Pod>::all(client.clone())
        .list_metadata(&ListParams::default().labels(INJECTED_LABEL))
        .await
        .map_err(api_error(
            format!("list pods labeled {INJECTED_LABEL}"),
            LIST_PODS,
        ))?;
    let mut names = census::Interner::default();
    let mut records: Vec<PodRecord> = pods
        .items
        .iter()
        .filter_map(|p| PodRecord::from_meta(&p.metadata, &mut names))
        .collect();
    // And the pods that asked and were admitted without the webhook.
    let empty = Arc::default();
    let entries: HashMap<String, NamespaceEntry> = namespaces
        .items
        .into_iter()
        .map(|n| NamespaceEntry::of(n.metadata, &empty))
        .collect();
    records.extend(
        missed::list(client, &entries, excluded, &index, &mut names)
            .await
            .map_err(api_error(
                "list the pods that asked for injection by label or namespace".into(),
                LIST_PODS,
            ))?,
    );
    let tally = census::census(&records, &existing)
        .remove(&key)
        .unwrap_or_default();
    let mut objects = BTreeMap::new();
    for w in plan::to_read(&tally, &exclusions) {
        let object = get(client, &w)
            .await
            .map_err(api_error(format!("get {w}"), GET_WORKLOADS))?;
        objects.insert(w, object);
    }
    let plan = plan::plan(&tally, &exclusions, &objects);
    Ok(Census {
        key,
        spec,
        tally,
        plan,
    })
}
