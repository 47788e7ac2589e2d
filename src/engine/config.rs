//! The engine's settings, from the command line: the languages, images, bounds and delivery
//! modes a decision follows.

use crate::agents::{DefaultImages, Language, LanguageSet};

/// The default bound on the mutated pod's JSON: etcd's default request limit
/// (`--max-request-bytes`, 1.5 MiB); a larger pod could not be stored anyway.
pub const DEFAULT_MAX_POD_BYTES: usize = 1536 * 1024;
/// A lower bound of what one instrumented container adds to the patch (the SDK env alone
/// is larger), for the check made before any work.
pub const MIN_PATCH_BYTES_PER_TARGET: usize = 512;

/// Which Instrumentations a pod may name in another namespace (`ns/name`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum CrossNamespace {
    /// Any, as the OpenTelemetry Operator allows.
    #[default]
    All,
    /// Only those annotated `otel-injector/cross-namespace: "allowed"`.
    OptIn,
    /// None.
    Deny,
}

/// How copy-style agents (Java, Node.js, Python, .NET) reach the pod.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum AgentDelivery {
    /// An init container copies the agent into an emptyDir (as the Operator does).
    #[default]
    InitContainer,
    /// The agent image is mounted read-only as an image volume (Kubernetes ≥ 1.35 beta,
    /// 1.36 GA); the container runtime must support it too.
    ImageVolume,
    /// Image volumes when the API server has the `ImageVolume` feature gate on (read from its
    /// `/metrics`); when the gate cannot be read, when the API server is 1.36 or later.
    Auto,
}

/// How the Go agent's sidecar runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum GoSidecar {
    /// A native sidecar (init container with `restartPolicy: Always`) when the API server is
    /// 1.29 or later, else a plain container.
    #[default]
    Auto,
    Native,
    Classic,
}

/// Engine settings that come from the command line.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    pub enabled: LanguageSet,
    /// Languages whose agents read a declarative configuration file.
    pub declarative: LanguageSet,
    pub images: DefaultImages,
    /// Pods whose mutated JSON would exceed this many bytes are admitted unchanged.
    pub max_pod_bytes: usize,
    /// Which Instrumentations of other namespaces a pod may name.
    pub cross_namespace: CrossNamespace,
    /// How copy-style agents reach the pod.
    pub delivery: AgentDelivery,
    /// How the Go sidecar runs.
    pub go_sidecar: GoSidecar,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            enabled: LanguageSet::all(),
            declarative: [Language::Java].into_iter().collect(),
            images: DefaultImages::default(),
            max_pod_bytes: DEFAULT_MAX_POD_BYTES,
            cross_namespace: CrossNamespace::All,
            delivery: AgentDelivery::InitContainer,
            go_sidecar: GoSidecar::Auto,
        }
    }
}

/// What `auto` delivery decides: image volumes when the API server's `ImageVolume` feature
/// gate is known to be on, init containers when it is known to be off; when the gate could
/// not be read (no permission, no such metric, no cluster), image volumes from Kubernetes
/// 1.36 on (the gate is GA and locked on there), init containers before or when the version
/// is unknown too.
pub fn auto_image_volumes(version: Option<(u32, u32)>, gate: Option<bool>) -> bool {
    match gate {
        Some(on) => on,
        None => version.is_some_and(|v| v >= (1, 36)),
    }
}
