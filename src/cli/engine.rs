//! Flags of the decision engine: which languages it injects, and their default images.

use clap::Args;

use crate::agents::{DefaultImages, Language, LanguageSet};
use crate::engine::{CrossNamespace, EngineConfig};

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
            images,
            max_pod_bytes: self.max_pod_bytes,
            cross_namespace: self.cross_namespace_references,
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
