//! Live policies (`serve --apply-policies policy|both`): the replica that holds the Lease
//! renders the policies from its Instrumentation cache, exactly as `otel-injector policy`
//! does from the cluster, whenever the cache changes (and every [`RESYNC`]), applies those
//! that differ from what it applied last or that someone else changed since (their
//! resourceVersion moved; one metadata list per kind and pass), with server-side apply and
//! the field manager [`FIELD_MANAGER`] ([`WRITES_IN_FLIGHT`] at once, the policies before the
//! bindings), and deletes the objects it owns that it no longer
//! renders: labeled
//! `otel-injector/policy=true` and named `<prefix>.…` (so installs with other prefixes, and
//! policies rendered by hand under another prefix, are left alone). An edited Instrumentation
//! therefore reaches the API server's injection within a watch event and a few writes, with
//! no CLI run (only its templates are read off the engine again: the others are kept,
//! [`TemplateCache`]), and a deleted one's objects go in the next pass (they have no
//! `paramRef`, which would cost every pod a param lookup per policy: [`super::Form::Live`]).
//!
//! The write is a strong permission (whoever writes admission policies can mutate any object
//! the API server admits): `manifests/components/live-policies`, in no overlay.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use kube::Client;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use serde_json::Value;
use tokio::sync::{broadcast, watch};

use super::template::TemplateCache;
use super::{PolicyOptions, render_cached};
use crate::agents::Language;
use crate::cluster::{KubeCatalog, Leadership, NamespaceChange};
use crate::crd::SpecHash;
use crate::engine::{Catalog as _, EngineConfig};
use crate::keys::POLICY_LABEL;

/// The field manager of every write.
pub const FIELD_MANAGER: &str = "otel-injector-policies";
/// Rendered and compared again this often without a change (a policy edited or deleted by
/// hand is put back at the next pass).
pub const RESYNC: Duration = Duration::from_secs(60);
/// After a failed write or list.
const RETRY: Duration = Duration::from_secs(10);
/// Writes of one pass in flight at once.
const WRITES_IN_FLIGHT: usize = 8;

/// The kinds it writes, bindings first (the order of deletion).
const KINDS: [(&str, &str); 4] = [
    (
        "MutatingAdmissionPolicyBinding",
        "mutatingadmissionpolicybindings",
    ),
    (
        "ValidatingAdmissionPolicyBinding",
        "validatingadmissionpolicybindings",
    ),
    ("MutatingAdmissionPolicy", "mutatingadmissionpolicies"),
    ("ValidatingAdmissionPolicy", "validatingadmissionpolicies"),
];

fn api(client: &Client, kind: &str, plural: &str) -> Api<DynamicObject> {
    let resource = ApiResource {
        group: "admissionregistration.k8s.io".into(),
        version: "v1".into(),
        api_version: "admissionregistration.k8s.io/v1".into(),
        kind: kind.into(),
        plural: plural.into(),
    };
    Api::all_with(client.clone(), &resource)
}

/// What it applied, by (kind, name): the object as sent and the resourceVersion the API
/// server answered (kept across Lease changes: a resourceVersion that moved tells a write by
/// anyone else).
type Applied = BTreeMap<(String, String), (Value, String)>;

/// One Instrumentation as a render sees it. Its status is not part of it.
#[derive(Clone, Debug, PartialEq)]
struct Spec {
    namespace: String,
    name: String,
    /// Its spec's digest; `None`: unreadable.
    hash: Option<SpecHash>,
    /// The render reads some: `otel-injector/cross-namespace` widens the binding,
    /// `otel-injector/agent-delivery` changes the template, `otel-injector/selector` selects.
    annotations: BTreeMap<String, String>,
}

