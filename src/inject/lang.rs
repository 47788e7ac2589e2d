//! The languages the webhook can inject, their annotation keys and defaults.

use std::fmt;
use std::str::FromStr;

/// Prefix of every pod and namespace annotation read by the webhook.
pub const ANNOTATION_PREFIX: &str = "instrumentation.opentelemetry.io/";

/// An instrumentation flavour, in the order the Operator injects them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Language {
    Java,
    NodeJs,
    Python,
    DotNet,
    Go,
    ApacheHttpd,
    Nginx,
    Sdk,
}

impl Language {
    /// Every language, in injection order.
    pub const ALL: [Language; 8] = [
        Language::Java,
        Language::NodeJs,
        Language::Python,
        Language::DotNet,
        Language::Go,
        Language::ApacheHttpd,
        Language::Nginx,
        Language::Sdk,
    ];

    /// The short name used in annotations, flags, metrics and warnings.
    pub fn as_str(self) -> &'static str {
        match self {
            Language::Java => "java",
            Language::NodeJs => "nodejs",
            Language::Python => "python",
            Language::DotNet => "dotnet",
            Language::Go => "go",
            Language::ApacheHttpd => "apache-httpd",
            Language::Nginx => "nginx",
            Language::Sdk => "sdk",
        }
    }

    /// `instrumentation.opentelemetry.io/inject-<lang>`.
    pub fn inject_annotation(self) -> &'static str {
        match self {
            Language::Java => "instrumentation.opentelemetry.io/inject-java",
            Language::NodeJs => "instrumentation.opentelemetry.io/inject-nodejs",
            Language::Python => "instrumentation.opentelemetry.io/inject-python",
            Language::DotNet => "instrumentation.opentelemetry.io/inject-dotnet",
            Language::Go => "instrumentation.opentelemetry.io/inject-go",
            Language::ApacheHttpd => "instrumentation.opentelemetry.io/inject-apache-httpd",
            Language::Nginx => "instrumentation.opentelemetry.io/inject-nginx",
            Language::Sdk => "instrumentation.opentelemetry.io/inject-sdk",
        }
    }

    /// The per-language container list annotation (nginx's breaks the pattern, as in the
    /// Operator).
    pub fn container_names_annotation(self) -> &'static str {
        match self {
            Language::Java => "instrumentation.opentelemetry.io/java-container-names",
            Language::NodeJs => "instrumentation.opentelemetry.io/nodejs-container-names",
            Language::Python => "instrumentation.opentelemetry.io/python-container-names",
            Language::DotNet => "instrumentation.opentelemetry.io/dotnet-container-names",
            Language::Go => "instrumentation.opentelemetry.io/go-container-names",
            Language::ApacheHttpd => {
                "instrumentation.opentelemetry.io/apache-httpd-container-names"
            }
            Language::Nginx => "instrumentation.opentelemetry.io/inject-nginx-container-names",
            Language::Sdk => "instrumentation.opentelemetry.io/sdk-container-names",
        }
    }
}

impl fmt::Display for Language {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Error for an unknown language name on the command line.
#[derive(Debug, thiserror::Error)]
#[error(
    "unknown language {0:?}: expected one of java, nodejs, python, dotnet, go, apache-httpd, nginx, sdk"
)]
pub struct UnknownLanguage(String);

impl FromStr for Language {
    type Err = UnknownLanguage;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Language::ALL
            .into_iter()
            .find(|l| l.as_str().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| UnknownLanguage(s.to_owned()))
    }
}

/// A set of languages, as a bit set (cheap to copy into the request path).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LanguageSet(u8);

impl LanguageSet {
    pub fn all() -> Self {
        Language::ALL.into_iter().collect()
    }

    pub fn contains(self, l: Language) -> bool {
        self.0 & (1 << l as u8) != 0
    }

    pub fn insert(&mut self, l: Language) {
        self.0 |= 1 << l as u8;
    }

    pub fn remove(&mut self, l: Language) {
        self.0 &= !(1 << l as u8);
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

    #[test]
    fn annotations_follow_the_operator_names() {
        for l in Language::ALL {
            assert_eq!(
                l.inject_annotation(),
                format!("{ANNOTATION_PREFIX}inject-{}", l.as_str())
            );
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
                .into_iter()
                .filter(|l| *l != Language::Go)
                .all(|l| s.contains(l))
        );
    }
}
