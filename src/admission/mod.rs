//! `admission.k8s.io/v1` AdmissionReview in and out. The request envelope is read straight
//! from the bytes: a Pod CREATE that may ask for injection is decoded as it is read
//! ([`envelope`]), any other object is kept raw and never decoded, and a pod is decoded only
//! in the fields the engine reads ([`decode_pod`]). The response always echoes the request's
//! `uid`.

use std::collections::BTreeMap;

use json_patch::PatchOperation;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde::Deserialize;

use crate::engine::{
    self, Catalog, EngineConfig, Instrumentations, NamespaceInfo, Report, Snapshot,
};
use crate::pod::info::controller;
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

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct Gvk {
    group: String,
    version: String,
    kind: String,
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
/// for injection and had not been injected already, alone when nothing was injected. The
/// engine holds it to `snapshot.config.max_pod_bytes` ([`engine::decide_within`]).
pub fn mutate_json(snapshot: &Snapshot<'_>, pod: &Pod) -> (Option<Vec<u8>>, Report) {
    let bounded = engine::decide_within(snapshot, pod, patch::text);
    (bounded.patch, bounded.report)
}

/// [`mutate_json`] with the patch as typed operations (to apply it to a document): one write
/// makes the text the engine measures and the operations ([`patch::both`]).
pub fn mutate(snapshot: &Snapshot<'_>, pod: &Pod) -> (Vec<PatchOperation>, Report) {
    mutate_seeing(snapshot, pod, |_| {})
}

/// [`mutate`], showing `see` the plan the patch is written from (every time one is: the
/// policy's templates read the agents' env notes off it, `policy::template`).
pub fn mutate_seeing(
    snapshot: &Snapshot<'_>,
    pod: &Pod,
    see: impl Fn(&crate::pod::plan::PodPlan<'_>),
) -> (Vec<PatchOperation>, Report) {
    let write = |pod: &Pod, plan: Option<&crate::pod::plan::PodPlan<'_>>, status: Option<&_>| {
        plan.into_iter().for_each(&see);
        patch::both(pod, plan, status)
    };
    let bounded = engine::decide_within(snapshot, pod, write);
    let ops = bounded.patch.map(|p| p.operations).unwrap_or_default();
    (ops, bounded.report)
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
    let read: envelope::Review<'_> = serde_json::from_slice(body)?;
    answer(read, catalog, config)
}

/// Whether the namespace's annotations ask for injection, or a selector selects it.
fn namespace_asks(catalog: &dyn Catalog, namespace: &str) -> bool {
    let info = catalog.namespace(namespace);
    info.as_deref().is_some_and(NamespaceInfo::asks)
        || selected(&catalog.instrumentations(), namespace, info.as_deref())
}

/// Whether an Instrumentation's selector selects the namespace (its pods may be injected
/// with no annotation of theirs).
fn selected(index: &Instrumentations, namespace: &str, info: Option<&NamespaceInfo>) -> bool {
    index.has_selectors() && {
        let empty = BTreeMap::new();
        let labels = info.map_or(&empty, |n| &n.all_labels);
        !index.selecting(namespace, labels).is_empty()
    }
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
    let is_pod = s.kind == "Pod" && req.kind.group.is_empty() && req.kind.version == "v1";
    let mut patch = None;
    if is_pod && s.operation == "CREATE" {
        let created = Created::from(req.object);
        // On CREATE the pod's own namespace may be empty: the request's is the truth.
        let snapshot =
            Snapshot::take(catalog, &s.namespace, config).with_pod_bytes(created.bytes.len());
        let answer = created.answer(&snapshot);
        patch = answer.patch;
        s.report = answer.report;
        s.owner = answer.owner;
    }
    s.patched = patch.is_some();
    Ok((response(&s.uid, patch.as_deref(), &s.report.warnings), s))
}

/// A Pod CREATE's object as the review holds it.
struct Created<'a> {
    /// Its JSON text as a `str`, when it was kept raw (empty when it was decoded in one pass
    /// with the envelope: the pod is small, its text is not read again).
    object: &'a str,
    /// Its JSON text.
    bytes: &'a [u8],
    /// The pod, when it was decoded in one pass with the envelope.
    decoded: Option<Box<PodIn>>,
    /// Whether its text holds an `inject-` annotation key's prefix.
    prefixed: bool,
}