/// What a render reads of the cache: every Instrumentation, the namespaces whose own keys
/// ask ([`crate::engine::NamespaceInfo::asks`]), which decide which pods reach the policies
/// ([`PolicyOptions::namespaces_read`]), and which of the Instrumentations' namespaces the
/// bindings can match ([`super::bound_in`]: a namespace that comes to carry the labels gets
/// its Instrumentations' policies).
#[derive(Clone, Debug, Default, PartialEq)]
struct RenderInput {
    specs: Vec<Spec>,
    /// Each namespace whose keys ask, and the languages they ask for.
    asking: Vec<(String, Vec<Language>)>,
    /// The namespaces of `specs` the bindings can match.
    bound: BTreeSet<String>,
}

/// The cache as a render sees it, with `options`.
fn render_input(catalog: &KubeCatalog, options: &PolicyOptions) -> RenderInput {
    let specs = specs(catalog);
    RenderInput {
        bound: specs
            .iter()
            .map(|s| &s.namespace)
            .filter(|ns| super::bound_in(catalog, options, ns))
            .cloned()
            .collect(),
        specs,
        asking: catalog
            .namespaces_asking()
            .unwrap_or_default()
            .into_iter()
            .map(|(name, info)| {
                let langs = Language::ALL
                    .iter()
                    .copied()
                    .filter(|&l| info.asks_for(l))
                    .collect();
                (name, langs)
            })
            .collect(),
    }
}

/// Every Instrumentation of the cache as a render sees it.
fn specs(catalog: &KubeCatalog) -> Vec<Spec> {
    catalog
        .instrumentations()
        .iter()
        .map(|(ns, name, entry, hash)| Spec {
            namespace: ns.to_owned(),
            name: name.to_owned(),
            hash: hash.filter(|_| entry.is_ok()),
            annotations: entry
                .as_ref()
                .ok()
                .and_then(|i| i.metadata.annotations.clone())
                .unwrap_or_default(),
        })
        .collect()
}

/// `changes` of the Instrumentations, moved also by every change of the namespace cache
/// (`namespaces`): a namespace that comes to ask, or stops, renders again (when a spec
/// says so: [`due`]). The forwarding ends with either source.
fn with_namespaces(
    mut changes: watch::Receiver<u64>,
    mut namespaces: broadcast::Receiver<NamespaceChange>,
) -> watch::Receiver<u64> {
    let (tx, rx) = watch::channel(0u64);
    tokio::spawn(async move {
        loop {
            let moved = tokio::select! {
                changed = changes.changed() => changed.is_ok(),
                got = namespaces.recv() => !matches!(got, Err(broadcast::error::RecvError::Closed)),
            };
            if !moved || tx.is_closed() {
                return;
            }
            tx.send_modify(|n| *n = n.wrapping_add(1));
        }
    });
    rx
}

/// The writer of the live policies.
pub struct LivePolicies {
    /// The engine's flags (default images, enabled languages), as the CLI's.
    pub config: EngineConfig,
    pub options: PolicyOptions,
}

