//! The outcome of a review as it is recorded on the pod: the `otel-injector/status`
//! annotation (per requested language, what happened) and the `otel-injector/injected`
//! label (selectable). The webhook writes them in the patch; the status controller and
//! `rollout` read them back, so the text form is defined, rendered and parsed here only.
//!
//! The annotation's value is a list of entries separated by `"; "`:
//!
//! ```text
//! <language>=injected <namespace>/<name> <spec-hash>
//! <language>=skipped <reason> [<namespace>/<name> | <namespace>/*]
//! pod=skipped <reason>
//! ```
//!
//! `<language>` is the name in the `inject-<language>` key, `<spec-hash>` the 8 hex digits of
//! [`SpecHash`] for the spec that was applied, `<reason>` a `reason` label of the metrics
//! ([`SkipReason::as_str`]). A skipped entry names the Instrumentation it wanted when that is
//! known (`<namespace>/*`: any one of the namespace, the pod said `"true"`). `pod=` stands for
//! a skip of the whole pod (before any language was looked at).
//!
//! The safety net's marker on a workload's pod template, `otel-injector/rolled-back`
//! ([`RolledBack`]), is a list of entries separated by `,`, sorted by language:
//!
//! ```text
//! <language>=<spec-hash>
//! ```
//!
//! the languages the workload was rolled back from, each with the spec it failed with. The
//! status controller's rollback writes it, the engine skips those languages while the spec is
//! current, and `rollout` stops on a workload rolled back from the spec it rolls out.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use super::reason::SkipReason;
use crate::agents::Language;
use crate::crd::SpecHash;

/// What happened to one requested language (or to the whole pod).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Injected with the Instrumentation `namespace/name` whose spec had this digest.
    Injected {
        instrumentation: String,
        spec: SpecHash,
    },
    /// Not injected, and why; the Instrumentation it wanted, when known (`ns/name` or `ns/*`).
    Skipped {
        reason: SkipReason,
        instrumentation: Option<String>,
    },
}

/// One entry of the annotation: a language (`None`: the whole pod) and its outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub language: Option<Language>,
    pub outcome: Outcome,
}

/// The whole annotation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodStatus {
    pub entries: Vec<Entry>,
}

impl PodStatus {
    /// Whether any language was injected (the label's value).
    pub fn injected(&self) -> bool {
        self.entries
            .iter()
            .any(|e| matches!(e.outcome, Outcome::Injected { .. }))
    }
}

impl fmt::Display for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.language {
            Some(lang) => write!(f, "{lang}=")?,
            None => f.write_str("pod=")?,
        }
        match &self.outcome {
            Outcome::Injected {
                instrumentation,
                spec,
            } => write!(f, "injected {instrumentation} {spec}"),
            Outcome::Skipped {
                reason,
                instrumentation,
            } => {
                write!(f, "skipped {}", reason.as_str())?;
                match instrumentation {
                    Some(i) => write!(f, " {i}"),
                    None => Ok(()),
                }
            }
        }
    }
}

impl fmt::Display for PodStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.entries.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

/// `ns/name` or `ns/*`, each part non-empty and without spaces.
fn reference(s: &str) -> Option<&str> {
    let (ns, name) = s.split_once('/')?;
    (!ns.is_empty() && !name.is_empty() && !name.contains('/')).then_some(s)
}

impl FromStr for Entry {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("not an otel-injector status entry: {s:?}");
        let (subject, rest) = s.split_once('=').ok_or_else(bad)?;
        let language = match subject {
            "pod" => None,
            lang => Some(lang.parse::<Language>().map_err(|_| bad())?),
        };
        let words: Vec<&str> = rest.split(' ').collect();
        let outcome = match words.as_slice() {
            ["injected", inst, hash] if language.is_some() => Outcome::Injected {
                instrumentation: reference(inst)
                    .filter(|i| !i.ends_with("/*"))
                    .ok_or_else(bad)?
                    .to_owned(),
                spec: hash.parse().map_err(|()| bad())?,
            },
            ["skipped", reason, inst @ ..] if inst.len() <= 1 => Outcome::Skipped {
                reason: SkipReason::from_label(reason).ok_or_else(bad)?,
                instrumentation: match inst {
                    [i] => Some(reference(i).ok_or_else(bad)?.to_owned()),
                    _ => None,
                },
            },
            _ => return Err(bad()),
        };
        Ok(Entry { language, outcome })
    }
}

