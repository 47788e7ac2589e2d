//! [`super::decide`]'s stages, in the order of the request path (`docs/architecture.md`):
//! what the pod asks for ([`requests`]), whether the pod can be injected at all
//! ([`admit_pod`]), the languages this webhook injects ([`enabled`]), the containers each
//! targets ([`targets`]), the size budget ([`size_budget`]); then per language: admitted
//! ([`admit_language`]), its Instrumentation found and checked ([`instrumentation`]), the
//! agent's injection and the plan's check ([`inject`]). A stage that stops the pod or a
//! language returns the [`Skip`] that says why.

use k8s_openapi::api::core::v1::Pod;

use super::decision::{Report, Skip, SkipReason};
use super::references::{
    cross_namespace_denied, invalid_tls_reference, missing_tls_reference, resolve, v1beta1_refusal,
    wanted,
};
use super::{Snapshot, bound};
use crate::agents::exporter_tls::ExporterTls;
use crate::agents::{Effect, Injection, Language, declarative};
use crate::crd::{Instrumentation, SpecHash};
use crate::keys::{
    ANNOTATION_PREFIX, CONTAINER_NAMES, INJECTED_ANNOTATION, MIRROR_ANNOTATION,
    ROLLED_BACK_ANNOTATION,
};
use crate::pod::info::PodInfo;
use crate::pod::plan::{PodPlan, Slot};
use crate::pod::select::{self, Annotations, Request, TargetError};
use crate::warnings::shorten;

/// A language the pod asks for, and how.
type Requested<'a> = (Language, Request<'a>);
/// A language, how the pod asks for it, and the containers it targets.
type Target<'a> = (Language, Request<'a>, Vec<Slot>);

/// Fills the report and returns the plan, if anything was injected.
pub(super) fn plan<'p>(
    snapshot: &Snapshot<'_>,
    pod: &'p Pod,
    d: &mut Report,
) -> Option<PodPlan<'p>> {
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
    let requests = requests(&annotations);
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
    let targets = admit_pod(snapshot, pod)
        .map(|()| enabled(snapshot, requests, d))
        .and_then(|requests| targets(snapshot, pod, &annotations, requests))
        .and_then(|targets| size_budget(snapshot, targets));
    let targets = match targets {
        Ok(t) => t,
        Err(skip) => {
            d.add(skip);
            return None;
        }
    };

    let info = PodInfo::new(pod, snapshot.namespace);
    let scene = Scene {
        snapshot,
        info: &info,
        annotations: &annotations,
    };
    let mut plan = PodPlan::new(pod);
    for (lang, request, slots) in targets {
        let injected = admit_language(snapshot, lang, &request)
            .and_then(|()| instrumentation(snapshot, lang, &request))
            .and_then(|inst| not_rolled_back(snapshot, pod_annotations, lang, inst))
            .map_err(Stop::Skip)
            .and_then(|inst| {
                let slots = init_targets(lang, slots, &plan, d);
                inject(&scene, lang, &inst, &slots, &mut plan, d)
            });
        match injected {
            Ok(spec) => {
                d.injected.push(lang);
                d.instrumentations.push(spec.0);
                d.spec_hashes.push(spec.1);
            }
            Err(Stop::Skip(skip)) => d.add(skip),
            Err(Stop::Said(skip)) => d.skipped.push(skip),
        }
    }

    if d.injected.is_empty() {
        return None;
    }
    let names: Vec<&str> = d.injected.iter().map(|l| l.as_str()).collect();
    plan.new_annotations
        .insert(INJECTED_ANNOTATION.to_owned(), names.join(","));
    Some(plan)
}

/// What the agents read besides the plan: the snapshot and the pod as the engine sees it.
struct Scene<'s, 'a> {
    snapshot: &'s Snapshot<'s>,
    info: &'s PodInfo<'a>,
    annotations: &'s Annotations<'a>,
}

/// Why a language was not injected: a skip whose message is a new warning, or one whose
/// message sums up the warnings the agent already gave.
enum Stop {
    Skip(Skip),
    Said(Skip),
}

