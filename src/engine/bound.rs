//! Every size rule, owned here whole. No pod is grown past `max_pod_bytes` (the API server
//! could not store it, and a pod of many tiny containers must not make the answer many times
//! the request). Three checks, one rule: the estimate before any work ([`estimate`], a
//! stage of the plan), the exact check of the patch the admission layer writes for the plan
//! ([`fit`], the last stage of [`super::decide_within`]), and the refusal of a pod too large to
//! decode ([`refuse_undecoded`]). When the plan does not fit, the pod gets its outcome
//! alone (`pod=skipped pod_too_large`) where that still fits, and a warning.
//!
//! A declarative SDK configuration file travels in an annotation ([`sdk_config`]): at most
//! [`MAX_SDK_CONFIG_BYTES`] rendered, and the pod's annotations with it, and with the outcome
//! the patch adds after the agents ([`outcome_room`], computed from the outcome's grammar),
//! within the [`MAX_ANNOTATION_BYTES`] Kubernetes allows; beyond either the language is
//! skipped (`declarative_config_too_large`).
//!
//! The engine writes no patch: the caller passes the writer, the engine measures what it
//! wrote.

use std::fmt::Display;

use k8s_openapi::api::core::v1::Pod;

use super::config::MIN_PATCH_BYTES_PER_TARGET;
use super::decision::{Report, Skip};
use super::outcome::PodStatus;
use super::reason::SkipReason;
use super::snapshot::Snapshot;
use crate::agents::Language;
use crate::keys::{
    CONFIG_FILE_ANNOTATION, INJECTED_ANNOTATION, SELECTED_BY_ANNOTATION, STATUS_ANNOTATION,
};
use crate::pod::plan::PodPlan;

/// The largest rendered SDK configuration file: its annotation is part of the
/// [`MAX_ANNOTATION_BYTES`] all of a pod's annotations may hold, and the pod's own come first.
pub const MAX_SDK_CONFIG_BYTES: usize = 64 * 1024;
/// What Kubernetes allows all annotations of an object together (keys and values, apimachinery's
/// `TotalAnnotationSizeLimitB`).
pub const MAX_ANNOTATION_BYTES: usize = 256 * 1024;
/// The longest Instrumentation reference an outcome entry names: `ns/name` or `ns/*`, each
/// part at most a DNS subdomain (only valid object names are recorded).
const MAX_REFERENCE_BYTES: usize = 253 + 1 + 253;
/// A spec digest as the outcome writes it (`SpecHash`: 8 hex digits).
const SPEC_HASH_BYTES: usize = 8;

/// The engine's answer for one pod with the patch that carries it, measured.
#[derive(Debug)]
pub struct Bounded<'p, P> {
    /// The plan the patch carries; `None` when nothing is injected.
    pub plan: Option<PodPlan<'p>>,
    /// The outcome the patch records, when it records one.
    pub status: Option<PodStatus>,
    /// The patch, within the bound; `None` when the pod is admitted unchanged.
    pub patch: Option<P>,
    /// What happened and why.
    pub report: Report,
}

/// The plan check: the patch for `plan` and `report`'s outcome, kept when the pod it makes
/// stays within the bound. Otherwise nothing is injected (`pod_too_large`) and the pod gets
/// its outcome alone when that fits; when even the outcome alone does not fit a pod that
/// asked for nothing new to be injected, nothing is written.
pub(super) fn fit<'p, P, E>(
    snapshot: &Snapshot<'_>,
    pod: &'p Pod,
    plan: Option<PodPlan<'p>>,
    mut report: Report,
    write: &impl Fn(&Pod, Option<&PodPlan<'_>>, Option<&PodStatus>) -> Result<Option<P>, E>,
) -> Bounded<'p, P>
where
    P: AsRef<[u8]>,
    E: Display,
{
    let status = report.status();
    let patch = match write(pod, plan.as_ref(), status.as_ref()) {
        Ok(patch) => patch,
        Err(e) => {
            // No k8s-openapi type fails to serialize: this is never expected to happen, and
            // then nothing, not even the outcome, is written.
            report.clear_injected();
            report.warn(format!(
                "otel-injector: the patch could not be encoded ({e}); not injected"
            ));
            return Bounded::nothing(report);
        }
    };
    let max = snapshot.config.max_pod_bytes;
    let grown = grown(snapshot, patch.as_ref());
    if grown <= max {
        return Bounded {
            plan,
            status,
            patch,
            report,
        };
    }
    if report.injected.is_empty() {
        // Only the outcome, and even that would take the pod past the bound (it is there
        // already): nothing is written; the report says why.
        return Bounded::nothing(report);
    }
    report.clear_injected();
    report.add(too_large(grown, max));
    outcome_only(snapshot, pod, report, write)
}

/// The estimate made before any work: every instrumented container costs the patch at least
/// [`MIN_PATCH_BYTES_PER_TARGET`].
pub(super) fn estimate(snapshot: &Snapshot<'_>, targeted: usize) -> Result<(), Skip> {
    let max = snapshot.config.max_pod_bytes;
    let estimate = snapshot
        .pod_bytes
        .saturating_add(targeted.saturating_mul(MIN_PATCH_BYTES_PER_TARGET));
    if estimate > max {
        return Err(too_large(estimate, max));
    }
    Ok(())
}

