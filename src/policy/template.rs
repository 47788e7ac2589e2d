//! What the webhook does for one Instrumentation and language, read from the engine itself:
//! it decides for probe pods (one container, named by a marker; no owners; no uid) and the
//! differences are the template a policy replays. The parts that depend on the pod (the
//! service name, the resource attributes) are marked and written in CEL by
//! the injection policy, and so is what the init containers take of the first target
//! (`init`: its security context; the web servers' clone of it, which runs its image with its
//! env, envFrom and mounts, and their module configuration, which names the service);
//! anything else the engine did that a template cannot replay (a file annotation, a sidecar,
//! a changed container) makes the pair not covered, with the reason.
//!
//! How the container's own variables interact with the injected ones is not probed: the
//! agents note it in their typed edits of the env as the same run plans them
//! ([`crate::pod::env::EnvNote`], read by [`notes`]): either the user's wins (the injected
//! one is left out, with any others it keeps out: the sampler's pair), or the agent extends
//! it in place (`prefix + value + suffix`: `JAVA_TOOL_OPTIONS`), or the agent refuses the
//! container (then a pod that sets it is not covered), or it is merged
//! (`OTEL_RESOURCE_ATTRIBUTES`).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{EnvVar, Pod};
use serde_json::{Value, json};

use super::vars::Variant;
use crate::agents::Language;
use crate::agents::sdk_env::{OTEL_RESOURCE_ATTRIBUTES, OTEL_SERVICE_NAME};
use crate::cluster::StaticCatalog;
use crate::crd::Instrumentation;
use crate::engine::{AgentDelivery, EngineConfig, SkipReason, Snapshot};
use crate::keys::{
    INJECTED_ANNOTATION, INJECTED_LABEL, SERVICE_NAME_ANNOTATION, STATUS_ANNOTATION,
};
use crate::pod::env::EnvNote;
use crate::pod::plan::{InitNote, PodPlan, Slot};
pub use cache::TemplateCache;
pub use init::InitHoles;

mod cache;
mod init;
mod notes;
#[cfg(test)]
pub(super) mod probe;

/// The probe container's name: stands for the target's name in what the template holds.
pub const CONTAINER: &str = "zq-otel-injector-probe-zq";
/// The probe pod's service name (from its annotation), so `OTEL_SERVICE_NAME` is found.
pub const SERVICE: &str = "zq-otel-injector-service-zq";
/// The probe container's image, so that an init container that copies it is found.
pub const IMAGE: &str = "zq-otel-injector-image-zq";

/// One variable the webhook appends, and what keeps it out.
#[derive(Clone, Debug, PartialEq)]
pub struct Appended {
    /// The entry as the engine writes it (`name`, `value` or `valueFrom`).
    pub entry: Value,
    pub kind: Kind,
    /// User variables whose presence leaves this one out (its own name among them).
    pub kept_out_by: Vec<String>,
}

/// Where an appended variable's value comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// The entry itself (its strings may hold [`CONTAINER`]).
    Fixed,
    /// `OTEL_SERVICE_NAME`: derived from the pod.
    ServiceName,
    /// `OTEL_RESOURCE_ATTRIBUTES`: derived from the pod and the container; always last.
    ResourceAttributes,
}

/// A user variable the agent extends in place: `prefix + value + suffix`, or `empty` when
/// the value is empty.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExtendedVariable {
    pub name: String,
    pub prefix: String,
    pub suffix: String,
    pub empty: String,
}