/// The languages the pod (or its namespace) asks for, in the registry's order.
fn requests<'a>(annotations: &Annotations<'a>) -> Vec<Requested<'a>> {
    Language::ALL
        .iter()
        .copied()
        .map(|l| (l, Request::parse(annotations.get(l.inject_annotation()))))
        .filter(|(_, r)| *r != Request::No)
        .collect()
}

/// Whether the pod can be injected at all: the caches have synced and it has containers.
fn admit_pod(snapshot: &Snapshot<'_>, pod: &Pod) -> Result<(), Skip> {
    if !snapshot.ready {
        return Err(Skip::new(
            None,
            SkipReason::CacheNotReady,
            None,
            "otel-injector: Instrumentation cache not synced yet; pod admitted without injection"
                .into(),
        ));
    }
    if pod.spec.as_ref().is_none_or(|s| s.containers.is_empty()) {
        return Err(Skip::new(
            None,
            SkipReason::NoContainers,
            None,
            "otel-injector: pod has no containers; not injected".into(),
        ));
    }
    Ok(())
}

/// The requests for languages this webhook injects; the others are reported and take no
/// part in targeting.
fn enabled<'a>(
    snapshot: &Snapshot<'_>,
    mut requests: Vec<Requested<'a>>,
    d: &mut Report,
) -> Vec<Requested<'a>> {
    requests.retain(|(lang, request)| {
        let enabled = snapshot.config.enabled.contains(*lang);
        if !enabled {
            d.add(Skip::new(
                Some(*lang),
                SkipReason::LanguageDisabled,
                wanted(snapshot, request),
                format!("inject-{lang}: {lang} injection is disabled on this webhook"),
            ));
        }
        enabled
    });
    requests
}

/// The containers each language targets: the common list applies to every language, each
/// language's own list is added to it. Several languages need explicit lists for each of
/// them. As the Operator does, one bad list leaves the whole pod unchanged.
fn targets<'a>(
    snapshot: &Snapshot<'_>,
    pod: &Pod,
    annotations: &Annotations<'_>,
    requests: Vec<Requested<'a>>,
) -> Result<Vec<Target<'a>>, Skip> {
    let common = select::split_names(annotations.get(CONTAINER_NAMES));
    let lists: Vec<(Language, Request<'a>, Vec<&str>)> = requests
        .into_iter()
        .map(|(l, r)| {
            let mut names = common.clone();
            names.extend(select::split_names(
                annotations.get(l.container_names_annotation()),
            ));
            (l, r, names)
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
            return Err(Skip::new(
                None,
                SkipReason::InvalidContainerNames,
                None,
                msg.into(),
            ));
        }
    }
    lists
        .into_iter()
        .map(|(l, r, names)| match select::resolve_targets(pod, &names) {
            Ok(t) => Ok((l, r, t)),
            Err(e) => {
                let from_common = match &e {
                    TargetError::Unknown(n) | TargetError::Duplicate(n) => {
                        common.contains(&n.as_str())
                    }
                    TargetError::Empty => common.contains(&""),
                };
                let key = if from_common {
                    CONTAINER_NAMES.trim_start_matches(ANNOTATION_PREFIX)
                } else {
                    l.container_names_annotation()
                        .trim_start_matches(ANNOTATION_PREFIX)
                };
                Err(Skip::new(
                    Some(l),
                    SkipReason::InvalidContainerNames,
                    wanted(snapshot, &r),
                    format!("{key}: {e}; pod not injected"),
                ))
            }
        })
        .collect()
}

/// The size budget: the estimate of [`bound::estimate`] for the containers targeted (the
/// exact check comes when the patch exists).
fn size_budget<'a>(
    snapshot: &Snapshot<'_>,
    targets: Vec<Target<'a>>,
) -> Result<Vec<Target<'a>>, Skip> {
    let targeted: usize = targets.iter().map(|(_, _, t)| t.len()).sum();
    bound::estimate(snapshot, targeted).map(|()| targets)
}