impl<'a> From<Object<'a>> for Created<'a> {
    fn from(object: Object<'a>) -> Self {
        match object {
            Object::Absent => Created {
                object: "",
                bytes: &[],
                decoded: None,
                prefixed: false,
            },
            Object::Raw(raw) => {
                let text = raw.get();
                Created {
                    object: text,
                    bytes: text.as_bytes(),
                    decoded: None,
                    prefixed: find_inject_prefix(text.as_bytes()).is_some(),
                }
            }
            Object::Pod {
                pod,
                text,
                prefixed,
            } => Created {
                object: "",
                bytes: text,
                decoded: Some(pod),
                prefixed,
            },
        }
    }
}

/// What the webhook answers for one pod.
struct Answer {
    patch: Option<Vec<u8>>,
    report: Report,
    /// The pod's controller, when something was skipped (what the skips' Events are about).
    owner: Option<OwnerReference>,
}

impl Created<'_> {
    fn answer(self, snapshot: &Snapshot<'_>) -> Answer {
        let mut answer = Answer {
            patch: None,
            report: Report::default(),
            owner: None,
        };
        // The fast path: a pod that asks for nothing, in a namespace that asks for nothing,
        // is answered without decoding it (most pods, with the default configuration that
        // sends every pod).
        // A pod decoded as the envelope was read asks already (`namespace_asks`).
        let info = snapshot.namespace_info.as_deref();
        let asks = self.prefixed
            || self.decoded.is_some()
            || info.is_some_and(NamespaceInfo::asks)
            || selected(&snapshot.instrumentations, snapshot.namespace, info);
        if !asks {
            return answer;
        }
        // Decoding costs about the size of a `Container` per container, far more than the
        // JSON of a tiny one: a large pod of many tiny containers is refused before decoding.
        if self.decoded.is_none() && too_many_containers(self.object) {
            let meta = metadata_only(self.object);
            let refused = engine::refuse_undecoded(snapshot, meta.as_ref(), patch::text);
            answer.owner = meta
                .as_ref()
                .and_then(|m| controller(m.metadata.owner_references.as_deref()).cloned());
            answer.patch = refused.patch;
            answer.report = refused.report;
            return answer;
        }
        let pod = match self.decoded {
            Some(pod) => Pod::from(*pod),
            None => match decode_pod(self.object) {
                Ok(pod) => pod,
                Err(e) => {
                    answer.report.warnings.push(shorten(format!(
                        "otel-injector: pod could not be decoded ({e}); not injected"
                    )));
                    return answer;
                }
            },
        };
        (answer.patch, answer.report) = mutate_json(snapshot, &pod);
        if !answer.report.skipped.is_empty() {
            answer.owner = controller(pod.metadata.owner_references.as_deref()).cloned();
        }
        answer
    }
}

/// The pod's annotations, labels and owners alone (a metadata-only decode, every other field
/// skipped unread), for a pod refused before decoding; `None` when even they cannot be read.
fn metadata_only(object: &str) -> Option<Pod> {
    #[derive(Deserialize)]
    struct MetaOnly {
        #[serde(default)]
        metadata: MetaIn,
    }
    let MetaOnly { metadata: meta } = serde_json::from_str(object).ok()?;
    Some(Pod {
        metadata: ObjectMeta {
            annotations: meta.annotations,
            labels: meta.labels,
            owner_references: meta.owner_references,
            ..Default::default()
        },
        ..Default::default()
    })
}

#[cfg(test)]
mod tests;
