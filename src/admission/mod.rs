//! `admission.k8s.io/v1` AdmissionReview in and out. The request envelope is read straight
//! from the bytes: a Pod CREATE that may ask for injection is decoded as it is read
//! ([`envelope`]), any other object is kept raw and never decoded, and a pod is decoded only
//! in the fields the engine reads ([`decode_pod`]). The response always echoes the request's
//! `uid`.

use std::collections::BTreeMap;

use json_patch::PatchOperation;
use k8s_openapi::api::core::v1::{
    Container, EnvFromSource, EnvVar, EphemeralContainer, Pod, PodSpec, SecurityContext, Volume,
    VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::engine::census::controller;
use crate::engine::{self, Catalog, EngineConfig, NamespaceInfo, Report, SkipReason, Snapshot};
use crate::warnings::shorten;

mod base64;
mod envelope;
pub mod patch;

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

/// The parts of a pod's metadata the engine reads. Everything else, `managedFields` above
/// all (often most of the object), is skipped while parsing instead of being decoded.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct MetaIn {
    name: Option<String>,
    generate_name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    labels: Option<BTreeMap<String, String>>,
    annotations: Option<BTreeMap<String, String>>,
    owner_references: Option<Vec<OwnerReference>>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct PodIn {
    metadata: MetaIn,
    spec: Option<SpecIn>,
}

/// The parts of a pod's spec the engine and the patch read. Everything else (probes,
/// ports, resources, tolerations, the sources of volumes…) is skipped while parsing: the
/// patch only appends to lists and addresses their entries by index, so it never writes
/// back what was not read. `null` reads as absent, as k8s-openapi reads it.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct SpecIn {
    containers: Option<Vec<ContainerIn>>,
    init_containers: Option<Vec<ContainerIn>>,
    /// Only their names are read (no two containers of a pod may share one).
    ephemeral_containers: Option<Vec<NameIn>>,
    /// Only their names are read (what the plan adds must not collide with them).
    volumes: Option<Vec<NameIn>>,
    node_name: Option<String>,
    share_process_namespace: Option<bool>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct ContainerIn {
    name: Option<String>,
    image: Option<String>,
    image_pull_policy: Option<String>,
    env: Option<Vec<EnvVar>>,
    env_from: Option<Vec<EnvFromSource>>,
    volume_mounts: Option<Vec<VolumeMount>>,
    security_context: Option<SecurityContext>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct NameIn {
    name: Option<String>,
}

impl From<ContainerIn> for Container {
    fn from(c: ContainerIn) -> Container {
        Container {
            name: c.name.unwrap_or_default(),
            image: c.image,
            image_pull_policy: c.image_pull_policy,
            env: c.env,
            env_from: c.env_from,
            volume_mounts: c.volume_mounts,
            security_context: c.security_context,
            ..Default::default()
        }
    }
}

impl From<SpecIn> for PodSpec {
    fn from(s: SpecIn) -> PodSpec {
        let containers = |list: Option<Vec<ContainerIn>>| {
            list.map(|l| l.into_iter().map(Container::from).collect::<Vec<_>>())
        };
        PodSpec {
            containers: containers(s.containers).unwrap_or_default(),
            init_containers: containers(s.init_containers),
            ephemeral_containers: s.ephemeral_containers.map(|l| {
                l.into_iter()
                    .map(|n| EphemeralContainer {
                        name: n.name.unwrap_or_default(),
                        ..Default::default()
                    })
                    .collect()
            }),
            volumes: s.volumes.map(|l| {
                l.into_iter()
                    .map(|n| Volume {
                        name: n.name.unwrap_or_default(),
                        ..Default::default()
                    })
                    .collect()
            }),
            node_name: s.node_name,
            share_process_namespace: s.share_process_namespace,
            ..Default::default()
        }
    }
}

impl From<PodIn> for Pod {
    fn from(p: PodIn) -> Pod {
        let m = p.metadata;
        Pod {
            metadata: ObjectMeta {
                name: m.name,
                generate_name: m.generate_name,
                namespace: m.namespace,
                uid: m.uid,
                labels: m.labels,
                annotations: m.annotations,
                owner_references: m.owner_references,
                ..Default::default()
            },
            spec: p.spec.map(PodSpec::from),
            status: None,
        }
    }
}

/// A pod object as the webhook reads it: only the fields the engine and the patch read
/// ([`MetaIn`], [`SpecIn`]), every other field skipped unread. Deciding on it gives the same
/// answer as deciding on the whole typed pod (the fuzz corpus checks this on every input).
pub fn decode_pod(object: &str) -> Result<Pod, serde_json::Error> {
    serde_json::from_str::<PodIn>(object).map(Pod::from)
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

/// Objects up to this size are decoded without counting their containers first: even all
/// tiny containers, they decode to a few MiB at most.
const COUNT_CONTAINERS_ABOVE: usize = 64 * 1024;
/// Decoding may take at most this many times the object's size.
const MAX_DECODE_FACTOR: usize = 16;

/// Whether decoding `object` would take more than [`MAX_DECODE_FACTOR`] times its size, by
/// the containers it lists (counted without allocating).
fn too_many_containers(object: &str) -> bool {
    if object.len() <= COUNT_CONTAINERS_ABOVE {
        return false;
    }
    let Ok(count) = serde_json::from_str::<CountPod>(object) else {
        return false; // the decode reports it
    };
    let containers = count
        .spec
        .map_or(0, |s| s.containers.0 + s.init_containers.0);
    containers.saturating_mul(std::mem::size_of::<k8s_openapi::api::core::v1::Container>())
        > object.len().saturating_mul(MAX_DECODE_FACTOR)
}

#[derive(Deserialize)]
struct CountPod {
    #[serde(default)]
    spec: Option<CountSpec>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CountSpec {
    #[serde(default)]
    containers: Count,
    #[serde(default)]
    init_containers: Count,
}

/// The length of a JSON array, every element skipped unread.
#[derive(Default)]
struct Count(usize);

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Count;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a list")
            }
            fn visit_unit<E>(self) -> Result<Count, E> {
                Ok(Count(0))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Count, A::Error> {
                let mut n = 0;
                while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {
                    n += 1;
                }
                Ok(Count(n))
            }
        }
        d.deserialize_any(Visit)
    }
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
    let request = review.request.map(|r| envelope::Request {
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

/// The response body: `{"apiVersion","kind","response":{"uid","allowed","patchType",
/// "patch","warnings"}}`, the patch base64-encoded straight into the body.
fn response(uid: &str, patch: Option<&[u8]>, warnings: &[String]) -> Vec<u8> {
    let patch_len = patch.map_or(0, |p| base64::encoded_len(p.len()));
    let mut out = Vec::with_capacity(160 + uid.len() + patch_len);
    out.extend_from_slice(
        br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"#,
    );
    // Strings and string lists always serialize.
    let _ = serde_json::to_writer(&mut out, uid);
    out.extend_from_slice(br#","allowed":true"#);
    if let Some(p) = patch {
        out.extend_from_slice(br#","patchType":"JSONPatch","patch":""#);
        base64::encode_into(p, &mut out);
        out.push(b'"');
    }
    if !warnings.is_empty() {
        out.extend_from_slice(br#","warnings":"#);
        let _ = serde_json::to_writer(&mut out, warnings);
    }
    out.extend_from_slice(b"}}");
    out
}

#[cfg(test)]
mod tests;
