//! Finding the Instrumentation a request names, and the checks on it before any agent runs:
//! cross-namespace policy, exporter TLS references (valid names, and present when tracked),
//! and what a v1beta1 object cannot give a language (an image, a declarative configuration).

use std::sync::Arc;

use super::config::{CrossNamespace, EngineConfig};
use super::decision::Skip;
use super::reason::SkipReason;
use super::snapshot::{Instrumentations, ObjectKind, Snapshot};
use crate::agents::Language;
use crate::agents::exporter_tls::ExporterTlsFiles;
use crate::crd::Instrumentation;
use crate::crd::base::is_object_name;
use crate::keys::CROSS_NAMESPACE_ANNOTATION;
use crate::pod::select::Request;

/// The Instrumentation a request wants, before it is looked up: `ns/name`, or `ns/*` for
/// `"true"`. `None` when a part is not a valid object name (the pod wrote anything there),
/// so that what is recorded always reads back ([`super::outcome`]).
pub(super) fn wanted(snapshot: &Snapshot<'_>, request: &Request<'_>) -> Option<String> {
    let namespace = snapshot.namespace;
    let (ns, name) = match *request {
        Request::No => return None,
        Request::Default => (namespace, "*"),
        Request::Named(name) => (namespace, name),
        Request::Qualified {
            namespace: ns,
            name,
        } => (ns, name),
    };
    (is_object_name(ns) && (name == "*" || is_object_name(name))).then(|| format!("{ns}/{name}"))
}

fn by_name(
    snapshot: &Snapshot<'_>,
    key: &str,
    ns: &str,
    name: &str,
) -> Result<Arc<Instrumentation>, (SkipReason, String)> {
    let index = &snapshot.instrumentations;
    if let Some(why) = unusable(index, snapshot.config, ns, name) {
        let msg = match &why {
            Unusable::Unreadable(e) => {
                format!("{key}: Instrumentation \"{ns}/{name}\" cannot be read ({e}); not injected")
            }
            Unusable::Base(b) => {
                format!("{key}: Instrumentation \"{ns}/{name}\": {b}; not injected")
            }
        };
        return Err((why.reason(), msg));
    }
    match index.get(ns, name) {
        Some(Ok(i)) => Ok(i.clone()),
        _ => Err((
            SkipReason::InstrumentationNotFound,
            format!("{key}: Instrumentation \"{ns}/{name}\" not found; not injected"),
        )),
    }
}

/// Why an Instrumentation of the index cannot be used, whoever asks for it.
#[derive(Debug, PartialEq, Eq)]
pub enum Unusable<'a> {
    /// It cannot be read: why.
    Unreadable(&'a str),
    /// It stands on a base it cannot use (missing, unreadable, too deep, in a cycle, or not
    /// shared with it): why.
    Base(String),
}

impl Unusable<'_> {
    pub fn reason(&self) -> SkipReason {
        match self {
            Unusable::Unreadable(_) => SkipReason::InstrumentationInvalid,
            Unusable::Base(_) => SkipReason::BaseUnresolved,
        }
    }
}

/// Why `ns/name` cannot be used, if it is in the index and cannot: the one judgement the
/// engine skips a request by and a policy leaves an Instrumentation to the webhook by. A
/// base in another namespace than the Instrumentation that names it is shared by the rule
/// pods follow (`--cross-namespace-references`).
pub fn unusable<'a>(
    index: &'a Instrumentations,
    config: &EngineConfig,
    ns: &str,
    name: &str,
) -> Option<Unusable<'a>> {
    if let Some(error) = index.based(ns, name).and_then(|b| b.error.as_deref()) {
        return Some(Unusable::Base(error.to_owned()));
    }
    if let Err(e) = index.get(ns, name)? {
        return Some(Unusable::Unreadable(e));
    }
    let mut naming = ns;
    for key in &index.based(ns, name)?.chain {
        let (base_ns, base) = key.split_once('/')?;
        if base_ns != naming
            && let Some(Ok(b)) = index.own(base_ns, base)
            && !shared_with_others(config, b)
        {
            return Some(Unusable::Base(format!(
                "base \"{key}\" not shared with other namespaces"
            )));
        }
        naming = base_ns;
    }
    None
}