/// Whether `file`, the SDK configuration `lang` would deliver from `instrumentation` (`ns/name`)
/// into `plan`'s pod, keeps within
/// the size rules: at most [`MAX_SDK_CONFIG_BYTES`], and, with the pod's annotations, those
/// the plan adds besides it and the outcome's ([`outcome_room`] for the `asked` languages),
/// within [`MAX_ANNOTATION_BYTES`].
pub(super) fn sdk_config(
    plan: &PodPlan<'_>,
    (lang, instrumentation): (Language, &str),
    asked: &[Language],
    file: &str,
) -> Result<(), Skip> {
    let refused = |why: String| {
        Skip::new(
            Some(lang),
            SkipReason::DeclarativeConfigTooLarge,
            Some(instrumentation.to_owned()),
            format!("inject-{lang}: {why}; not injected"),
        )
    };
    if file.len() > MAX_SDK_CONFIG_BYTES {
        return Err(refused(format!(
            "the rendered SDK configuration is {} bytes, over {MAX_SDK_CONFIG_BYTES}",
            file.len()
        )));
    }
    let own: usize = plan
        .pod
        .metadata
        .annotations
        .iter()
        .flatten()
        .chain(
            plan.new_annotations
                .iter()
                .filter(|(k, _)| *k != CONFIG_FILE_ANNOTATION),
        )
        .map(|(k, v)| k.len() + v.len())
        .sum::<usize>()
        + outcome_room(asked);
    if own + CONFIG_FILE_ANNOTATION.len() + file.len() > MAX_ANNOTATION_BYTES {
        return Err(refused(format!(
            "pod annotations ({own} bytes) and SDK configuration ({} bytes) exceed Kubernetes' {MAX_ANNOTATION_BYTES}",
            file.len()
        )));
    }
    Ok(())
}

/// The most the annotations the patch adds after the agents can take for a pod that asked
/// for `asked`: the outcome (`otel-injector/status`, one entry per language asked for, each at
/// its longest), the `otel-injector/injected` list of every one of them, and the selectors
/// that asked (`otel-injector/selected-by`, each language with the longest reference).
pub(super) fn outcome_room(asked: &[Language]) -> usize {
    let longest_reason = SkipReason::ALL
        .iter()
        .map(|r| r.as_str().len())
        .max()
        .unwrap_or(0);
    // `injected <ref> <hash>` or `skipped <reason> <ref>`.
    let outcome = ("injected ".len() + MAX_REFERENCE_BYTES + 1 + SPEC_HASH_BYTES)
        .max("skipped ".len() + longest_reason + 1 + MAX_REFERENCE_BYTES);
    let names: usize = asked.iter().map(|l| l.as_str().len()).sum();
    let separators = asked.len().saturating_sub(1);
    let status = names + asked.len() * ("=".len() + outcome) + separators * "; ".len();
    let injected = names + separators * ",".len();
    let selected = names + asked.len() * ("=".len() + MAX_REFERENCE_BYTES) + separators;
    STATUS_ANNOTATION.len()
        + status
        + INJECTED_ANNOTATION.len()
        + injected
        + SELECTED_BY_ANNOTATION.len()
        + selected
}

/// The answer for a pod that asks for injection but has too many containers for its size to
/// be decoded (decoding costs about a `Container` per container, far more than the JSON of
/// a tiny one). `meta` holds its annotations and labels when they could be read: then, unless
/// it had been injected already, it gets its outcome where that fits.
pub fn refuse_undecoded<'p, P, E>(
    snapshot: &Snapshot<'_>,
    meta: Option<&'p Pod>,
    write: impl Fn(&Pod, Option<&PodPlan<'_>>, Option<&PodStatus>) -> Result<Option<P>, E>,
) -> Bounded<'p, P>
where
    P: AsRef<[u8]>,
    E: Display,
{
    let mut report = Report {
        requested: true,
        ..Report::default()
    };
    report.add(Skip::new(
        None,
        SkipReason::PodTooLarge,
        None,
        format!(
            "otel-injector: the pod has too many containers for its size ({} bytes); not injected",
            snapshot.pod_bytes
        ),
    ));
    let Some(pod) = meta else {
        return Bounded::nothing(report);
    };
    if pod
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(INJECTED_ANNOTATION))
    {
        report.already_injected = true;
        return Bounded::nothing(report);
    }
    outcome_only(snapshot, pod, report, &write)
}

/// The patch that records `report`'s outcome alone, when it keeps the pod within the bound.
fn outcome_only<'p, P, E>(
    snapshot: &Snapshot<'_>,
    pod: &Pod,
    report: Report,
    write: &impl Fn(&Pod, Option<&PodPlan<'_>>, Option<&PodStatus>) -> Result<Option<P>, E>,
) -> Bounded<'p, P>
where
    P: AsRef<[u8]>,
{
    let status = report.status();
    // Only strings are serialized: this cannot fail.
    let patch = status
        .as_ref()
        .and_then(|s| write(pod, None, Some(s)).ok().flatten())
        .filter(|p| grown(snapshot, Some(p)) <= snapshot.config.max_pod_bytes);
    Bounded {
        plan: None,
        status: status.filter(|_| patch.is_some()),
        patch,
        report,
    }
}

