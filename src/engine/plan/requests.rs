//! The stages that read the pod as a whole: what it asks for (recorded in the report as it is
//! read), whether it can be injected at all, the languages this webhook injects, the
//! containers each targets, and the size budget.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;

use super::{Requested, Target};
use crate::agents::Language;
use crate::engine::asked::{Asked, AskedBy, Naming, Targets};
use crate::engine::bound;
use crate::engine::decision::{Report, Skip};
use crate::engine::reason::SkipReason;
use crate::engine::references::wanted;
use crate::engine::snapshot::Snapshot;
use crate::engine::snapshot::{Instrumentations, SelectedBy};
use crate::keys::{ANNOTATION_PREFIX, CONTAINER_NAMES, SELECTOR_ANNOTATION};
use crate::pod::select::{self, Annotations, Request, TargetError};

/// The languages the pod (or its namespace) asks for, in the registry's order.
/// Each is recorded in `d` ([`Asked`]).
pub(super) fn requests<'a>(annotations: &Annotations<'a>, d: &mut Report) -> Vec<Requested<'a>> {
    let mut out = Vec::new();
    for &lang in Language::ALL {
        let key = lang.inject_annotation();
        let Some(value) = annotations.get(key) else {
            continue;
        };
        let request = Request::parse(Some(value));
        let Some(naming) = Naming::of(&request) else {
            continue;
        };
        let from = match annotations.pod(key) {
            Some(on_pod) if std::ptr::eq(on_pod, value) => AskedBy::Pod,
            _ => AskedBy::Namespace,
        };
        d.requests.push(Asked {
            language: lang,
            key,
            value: value.to_owned(),
            from,
            naming,
            targets: Targets {
                common: annotations.get(CONTAINER_NAMES).map(str::to_owned),
                own: annotations
                    .get(lang.container_names_annotation())
                    .map(str::to_owned),
                own_by_selector: false,
                resolved: None,
            },
            warnings: Vec::new(),
        });
        out.push((lang, request));
    }
    out
}

/// The languages selectors ask for (`otel-injector/selector`) when the pod and its namespace
/// set no `inject-*` key at all: an explicit key, `"false"` included, decides for the whole
/// pod (a selector's language added beside an annotated one could change its targets). Of
/// several selectors for one language, the first of [`Instrumentations::selecting`]'s order
/// (the pod's namespace first, then by name), with a warning that names both. Recorded in
/// `d`.
pub(super) fn selected<'a>(
    snapshot: &'a Snapshot<'_>,
    pod: &Pod,
    annotations: &Annotations<'_>,
    requests: &mut Vec<Requested<'a>>,
    d: &mut Report,
) {
    let index: &'a Instrumentations = &snapshot.instrumentations;
    let keyed = Language::ALL.iter().any(|l| {
        annotations
            .get(l.inject_annotation())
            .is_some_and(|v| !v.trim().is_empty())
    });
    if keyed || !index.has_selectors() {
        return;
    }
    let no_labels = BTreeMap::new();
    let ns_labels = snapshot
        .namespace_info
        .as_deref()
        .map_or(&no_labels, |n| &n.all_labels);
    let selected = index.selected_for(snapshot.namespace, ns_labels, pod.metadata.labels.as_ref());
    for SelectedBy {
        language: lang,
        key,
        selector,
        also,
    } in selected
    {
        let Some((namespace, name)) = key.split_once('/') else {
            continue;
        };
        let mut warnings = Vec::new();
        if let Some(other) = also {
            warnings.push(format!(
                "inject-{lang}: the selectors of \"{key}\" and \"{other}\" both select this pod; using \"{key}\""
            ));
        }
        d.warnings.extend(warnings.iter().cloned());
        let own = annotations
            .get(lang.container_names_annotation())
            .map(str::to_owned);
        let listed = (!selector.containers.is_empty()).then(|| selector.containers.join(","));
        d.requests.push(Asked {
            language: lang,
            key: SELECTOR_ANNOTATION,
            value: key.to_owned(),
            from: AskedBy::Selector,
            naming: Naming::Qualified,
            targets: Targets {
                common: annotations.get(CONTAINER_NAMES).map(str::to_owned),
                own_by_selector: own.is_none() && listed.is_some(),
                own: own.or(listed),
                resolved: None,
            },
            warnings,
        });
        requests.push((lang, Request::Qualified { namespace, name }));
    }
}