/// Finds the Instrumentation a request names.
pub(super) fn resolve(
    snapshot: &Snapshot<'_>,
    request: &Request<'_>,
    lang: Language,
) -> Result<Arc<Instrumentation>, (SkipReason, String)> {
    let key = format!("inject-{lang}");
    let namespace = snapshot.namespace;
    match *request {
        Request::No => Err((SkipReason::NoInstrumentation, String::new())),
        Request::Default => {
            // Readable or not, as the Operator's `true` counts the objects (and the policies
            // do): an unusable only one is skipped for what is wrong with it.
            let all = snapshot.instrumentations.names_in(namespace);
            match all.as_slice() {
                [one] => by_name(snapshot, &key, namespace, one),
                [] => Err((
                    SkipReason::NoInstrumentation,
                    format!("{key}: no Instrumentation in namespace {namespace:?}; not injected"),
                )),
                many => Err((
                    SkipReason::MultipleInstrumentations,
                    format!(
                        "{key}: {} Instrumentations in namespace {namespace:?}; name one instead of \"true\"",
                        many.len()
                    ),
                )),
            }
        }
        Request::Named(name) => by_name(snapshot, &key, namespace, name),
        Request::Qualified {
            namespace: ns,
            name,
        } => by_name(snapshot, &key, ns, name),
    }
}

/// Which values of a request name one Instrumentation: [`resolve`] seen from the
/// Instrumentation's side, for those that must say it of one Instrumentation at a time (the
/// policies' CEL, `explain`'s path). `tests/engine/naming.rs` holds it to the engine's
/// resolution for every form of value.
#[derive(Clone, Copy, Debug)]
pub struct NamingRule<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
    /// It is its namespace's only Instrumentation: `"true"` there names it.
    pub only_in_namespace: bool,
    /// Pods of other namespaces may use it (`ns/name`): [`shared_with_others`], or what a
    /// caller serves of it.
    pub shared: bool,
}

/// One value of a request that names an Instrumentation, as read trimmed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NamingValue {
    /// This string exactly.
    Exactly(String),
    /// `true`, in any case.
    True,
}

impl NamingValue {
    fn matches(&self, value: &str) -> bool {
        match self {
            NamingValue::Exactly(s) => value == s,
            NamingValue::True => value.eq_ignore_ascii_case("true"),
        }
    }
}

impl<'a> NamingRule<'a> {
    /// The rule of `namespace/name` in `index`: the only one of its namespace when the index
    /// holds no other there, readable or not (as [`resolve`] counts them for `"true"`).
    pub fn of(index: &Instrumentations, namespace: &'a str, name: &'a str, shared: bool) -> Self {
        NamingRule {
            namespace,
            name,
            only_in_namespace: index.names_in(namespace).len() == 1,
            shared,
        }
    }

    /// The values that name it from a pod of its own namespace (`home`) or of another: at
    /// home its name (unless `true` or `false`, which ask for the namespace's only one or for
    /// none), `ns/name`, and `"true"` when it is the only one there; elsewhere `ns/name` when
    /// shared.
    pub fn values(&self, home: bool) -> Vec<NamingValue> {
        let qualified = NamingValue::Exactly(format!("{}/{}", self.namespace, self.name));
        if !home {
            return if self.shared { vec![qualified] } else { vec![] };
        }
        let mut values = Vec::new();
        if !["true", "false"]
            .iter()
            .any(|w| self.name.eq_ignore_ascii_case(w))
        {
            values.push(NamingValue::Exactly(self.name.to_owned()));
        }
        values.push(qualified);
        if self.only_in_namespace {
            values.push(NamingValue::True);
        }
        values
    }

    /// Whether `value` names it for a pod of `namespace`.
    pub fn names(&self, namespace: &str, value: &str) -> bool {
        let value = value.trim();
        self.values(namespace == self.namespace)
            .iter()
            .any(|v| v.matches(value))
    }
}

/// Why a pod may not use an Instrumentation of another namespace, if that is the case.
pub(super) fn cross_namespace_denied(
    snapshot: &Snapshot<'_>,
    inst: &Instrumentation,
    lang: Language,
) -> Option<String> {
    let home = inst.metadata.namespace.as_deref().unwrap_or("");
    (home != snapshot.namespace && !shared_with_others(snapshot.config, inst)).then(|| {
        format!(
            "inject-{lang}: Instrumentation \"{home}/{}\" is not shared with other namespaces; not injected",
            inst.metadata.name.as_deref().unwrap_or("")
        )
    })
}

