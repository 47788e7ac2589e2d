//! The agents: one file per language, each an [`Agent`], and the registry below that names
//! them. Adding a language is its own file plus one registry line (see
//! `docs/architecture.md`); everything else (annotation keys, metrics labels, the
//! `--enabled-languages` values, default images, the spec's section) is read from the
//! registry.

pub mod apache;
pub mod copy;
pub mod declarative;
#[cfg(test)]
mod demo;
pub mod dotnet;
pub mod exporter_tls;
pub mod golang;
pub mod image_tag;
mod injection;
pub mod java;
mod language;
pub mod nginx;
pub mod nodejs;
pub mod python;
pub mod sdk;
pub mod sdk_env;
pub mod webserver;

pub use injection::{
    DefaultImages, Delivery, Effect, Injection, Refusal, ValueFromOrigin, value_from_origin,
    value_from_warning,
};
pub use language::{LanguageSet, UnknownLanguage};

use crate::crd::{InstrumentationSpec, LanguageSpec};

/// One language's injection. Agents only add to the plan they are given; the engine owns
/// selection, validation and the patch.
pub trait Agent: Sync {
    /// Whether init containers can be targets.
    fn supports_init_targets(&self) -> bool {
        true
    }
    /// Whether the agent needs privileges that Pod Security `baseline` and `restricted`
    /// forbid (the Go agent: privileged, hostPath).
    fn needs_privileges(&self) -> bool {
        false
    }
    /// The tag of `image` when the agent in it is known to predate reading a declarative
    /// configuration file (`OTEL_CONFIG_FILE`); `None` when it reads one or nothing is known.
    fn predates_config_file<'i>(&self, _image: &'i str) -> Option<&'i str> {
        None
    }
    /// Adds this language to the plan for the targets in `cx`.
    fn inject(&self, cx: &mut Injection<'_, '_>) -> Effect;
}

/// The registry entry of a language: the names users write for it, and its image.
#[derive(Debug)]
pub struct Names {
    pub language: Language,
    /// The short name used in annotations, flags, metrics and warnings.
    pub name: &'static str,
    /// `instrumentation.opentelemetry.io/inject-<name>`.
    pub inject_annotation: &'static str,
    /// The per-language container list annotation.
    pub container_names_annotation: &'static str,
    /// The agent image used when the Instrumentation names none (`--agent-image` overrides).
    pub default_image: Option<&'static str>,
}

// The registry: one line per language, in the order the Operator injects them. It defines
// the `Language` enum, `Language::ALL`, `Language::agent`, `Language::names` and
// `Language::section`.
language::registry! {
    Java => java::Java, "java", section java, image java::DEFAULT_IMAGE;
    NodeJs => nodejs::NodeJs, "nodejs", section nodejs, image nodejs::DEFAULT_IMAGE;
    Python => python::Python, "python", section python, image python::DEFAULT_IMAGE;
    DotNet => dotnet::DotNet, "dotnet", section dotnet, image dotnet::DEFAULT_IMAGE;
    Go => golang::Go, "go", section go, image golang::DEFAULT_IMAGE;
    ApacheHttpd => apache::ApacheHttpd, "apache-httpd", section apache_httpd,
        image apache::DEFAULT_IMAGE;
    // Its container list's key breaks the pattern, exactly as in the Operator.
    Nginx => nginx::Nginx, "nginx", section nginx, image nginx::DEFAULT_IMAGE,
        containers crate::keys::NGINX_CONTAINER_NAMES;
    Sdk => sdk::SdkOnly, "sdk";
    // A language that exists only in unit tests: it proves that a file plus this line is
    // all a new language needs.
    #[cfg(test)]
    Demo => demo::Demo, "demo";
}
