//! `admission.k8s.io/v1` AdmissionReview in and out. The request envelope is read straight
//! from the bytes: a Pod CREATE that may ask for injection is decoded as it is read
//! ([`envelope`]), any other object is kept raw and never decoded, and a pod is decoded only
//! in the fields the engine reads ([`decode_pod`]). The response always echoes the request's
//! `uid`.

use json_patch::PatchOperation;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::engine::census::controller;
use crate::engine::{self, Catalog, EngineConfig, NamespaceInfo, Report, SkipReason, Snapshot};
use crate::warnings::shorten;

mod base64;
mod decode;
mod envelope;
pub mod patch;
mod response;

pub use decode::decode_pod;
use decode::{COUNT_CONTAINERS_ABOVE, MetaIn, PodIn, too_many_containers};
use response::response;

use envelope::Object;

const API_VERSION: &str = "admission.k8s.io/v1";
/// Every key that asks for injection starts with this (`inject-<lang>`).
use crate::keys::INJECT_PREFIX;

/// Where `text` first holds [`INJECT_PREFIX`]: a pod without it asks for nothing by its own
/// annotations.
fn find_inject_prefix(text: &[u8]) -> Option<usize> {
    memchr::memmem::find(text, INJECT_PREFIX.as_bytes())
}
const KIND: &str = "AdmissionReview";

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReviewIn<'a> {
    api_version: Option<&'a str>,
    kind: Option<&'a str>,
    #[serde(borrow)]
    request: Option<RequestIn<'a>>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct Gvk {
    group: String,
    version: String,
    kind: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RequestIn<'a> {
    uid: String,
    #[serde(default)]
    kind: Gvk,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    operation: String,
    #[serde(default)]
    dry_run: Option<bool>,
    #[serde(borrow, default)]
    object: Option<&'a RawValue>,
}

/// Why a body is not a readable AdmissionReview (answered with HTTP 400).
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    #[error("request body is not valid AdmissionReview JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("expected apiVersion admission.k8s.io/v1 kind AdmissionReview, got {0}")]
    WrongType(String),
    #[error("AdmissionReview has no request")]
    NoRequest,
    #[error("AdmissionReview request has an empty uid")]
    NoUid,
}

/// What the webhook did with one review, for logs and metrics.
#[derive(Debug, Default)]
pub struct Summary {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    pub operation: String,
    pub kind: String,
    pub dry_run: bool,
    /// Whether the response carries a patch.
    pub patched: bool,
    pub report: Report,
    /// The pod's controller (its `ownerReferences` entry with `controller: true`), when the
    /// pod was read and something was skipped: what the Events of its skips are about.
    pub owner: Option<OwnerReference>,
}

/// The engine's decision for `pod` as the patch the webhook answers with (JSON text), and
/// its report. The patch carries the outcome ([`engine::outcome`]) on every pod that asked
/// for injection and had not been injected already, alone when nothing was injected. A
/// patch that would grow the pod past `snapshot.config.max_pod_bytes` is dropped: the pod
/// gets only its outcome (`pod=skipped pod_too_large`, when that still fits) and a warning.
pub fn mutate_json(snapshot: &Snapshot<'_>, pod: &Pod) -> (Option<Vec<u8>>, Report) {
    let decision = engine::decide(snapshot, pod);
    let mut report = decision.report;
    let status = report.status();
    let text = match patch::build_with_status(pod, decision.plan.as_ref(), status.as_ref()) {
        Ok(text) => text,
        Err(e) => {
            // No k8s-openapi type fails to serialize: this is never expected to happen, and
            // then nothing, not even the outcome, is written.
            report.clear_injected();
            report.warnings.push(shorten(format!(
                "otel-injector: the patch could not be encoded ({e}); not injected"
            )));
            return (None, report);
        }
    };
    let max = snapshot.config.max_pod_bytes;
    let grown = grown_size(snapshot.pod_bytes, text.as_deref());
    if grown <= max {
        return (text, report);
    }
    if report.injected.is_empty() {
        // Only the outcome, and even that would take the pod past the bound (it is there
        // already): nothing is written; the report says why.
        return (None, report);
    }
    report.clear_injected();
    report.skip(
        None,
        SkipReason::PodTooLarge,
        None,
        engine::too_large_warning(grown, max),
    );
    let text = status_patch(pod, &report, snapshot.pod_bytes, max);
    (text, report)
}

