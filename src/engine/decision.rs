//! The engine's answer for one pod: the plan, the warnings that explain it, the outcome per
//! language with a fixed set of reasons (the values of the `reason` metric label), and the
//! record of what the pod asked for ([`Asked`]), which `explain` formats.

use super::asked::Asked;
use super::outcome::{self, PodStatus};
use super::reason::SkipReason;
use crate::agents::Language;
use crate::crd::SpecHash;
use crate::pod::plan::PodPlan;
use crate::warnings::shorten;

/// A language (or the whole pod, when `language` is `None`) that was not injected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skip {
    pub language: Option<Language>,
    pub reason: SkipReason,
    /// The Instrumentation it wanted, when known: `ns/name` (named, qualified, or found),
    /// `ns/*` (`"true"`: any one of the namespace). Only valid object names are kept, so the
    /// status annotation reads back.
    pub instrumentation: Option<String>,
    /// The warning that explains it (the note of its Kubernetes Event).
    pub message: String,
}

impl Skip {
    /// A skip whose message is `msg` shortened to a warning's length.
    pub fn new(
        language: Option<Language>,
        reason: SkipReason,
        instrumentation: Option<String>,
        msg: String,
    ) -> Self {
        Skip {
            language,
            reason,
            instrumentation,
            message: shorten(msg),
        }
    }
}

/// One language injected, with what it was injected from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InjectedLanguage {
    pub language: Language,
    /// The Instrumentation (`ns/name`) it used.
    pub instrumentation: String,
    /// The digest of the spec it used.
    pub spec: SpecHash,
}

/// An injected entry is that language's (`report.injected == [Language::Java]`).
impl PartialEq<Language> for InjectedLanguage {
    fn eq(&self, language: &Language) -> bool {
        self.language == *language
    }
}

/// The engine's answer for one pod.
#[derive(Debug, Default)]
pub struct Decision<'p> {
    /// What to change; `None` when the pod is admitted unchanged.
    pub plan: Option<PodPlan<'p>>,
    /// What happened and why, for the client, logs and metrics.
    pub report: Report,
}

/// What the engine did with one pod, and why.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// Short messages for the client, each at most `MAX_WARNING_LEN` characters.
    pub warnings: Vec<String>,
    /// Languages injected, in order.
    pub injected: Vec<InjectedLanguage>,
    /// Languages requested but not injected, with the reason.
    pub skipped: Vec<Skip>,
    /// What the pod (or its namespace) asks for, per language in the registry's order: the
    /// key, its value and whose it is, the containers targeted, what the engine said about
    /// it. Recorded for every pod that asks, even one never injected (a mirror pod, one
    /// injected already).
    pub requests: Vec<Asked>,
    /// Whether the pod (or its namespace) asked for any injection.
    pub requested: bool,
    /// Whether the pod had been injected already (by this webhook or the Operator).
    pub already_injected: bool,
}

impl Report {
    pub(super) fn warn(&mut self, msg: String) {
        self.warnings.push(shorten(msg));
    }

    /// A warning about `language`, recorded with its request too.
    pub(super) fn warn_about(&mut self, language: Language, msg: String) {
        let msg = shorten(msg);
        self.note(Some(language), &msg);
        self.warnings.push(msg);
    }

    /// Records `msg` with the request of `language` (nothing for the whole pod).
    fn note(&mut self, language: Option<Language>, msg: &str) {
        if let Some(asked) =
            language.and_then(|l| self.requests.iter_mut().find(|a| a.language == l))
        {
            asked.warnings.push(msg.to_owned());
        }
    }

    /// Records a skip and its warning; `instrumentation` as in [`Skip::instrumentation`].
    pub fn skip(
        &mut self,
        language: Option<Language>,
        reason: SkipReason,
        instrumentation: Option<String>,
        msg: String,
    ) {
        self.add(Skip::new(language, reason, instrumentation, msg));
    }

    /// Records a skip and its message as a warning.
    pub(super) fn add(&mut self, skip: Skip) {
        self.note(skip.language, &skip.message);
        self.warnings.push(skip.message.clone());
        self.skipped.push(skip);
    }

    /// Forgets every injected language (the patch that carried them was dropped).
    pub(super) fn clear_injected(&mut self) {
        self.injected.clear();
    }

    /// The outcome to record on the pod: `None` when the pod asked for nothing or had been
    /// injected already (it is never changed again). Whole-pod skips come first, then the
    /// languages in injection order.
    pub fn status(&self) -> Option<PodStatus> {
        if !self.requested || self.already_injected {
            return None;
        }
        let injected = self.injected.iter().map(|i| outcome::Entry {
            language: Some(i.language),
            outcome: outcome::Outcome::Injected {
                instrumentation: i.instrumentation.clone(),
                spec: i.spec,
            },
        });
        let skipped = self.skipped.iter().map(|s| outcome::Entry {
            language: s.language,
            outcome: outcome::Outcome::Skipped {
                reason: s.reason,
                instrumentation: s.instrumentation.clone(),
            },
        });
        let mut entries: Vec<outcome::Entry> = injected.chain(skipped).collect();
        // Stable: a language reported twice keeps the order it was reported in.
        entries.sort_by_key(|e| e.language.map_or(0, |l| 1 + l as usize));
        Some(PodStatus { entries })
    }
}
