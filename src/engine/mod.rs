//! The decision engine: a pure function from one [`Snapshot`] (Instrumentations, the
//! namespace, settings) and a pod to a [`Decision`]: the plan, the warnings that explain it
//! and the outcome per language. No I/O, no logging, no patch encoding: the admission layer
//! turns the plan into a patch, logs and counts.

pub mod census;
mod config;
mod decision;
pub mod outcome;
mod references;
mod snapshot;

use k8s_openapi::api::core::v1::Pod;

pub use config::{
    AgentDelivery, CROSS_NAMESPACE_ANNOTATION, CrossNamespace, DEFAULT_MAX_POD_BYTES, EngineConfig,
    GoSidecar, MIN_PATCH_BYTES_PER_TARGET, auto_image_volumes,
};
pub use decision::{Decision, Report, Skip, SkipReason};
use references::{
    cross_namespace_denied, invalid_tls_reference, missing_tls_reference, qualified, resolve,
    wanted,
};
pub use snapshot::{
    Catalog, Entry, Instrumentations, NamespaceInfo, ObjectKind, ObjectLookup,
    POD_SECURITY_ENFORCE, Snapshot,
};

use crate::agents::exporter_tls::ExporterTls;
use crate::agents::{ANNOTATION_PREFIX, Delivery, Injection, Language, Outcome};
use crate::crd::{Instrumentation, SpecHash};
use crate::pod::info::PodInfo;
use crate::pod::plan::{PodPlan, Slot};
use crate::pod::select::{self, Annotations, Request, TargetError};
use crate::warnings::shorten;

/// Annotation the webhook puts on every pod it changed; its value lists the injected
/// languages. A pod that carries it is never changed again (reinvocation, re-submission).
pub use crate::keys::INJECTED_ANNOTATION;
/// Static pods mirrored by the kubelet carry this; they are never mutated.
pub use crate::keys::MIRROR_ANNOTATION;

/// Annotation on an Instrumentation that overrides `--agent-delivery` for it.
pub use crate::keys::DELIVERY_ANNOTATION;

/// The delivery for agents of `inst`: its annotation, else the flag; `auto` by the feature
/// gate, else by version ([`auto_image_volumes`]).
fn delivery(snapshot: &Snapshot<'_>, inst: &Instrumentation) -> Delivery {
    let config = snapshot.config;
    let annotated = inst
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(DELIVERY_ANNOTATION))
        .and_then(|v| <AgentDelivery as clap::ValueEnum>::from_str(v.trim(), true).ok());
    let at_least = |minor: u32| snapshot.server_version.is_some_and(|v| v >= (1, minor));
    let image_volumes = match annotated.unwrap_or(config.delivery) {
        AgentDelivery::InitContainer => false,
        AgentDelivery::ImageVolume => true,
        AgentDelivery::Auto => {
            auto_image_volumes(snapshot.server_version, snapshot.image_volume_gate)
        }
    };
    let native_sidecar = match config.go_sidecar {
        GoSidecar::Native => true,
        GoSidecar::Classic => false,
        GoSidecar::Auto => at_least(29),
    };
    Delivery {
        image_volumes,
        native_sidecar,
    }
}

/// The warning for a pod that would grow past `max` bytes.
pub fn too_large_warning(bytes: usize, max: usize) -> String {
    format!(
        "otel-injector: the injected pod would be over {bytes} bytes (limit {max}); not injected"
    )
}

/// Containers the OpenTelemetry Operator adds. A pod carrying one was injected before this
/// webhook ran (during a migration both may be installed): never inject it twice.
const OPERATOR_INIT_CONTAINERS: [&str; 7] = [
    "opentelemetry-auto-instrumentation-java",
    "opentelemetry-auto-instrumentation-nodejs",
    "opentelemetry-auto-instrumentation-python",
    "opentelemetry-auto-instrumentation-dotnet",
    "otel-agent-attach-apache",
    "otel-agent-attach-nginx",
    "otel-agent-source-container-clone",
];
const OPERATOR_SIDECAR: &str = "opentelemetry-auto-instrumentation";

fn injected_by_operator(pod: &Pod) -> bool {
    let Some(spec) = pod.spec.as_ref() else {
        return false;
    };
    spec.init_containers
        .iter()
        .flatten()
        .any(|c| OPERATOR_INIT_CONTAINERS.contains(&c.name.as_str()))
        || spec.containers.iter().any(|c| c.name == OPERATOR_SIDECAR)
}

/// Mounts the exporter TLS files into every target the agent changed (the SDK variables
/// point into these mounts), and adds their volumes once.
fn mount_exporter_tls(plan: &mut PodPlan<'_>, slots: &[Slot], inst: &Instrumentation) {
    let Some(tls) = ExporterTls::of(&inst.spec) else {
        return;
    };
    let volumes = tls.volumes();
    if volumes.is_empty() {
        return;
    }
    for &slot in slots {
        if let Some(c) = plan.container(slot).filter(|c| c.is_changed()) {
            for (_, m) in &volumes {
                c.mount(m.clone());
            }
        }
    }
    for (v, _) in volumes {
        plan.add_volume(v);
    }
}