/// What the webhook does to a pod for one Instrumentation and language, as data.
#[derive(Clone, Debug)]
pub struct Template {
    pub language: Language,
    /// The variant of the agent it injects (`vars::VARIANTS`), for a language with variants.
    pub variant: Option<Variant>,
    pub instrumentation: Arc<Instrumentation>,
    /// Pod volumes added, in order.
    pub volumes: Vec<Value>,
    /// Init containers added after the pod's own, in order (init-container delivery: the
    /// agent's, then Java's extensions').
    pub init_containers: Vec<Value>,
    /// What of the pod they take (the first target's security context; the web servers'
    /// clone of it).
    pub init: InitHoles,
    /// Mounts added to each target, in order.
    pub mounts: Vec<Value>,
    /// Directories (of `mounts`) below or at which the first target's own mounts are removed
    /// from it and kept by the web server's clone (they would hide the edited configuration):
    /// read off a probe that mounts something at and below each.
    pub hidden_below: Vec<String>,
    /// Variables put before the container's own unless it has them, in order.
    pub prepended: Vec<Value>,
    /// Variables appended after the container's own, in order.
    pub appended: Vec<Appended>,
    pub extensions: Vec<ExtendedVariable>,
    /// User variables that leave the pod not covered when set as a literal.
    pub refuse_literal: Vec<String>,
    /// User variables that leave the pod not covered when set with `valueFrom`.
    pub refuse_value_from: Vec<String>,
    /// A container's own `OTEL_RESOURCE_ATTRIBUTES` is kept, the attributes of keys it does
    /// not set appended to a literal value, and moved after every injected variable (what the
    /// engine does, checked on the probes).
    pub merges_resource_attributes: bool,
    /// Of those, the ones for which the webhook leaves the container uninstrumented (the
    /// agent refuses it: `valueFrom` on a variable it extends), as (name, set with
    /// `valueFrom`): a pod whose every target sets one is the webhook's `nothing_instrumented`.
    pub agent_refuses: Vec<(String, bool)>,
    /// Annotations and labels set on the pod.
    pub annotations: BTreeMap<String, String>,
    pub labels: BTreeMap<String, String>,
}

impl Template {
    /// Whether a target's own mounts at or below mount path `path` (of [`Template::mounts`])
    /// move to the clone ([`Template::hidden_below`]): such a mount is then no reason to
    /// leave the pod to the webhook.
    pub fn hides(&self, path: &str) -> bool {
        let dir = path.trim_end_matches('/');
        self.hidden_below.iter().any(|h| h == dir)
    }
}

/// Why a pair cannot be a policy: what the webhook does that the template cannot replay, or
/// the webhook's own skip (its reason is then the pods' status reason too).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotCovered {
    pub reason: SkipReason,
    pub why: String,
}

impl From<String> for NotCovered {
    fn from(why: String) -> Self {
        NotCovered {
            reason: SkipReason::PolicyUnsupported,
            why,
        }
    }
}

impl From<&str> for NotCovered {
    fn from(why: &str) -> Self {
        why.to_owned().into()
    }
}

/// A probe pod in `namespace` asking for `lang` from `inst` by name, with the variant's
/// first value, its container with `env`.
fn probe_pod(
    inst: &Instrumentation,
    lang: Language,
    variant: Option<Variant>,
    env: Value,
) -> Value {
    let ns = inst.metadata.namespace.as_deref().unwrap_or("");
    let name = inst.metadata.name.as_deref().unwrap_or("");
    let mut pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "namespace": ns,
            "annotations": {
                lang.inject_annotation(): format!("{ns}/{name}"),
                SERVICE_NAME_ANNOTATION: SERVICE,
            },
        },
        "spec": {"containers": [{"name": CONTAINER, "image": IMAGE, "env": env}]},
    });
    // The default variant's first value is "": no key, as most pods.
    if let Some((key, values)) = variant.filter(|(_, values)| !values[0].is_empty()) {
        pod["metadata"]["annotations"][key] = json!(values[0]);
    }
    pod
}