fn grown_size(pod_bytes: usize, patch: Option<&[u8]>) -> usize {
    pod_bytes.saturating_add(patch.map_or(0, <[u8]>::len))
}

/// The patch that records `report`'s outcome alone, when it keeps the pod within `max`.
fn status_patch(pod: &Pod, report: &Report, pod_bytes: usize, max: usize) -> Option<Vec<u8>> {
    let status = report.status()?;
    // Only strings are serialized: this cannot fail.
    let text = patch::build_with_status(pod, None, Some(&status)).ok()??;
    (grown_size(pod_bytes, Some(&text)) <= max).then_some(text)
}

/// [`mutate_json`] with the patch as typed operations (to apply it to a document).
pub fn mutate(snapshot: &Snapshot<'_>, pod: &Pod) -> (Vec<PatchOperation>, Report) {
    let (text, report) = mutate_json(snapshot, pod);
    // The text was written from these very types, so it reads back.
    let ops = text
        .and_then(|t| patch::operations(&t).ok())
        .unwrap_or_default();
    (ops, report)
}

/// Reads a review, decides, and returns the response body. `Err` only for a body that is
/// not a readable review; every readable review is allowed (with a patch or warnings).
pub fn review(
    body: &[u8],
    catalog: &dyn Catalog,
    config: &EngineConfig,
) -> Result<(Vec<u8>, Summary), ReviewError> {
    // A body of this size decodes within bounds whatever it holds: its pod, when it may ask
    // for injection, is decoded as the envelope is read ([`envelope`]).
    let one_pass = (body.len() <= COUNT_CONTAINERS_ABOVE)
        .then(|| envelope::read(body, &|ns| namespace_asks(catalog, ns)))
        .flatten();
    match one_pass {
        Some(read) => answer(read, catalog, config),
        None => review_two_pass(body, catalog, config),
    }
}

/// [`review`] with the envelope read as it is by any size of body: `request.object` kept
/// raw, a pod decoded from it afterwards. The same answer, one more scan of the pod; the fuzz
/// checks compare the two.
#[doc(hidden)]
pub fn review_two_pass(
    body: &[u8],
    catalog: &dyn Catalog,
    config: &EngineConfig,
) -> Result<(Vec<u8>, Summary), ReviewError> {
    let review: ReviewIn<'_> = serde_json::from_slice(body)?;
    let request = review.request.map(|r| envelope::RequestIn {
        uid: r.uid,
        kind: r.kind,
        namespace: r.namespace,
        name: r.name,
        operation: r.operation,
        dry_run: r.dry_run,
        object: r.object.map_or(Object::Absent, Object::Raw),
    });
    let read = envelope::Review {
        api_version: review.api_version,
        kind: review.kind,
        request,
    };
    answer(read, catalog, config)
}

/// Whether the namespace's annotations ask for injection.
fn namespace_asks(catalog: &dyn Catalog, namespace: &str) -> bool {
    catalog.namespace(namespace).is_some_and(|n| info_asks(&n))
}

fn info_asks(namespace: &NamespaceInfo) -> bool {
    namespace
        .annotations
        .keys()
        .any(|k| k.starts_with(INJECT_PREFIX))
}