/// Decides what to inject into `pod`, created in the snapshot's namespace.
pub fn decide<'p>(snapshot: &Snapshot<'_>, pod: &'p Pod) -> Decision<'p> {
    let mut d = Report::default();
    let plan = plan(snapshot, pod, &mut d);
    Decision { plan, report: d }
}

/// [`decide`]'s work: fills the report and returns the plan, if anything was injected.
fn plan<'p>(snapshot: &Snapshot<'_>, pod: &'p Pod, d: &mut Report) -> Option<PodPlan<'p>> {
    let (namespace, config) = (snapshot.namespace, snapshot.config);
    let pod_annotations = pod.metadata.annotations.as_ref();
    if pod_annotations.is_some_and(|a| a.contains_key(MIRROR_ANNOTATION)) {
        return None;
    }
    let namespace_keys = snapshot
        .namespace_info
        .as_ref()
        .map(|n| n.keys())
        .unwrap_or_default();
    let annotations = Annotations::new(pod, namespace_keys);

    let requests: Vec<(Language, Request<'_>)> = Language::ALL
        .iter()
        .copied()
        .map(|l| (l, Request::parse(annotations.get(l.inject_annotation()))))
        .filter(|(_, r)| *r != Request::No)
        .collect();
    // Before the namespace store has synced, only the pod's own annotations are seen.
    if requests.is_empty() {
        return None;
    }
    d.requested = true;

    if pod_annotations.is_some_and(|a| a.contains_key(INJECTED_ANNOTATION))
        || injected_by_operator(pod)
    {
        d.already_injected = true;
        return None;
    }
    if !snapshot.ready {
        d.skip(
            None,
            SkipReason::CacheNotReady,
            None,
            "otel-injector: Instrumentation cache not synced yet; pod admitted without injection"
                .into(),
        );
        return None;
    }
    let has_containers = pod.spec.as_ref().is_some_and(|s| !s.containers.is_empty());
    if !has_containers {
        d.skip(
            None,
            SkipReason::NoContainers,
            None,
            "otel-injector: pod has no containers; not injected".into(),
        );
        return None;
    }

    // Languages this webhook does not inject are reported and take no part in targeting.
    let mut requests = requests;
    requests.retain(|(lang, request)| {
        let enabled = config.enabled.contains(*lang);
        if !enabled {
            d.skip(
                Some(*lang),
                SkipReason::LanguageDisabled,
                wanted(snapshot, request),
                format!("inject-{lang}: {lang} injection is disabled on this webhook"),
            );
        }
        enabled
    });

    // Container targeting: the common list applies to every language, each language's own
    // list is added to it. Several languages need explicit lists for each of them.
    let common = select::split_names(annotations.get(select::CONTAINER_NAMES));
    let mut lists: Vec<(Language, &Request<'_>, Vec<&str>)> = requests
        .iter()
        .map(|(l, r)| {
            let mut names = common.clone();
            names.extend(select::split_names(
                annotations.get(l.container_names_annotation()),
            ));
            (*l, r, names)
        })
        .collect();
    if lists.len() > 1 {
        let with = lists.iter().filter(|(_, _, n)| !n.is_empty()).count();
        if with != lists.len() {
            let msg = if with == 0 {
                "otel-injector: several languages requested; set <lang>-container-names for each"
            } else {
                "otel-injector: some requested languages have container names and some not; set them for all"
            };
            d.skip(None, SkipReason::InvalidContainerNames, None, msg.into());
            return None;
        }
    }
    let mut targets = Vec::with_capacity(lists.len());
    for (l, r, names) in lists.drain(..) {
        match select::resolve_targets(pod, &names) {
            Ok(t) => targets.push((l, r, t)),
            Err(e) => {
                let from_common = match &e {
                    TargetError::Unknown(n) | TargetError::Duplicate(n) => {
                        common.contains(&n.as_str())
                    }
                    TargetError::Empty => common.contains(&""),
                };
                let key = if from_common {
                    select::CONTAINER_NAMES.trim_start_matches(ANNOTATION_PREFIX)
                } else {
                    l.container_names_annotation()
                        .trim_start_matches(ANNOTATION_PREFIX)
                };
                let reason = SkipReason::InvalidContainerNames;
                let msg = format!("{key}: {e}; pod not injected");
                d.skip(Some(l), reason, wanted(snapshot, r), msg);
                // As the Operator does, a bad list leaves the whole pod unchanged.
                return None;
            }
        }
    }

    // Every instrumented container costs the patch at least this much: a pod of many tiny
    // containers must not make the answer (and the memory to build it) many times the
    // request, nor a pod the API server cannot store. Checked exactly once the patch exists.
    let targeted: usize = targets.iter().map(|(_, _, t)| t.len()).sum();
    let estimate = snapshot
        .pod_bytes
        .saturating_add(targeted.saturating_mul(MIN_PATCH_BYTES_PER_TARGET));
    if estimate > config.max_pod_bytes {
        d.skip(
            None,
            SkipReason::PodTooLarge,
            None,
            too_large_warning(estimate, config.max_pod_bytes),
        );
        return None;
    }

    let info = PodInfo::new(pod, namespace);
    let mut plan = PodPlan::new(pod);
    for (lang, request, slots) in targets {
        let agent = lang.agent();
        if agent.needs_privileges()
            && let Some(level) = snapshot
                .namespace_info
                .as_ref()
                .and_then(|n| n.pod_security_enforce.as_deref())
                .filter(|l| *l == "baseline" || *l == "restricted")
        {
            d.skip(
                Some(lang),
                SkipReason::PodSecurity,
                wanted(snapshot, request),
                format!(
                    "inject-{lang}: namespace enforces Pod Security {level:?}, which rejects the privileged {lang} agent; not injected"
                ),
            );
            continue;
        }
        let inst = match resolve(snapshot, request, lang) {
            Ok(i) => i,
            Err((reason, msg)) => {
                d.skip(Some(lang), reason, wanted(snapshot, request), msg);
                continue;
            }
        };
        // From here on, a skip names the Instrumentation that was found.
        let found = Some(qualified(&inst));
        if let Some(msg) = cross_namespace_denied(snapshot, &inst, lang) {
            d.skip(Some(lang), SkipReason::CrossNamespaceDenied, found, msg);
            continue;
        }
        if let Some((kind, name)) = invalid_tls_reference(&inst) {
            d.skip(
                Some(lang),
                SkipReason::InvalidValue,
                found,
                format!(
                    "inject-{lang}: exporter TLS {} name {name:?} is not a valid DNS label; not injected",
                    kind.as_str()
                ),
            );
            continue;
        }
        if let Some((kind, name)) = missing_tls_reference(snapshot, &inst) {
            d.skip(
                Some(lang),
                SkipReason::ExporterTlsMissing,
                found,
                format!(
                    "inject-{lang}: exporter TLS {} {name:?} not found in namespace {namespace:?}; not injected",
                    kind.as_str()
                ),
            );
            continue;
        }
        let slots: Vec<Slot> = if agent.supports_init_targets() {
            slots
        } else {
            let (inits, apps): (Vec<_>, Vec<_>) =
                slots.into_iter().partition(|s| matches!(s, Slot::Init(_)));
            for s in inits {
                if let Some(c) = plan.original(s) {
                    d.warn(format!(
                        "{lang}: init container {:?} cannot be instrumented; skipped",
                        c.name
                    ));
                }
            }
            apps
        };
        // A language that collides with the user's pod is taken back whole.
        let before = plan.is_changed().then(|| plan.clone());
        let mut warnings = Vec::new();
        let outcome = agent.inject(&mut Injection {
            plan: &mut plan,
            info: &info,
            inst: &inst,
            targets: &slots,
            images: &config.images,
            delivery: delivery(snapshot, &inst),
            annotations: &annotations,
            warnings: &mut warnings,
        });
        if let Outcome::Injected(_) = outcome {
            mount_exporter_tls(&mut plan, &slots, &inst);
            if let Err(collision) = plan.check() {
                plan = before.unwrap_or_else(|| PodPlan::new(pod));
                d.skip(
                    Some(lang),
                    SkipReason::NameCollision,
                    found,
                    format!("inject-{lang}: {collision}; not injected"),
                );
                continue;
            }
        }
        // The agent's own warnings explain a language it did not instrument.
        let message = || {
            let said = warnings.join("; ");
            shorten(if said.is_empty() {
                format!("inject-{lang}: nothing could be instrumented; not injected")
            } else {
                said
            })
        };
        let message = if matches!(outcome, Outcome::Injected(_)) {
            String::new()
        } else {
            message()
        };
        d.warnings.extend(warnings);
        match outcome {
            Outcome::Injected(_) => {
                let (ns, name) = (
                    inst.metadata.namespace.as_deref().unwrap_or(""),
                    inst.metadata.name.as_deref().unwrap_or(""),
                );
                // The index computed it when the Instrumentation arrived; an object that
                // did not come from the index (none does today) is hashed here.
                let spec = snapshot
                    .instrumentations
                    .spec_hash(ns, name)
                    .unwrap_or_else(|| SpecHash::of(&inst.spec));
                d.injected.push(lang);
                d.instrumentations.push(qualified(&inst));
                d.spec_hashes.push(spec);
            }
            Outcome::NothingInstrumented => d.skipped.push(Skip {
                language: Some(lang),
                reason: SkipReason::NothingInstrumented,
                instrumentation: found,
                message,
            }),
            Outcome::InvalidValue => d.skipped.push(Skip {
                language: Some(lang),
                reason: SkipReason::InvalidValue,
                instrumentation: found,
                message,
            }),
        }
    }

    if !d.injected.is_empty() {
        let value = d
            .injected
            .iter()
            .map(|l| l.as_str())
            .collect::<Vec<_>>()
            .join(",");
        plan.new_annotations
            .insert(INJECTED_ANNOTATION.to_owned(), value);
        return Some(plan);
    }
    None
}