impl LivePolicies {
    /// Runs until dropped: while this replica holds the Lease, keeps the policies in step
    /// with the cache; `changes` moves with every change of the Instrumentation cache.
    pub async fn run(
        self,
        client: Client,
        catalog: Arc<KubeCatalog>,
        mut leadership: Leadership,
        changes: watch::Receiver<u64>,
    ) {
        let mut changes = with_namespaces(changes, catalog.namespace_changes());
        let mut applied = Applied::new();
        // The templates of the last render: an edit re-reads the edited Instrumentation's.
        let mut cache = Some(TemplateCache::default());
        // The specs the last pass rendered, and when: a change of the cache that changes no
        // spec (a status write) renders nothing until the resync.
        let mut last: Option<(RenderInput, Instant)> = None;
        loop {
            if !leadership.is_leader() {
                while !leadership.changed().await {}
                tracing::info!(prefix = %self.options.prefix, "live policies: this replica holds the Lease; keeping the policies current");
                // Another holder may have written meanwhile: a pass at once.
                last = None;
            }
            let input = render_input(catalog.as_ref(), &self.options);
            let due = due(last.as_ref(), &input);
            let wait = if !catalog.instrumentations_synced() || !catalog.namespaces_synced() {
                Duration::from_secs(1)
            } else if !due {
                RESYNC.saturating_sub(last.as_ref().map_or(RESYNC, |(_, at)| at.elapsed()))
            } else {
                // Rendering runs the engine for every Instrumentation: off the runtime's
                // workers, which serve the admission requests.
                let (cat, config, options) =
                    (catalog.clone(), self.config.clone(), self.options.clone());
                let started = Instant::now();
                let mut templates = cache.take().unwrap_or_default();
                let (objects, templates) = tokio::task::spawn_blocking(move || {
                    let objects = render_cached(cat.as_ref(), &config, &options, &mut templates);
                    (objects.objects, templates)
                })
                .await
                .unwrap_or_default();
                cache = Some(templates);
                let rendered = started.elapsed();
                last = Some((input, Instant::now()));
                match self.apply(&client, objects, &mut applied).await {
                    Ok((0, 0)) => RESYNC,
                    Ok((written, deleted)) => {
                        tracing::info!(
                            written,
                            deleted,
                            total = applied.len(),
                            render_ms = rendered.as_millis() as u64,
                            apply_ms = (started.elapsed() - rendered).as_millis() as u64,
                            "live policies: applied"
                        );
                        RESYNC
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "live policies: cannot write the admission policies (needs get/list/create/patch/delete on them and their bindings: manifests/components/live-policies); retrying");
                        last = None;
                        RETRY
                    }
                }
            };
            leadership.next_pass(&mut changes, wait).await;
        }
    }

    /// Applies the objects that differ from `applied` or are missing, then deletes its own
    /// that are not among them; how many it wrote and deleted.
    async fn apply(
        &self,
        client: &Client,
        objects: Vec<Value>,
        applied: &mut Applied,
    ) -> Result<(usize, usize), kube::Error> {
        let ours = ListParams::default().labels(&format!("{POLICY_LABEL}=true"));
        // What exists now, with its resourceVersion.
        let mut present = Present::new();
        for (kind, plural) in KINDS {
            for o in api(client, kind, plural).list_metadata(&ours).await? {
                let name = o.metadata.name.unwrap_or_default();
                let version = o.metadata.resource_version.unwrap_or_default();
                present.insert((kind.to_owned(), name), version);
            }
        }
        let mut pass = plan(&self.options.prefix, objects, applied, &present);
        // Several writes in flight, policies before bindings: an edit rewrites each
        // language's policy and binding of the Instrumentation, and one after the other their
        // round trips add up; a binding is written after its policy (the API server refuses
        // a binding with params whose policy it cannot get yet, and one without matches
        // nothing until then). A policy it refuses holds back its own binding only: the pass
        // still fails, and is tried again.
        let (mut written, mut failed) = (0, None);
        let mut refused = BTreeSet::new();
        let [policies, bindings] = pass.waves();
        for wave in [policies, bindings] {
            let wave = without_bindings_of(wave, &refused);
            let writes = wave.into_iter().map(|(key, obj)| async move {
                let stored = match KINDS.iter().find(|(k, _)| *k == key.0) {
                    Some((kind, plural)) => Some(
                        api(client, kind, plural)
                            .patch(
                                &key.1,
                                &PatchParams::apply(FIELD_MANAGER).force(),
                                &Patch::Apply(&obj),
                            )
                            .await,
                    ),
                    None => None,
                };
                (key, obj, stored)
            });
            let mut writes = futures::stream::iter(writes).buffer_unordered(WRITES_IN_FLIGHT);
            while let Some((key, obj, stored)) = writes.next().await {
                match stored {
                    Some(Ok(stored)) => {
                        let version = stored.metadata.resource_version.unwrap_or_default();
                        applied.insert(key, (obj, version));
                        written += 1;
                    }
                    // The first failure is the pass's; those that were written are kept.
                    Some(Err(e)) => {
                        refused.insert(key);
                        failed.get_or_insert(e);
                    }
                    None => {}
                }
            }
        }
        if let Some(e) = failed {
            return Err(e);
        }
        let mut deleted = 0;
        for key in pass.delete {
            let Some((kind, plural)) = KINDS.iter().find(|(k, _)| *k == key.0) else {
                continue;
            };
            match api(client, kind, plural)
                .delete(&key.1, &DeleteParams::default())
                .await
            {
                Ok(_) => deleted += 1,
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(e),
            }
            applied.remove(&key);
        }
        Ok((written, deleted))
    }
}