fn answer(
    review: envelope::Review<'_>,
    catalog: &dyn Catalog,
    config: &EngineConfig,
) -> Result<(Vec<u8>, Summary), ReviewError> {
    if review.api_version.is_some_and(|v| v != API_VERSION)
        || review.kind.is_some_and(|k| k != KIND)
    {
        return Err(ReviewError::WrongType(format!(
            "{}/{}",
            review.api_version.unwrap_or(""),
            review.kind.unwrap_or("")
        )));
    }
    let req = review.request.ok_or(ReviewError::NoRequest)?;
    if req.uid.is_empty() {
        return Err(ReviewError::NoUid);
    }
    let mut s = Summary {
        namespace: req.namespace.unwrap_or_default(),
        name: req.name.unwrap_or_default(),
        operation: req.operation,
        kind: req.kind.kind,
        dry_run: req.dry_run.unwrap_or(false),
        uid: req.uid,
        ..Summary::default()
    };
    let mut patch = None;
    let is_pod = s.kind == "Pod" && req.kind.group.is_empty() && req.kind.version == "v1";
    if is_pod && s.operation == "CREATE" {
        // The object's JSON text, and the pod when it was decoded in one pass with the
        // envelope (then `object`, the text as a `str`, is not needed: the pod is small).
        let (object, bytes, decoded, prefixed) = match req.object {
            Object::Absent => ("", &[][..], None, false),
            Object::Raw(raw) => {
                let text = raw.get();
                (
                    text,
                    text.as_bytes(),
                    None,
                    find_inject_prefix(text.as_bytes()).is_some(),
                )
            }
            Object::Pod {
                pod,
                text,
                prefixed,
            } => ("", text, Some(pod), prefixed),
        };
        // On CREATE the pod's own namespace may be empty: the request's is the truth.
        let snapshot = Snapshot::take(catalog, &s.namespace, config).with_pod_bytes(bytes.len());
        // The fast path: a pod that asks for nothing, in a namespace that asks for nothing,
        // is answered without decoding it (most pods, with the default configuration that
        // sends every pod).
        let asks = prefixed || snapshot.namespace_info.as_deref().is_some_and(info_asks);
        // Decoding costs about the size of a `Container` per container, far more than the
        // JSON of a tiny one: a large pod of many tiny containers is refused before decoding.
        let too_many = decoded.is_none() && asks && too_many_containers(object);
        if too_many {
            s.report.requested = true;
            s.report.skip(
                None,
                SkipReason::PodTooLarge,
                None,
                format!(
                    "otel-injector: the pod has too many containers for its size ({} bytes); not injected",
                    bytes.len()
                ),
            );
            let owner;
            (patch, owner) = refused_status_patch(object, &mut s.report, config.max_pod_bytes);
            s.owner = owner;
        }
        let pod = || decoded.map_or_else(|| decode_pod(object), |p| Ok(Pod::from(*p)));
        match (asks && !too_many).then(pod) {
            Some(Ok(pod)) => {
                let (text, report) = mutate_json(&snapshot, &pod);
                patch = text;
                s.report = report;
                if !s.report.skipped.is_empty() {
                    s.owner = controller(pod.metadata.owner_references.as_deref()).cloned();
                }
            }
            Some(Err(e)) => s.report.warnings.push(shorten(format!(
                "otel-injector: pod could not be decoded ({e}); not injected"
            ))),
            None => {}
        }
    }
    s.patched = patch.is_some();
    Ok((response(&s.uid, patch.as_deref(), &s.report.warnings), s))
}

/// For a pod refused before decoding (too many containers): its outcome, from its
/// annotations and labels alone (a metadata-only decode, every other field skipped unread),
/// unless it had been injected already, and its controller. `None` when even the metadata
/// cannot be read.
fn refused_status_patch(
    object: &str,
    report: &mut Report,
    max: usize,
) -> (Option<Vec<u8>>, Option<OwnerReference>) {
    #[derive(Deserialize)]
    struct MetaOnly {
        #[serde(default)]
        metadata: MetaIn,
    }
    let Ok(MetaOnly { metadata: meta }) = serde_json::from_str::<MetaOnly>(object) else {
        return (None, None);
    };
    let owner = controller(meta.owner_references.as_deref()).cloned();
    if meta
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(engine::INJECTED_ANNOTATION))
    {
        report.already_injected = true;
        return (None, owner);
    }
    let pod = Pod {
        metadata: ObjectMeta {
            annotations: meta.annotations,
            labels: meta.labels,
            ..Default::default()
        },
        ..Default::default()
    };
    (status_patch(&pod, report, object.len(), max), owner)
}

#[cfg(test)]
mod tests;