impl FromStr for PodStatus {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let entries = s
            .split("; ")
            .filter(|e| !e.is_empty())
            .map(str::parse)
            .collect::<Result<_, _>>()?;
        Ok(PodStatus { entries })
    }
}

/// The safety net's marker (`otel-injector/rolled-back`): per language, the spec it was
/// rolled back from. Languages are kept by the name written, so an entry of a language this
/// build does not know (written by a newer replica) survives a rewrite and never matches.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RolledBack {
    entries: BTreeMap<String, SpecHash>,
}

impl RolledBack {
    /// The marker's entries; those that do not read as `<language>=<spec-hash>` are ignored
    /// (a hand-edited marker keeps its other entries in force).
    pub fn parse(value: &str) -> RolledBack {
        let entries = read_pairs(value)
            .filter_map(|(lang, hash)| Some((lang.to_owned(), hash.parse().ok()?)))
            .collect();
        RolledBack { entries }
    }

    /// Whether `lang` was rolled back from `spec`.
    pub fn names(&self, lang: Language, spec: SpecHash) -> bool {
        self.entries.get(lang.as_str()) == Some(&spec)
    }

    /// Whether any language was rolled back from `spec`.
    pub fn from_spec(&self, spec: SpecHash) -> bool {
        self.entries.values().any(|h| *h == spec)
    }

    /// Marks `lang` as rolled back from `spec` (replacing the spec it had).
    pub fn mark(&mut self, lang: Language, spec: SpecHash) {
        self.entries.insert(lang.as_str().to_owned(), spec);
    }
}

/// The markers' entries, `<language>=<value>` comma-separated, trimmed; an entry without `=`
/// or whose language is empty or holds white space is left out.
fn read_pairs(value: &str) -> impl Iterator<Item = (&str, &str)> {
    value.split(',').filter_map(|e| {
        let (lang, value) = e.split_once('=')?;
        let (lang, value) = (lang.trim(), value.trim());
        (!lang.is_empty() && !lang.contains(char::is_whitespace)).then_some((lang, value))
    })
}

/// The markers' form: `<language>=<value>`, comma-separated.
fn write_pairs<V: fmt::Display>(
    f: &mut fmt::Formatter<'_>,
    pairs: impl Iterator<Item = (impl fmt::Display, V)>,
) -> fmt::Result {
    for (i, (lang, value)) in pairs.enumerate() {
        if i > 0 {
            f.write_str(",")?;
        }
        write!(f, "{lang}={value}")?;
    }
    Ok(())
}

impl fmt::Display for RolledBack {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_pairs(f, self.entries.iter())
    }
}

/// The pod annotation `otel-injector/selected-by`: per injected language, in the outcome's
/// order, the Instrumentation (`ns/name`) whose selector asked for it, `java=platform/java`
/// comma-separated. Written with the injection (the webhook's and the selector's policy),
/// read by the census to count a workload's selected pods.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SelectorMark {
    entries: Vec<(String, String)>,
}

impl SelectorMark {
    /// The annotation's entries; one that does not read as `<language>=<ns/name>` is ignored.
    pub fn parse(value: &str) -> SelectorMark {
        let entries = read_pairs(value)
            .filter(|(_, inst)| inst.contains('/'))
            .map(|(lang, inst)| (lang.to_owned(), inst.to_owned()))
            .collect();
        SelectorMark { entries }
    }