/// Whether `--cross-namespace-references` lets other namespaces use `inst`.
pub fn shared_with_others(config: &EngineConfig, inst: &Instrumentation) -> bool {
    match config.cross_namespace {
        CrossNamespace::All => true,
        CrossNamespace::Deny => false,
        CrossNamespace::OptIn => inst
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(CROSS_NAMESPACE_ANNOTATION))
            .is_some_and(|v| v == "allowed"),
    }
}

/// A Secret or ConfigMap name in `spec.exporter.tls` that cannot be used: its volume would be
/// named `otel-auto-secret-<name>` (or `-configmap-`), which must be a DNS label, so a name
/// that is not one (dots included) would make the API server reject the pod.
pub(super) fn invalid_tls_reference(inst: &Instrumentation) -> Option<(ObjectKind, String)> {
    tls_reference(inst, |_, name| !is_dns_label(name))
}

/// The first object `spec.exporter.tls` names (Secret, then ConfigMap) for which `bad` holds.
fn tls_reference(
    inst: &Instrumentation,
    bad: impl Fn(ObjectKind, &str) -> bool,
) -> Option<(ObjectKind, String)> {
    let tls = ExporterTlsFiles::of(&inst.spec)?;
    let refs = [
        (ObjectKind::Secret, tls.secret()),
        (ObjectKind::ConfigMap, tls.config_map()),
    ];
    refs.into_iter().find_map(|(kind, name)| {
        let name = name?;
        bad(kind, name).then(|| (kind, name.to_owned()))
    })
}

/// RFC 1123 label: lower-case alphanumerics and `-`, alphanumeric at both ends, ≤ 63.
fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// A Secret or ConfigMap named by `spec.exporter.tls` that the snapshot knows is missing
/// from the pod's namespace. The pod could not start with its volume mounted, so that
/// language is not injected (as the Operator does), and the warning says why.
pub(super) fn missing_tls_reference(
    snapshot: &Snapshot<'_>,
    inst: &Instrumentation,
) -> Option<(ObjectKind, String)> {
    tls_reference(inst, |kind, name| {
        snapshot.object_exists(kind, name) == Some(false)
    })
}

/// What a v1beta1 Instrumentation cannot give `lang`: an image (v1beta1 has no default), or
/// a declarative configuration the language's agent reads (the language is not in
/// `--declarative-config-languages`, or the image's tag predates the agent's reading it).
pub(super) fn v1beta1_refusal(
    snapshot: &Snapshot<'_>,
    inst: &Instrumentation,
    lang: Language,
) -> Option<Skip> {
    let beta = inst.spec.v1beta1.as_deref()?;
    let found = Some(inst.qualified());
    let own_image = lang.section(&inst.spec).and_then(|s| s.image());
    if !beta.default_images && lang.names().default_image.is_some() && own_image.is_none() {
        return Some(Skip::new(
            Some(lang),
            SkipReason::ImageRequired,
            found,
            format!(
                "inject-{lang}: v1beta1 Instrumentation {} sets no {lang} image and v1beta1 has no default; not injected",
                inst.qualified()
            ),
        ));
    }
    // Nothing more to check without a declarative configuration.
    beta.declarative_config.as_ref()?;
    if !snapshot.config.declarative.contains(lang) {
        return Some(Skip::new(
            Some(lang),
            SkipReason::DeclarativeConfigUnsupported,
            found,
            format!(
                "inject-{lang}: {} has a declarativeConfig, which the {lang} agent does not read; not injected",
                inst.qualified()
            ),
        ));
    }
    // An agent that reads no file would export to its default endpoint, silently.
    let image = snapshot.config.images.of(lang, &inst.spec);
    let tag = lang.agent().predates_config_file(image)?;
    Some(Skip::new(
        Some(lang),
        SkipReason::AgentPredatesConfigFile,
        found,
        format!(
            "inject-{lang}: agent image {tag} reads no declarativeConfig (OTEL_CONFIG_FILE); not injected"
        ),
    ))
}
