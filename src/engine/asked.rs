//! The engine's record of what a pod asks for, per language: the key that asks, its value
//! and whose it is (the pod's or its namespace's), how the value names an Instrumentation,
//! the container lists and the containers they resolved to, and what the engine said about
//! the language. `explain` formats this record; it never reads the annotations again.

use crate::agents::Language;
use crate::pod::plan::Slot;
use crate::pod::select::{Request, TargetError};

/// One language the pod or its namespace asks for, as the engine read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Asked {
    pub language: Language,
    /// The key that asks (`instrumentation.opentelemetry.io/inject-<lang>`).
    pub key: &'static str,
    /// Its effective value (after the namespace-vs-pod rule).
    pub value: String,
    /// Whose key gave that value.
    pub from: AskedBy,
    /// How the value names the Instrumentation.
    pub naming: Naming,
    /// The containers it targets, and the lists that chose them.
    pub targets: Targets,
    /// The warnings the engine gave about this language, in order (its skip's included).
    pub warnings: Vec<String>,
}

/// Whose annotation (or label) gave a request its value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AskedBy {
    Pod,
    Namespace,
    /// An Instrumentation's `otel-injector/selector` (the value names it).
    Selector,
}

impl AskedBy {
    pub fn as_str(self) -> &'static str {
        match self {
            AskedBy::Pod => "pod",
            AskedBy::Namespace => "namespace",
            AskedBy::Selector => "selector",
        }
    }
}

/// How a request's value names its Instrumentation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Naming {
    /// `true`: the only one in the pod's namespace.
    Only,
    /// `name`: that one, in the pod's namespace.
    Name,
    /// `ns/name`: that one, in namespace `ns`.
    Qualified,
}

impl Naming {
    /// How `request` names its Instrumentation; `None` when it asks for nothing.
    pub(super) fn of(request: &Request<'_>) -> Option<Naming> {
        match request {
            Request::No => None,
            Request::Default => Some(Naming::Only),
            Request::Named(_) => Some(Naming::Name),
            Request::Qualified { .. } => Some(Naming::Qualified),
        }
    }
}

/// The containers a language targets and where the choice came from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Targets {
    /// The common list's value (`container-names`), when set.
    pub common: Option<String>,
    /// The language's own list's value (`<lang>-container-names`, or a selector's
    /// `containers`), when set.
    pub own: Option<String>,
    /// Whether `own` is a selector's `containers` (not the pod's annotation).
    pub own_by_selector: bool,
    /// The containers the lists resolved to, or why they could not; `None` when the engine
    /// stopped before targeting (the pod, or this language, was skipped first).
    pub resolved: Option<Result<Vec<Slot>, TargetError>>,
}
