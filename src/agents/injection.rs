//! What an agent is given ([`Injection`]) and returns ([`Effect`]), and the checks every
//! agent that extends a variable shares.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{EnvVar, SecurityContext};

use super::Language;
use crate::crd::{Instrumentation, InstrumentationSpec};
use crate::pod::env::{EnvPlan, EnvValue};
use crate::pod::info::PodInfo;
use crate::pod::plan::{ContainerPlan, InitNote, InitPosition, PodPlan, Slot};
use crate::pod::select::Annotations;
use crate::warnings::shorten;

/// Default agent images, per language (overridable by flags).
#[derive(Clone, Debug)]
pub struct DefaultImages {
    images: BTreeMap<Language, String>,
}

impl Default for DefaultImages {
    fn default() -> Self {
        let images = Language::ALL
            .iter()
            .filter_map(|l| Some((*l, l.names().default_image?.to_owned())))
            .collect();
        DefaultImages { images }
    }
}

impl DefaultImages {
    pub fn get(&self, l: Language) -> &str {
        self.images.get(&l).map(String::as_str).unwrap_or("")
    }

    pub fn set(&mut self, l: Language, image: String) {
        self.images.insert(l, image);
    }

    /// The image `lang` is injected with from `spec`: the section's, else the default.
    pub fn of<'a>(&'a self, l: Language, spec: &'a InstrumentationSpec) -> &'a str {
        l.section(spec)
            .and_then(|s| s.image())
            .unwrap_or_else(|| self.get(l))
    }
}

/// What an agent did to the pod (the engine's `outcome::Outcome` is what is
/// recorded on it).
#[derive(Debug, PartialEq, Eq)]
pub enum Effect {
    /// This many containers were instrumented.
    Injected(usize),
    /// Every target was skipped (each with its own warning).
    NothingInstrumented,
    /// A value this language would write into a configuration or a command cannot be
    /// written safely (the warning says which); nothing was changed.
    InvalidValue,
}

/// Why a copy agent does not inject a pod at all (the warning says why).
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The pod asks for something the agent does not support (a platform, a runtime).
    Unsupported(String),
    /// A value cannot be written safely.
    Invalid(String),
}

/// How agents reach the pod, chosen by the engine per Instrumentation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Delivery {
    /// Mount the agent image as an image volume instead of copying it with an init
    /// container (copy-style agents).
    pub image_volumes: bool,
    /// Run sidecar agents (Go) as native sidecars: init containers with
    /// `restartPolicy: Always`.
    pub native_sidecar: bool,
}

/// Everything an agent needs to inject one language.
pub struct Injection<'p, 'a> {
    /// The language injected.
    pub lang: Language,
    pub plan: &'p mut PodPlan<'a>,
    pub info: &'p PodInfo<'p>,
    pub inst: &'p Instrumentation,
    pub targets: &'p [Slot],
    pub images: &'p DefaultImages,
    pub delivery: Delivery,
    pub annotations: &'p Annotations<'p>,
    pub warnings: &'p mut Vec<String>,
}

impl Injection<'_, '_> {
    pub fn warn(&mut self, msg: String) {
        self.warnings.push(shorten(msg));
    }

    /// Edits every target with `edit` (given the Instrumentation and the pod), for agents
    /// that only set variables: `Injected` with how many it edited, or `NothingInstrumented`.
    pub fn each_target(
        &mut self,
        mut edit: impl FnMut(&mut ContainerPlan<'_>, &Instrumentation, &PodInfo<'_>),
    ) -> Effect {
        let mut count = 0;
        for &slot in self.targets {
            if let Some(c) = self.plan.container(slot) {
                edit(c, self.inst, self.info);
                count += 1;
            }
        }
        if count == 0 {
            Effect::NothingInstrumented
        } else {
            Effect::Injected(count)
        }
    }

    /// The section's image, else the default image of `lang`.
    pub fn image(&self, lang: Language) -> String {
        self.images.of(lang, &self.inst.spec).to_owned()
    }

    /// Agent init containers go before the first targeted init container (which needs the
    /// agent files when it runs), or after all init containers.
    pub fn init_position(&self, instrumented: &[Slot]) -> InitPosition {
        instrumented
            .iter()
            .filter_map(|s| match s {
                Slot::Init(i) => Some(InitPosition::Before(*i)),
                Slot::App(_) => None,
            })
            .min()
            .unwrap_or(InitPosition::End)
    }

    /// `spec.initContainerSecurityContext`, else the first instrumented container's, so that
    /// pods under a restricted policy stay admissible (noted: [`InitNote::SecurityFromTarget`]).
    pub fn init_security_context(&mut self, instrumented: &[Slot]) -> Option<SecurityContext> {
        if let Some(own) = self.inst.spec.init_container_security_context.as_deref() {
            return Some(own.clone());
        }
        if !self.plan.init_notes.contains(&InitNote::SecurityFromTarget) {
            self.plan.init_notes.push(InitNote::SecurityFromTarget);
        }
        instrumented
            .first()
            .and_then(|s| self.plan.original(*s))
            .and_then(|c| c.security_context.clone())
    }
}

/// Where a variable that the agent must extend gets a `valueFrom` (which the webhook can
/// neither read nor extend), if it does once the env layers are merged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueFromOrigin {
    /// The container itself (or an agent that ran before).
    Container,
    /// `spec.<lang>.env` or `spec.env` of the Instrumentation.
    Instrumentation,
}

/// Whether `name` will be set with `valueFrom` once `layers` (language env, then `spec.env`)
/// are merged into `env` with append-if-absent: the container's own definition always wins,
/// else the first layer that defines it.
pub fn value_from_origin(
    env: &EnvPlan<'_>,
    layers: &[&[EnvVar]],
    name: &str,
) -> Option<ValueFromOrigin> {
    match env.get(name) {
        Some(EnvValue::ValueFrom) => Some(ValueFromOrigin::Container),
        Some(EnvValue::Literal(_)) => None,
        None => layers
            .iter()
            .find_map(|layer| layer.iter().find(|e| e.name == name))
            .filter(|e| e.value_from.is_some())
            .map(|_| ValueFromOrigin::Instrumentation),
    }
}

/// The warning for a target skipped because `var` comes from `valueFrom`.
pub fn value_from_warning(
    lang: Language,
    container: &str,
    var: &str,
    origin: ValueFromOrigin,
) -> String {
    match origin {
        ValueFromOrigin::Container => {
            format!("{lang}: container {container:?} sets {var} with valueFrom; not instrumented")
        }
        ValueFromOrigin::Instrumentation => format!(
            "{lang}: Instrumentation sets {var} with valueFrom; container {container:?} not instrumented"
        ),
    }
}
