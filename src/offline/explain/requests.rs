//! The requests of an explanation, formatted from the engine's record of them
//! ([`crate::engine::Asked`]): whose key asked and with what value, the Instrumentation it
//! got and why that one, the containers it targets and the lists that chose them.

use k8s_openapi::api::core::v1::Pod;

use super::{InheritedExplained, RequestExplained, Used};
use crate::engine::{Asked, AskedBy, Naming, Targets};
use crate::keys::CONTAINER_NAMES;
use crate::pod::plan::Slot;

/// `asked` explained; `chosen` is the Instrumentation it was injected with, if it was, and
/// `namespace` the pod's.
pub(super) fn explained(
    asked: &Asked,
    pod: &Pod,
    chosen: Option<Used<'_>>,
    namespace: &str,
) -> RequestExplained {
    let based = chosen.and_then(|u| u.based);
    let why = chosen.map(|_| match asked.naming {
        _ if asked.from == AskedBy::Selector => {
            "its selector selects the pod's namespace and labels; the pod and its namespace set no inject key for the language".to_owned()
        }
        Naming::Only => format!(
            "the only Instrumentation in namespace {namespace:?} (the annotation says \"true\")"
        ),
        Naming::Name => "named by the annotation, in the pod's namespace".to_owned(),
        Naming::Qualified => "named by the annotation as namespace/name".to_owned(),
    });
    let (targets, targets_why) = targets(asked, pod);
    RequestExplained {
        language: asked.language.to_string(),
        annotation: asked.key.to_owned(),
        value: asked.value.clone(),
        from: asked.from.as_str(),
        instrumentation: chosen.map(|u| u.name.to_owned()),
        why,
        bases: based.map(|b| b.chain.clone()).unwrap_or_default(),
        inherited: based
            .into_iter()
            .flat_map(|b| &b.inherited)
            .map(|(field, from)| InheritedExplained {
                field: field.clone(),
                from: from.clone(),
            })
            .collect(),
        targets,
        targets_why,
        warnings: match chosen {
            Some(_) => asked.warnings.clone(),
            None => Vec::new(),
        },
    }
}

/// The containers `asked` targets, by name, and why those.
pub(super) fn targets(asked: &Asked, pod: &Pod) -> (Vec<String>, String) {
    let Targets {
        common,
        own,
        own_by_selector,
        resolved,
    } = &asked.targets;
    let own_key = if *own_by_selector {
        "the selector's containers"
    } else {
        asked.language.container_names_annotation()
    };
    let why = match (common, own) {
        (None, None) => "the first container: no container-names annotation".to_owned(),
        (Some(c), None) => format!("{CONTAINER_NAMES}: {c:?}"),
        (None, Some(o)) => format!("{own_key}: {o:?}"),
        (Some(c), Some(o)) => format!("{CONTAINER_NAMES}: {c:?} and {own_key}: {o:?}"),
    };
    match resolved {
        Some(Ok(slots)) => (names(pod, slots), why),
        Some(Err(e)) => (Vec::new(), format!("{why}: {e}")),
        None => (
            Vec::new(),
            format!("{why}; not looked at: the pod, or this language, stopped before targeting"),
        ),
    }
}

/// The names of the containers in `slots`.
fn names(pod: &Pod, slots: &[Slot]) -> Vec<String> {
    let Some(spec) = pod.spec.as_ref() else {
        return Vec::new();
    };
    slots
        .iter()
        .filter_map(|&slot| match slot {
            Slot::Init(i) => spec.init_containers.as_ref()?.get(i),
            Slot::App(i) => spec.containers.get(i),
        })
        .map(|c| c.name.clone())
        .collect()
}