    /// Records that the selector of `instrumentation` asked for `lang`.
    pub fn push(&mut self, lang: Language, instrumentation: &str) {
        self.entries
            .push((lang.as_str().to_owned(), instrumentation.to_owned()));
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The Instrumentations named, each once.
    pub fn instrumentations(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for (_, inst) in &self.entries {
            if !out.contains(&inst.as_str()) {
                out.push(inst);
            }
        }
        out
    }
}

impl fmt::Display for SelectorMark {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_pairs(f, self.entries.iter().map(|(l, i)| (l, i)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> PodStatus {
        PodStatus {
            entries: vec![
                Entry {
                    language: Some(Language::Java),
                    outcome: Outcome::Injected {
                        instrumentation: "shop/default".into(),
                        spec: SpecHash([0x3f, 0x2a, 0x9c, 0x1b]),
                    },
                },
                Entry {
                    language: Some(Language::Python),
                    outcome: Outcome::Skipped {
                        reason: SkipReason::InstrumentationNotFound,
                        instrumentation: Some("shop/py".into()),
                    },
                },
                Entry {
                    language: Some(Language::NodeJs),
                    outcome: Outcome::Skipped {
                        reason: SkipReason::NoInstrumentation,
                        instrumentation: Some("shop/*".into()),
                    },
                },
            ],
        }
    }

    #[test]
    fn the_annotation_reads_back_as_written() {
        let text = "java=injected shop/default 3f2a9c1b; python=skipped instrumentation_not_found shop/py; nodejs=skipped no_instrumentation shop/*";
        assert_eq!(sample().to_string(), text);
        assert_eq!(text.parse::<PodStatus>().unwrap(), sample());
        assert!(sample().injected());
        let whole: PodStatus = "pod=skipped cache_not_ready".parse().unwrap();
        assert_eq!(
            whole.entries,
            [Entry {
                language: None,
                outcome: Outcome::Skipped {
                    reason: SkipReason::CacheNotReady,
                    instrumentation: None
                }
            }]
        );
        assert!(!whole.injected());
        assert_eq!(whole.to_string(), "pod=skipped cache_not_ready");
    }

    #[test]
    fn malformed_entries_are_refused_with_the_text() {
        for bad in [
            "java",
            "cobol=injected a/b 3f2a9c1b",
            "java=injected a/b 3f2a9c1",
            "java=injected a/* 3f2a9c1b",
            "java=injected ab 3f2a9c1b",
            "pod=injected a/b 3f2a9c1b",
            "java=skipped no_such_reason",
            "java=skipped no_instrumentation a/b c/d",
            "java=done",
        ] {
            let err = bad.parse::<PodStatus>().unwrap_err();
            assert!(err.contains(bad), "{err}");
        }
    }

    #[test]
    fn every_reason_round_trips() {
        for reason in SkipReason::ALL {
            let e = Entry {
                language: Some(Language::Go),
                outcome: Outcome::Skipped {
                    reason,
                    instrumentation: None,
                },
            };
            assert_eq!(e.to_string().parse::<Entry>().unwrap(), e);
        }
    }

    #[test]
    fn the_rolled_back_marker_reads_back_as_written() {
        let (a, b) = (SpecHash([0x3f, 0x2a, 0x9c, 0x1b]), SpecHash([1, 2, 3, 4]));
        let mut marker = RolledBack::default();
        assert_eq!(marker.to_string(), "");
        marker.mark(Language::Python, b);
        marker.mark(Language::Java, SpecHash([0; 4]));
        marker.mark(Language::Java, a);
        let text = "java=3f2a9c1b,python=01020304";
        assert_eq!(marker.to_string(), text);
        assert_eq!(RolledBack::parse(text), marker);
        assert!(marker.names(Language::Java, a) && marker.names(Language::Python, b));
        assert!(!marker.names(Language::Java, b) && !marker.names(Language::Go, a));
        assert!(marker.from_spec(b) && !marker.from_spec(SpecHash([0; 4])));
        // Spaces around entries are read; a language this build does not know is kept.
        let read = RolledBack::parse(" python = 01020304 , java=3f2a9c1b,rust=01020304");
        assert_eq!(
            read.to_string(),
            "java=3f2a9c1b,python=01020304,rust=01020304"
        );
    }

    #[test]
    fn malformed_marker_entries_are_ignored_and_the_others_kept() {
        for bad in [
            "",
            "junk",
            "java",
            "java=",
            "=3f2a9c1b",
            "java=3f2a9c1",
            "java=zz2a9c1b",
            "ja va=3f2a9c1b",
        ] {
            assert_eq!(RolledBack::parse(bad), RolledBack::default(), "{bad:?}");
            let kept = RolledBack::parse(&format!("{bad},python=01020304"));
            assert_eq!(kept.to_string(), "python=01020304", "{bad:?}");
        }
    }

    #[test]
    fn the_selector_mark_reads_back_what_it_writes_and_names_each_instrumentation_once() {
        let mut by = SelectorMark::default();
        by.push(Language::Java, "platform/java");
        by.push(Language::Python, "platform/java");
        by.push(Language::NodeJs, "shop/team");
        let text = by.to_string();
        assert_eq!(
            text,
            "java=platform/java,python=platform/java,nodejs=shop/team"
        );
        assert_eq!(SelectorMark::parse(&text), by);
        assert_eq!(by.instrumentations(), ["platform/java", "shop/team"]);
        // Entries that do not read are ignored; spaces are tolerated.
        // (A language with white space inside is not one, as in the rolled-back marker.)
        let edited = SelectorMark::parse(" java = platform/java ,junk,=a/b,go=nons,no de=x/y");
        assert_eq!(edited.instrumentations(), ["platform/java"]);
    }
}