/// Whether the pod can be injected at all: the caches have synced and it has containers.
pub(super) fn admit_pod(snapshot: &Snapshot<'_>, pod: &Pod) -> Result<(), Skip> {
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
pub(super) fn enabled<'a>(
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
/// Each language's resolved containers are recorded in `d`, before the lists are judged.
pub(super) fn targets<'a>(
    snapshot: &Snapshot<'_>,
    pod: &Pod,
    annotations: &Annotations<'_>,
    requests: Vec<Requested<'a>>,
    d: &mut Report,
) -> Result<Vec<Target<'a>>, Skip> {
    let common = select::split_names(annotations.get(CONTAINER_NAMES));
    // Each language's own list as recorded: its annotation's, or its selector's.
    let owns: Vec<Option<String>> = requests
        .iter()
        .map(|(l, _)| {
            let asked = d.requests.iter().find(|a| a.language == *l);
            asked.and_then(|a| a.targets.own.clone())
        })
        .collect();
    let lists: Vec<(Language, Request<'a>, Vec<&str>)> = requests
        .into_iter()
        .zip(&owns)
        .map(|((l, r), own)| {
            let mut names = common.clone();
            names.extend(select::split_names(own.as_deref()));
            (l, r, names)
        })
        .collect();
    let with = lists.iter().filter(|(_, _, n)| !n.is_empty()).count();
    let resolved: Vec<(Language, Request<'a>, Result<_, TargetError>)> = lists
        .into_iter()
        .map(|(l, r, names)| (l, r, select::resolve_targets(pod, &names)))
        .collect();
    for (l, _, slots) in &resolved {
        if let Some(asked) = d.requests.iter_mut().find(|a| a.language == *l) {
            asked.targets.resolved = Some(slots.clone());
        }
    }
    if resolved.len() > 1 && with != resolved.len() {
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
    resolved
        .into_iter()
        .map(|(l, r, slots)| match slots {
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
pub(super) fn size_budget<'a>(
    snapshot: &Snapshot<'_>,
    targets: Vec<Target<'a>>,
) -> Result<Vec<Target<'a>>, Skip> {
    let targeted: usize = targets.iter().map(|(_, _, t)| t.len()).sum();
    bound::estimate(snapshot, targeted).map(|()| targets)
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

pub(super) fn injected_by_operator(pod: &Pod) -> bool {
    let Some(spec) = pod.spec.as_ref() else {
        return false;
    };
    spec.init_containers
        .iter()
        .flatten()
        .any(|c| OPERATOR_INIT_CONTAINERS.contains(&c.name.as_str()))
        || spec.containers.iter().any(|c| c.name == OPERATOR_SIDECAR)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::cluster::StaticCatalog;
    use crate::engine::{EngineConfig, decide};
    use crate::pod::plan::Slot;

    fn report(annotations: serde_json::Value) -> Report {
        let catalog = StaticCatalog::one("shop", "java");
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "annotations": annotations},
            "spec": {"containers": [{"name": "a"}, {"name": "b"}]}
        }))
        .unwrap();
        let config = EngineConfig::default();
        decide(&Snapshot::take(&catalog, "shop", &config), &pod).report
    }

    #[test]
    fn each_request_is_recorded_with_its_key_value_lists_and_targets() {
        let r = report(json!({
            "instrumentation.opentelemetry.io/inject-java": "shop/java",
            "instrumentation.opentelemetry.io/java-container-names": "b",
        }));
        assert_eq!(r.injected, [Language::Java]);
        let [java] = r.requests.as_slice() else {
            panic!("{:?}", r.requests)
        };
        assert_eq!(
            (java.key, java.value.as_str(), java.from, java.naming),
            (
                "instrumentation.opentelemetry.io/inject-java",
                "shop/java",
                AskedBy::Pod,
                Naming::Qualified
            )
        );
        assert_eq!(
            java.targets,
            Targets {
                common: None,
                own: Some("b".into()),
                own_by_selector: false,
                resolved: Some(Ok(vec![Slot::App(1)])),
            }
        );
    }

    #[test]
    fn targets_are_recorded_before_the_lists_are_judged_and_skips_with_their_language() {
        // Two languages, one list: the pod is skipped, each language's resolution recorded.
        let r = report(json!({
            "instrumentation.opentelemetry.io/inject-java": "true",
            "instrumentation.opentelemetry.io/inject-python": "missing",
            "instrumentation.opentelemetry.io/java-container-names": "a",
        }));
        assert_eq!(r.skipped[0].reason, SkipReason::InvalidContainerNames);
        assert_eq!(r.skipped[0].language, None);
        let resolved: Vec<_> = r.requests.iter().map(|a| &a.targets.resolved).collect();
        assert_eq!(
            resolved,
            [&Some(Ok(vec![Slot::App(0)])), &Some(Ok(vec![Slot::App(0)]))]
        );
        assert!(r.requests.iter().all(|a| a.warnings.is_empty()));

        // A language's skip is recorded with its request.
        let r = report(json!({
            "instrumentation.opentelemetry.io/inject-java": "nope",
        }));
        assert_eq!(r.requests[0].naming, Naming::Name);
        assert_eq!(
            r.requests[0].warnings,
            ["inject-java: Instrumentation \"shop/nope\" not found; not injected"]
        );
        assert_eq!(r.requests[0].warnings, r.warnings);
    }
}