/// The size of the pod once `patch` is applied, bounded from above by the pod plus the
/// patch's text (an `add` writes at most its value; a `remove` or `move` writes less).
fn grown<P: AsRef<[u8]>>(snapshot: &Snapshot<'_>, patch: Option<&P>) -> usize {
    snapshot
        .pod_bytes
        .saturating_add(patch.map_or(0, |p| p.as_ref().len()))
}

/// The skip of a pod that would grow past `max` bytes.
fn too_large(bytes: usize, max: usize) -> Skip {
    Skip::new(
        None,
        SkipReason::PodTooLarge,
        None,
        format!(
            "otel-injector: the injected pod would be over {bytes} bytes (limit {max}); not injected"
        ),
    )
}

impl<P> Bounded<'_, P> {
    /// Nothing written; `report` says why.
    fn nothing(report: Report) -> Self {
        Bounded {
            plan: None,
            status: None,
            patch: None,
            report,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::engine::outcome::{Entry, Outcome};

    fn pod(annotations: &[(&str, String)]) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.annotations = Some(
            annotations
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.clone()))
                .collect::<BTreeMap<_, _>>(),
        );
        pod
    }

    fn check(pod: &Pod, file: &str) -> Result<(), Skip> {
        let plan = PodPlan::new(pod);
        sdk_config(
            &plan,
            (Language::Java, "shop/decl"),
            &[Language::Java],
            file,
        )
    }

    fn skip(msg: &str) -> Skip {
        Skip {
            language: Some(Language::Java),
            reason: SkipReason::DeclarativeConfigTooLarge,
            instrumentation: Some("shop/decl".into()),
            message: msg.into(),
        }
    }

    #[test]
    fn the_file_is_bounded_by_itself() {
        let empty = Pod::default();
        assert_eq!(check(&empty, &"x".repeat(MAX_SDK_CONFIG_BYTES)), Ok(()));
        assert_eq!(
            check(&empty, &"x".repeat(MAX_SDK_CONFIG_BYTES + 1)),
            Err(skip(
                "inject-java: the rendered SDK configuration is 65537 bytes, over 65536; not injected"
            ))
        );
    }

    #[test]
    fn the_file_and_the_pods_annotations_are_bounded_together() {
        let file = "x".repeat(1000);
        // What the pod's own annotation may take so that the whole reaches the limit exactly.
        let room = MAX_ANNOTATION_BYTES
            - outcome_room(&[Language::Java])
            - CONFIG_FILE_ANNOTATION.len()
            - file.len()
            - "example.com/notes".len();
        let at = pod(&[("example.com/notes", "n".repeat(room))]);
        assert_eq!(check(&at, &file), Ok(()));
        let over = pod(&[("example.com/notes", "n".repeat(room + 1))]);
        let own = MAX_ANNOTATION_BYTES - CONFIG_FILE_ANNOTATION.len() - file.len() + 1;
        assert_eq!(
            check(&over, &file),
            Err(skip(&format!(
                "inject-java: pod annotations ({own} bytes) and SDK configuration (1000 bytes) exceed Kubernetes' 262144; not injected"
            )))
        );
    }

    #[test]
    fn the_outcome_room_is_the_longest_outcome_the_grammar_allows() {
        let name = "n".repeat(253);
        let reference = format!("{name}/{name}");
        let longest = SkipReason::ALL
            .into_iter()
            .max_by_key(|r| r.as_str().len())
            .unwrap();
        let entries = |lang| {
            [
                Entry {
                    language: Some(lang),
                    outcome: Outcome::Skipped {
                        reason: longest,
                        instrumentation: Some(reference.clone()),
                    },
                },
                Entry {
                    language: Some(lang),
                    outcome: Outcome::Injected {
                        instrumentation: reference.clone(),
                        spec: crate::crd::SpecHash([0xff; 4]),
                    },
                },
            ]
        };
        let asked = [Language::Java, Language::ApacheHttpd];
        let status = PodStatus {
            entries: asked
                .iter()
                .map(|&l| {
                    entries(l)
                        .into_iter()
                        .max_by_key(|e| e.to_string().len())
                        .unwrap()
                })
                .collect(),
        };
        let injected = "java,apache-httpd";
        let selected = format!("java={reference},apache-httpd={reference}");
        assert_eq!(
            outcome_room(&asked),
            STATUS_ANNOTATION.len()
                + status.to_string().len()
                + INJECTED_ANNOTATION.len()
                + injected.len()
                + SELECTED_BY_ANNOTATION.len()
                + selected.len()
        );
        assert_eq!(
            outcome_room(&[]),
            STATUS_ANNOTATION.len() + INJECTED_ANNOTATION.len() + SELECTED_BY_ANNOTATION.len()
        );
    }
}
