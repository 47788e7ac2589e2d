//! [`super::decide`]'s stages, in the order of the request path (`docs/architecture.md`):
//! what the pod asks for, whether the pod can be injected at all, the languages this webhook
//! injects, the containers each targets and the size budget ([`requests`]); then per
//! language: admitted and its Instrumentation found and checked ([`language`]), not rolled
//! back ([`not_rolled_back`]), the agent's injection and the plan's check ([`inject`]). A
//! stage that stops the pod or a language returns the [`Skip`] that says why; what the pod
//! asked for is recorded in the report as it is read ([`super::asked`]).

mod inject;
mod language;
mod requests;

use k8s_openapi::api::core::v1::Pod;

use super::asked::AskedBy;
use super::decision::{Report, Skip};
use super::outcome::{RolledBack, SelectorMark};
use super::reason::SkipReason;
use super::snapshot::Snapshot;
use crate::agents::Language;
use crate::crd::{Instrumentation, SpecHash};
use crate::keys::{
    INJECTED_ANNOTATION, MIRROR_ANNOTATION, ROLLED_BACK_ANNOTATION, SELECTED_BY_ANNOTATION,
};
use crate::pod::info::PodInfo;
use crate::pod::plan::{PodPlan, Slot};
use crate::pod::select::{Annotations, Request};

pub use requests::{OPERATOR_INIT_CONTAINERS, OPERATOR_SIDECAR};

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
    let namespace_keys = snapshot
        .namespace_info
        .as_ref()
        .map(|n| n.keys())
        .unwrap_or_default();
    let annotations = Annotations::new(pod, namespace_keys);
    let mut requests = requests::requests(&annotations, d);
    requests::selected(snapshot, pod, &annotations, &mut requests, d);
    // Before the namespace store has synced, only the pod's own annotations are seen.
    if requests.is_empty() || pod_annotations.is_some_and(|a| a.contains_key(MIRROR_ANNOTATION)) {
        return None;
    }
    d.requested = true;
    if pod_annotations.is_some_and(|a| a.contains_key(INJECTED_ANNOTATION))
        || requests::injected_by_operator(pod)
    {
        d.already_injected = true;
        return None;
    }
    let asked: Vec<Language> = requests.iter().map(|(l, _)| *l).collect();
    let targets = requests::admit_pod(snapshot, pod)
        .map(|()| requests::enabled(snapshot, requests, d))
        .and_then(|requests| requests::targets(snapshot, pod, &annotations, requests, d))
        .and_then(|targets| requests::size_budget(snapshot, targets));
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
        asked: &asked,
    };
    let mut plan = PodPlan::new(pod);
    for (lang, request, slots) in targets {
        let injected = language::admit_language(snapshot, lang, &request)
            .and_then(|()| language::instrumentation(snapshot, lang, &request))
            .and_then(|inst| not_rolled_back(snapshot, pod_annotations, lang, inst))
            .map_err(LanguageSkip::Skip)
            .and_then(|inst| {
                let slots = inject::init_targets(lang, slots, &plan, d);
                inject::inject(&scene, lang, &inst, &slots, &mut plan, d)
            });
        match injected {
            Ok(injected) => d.injected.push(injected),
            Err(LanguageSkip::Skip(skip)) => d.add(skip),
            Err(LanguageSkip::Said(skip)) => d.skipped.push(skip),
        }
    }

    if d.injected.is_empty() {
        return None;
    }
    let names: Vec<&str> = d.injected.iter().map(|i| i.language.as_str()).collect();
    plan.new_annotations
        .insert(INJECTED_ANNOTATION.to_owned(), names.join(","));
    // Which selectors asked for what was injected (the status counts their pods).
    let mut selected = SelectorMark::default();
    for i in &d.injected {
        if d.requests
            .iter()
            .any(|a| a.language == i.language && a.from == AskedBy::Selector)
        {
            selected.push(i.language, &i.instrumentation);
        }
    }
    if !selected.is_empty() {
        plan.new_annotations
            .insert(SELECTED_BY_ANNOTATION.to_owned(), selected.to_string());
    }
    Some(plan)
}

/// What the agents read besides the plan: the snapshot and the pod as the engine sees it.
struct Scene<'s, 'a> {
    snapshot: &'s Snapshot<'s>,
    info: &'s PodInfo<'a>,
    annotations: &'s Annotations<'a>,
    /// Every language the pod asks for (the outcome records each).
    asked: &'s [Language],
}

/// Why a language was not injected: a skip whose message is a new warning, or one whose
/// message sums up the warnings the agent already gave.
enum LanguageSkip {
    Skip(Skip),
    Said(Skip),
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
    let spec = spec_hash(snapshot, &inst);
    if !RolledBack::parse(marker).names(lang, spec) {
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