/// Whether the namespace lets the language's agent run: one that needs privileges is not
/// injected where Pod Security enforces `baseline` or `restricted`.
fn admit_language(
    snapshot: &Snapshot<'_>,
    lang: Language,
    request: &Request<'_>,
) -> Result<(), Skip> {
    if !lang.agent().needs_privileges() {
        return Ok(());
    }
    let Some(level) = snapshot
        .namespace_info
        .as_ref()
        .and_then(|n| n.pod_security_enforce.as_deref())
        .filter(|l| *l == "baseline" || *l == "restricted")
    else {
        return Ok(());
    };
    Err(Skip::new(
        Some(lang),
        SkipReason::PodSecurity,
        wanted(snapshot, request),
        format!(
            "inject-{lang}: namespace enforces Pod Security {level:?}, which rejects the privileged {lang} agent; not injected"
        ),
    ))
}

/// The Instrumentation the request names, if the pod may use it and what it refers to is
/// valid and present. From here on, a skip names the Instrumentation that was found.
fn instrumentation(
    snapshot: &Snapshot<'_>,
    lang: Language,
    request: &Request<'_>,
) -> Result<std::sync::Arc<Instrumentation>, Skip> {
    let inst = resolve(snapshot, request, lang)
        .map_err(|(reason, msg)| Skip::new(Some(lang), reason, wanted(snapshot, request), msg))?;
    let found = || Some(inst.qualified());
    if let Some(msg) = cross_namespace_denied(snapshot, &inst, lang) {
        return Err(Skip::new(
            Some(lang),
            SkipReason::CrossNamespaceDenied,
            found(),
            msg,
        ));
    }
    if let Some((kind, name)) = invalid_tls_reference(&inst) {
        return Err(Skip::new(
            Some(lang),
            SkipReason::InvalidValue,
            found(),
            format!(
                "inject-{lang}: exporter TLS {} name {name:?} is not a valid DNS label; not injected",
                kind.as_str()
            ),
        ));
    }
    if let Some(skip) = v1beta1_refusal(snapshot, &inst, lang) {
        return Err(skip);
    }
    if let Some((kind, name)) = missing_tls_reference(snapshot, &inst) {
        return Err(Skip::new(
            Some(lang),
            SkipReason::ExporterTlsMissing,
            found(),
            format!(
                "inject-{lang}: exporter TLS {} {name:?} not found in namespace {:?}; not injected",
                kind.as_str(),
                snapshot.namespace
            ),
        ));
    }
    Ok(inst)
}

/// The spec hashes of the languages a pod's [`ROLLED_BACK_ANNOTATION`] names
/// (`java=3f2a9c1b,python=...`; malformed entries are ignored).
pub fn rolled_back(value: &str) -> impl Iterator<Item = (&str, &str)> {
    value
        .split(',')
        .filter_map(|e| e.trim().split_once('='))
        .map(|(l, h)| (l.trim(), h.trim()))
}

/// `inst`, unless the pod's workload was rolled back from `lang` with its current spec.
fn not_rolled_back(
    snapshot: &Snapshot<'_>,
    annotations: Option<&std::collections::BTreeMap<String, String>>,
    lang: Language,
    inst: std::sync::Arc<Instrumentation>,
) -> Result<std::sync::Arc<Instrumentation>, Skip> {
    let Some(marker) = annotations.and_then(|a| a.get(ROLLED_BACK_ANNOTATION)) else {
        return Ok(inst);
    };
    let spec = spec_hash(snapshot, &inst).to_string();
    if !rolled_back(marker).any(|(l, h)| l == lang.as_str() && h == spec) {
        return Ok(inst);
    }
    Err(Skip::new(
        Some(lang),
        SkipReason::RolledBack,
        Some(inst.qualified()),
        format!(
            "inject-{lang}: rolled back, failed with {} spec {spec}; remove {ROLLED_BACK_ANNOTATION} to retry",
            inst.qualified()
        ),
    ))
}

