//! Flags of the decision engine: which languages it injects, and their default images.

use clap::Args;

use crate::agents::{DefaultImages, Language, LanguageSet};
use crate::engine::{AgentDelivery, CrossNamespace, EngineConfig, GoSidecar};

#[derive(Debug, Args)]
#[command(next_help_heading = "Injection")]
pub struct EngineArgs {
    /// Languages this webhook injects (comma-separated). A pod asking for another one is
    /// admitted without it, with a warning. Go is off by default: its agent is a privileged
    /// sidecar.
    #[arg(
        long,
        env = "OTEL_INJECTOR_ENABLED_LANGUAGES",
        default_value = "java,nodejs,python,dotnet,apache-httpd,nginx,sdk",
        value_parser = languages
    )]
    pub enabled_languages: LanguageSet,

    /// Languages injected with a v1beta1 `declarativeConfig` (comma-separated): their agents
    /// read the SDK configuration file (OTEL_CONFIG_FILE). Any other language asked for with
    /// a declarative Instrumentation is skipped (declarative_config_unsupported). The default
    /// Java agent reads it (2.26.0 and later); add python for an image with
    /// `opentelemetry-sdk[file-configuration]`, sdk for applications whose own SDK reads it.
    #[arg(
        long,
        env = "OTEL_INJECTOR_DECLARATIVE_CONFIG_LANGUAGES",
        default_value = "java",
        value_parser = languages
    )]
    pub declarative_config_languages: LanguageSet,

    /// Default agent image for a language, as LANGUAGE=IMAGE; used when the Instrumentation
    /// names none. Repeatable (comma-separated in the env var).
    #[arg(long = "agent-image", env = "OTEL_INJECTOR_AGENT_IMAGES", value_delimiter = ',', value_parser = agent_image)]
    pub agent_images: Vec<(Language, String)>,

    /// Largest pod, as JSON bytes after injection, the webhook will produce. A pod the
    /// patch would grow past it (for example thousands of tiny containers all targeted) is
    /// admitted unchanged with a warning (reason pod_too_large). The default is etcd's
    /// default request limit; the API server could not store a larger pod anyway.
    #[arg(long, env = "OTEL_INJECTOR_MAX_POD_BYTES", default_value_t = crate::engine::DEFAULT_MAX_POD_BYTES)]
    pub max_pod_bytes: usize,

    /// Which Instrumentations a pod may name in another namespace (`ns/name`): `all` (as
    /// the OpenTelemetry Operator), `opt-in` (only those annotated
    /// `otel-injector/cross-namespace: "allowed"`) or `deny`. Any pod creator can otherwise
    /// use (and so read the settings of) another namespace's Instrumentation.
    #[arg(long, env = "OTEL_INJECTOR_CROSS_NAMESPACE_REFERENCES", value_enum, default_value_t = CrossNamespace::All)]
    pub cross_namespace_references: CrossNamespace,

    /// How the Java, Node.js, Python and .NET agents reach the pod: `init-container` copies
    /// the agent into an emptyDir (as the Operator does); `image-volume` mounts the agent
    /// image read-only as an image volume (no init container, no copy, no emptyDir; needs
    /// the API server's ImageVolume feature gate, on by default from 1.35, and a container
    /// runtime that supports image volumes); `auto` uses image volumes when the API server
    /// accepts them, else init containers. `auto` decides by the ImageVolume gate as the API
    /// server's /metrics reports it (needs get on /metrics: manifests/components/agent-delivery-auto);
    /// when that cannot be read, by the version the API server runs or emulates (1.36 or
    /// later, where the gate is GA and locked on). Both are read at start and again after a
    /// watch reconnects, never per request; the metric otel_injector_apiserver_image_volumes
    /// says which signal decided. The default is `init-container` because neither signal
    /// says anything of the nodes' container runtime: a node whose runtime lacks image
    /// volumes would fail the pods. An Instrumentation overrides the flag with the
    /// annotation `otel-injector/agent-delivery`. The admission policies (`policy`,
    /// --apply-policies) follow the same choice, `auto` being `image-volume` there (they need
    /// 1.36 or later).
    #[arg(long, env = "OTEL_INJECTOR_AGENT_DELIVERY", value_enum, default_value_t = AgentDelivery::InitContainer)]
    pub agent_delivery: AgentDelivery,

    /// How the Go agent's sidecar runs: `native` (an init container with `restartPolicy:
    /// Always`, started before the app and stopped after it), `classic` (a plain container)
    /// or `auto` (native when the API server is 1.29 or later, where native sidecars are on
    /// by default; classic when the version is unknown, as with --instrumentation-file).
    #[arg(long, env = "OTEL_INJECTOR_GO_SIDECAR", value_enum, default_value_t = GoSidecar::Auto)]
    pub go_sidecar: GoSidecar,
}

impl EngineArgs {
    /// The engine's configuration.
    pub fn build(&self) -> EngineConfig {
        let mut images = DefaultImages::default();
        for (lang, image) in &self.agent_images {
            images.set(*lang, image.clone());
        }
        EngineConfig {
            enabled: self.enabled_languages,
            declarative: self.declarative_config_languages,
            images,
            max_pod_bytes: self.max_pod_bytes,
            cross_namespace: self.cross_namespace_references,
            delivery: self.agent_delivery,
            go_sidecar: self.go_sidecar,
        }
    }
}

fn languages(v: &str) -> Result<LanguageSet, String> {
    v.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<Language>().map_err(|e| e.to_string()))
        .collect()
}

fn agent_image(v: &str) -> Result<(Language, String), String> {
    let (lang, image) = v
        .split_once('=')
        .ok_or_else(|| format!("expected LANGUAGE=IMAGE, got {v:?}"))?;
    let lang = lang.parse::<Language>().map_err(|e| e.to_string())?;
    if image.trim().is_empty() {
        return Err(format!("empty image for {lang}"));
    }
    Ok((lang, image.trim().to_owned()))
}
