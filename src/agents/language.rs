//! [`Language`](super::Language): the registry's enum, its names and parsing, and
//! [`LanguageSet`], a set of languages that holds any number of them.

use std::fmt;
use std::str::FromStr;

use super::Language;

/// Defines `Language` (one variant per agent, in injection order), `Language::ALL`,
/// `Language::agent`, `Language::names` and `Language::section` from lines
/// `Variant => agent, "name" [, section field] [, image DEFAULT] [, containers KEY];`: the
/// agent that injects it, the name users write (the annotations follow the Operator's pattern,
/// `inject-<name>` and `<name>-container-names`, unless `containers` gives the list's key),
/// its section of the spec (`spec.<field>`) and its default image.
macro_rules! registry {
    ($(
        $(#[$attr:meta])*
        $variant:ident => $agent:expr, $name:literal
        $(, section $field:ident)? $(, image $image:expr)? $(, containers $containers:expr)?;
    )+) => {
        /// An instrumentation flavour, in the order the Operator injects them.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Language {
            $($(#[$attr])* $variant,)+
        }

        impl Language {
            /// Every language, in injection order.
            pub const ALL: &'static [Language] = &[$($(#[$attr])* Language::$variant,)+];

            /// The agent that injects this language.
            pub fn agent(self) -> &'static dyn Agent {
                match self {
                    $($(#[$attr])* Language::$variant => &$agent,)+
                }
            }

            /// Its registry entry: the names users write, and its default image.
            pub fn names(self) -> &'static Names {
                match self {
                    $($(#[$attr])* Language::$variant => &Names {
                        language: Language::$variant,
                        name: $name,
                        inject_annotation: $crate::keys::inject_key!($name),
                        container_names_annotation: language::registry!(
                            @or $($containers)?; $crate::keys::container_names_key!($name)
                        ),
                        default_image: language::registry!(@some $($image)?),
                    },)+
                }
            }

            /// Its own section of the Instrumentation spec (image, env, resources, volume),
            /// if it has one.
            pub fn section(self, spec: &InstrumentationSpec) -> Option<&dyn LanguageSpec> {
                match self {
                    $($(#[$attr])* Language::$variant => language::registry!(@field spec $(. $field)?),)+
                }
            }
        }
    };
    (@or $given:expr; $default:expr) => { $given };
    (@or ; $default:expr) => { $default };
    (@some $image:expr) => { Some($image) };
    (@some) => { None };
    (@field $spec:ident . $field:ident) => {
        $spec.$field.as_deref().map(|s| s as &dyn LanguageSpec)
    };
    (@field $spec:ident) => { None };
}
pub(super) use registry;

impl Language {
    /// How many languages the registry holds.
    pub const COUNT: usize = Language::ALL.len();

    /// The short name used in annotations, flags, metrics and warnings.
    pub fn as_str(self) -> &'static str {
        self.names().name
    }

    /// `instrumentation.opentelemetry.io/inject-<lang>`.
    pub fn inject_annotation(self) -> &'static str {
        self.names().inject_annotation
    }

    /// The per-language container list annotation (nginx's breaks the pattern, as in the
    /// Operator).
    pub fn container_names_annotation(self) -> &'static str {
        self.names().container_names_annotation
    }

    fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Language {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Error for an unknown language name on the command line.
#[derive(Debug, thiserror::Error)]
#[error("unknown language {0:?}: expected one of {names}", names = names())]
pub struct UnknownLanguage(String);

fn names() -> String {
    Language::ALL
        .iter()
        .map(|l| l.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

impl FromStr for Language {
    type Err = UnknownLanguage;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Language::ALL
            .iter()
            .copied()
            .find(|l| l.as_str().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| UnknownLanguage(s.to_owned()))
    }
}

/// A set of languages (cheap to copy into the request path). One bit per registry entry;
/// the registry growing past the bits is a compile error, never a silent alias.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub struct LanguageSet(u128);

const _: () = assert!(
    Language::COUNT <= u128::BITS as usize,
    "LanguageSet holds at most 128 languages"
);

impl LanguageSet {
    pub fn all() -> Self {
        Language::ALL.iter().copied().collect()
    }

    pub fn contains(self, l: Language) -> bool {
        self.0 & (1 << l.index()) != 0
    }

    pub fn insert(&mut self, l: Language) {
        self.0 |= 1 << l.index();
    }

    pub fn remove(&mut self, l: Language) {
        self.0 &= !(1 << l.index());
    }

    /// The members, in injection order.
    pub fn iter(self) -> impl Iterator<Item = Language> {
        Language::ALL
            .iter()
            .copied()
            .filter(move |l| self.contains(*l))
    }
}

impl fmt::Debug for LanguageSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

impl FromIterator<Language> for LanguageSet {
    fn from_iter<T: IntoIterator<Item = Language>>(iter: T) -> Self {
        let mut s = LanguageSet::default();
        for l in iter {
            s.insert(l);
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::{self, ANNOTATION_PREFIX};

    #[test]
    fn annotations_follow_the_operator_names() {
        for l in Language::ALL {
            assert_eq!(
                l.inject_annotation(),
                format!("{ANNOTATION_PREFIX}inject-{}", l.as_str())
            );
            assert_eq!(l.names().language, *l, "registry line of {l}");
        }
        assert_eq!(
            Language::Nginx.container_names_annotation(),
            "instrumentation.opentelemetry.io/inject-nginx-container-names"
        );
        assert_eq!(
            Language::ApacheHttpd.container_names_annotation(),
            "instrumentation.opentelemetry.io/apache-httpd-container-names"
        );
    }

    #[test]
    fn the_keys_of_each_language_are_the_registrys() {
        for (l, key) in [
            (Language::Java, keys::INJECT_JAVA),
            (Language::NodeJs, keys::INJECT_NODEJS),
            (Language::Python, keys::INJECT_PYTHON),
            (Language::DotNet, keys::INJECT_DOTNET),
            (Language::Go, keys::INJECT_GO),
            (Language::ApacheHttpd, keys::INJECT_APACHE_HTTPD),
            (Language::Nginx, keys::INJECT_NGINX),
            (Language::Sdk, keys::INJECT_SDK),
        ] {
            assert_eq!(l.inject_annotation(), key);
        }
        assert_eq!(
            Language::Nginx.container_names_annotation(),
            keys::NGINX_CONTAINER_NAMES
        );
    }

    #[test]
    fn parse_and_set() {
        assert_eq!(
            "Apache-Httpd".parse::<Language>().unwrap(),
            Language::ApacheHttpd
        );
        assert!("php".parse::<Language>().is_err());
        let mut s = LanguageSet::all();
        s.remove(Language::Go);
        assert!(!s.contains(Language::Go));
        assert!(
            Language::ALL
                .iter()
                .filter(|l| **l != Language::Go)
                .all(|l| s.contains(*l))
        );
        assert_eq!(s.iter().count(), Language::COUNT - 1);
    }
}