/// Whether a pass renders: the first (or the first after a failure or a Lease taken), a spec
/// or annotation that changed since the last, a namespace that came to ask or stopped, or the
/// resync due. A cache change that changes none (a status write) renders nothing.
fn due(last: Option<&(RenderInput, Instant)>, seen: &RenderInput) -> bool {
    last.is_none_or(|(was, at)| was != seen || at.elapsed() >= RESYNC)
}

/// The objects of admission policies that exist, by (kind, name), with their resourceVersion.
type Present = BTreeMap<(String, String), String>;

/// One object to write, by (kind, name).
type Write = ((String, String), Value);

/// What one pass writes and deletes.
#[derive(Debug, Default, PartialEq)]
struct Pass {
    /// The rendered objects that are new, differ from what was applied, or were written by
    /// someone else since (their resourceVersion moved), in the render's order (written in
    /// [`Pass::waves`]).
    write: Vec<Write>,
    /// The objects of `prefix` that exist and were not rendered, bindings before policies.
    delete: Vec<(String, String)>,
}

impl Pass {
    /// The writes in the order the API server takes them: the policies, then the bindings
    /// (a binding is refused while its policy does not exist). Within a wave, any order.
    fn waves(&mut self) -> [Vec<Write>; 2] {
        let (bindings, policies) = std::mem::take(&mut self.write)
            .into_iter()
            .partition(|((kind, _), _)| kind.ends_with("Binding"));
        [policies, bindings]
    }
}

/// `writes` less the bindings of the policies in `refused` (by kind and name): a binding
/// whose policy the API server refused waits for it.
fn without_bindings_of(writes: Vec<Write>, refused: &BTreeSet<(String, String)>) -> Vec<Write> {
    writes
        .into_iter()
        .filter(|((kind, _), obj)| {
            let Some(policy) = kind.strip_suffix("Binding") else {
                return true;
            };
            let name = obj["spec"]["policyName"].as_str().unwrap_or_default();
            !refused.contains(&(policy.to_owned(), name.to_owned()))
        })
        .collect()
}

/// The pass for the rendered `objects` (named `<prefix>.…`) against what this writer applied
/// and what `present`s.
fn plan(prefix: &str, objects: Vec<Value>, applied: &Applied, present: &Present) -> Pass {
    let prefix = format!("{prefix}.");
    let mut pass = Pass::default();
    let mut wanted = BTreeSet::new();
    for obj in objects {
        let kind = obj["kind"].as_str().unwrap_or_default().to_owned();
        let name = obj["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let key = (kind, name);
        wanted.insert(key.clone());
        let unchanged = applied
            .get(&key)
            .is_some_and(|(sent, version)| *sent == obj && present.get(&key) == Some(version));
        if !unchanged {
            pass.write.push((key, obj));
        }
    }
    // Bindings before their policies (the order of KINDS).
    for (kind, _) in KINDS {
        pass.delete.extend(
            present
                .keys()
                .filter(|k| k.0 == kind && k.1.starts_with(&prefix) && !wanted.contains(*k))
                .cloned(),
        );
    }
    pass
}

#[cfg(test)]
mod tests;
