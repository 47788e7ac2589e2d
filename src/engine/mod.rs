//! The decision engine: a pure function from one [`Snapshot`] (Instrumentations, the
//! namespace, settings) and a pod to a [`Decision`]: the plan, the warnings that explain it
//! and the outcome per language. No I/O, no logging, no patch encoding: the admission layer
//! turns the plan into a patch, logs and counts.

pub mod census;
mod config;
mod decision;
pub mod outcome;
mod plan;
mod references;
mod snapshot;

use k8s_openapi::api::core::v1::Pod;

pub use config::{
    AgentDelivery, CROSS_NAMESPACE_ANNOTATION, CrossNamespace, DEFAULT_MAX_POD_BYTES, EngineConfig,
    GoSidecar, MIN_PATCH_BYTES_PER_TARGET, auto_image_volumes,
};
pub use decision::{Decision, Report, Skip, SkipReason};
pub use snapshot::{
    Catalog, IndexEntry, Instrumentations, NamespaceInfo, ObjectKind, ObjectLookup,
    POD_SECURITY_ENFORCE, Snapshot,
};

/// Annotation the webhook puts on every pod it changed; its value lists the injected
/// languages. A pod that carries it is never changed again (reinvocation, re-submission).
pub use crate::keys::INJECTED_ANNOTATION;
/// Static pods mirrored by the kubelet carry this; they are never mutated.
pub use crate::keys::MIRROR_ANNOTATION;

/// Annotation on an Instrumentation that overrides `--agent-delivery` for it.
pub use crate::keys::DELIVERY_ANNOTATION;

/// The warning for a pod that would grow past `max` bytes.
pub fn too_large_warning(bytes: usize, max: usize) -> String {
    format!(
        "otel-injector: the injected pod would be over {bytes} bytes (limit {max}); not injected"
    )
}

/// Decides what to inject into `pod`, created in the snapshot's namespace.
pub fn decide<'p>(snapshot: &Snapshot<'_>, pod: &'p Pod) -> Decision<'p> {
    let mut d = Report::default();
    let plan = plan::plan(snapshot, pod, &mut d);
    Decision { plan, report: d }
}