/// The engine's result for `pod`, with image volumes: the pod injected, or the reason of the
/// webhook's first skip when nothing was (`None`: no skip said why); `see` is shown the plan
/// the patch is written from.
fn decide_seeing(
    catalog: &StaticCatalog,
    config: &EngineConfig,
    ns: &str,
    pod: &Value,
    see: impl Fn(&PodPlan<'_>),
) -> Result<Value, Option<SkipReason>> {
    let typed: Pod = serde_json::from_value(pod.clone()).map_err(|_| None)?;
    let snapshot = Snapshot::take(catalog, ns, config);
    let (patch, report) = crate::admission::mutate_seeing(&snapshot, &typed, see);
    if report.injected.is_empty() {
        return Err(report.skipped.first().map(|s| s.reason));
    }
    let mut out = pod.clone();
    json_patch::patch(&mut out, &json_patch::Patch(patch)).map_err(|_| None)?;
    Ok(out)
}

/// What the engine planned for the probe, besides the patch: its container's env and the
/// agents' notes.
struct Planned {
    /// Put before the container's own, in order.
    prepended: Vec<Value>,
    /// Appended after them, in order.
    appended: Vec<Value>,
    /// What else the env edits do ([`EnvNote`]).
    env_notes: Vec<EnvNote>,
    /// What the init containers take of the container ([`InitNote`]).
    init_notes: Vec<InitNote>,
}

impl Planned {
    fn of(plan: &PodPlan<'_>) -> Option<Self> {
        let (_, c) = plan.containers().find(|(slot, _)| *slot == Slot::App(0))?;
        let values = |vars: &[EnvVar]| vars.iter().map(|e| json!(e)).collect();
        Some(Planned {
            prepended: values(c.env.prepended()),
            appended: values(c.env.appended()),
            env_notes: c.env.notes().to_vec(),
            init_notes: plan.init_notes.clone(),
        })
    }
}

fn name_of(e: &Value) -> &str {
    e["name"].as_str().unwrap_or("")
}

/// The engine's configuration for probes: the webhook's, with `auto` delivery resolved as
/// on every cluster that has admission policies (1.36 or later, where the `ImageVolume`
/// gate is locked on): image volumes. The Instrumentation's own `agent-delivery` annotation
/// still wins, as with the webhook.
pub fn probe_config(config: &EngineConfig) -> EngineConfig {
    let delivery = match config.delivery {
        AgentDelivery::Auto => AgentDelivery::ImageVolume,
        given => given,
    };
    EngineConfig {
        delivery,
        ..config.clone()
    }
}

/// Reads the template of `lang` for `inst` off the engine: the agent a pod without a variant
/// key gets.
#[cfg(test)]
pub fn read(
    inst: &Arc<Instrumentation>,
    lang: Language,
    config: &EngineConfig,
) -> Result<Template, NotCovered> {
    read_variant(inst, lang, super::vars::variants(lang)[0], config)
}

/// Reads the template of `variant` of `lang` for `inst` off the engine.
pub fn read_variant(
    inst: &Arc<Instrumentation>,
    lang: Language,
    variant: Option<Variant>,
    config: &EngineConfig,
) -> Result<Template, NotCovered> {
    let ns = inst.metadata.namespace.clone().unwrap_or_default();
    // The Instrumentation alone, in a namespace that asks for nothing: the pod's own request
    // is the only one.
    let catalog = StaticCatalog::new([Instrumentation::clone(inst)]).with_namespace(&ns, &[]);
    let config = probe_config(config);
    let bare = probe_pod(inst, lang, variant, json!([]));
    // What the engine plans for the probe's env, read as it writes the patch.
    let planned = RefCell::new(None);
    let see = |plan: &PodPlan<'_>| *planned.borrow_mut() = Planned::of(plan);
    let injected =
        decide_seeing(&catalog, &config, &ns, &bare, see).map_err(|skip| match skip {
            Some(reason) => NotCovered {
                reason,
                why: format!("the webhook skips it: {}", reason.as_str()),
            },
            None => "the webhook injects nothing".into(),
        })?;

    let (annotations, labels) = added_metadata(&bare, &injected)?;
    let container = &injected["spec"]["containers"][0];
    let mounts = container["volumeMounts"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let volumes = injected["spec"]["volumes"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let init_containers = injected["spec"]["initContainers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    only_these_changed(&bare, &injected)?;
    let env = planned
        .into_inner()
        .ok_or("the engine planned no container")?;
    let init = init::holes(&init_containers, &env.init_notes)?;
    let hidden_below = match init.clone_of_target {
        Some(_) => init::hidden_below(&mounts, &env.init_notes),
        None => Vec::new(),
    };
    let mut template = Template {
        language: lang,
        variant,
        instrumentation: inst.clone(),
        volumes,
        init_containers,
        init,
        mounts,
        hidden_below,
        prepended: env.prepended,
        appended: Vec::new(),
        extensions: Vec::new(),
        refuse_literal: Vec::new(),
        refuse_value_from: Vec::new(),
        merges_resource_attributes: false,
        agent_refuses: Vec::new(),
        annotations,
        labels,
    };
    let appended = env.appended.into_iter().map(|entry| Appended {
        kind: match name_of(&entry) {
            OTEL_SERVICE_NAME => Kind::ServiceName,
            OTEL_RESOURCE_ATTRIBUTES => Kind::ResourceAttributes,
            _ => Kind::Fixed,
        },
        kept_out_by: vec![name_of(&entry).to_owned()],
        entry,
    });
    template.appended = appended.collect();
    check_appended(&template.appended)?;
    let planned: Vec<&Value> = (template.prepended.iter())
        .chain(template.appended.iter().map(|a| &a.entry))
        .collect();
    let written = injected["spec"]["containers"][0]["env"].as_array();
    if written.is_none_or(|w| !w.iter().eq(planned.iter().copied())) {
        return Err("the patch's variables are not the plan's".into());
    }
    notes::read(&mut template, &env.env_notes);
    Ok(template)
}

/// The pod-dependent variables are where the policy writes them: the service name's value
/// is the probe's annotation, the resource attributes come last, and nothing else holds the
/// service name.
fn check_appended(appended: &[Appended]) -> Result<(), NotCovered> {
    for (i, a) in appended.iter().enumerate() {
        let text = a.entry.to_string();
        match a.kind {
            Kind::ServiceName if a.entry["value"] != SERVICE => {
                return Err("OTEL_SERVICE_NAME is not the pod's service name".into());
            }
            Kind::ResourceAttributes if i + 1 != appended.len() => {
                return Err("OTEL_RESOURCE_ATTRIBUTES is not the last variable".into());
            }
            Kind::Fixed if text.contains(SERVICE) => {
                return Err(format!("{} holds the service name", name_of(&a.entry)).into());
            }
            _ => {}
        }
    }
    Ok(())
}

/// The annotations and labels the injection added (none changed or removed).
type Added = (BTreeMap<String, String>, BTreeMap<String, String>);

fn added_metadata(before: &Value, after: &Value) -> Result<Added, NotCovered> {
    let added = |field: &str| -> Result<BTreeMap<String, String>, NotCovered> {
        let b = before["metadata"][field]
            .as_object()
            .cloned()
            .unwrap_or_default();
        let a = after["metadata"][field]
            .as_object()
            .cloned()
            .unwrap_or_default();
        let mut out = BTreeMap::new();
        for (k, v) in &a {
            match b.get(k) {
                Some(old) if old == v => {}
                Some(_) => return Err(format!("the injection changes {field} {k}").into()),
                None => {
                    out.insert(k.clone(), v.as_str().unwrap_or_default().to_owned());
                }
            }
        }
        Ok(out)
    };
    let annotations = added("annotations")?;
    let labels = added("labels")?;
    let expected = [INJECTED_ANNOTATION, STATUS_ANNOTATION];
    if let Some(k) = annotations.keys().find(|k| !expected.contains(&k.as_str())) {
        return Err(format!("the injection adds the annotation {k}").into());
    }
    if let Some(k) = labels.keys().find(|k| *k != INJECTED_LABEL) {
        return Err(format!("the injection adds the label {k}").into());
    }
    Ok((annotations, labels))
}

/// Nothing but the container's env and mounts, the pod's volumes and init containers and its
/// metadata changed.
fn only_these_changed(before: &Value, after: &Value) -> Result<(), NotCovered> {
    let strip = |pod: &Value| {
        let mut p = pod.clone();
        p["metadata"]["annotations"] = Value::Null;
        p["metadata"]["labels"] = Value::Null;
        p["spec"]["volumes"] = Value::Null;
        p["spec"]["initContainers"] = Value::Null;
        let c = &mut p["spec"]["containers"][0];
        c["env"] = Value::Null;
        c["volumeMounts"] = Value::Null;
        p
    };
    if strip(before) != strip(after) {
        let (b, a) = (strip(before), strip(after));
        let what = if b["spec"]["containers"].as_array().map(Vec::len)
            != a["spec"]["containers"].as_array().map(Vec::len)
        {
            "adds a container"
        } else {
            "changes more than the environment, mounts and volumes"
        };
        return Err(format!("the injection {what}").into());
    }
    Ok(())
}
