//! The agents: one file per language, each an [`Agent`], and the registry below that names
//! them. Adding a language is its own file plus one registry line (see
//! `docs/architecture.md`); everything else (annotation keys, metrics labels, the
//! `--enabled-languages` values, default images) is read from the agent.

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
    /// Its registry entry and the names users write (spelled by [`identity!`]).
    fn names(&self) -> &'static Names;
    /// The agent image used when the Instrumentation names none (`--agent-image` overrides).
    fn default_image(&self) -> Option<&'static str> {
        None
    }
    /// The language's own section of the Instrumentation spec (image, env, resources,
    /// volume), if it has one.
    fn section<'s>(&self, _spec: &'s InstrumentationSpec) -> Option<&'s dyn LanguageSpec> {
        None
    }
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

/// The registry entry of an agent and the names users write for it.
#[derive(Debug)]
pub struct Names {
    pub language: Language,
    /// The short name used in annotations, flags, metrics and warnings.
    pub name: &'static str,
    /// `instrumentation.opentelemetry.io/inject-<name>`.
    pub inject_annotation: &'static str,
    /// The per-language container list annotation.
    pub container_names_annotation: &'static str,
}

/// `identity!(Variant, "name", field)`, inside `impl Agent`: the methods every language with
/// a default image spells alike: [`Agent::names`] (the annotations follow the Operator's
/// pattern, `inject-<name>` and `<name>-container-names`; a fourth argument gives a container
/// list annotation that breaks it), [`Agent::default_image`] (`DEFAULT_IMAGE` of the
/// language's module) and [`Agent::section`] (`spec.<field>`). `identity!(Variant, "name")`:
/// only the names, for a language without an image or a section.
macro_rules! identity {
    (@names $variant:ident, $name:literal, $container_names:expr) => {
        fn names(&self) -> &'static $crate::agents::Names {
            const NAMES: $crate::agents::Names = $crate::agents::Names {
                language: $crate::agents::Language::$variant,
                name: $name,
                inject_annotation: $crate::keys::inject_key!($name),
                container_names_annotation: $container_names,
            };
            &NAMES
        }
    };
    ($variant:ident, $name:literal) => {
        $crate::agents::identity!(@names $variant, $name, $crate::keys::container_names_key!($name));
    };
    ($variant:ident, $name:literal, $field:ident) => {
        $crate::agents::identity!($variant, $name, $field, $crate::keys::container_names_key!($name));
    };
    ($variant:ident, $name:literal, $field:ident, $container_names:expr) => {
        $crate::agents::identity!(@names $variant, $name, $container_names);
        fn default_image(&self) -> Option<&'static str> {
            Some(DEFAULT_IMAGE)
        }
        fn section<'s>(
            &self,
            spec: &'s $crate::crd::InstrumentationSpec,
        ) -> Option<&'s dyn $crate::crd::LanguageSpec> {
            Some(spec.$field.as_deref()?)
        }
    };
}
pub(super) use identity;

// The registry: one line per language, in the order the Operator injects them. It defines
// the `Language` enum, `Language::ALL` and `Language::agent`.
language::registry! {
    Java => java::Java,
    NodeJs => nodejs::NodeJs,
    Python => python::Python,
    DotNet => dotnet::DotNet,
    Go => golang::Go,
    ApacheHttpd => apache::ApacheHttpd,
    Nginx => nginx::Nginx,
    Sdk => sdk::SdkOnly,
    // A language that exists only in unit tests: it proves that a file plus this line is
    // all a new language needs.
    #[cfg(test)]
    Demo => demo::Demo,
}