/// The digest of `inst`'s spec: the index's, else computed (an object that did not come
/// from the index; none does today).
fn spec_hash(snapshot: &Snapshot<'_>, inst: &Instrumentation) -> SpecHash {
    let (ns, name) = (
        inst.metadata.namespace.as_deref().unwrap_or(""),
        inst.metadata.name.as_deref().unwrap_or(""),
    );
    snapshot
        .instrumentations
        .spec_hash(ns, name)
        .unwrap_or_else(|| SpecHash::of(&inst.spec))
}

/// The targets the language's agent can instrument: init containers only if it supports
/// them; the others are reported as warnings.
fn init_targets(lang: Language, slots: Vec<Slot>, plan: &PodPlan<'_>, d: &mut Report) -> Vec<Slot> {
    if lang.agent().supports_init_targets() {
        return slots;
    }
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
}

/// The agent's injection into `plan`, then the plan's check: a language that collides with
/// the user's pod is taken back whole. Returns the Instrumentation (`ns/name`) and the
/// digest of the spec used.
fn inject(
    scene: &Scene<'_, '_>,
    lang: Language,
    inst: &Instrumentation,
    slots: &[Slot],
    plan: &mut PodPlan<'_>,
    d: &mut Report,
) -> Result<(String, SpecHash), Stop> {
    let snapshot = scene.snapshot;
    let found = Some(inst.qualified());
    let before = plan.is_changed().then(|| plan.clone());
    let mut warnings = Vec::new();
    let effect = lang.agent().inject(&mut Injection {
        plan,
        info: scene.info,
        inst,
        targets: slots,
        images: &snapshot.config.images,
        delivery: snapshot.delivery(inst),
        annotations: scene.annotations,
        warnings: &mut warnings,
    });
    if let Effect::Injected(_) = effect {
        mount_exporter_tls(plan, slots, inst);
        if let Err(refused) = declarative::deliver(plan, slots, scene.info, inst) {
            *plan = before.unwrap_or_else(|| PodPlan::new(plan.pod));
            let (reason, why) = match refused {
                declarative::Refused::TooLarge(why) => (SkipReason::PodTooLarge, why),
                declarative::Refused::Collision(why) => (SkipReason::NameCollision, why),
                declarative::Refused::Unrenderable(why) => (SkipReason::InvalidValue, why),
            };
            return Err(Stop::Skip(Skip::new(
                Some(lang),
                reason,
                found,
                format!("inject-{lang}: {why}; not injected"),
            )));
        }
        if let Err(collision) = plan.check() {
            *plan = before.unwrap_or_else(|| PodPlan::new(plan.pod));
            return Err(Stop::Skip(Skip::new(
                Some(lang),
                SkipReason::NameCollision,
                found,
                format!("inject-{lang}: {collision}; not injected"),
            )));
        }
    }
    // The agent's own warnings explain a language it did not instrument.
    let said = (!matches!(effect, Effect::Injected(_))).then(|| {
        let said = warnings.join("; ");
        shorten(if said.is_empty() {
            format!("inject-{lang}: nothing could be instrumented; not injected")
        } else {
            said
        })
    });
    d.warnings.extend(warnings);
    let reason = match effect {
        Effect::Injected(_) => {
            return Ok((inst.qualified(), spec_hash(snapshot, inst)));
        }
        Effect::NothingInstrumented => SkipReason::NothingInstrumented,
        Effect::InvalidValue => SkipReason::InvalidValue,
    };
    Err(Stop::Said(Skip {
        language: Some(lang),
        reason,
        instrumentation: found,
        message: said.unwrap_or_default(),
    }))
}

/// Containers the OpenTelemetry Operator adds. A pod carrying one was injected before this
/// webhook ran (during a migration both may be installed): never inject it twice.
pub const OPERATOR_INIT_CONTAINERS: [&str; 7] = [
    "opentelemetry-auto-instrumentation-java",
    "opentelemetry-auto-instrumentation-nodejs",
    "opentelemetry-auto-instrumentation-python",
    "opentelemetry-auto-instrumentation-dotnet",
    "otel-agent-attach-apache",
    "otel-agent-attach-nginx",
    "otel-agent-source-container-clone",
];
pub const OPERATOR_SIDECAR: &str = "opentelemetry-auto-instrumentation";

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
