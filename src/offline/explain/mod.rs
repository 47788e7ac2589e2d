//! `otel-injector explain`: why the webhook would (not) instrument a pod or workload. Nothing
//! here decides: the decision is [`workload::mutate`]'s (the webhook's own), and the
//! explanation formats its report (what the pod asked for, whose key, the targets, the
//! skips and what the engine said about each: [`crate::engine::Asked`]), the pod before and
//! after the patch, and the chosen Instrumentations. The parts: [`requests`] (the requests),
//! [`sources`] (where each variable comes from), [`fix`] (what to change per skip reason),
//! [`text`] (the text for people).

use std::collections::BTreeMap;

mod fix;
mod requests;
mod sources;
mod text;

use serde::Serialize;
use serde_json::Value;

use super::manifests::{InputError, Source};
use super::workload::{self, ManifestWorkload, Mutation};
use super::{Context, items};
use crate::agents::Language;
use crate::crd::Instrumentation;
use crate::crd::base::path_within;
use crate::engine::{AskedBy, Based, Catalog, Report};
use crate::keys::CONFIG_FILE_ANNOTATION;
use crate::policy;

pub use fix::fix;
pub use text::text;

/// The Instrumentation each injected language used (`ns/name`, and the object when the
/// catalog still has it, laid over its bases, and what it took from them when it names one).
type Chosen<'a> = BTreeMap<Language, Used<'a>>;

/// An Instrumentation a language was injected with.
#[derive(Clone, Copy)]
struct Used<'a> {
    name: &'a str,
    inst: Option<&'a Instrumentation>,
    based: Option<&'a Based>,
}

impl Used<'_> {
    /// `spec.<path> of ns/name`, and the base that set it when one did.
    fn field(&self, path: &str) -> String {
        self.field_as(path, path)
    }

    /// `spec.<shown> of ns/name`, and the base that set `path` (its place in the merge).
    fn field_as(&self, shown: &str, path: &str) -> String {
        let from = self
            .based
            .and_then(|b| b.inherited.iter().find(|(p, _)| path_within(path, p)))
            .map(|(_, base)| format!(" (from its base {base})"))
            .unwrap_or_default();
        format!("spec.{shown} of {}{from}", self.name)
    }
}

/// The explanation of one object.
#[derive(Debug, Serialize)]
pub struct Explanation {
    /// `Deployment shop/cart`.
    pub object: String,
    pub file: String,
    pub document: usize,
    /// Languages injected, in order.
    pub injected: Vec<String>,
    /// The pod carries the injection marker (or the Operator's containers): left unchanged.
    pub already_injected: bool,
    pub requests: Vec<RequestExplained>,
    pub containers: Vec<ContainerExplained>,
    pub skipped: Vec<SkipExplained>,
    /// The webhook's warnings, as it would send them.
    pub warnings: Vec<String>,
    /// The `otel-injector/status` annotation the webhook would write (`None`: none, the pod
    /// asked for nothing or was injected already).
    pub status: Option<String>,
    /// The `otel-injector/injected` label it would write with it (`"true"`/`"false"`).
    pub injected_label: Option<&'static str>,
    /// The SDK configuration file rendered for a declarative (v1beta1) Instrumentation, as
    /// the pod carries it (`otel-injector/sdk-config`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sdk_config: Option<String>,
    /// Which admission path injects it (`None`: nothing is injected).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<PathExplained>,
}

/// Which admission path injects a pod: the policy rendered from its Instrumentation
/// (`otel-injector policy`, applied) or only the webhook.
#[derive(Debug, Serialize)]
pub struct PathExplained {
    /// `policy` or `webhook`.
    pub via: &'static str,
    /// `policy`: the Instrumentation (`ns/name`) whose policy injects it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instrumentation: Option<String>,
    /// `webhook`: why a policy does not inject it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

impl PathExplained {
    fn of(path: policy::Path) -> Self {
        match path {
            policy::Path::Policy(q) => PathExplained {
                via: "policy",
                instrumentation: Some(q),
                why: None,
            },
            policy::Path::Webhook(why) => PathExplained {
                via: "webhook",
                instrumentation: None,
                why: Some(why),
            },
        }
    }
}

/// One language asked for.
#[derive(Debug, Serialize)]
pub struct RequestExplained {
    pub language: String,
    /// The annotation key.
    pub annotation: String,
    /// Its effective value.
    pub value: String,
    /// `pod` or `namespace`: whose annotation decided.
    pub from: &'static str,
    /// `ns/name` of the Instrumentation used, when injected.
    pub instrumentation: Option<String>,
    /// Why that one.
    pub why: Option<String>,
    /// Its bases (`otel-injector/base`), nearest first, when it names one.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub bases: Vec<String>,
    /// What it took from its bases: each field's path in the spec and the base that set it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub inherited: Vec<InheritedExplained>,
    /// The containers it targets.
    pub targets: Vec<String>,
    /// Why those.
    pub targets_why: String,
    /// What the webhook warned about the request when it was injected (two selectors); a
    /// skipped request's warnings are its skip's.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// A field an Instrumentation took from one of its bases.
#[derive(Debug, Serialize)]
pub struct InheritedExplained {
    /// Its path in the spec: `java.image`, `env[OTEL_LOGS_EXPORTER]`.
    pub field: String,
    /// The base (`ns/name`) that set it.
    pub from: String,
}

/// What the injection sets in one container.
#[derive(Debug, Serialize)]
pub struct ContainerExplained {
    pub name: String,
    /// Added by the injection (an init container or a sidecar), not the pod's own.
    pub added: bool,
    pub env: Vec<EnvExplained>,
}

/// One environment variable and where its value comes from.
#[derive(Debug, Serialize)]
pub struct EnvExplained {
    pub name: String,
    /// The literal value, or `valueFrom` as JSON text.
    pub value: String,
    /// `user`, `user, extended`, `language section`, `common env`, `instrumentation`,
    /// `derived` or `agent`.
    pub source: &'static str,
    pub detail: String,
}

/// A language (or the whole pod) not injected.
#[derive(Debug, Serialize)]
pub struct SkipExplained {
    pub language: Option<String>,
    pub reason: &'static str,
    /// The webhook's warnings about it.
    pub messages: Vec<String>,
    pub fix: &'static str,
}

/// Explains every pod and workload of `sources`.
pub fn explain(ctx: &Context, sources: &[Source]) -> Result<Vec<Explanation>, InputError> {
    let mut out = Vec::new();
    let mut paths = policy::Paths::new(&ctx.catalog, &ctx.config);
    for source in sources {
        for doc in &source.documents {
            let Some(value) = &doc.value else { continue };
            let objects: Vec<&Value> = match items(value) {
                Some(items) => items.iter().collect(),
                None => vec![value],
            };
            for object in objects {
                let Some(workload) = ManifestWorkload::of(object, &ctx.default_namespace) else {
                    continue;
                };
                let mutation = workload::mutate(&ctx.catalog, &ctx.config, workload, object)
                    .map_err(|e| InputError::document(&source.name, doc.index, doc.line, e))?;
                if let Some(m) = mutation {
                    out.push(explain_one(ctx, &mut paths, &m, &source.name, doc.index));
                }
            }
        }
    }
    Ok(out)
}

fn explain_one(
    ctx: &Context,
    paths: &mut policy::Paths<'_>,
    m: &Mutation,
    file: &str,
    document: usize,
) -> Explanation {
    let pod = &m.before.pod;
    let report = &m.report;
    let status = report.status();
    let index = ctx.catalog.instrumentations();
    let chosen: Chosen<'_> = report
        .injected
        .iter()
        .map(|i| {
            let q = i.instrumentation.as_str();
            let (ns, name) = q.split_once('/').unwrap_or(("", q));
            let inst = match index.get(ns, name) {
                Some(Ok(inst)) => Some(inst.as_ref()),
                _ => None,
            };
            let based = index.based(ns, name);
            (
                i.language,
                Used {
                    name: q,
                    inst,
                    based,
                },
            )
        })
        .collect();

    let requests: Vec<RequestExplained> = report
        .requests
        .iter()
        .map(|a| {
            let used = chosen.get(&a.language).copied();
            requests::explained(a, pod, used, &m.workload.namespace)
        })
        .collect();
    let targets_of: Vec<(Language, Vec<String>)> = report
        .requests
        .iter()
        .zip(&requests)
        .map(|(a, r)| (a.language, r.targets.clone()))
        .collect();
    let containers = if m.changed() {
        sources::containers(m, &chosen, &targets_of)
    } else {
        Vec::new()
    };
    let path = m.changed().then(|| {
        let asked: Vec<(Language, &str)> = report
            .requests
            .iter()
            .map(|a| (a.language, a.value.as_str()))
            .collect();
        let injected: Vec<(Language, &str)> = report
            .injected
            .iter()
            .map(|i| (i.language, i.instrumentation.as_str()))
            .collect();
        let targets = match targets_of.as_slice() {
            [(_, t)] => t.as_slice(),
            _ => &[],
        };
        let asked = policy::AskedFor {
            requested: &asked,
            by_selector: report.requests.iter().any(|a| a.from == AskedBy::Selector),
        };
        PathExplained::of(paths.of(&m.workload.namespace, pod, asked, &injected, targets))
    });
    Explanation {
        object: m.workload.describe(),
        file: file.to_owned(),
        document,
        injected: report
            .injected
            .iter()
            .map(|i| i.language.to_string())
            .collect(),
        already_injected: report.already_injected,
        requests,
        containers,
        skipped: skipped(report),
        warnings: report.warnings.clone(),
        status: status.as_ref().map(ToString::to_string),
        injected_label: status.map(|s| if s.injected() { "true" } else { "false" }),
        sdk_config: m
            .after
            .pointer(&format!(
                "/metadata/annotations/{}",
                CONFIG_FILE_ANNOTATION.replace('/', "~1")
            ))
            .and_then(Value::as_str)
            .map(str::to_owned),
        path,
    }
}

/// The skips, each with what the engine said about it: every warning it gave about the
/// language (its request's record), or the skip's own message (the whole pod, or a language
/// whose agent said nothing).
fn skipped(report: &Report) -> Vec<SkipExplained> {
    report
        .skipped
        .iter()
        .map(|s| {
            let said = s
                .language
                .and_then(|l| report.requests.iter().find(|a| a.language == l))
                .map(|a| a.warnings.as_slice())
                .filter(|w| !w.is_empty());
            SkipExplained {
                language: s.language.map(|l| l.to_string()),
                reason: s.reason.as_str(),
                messages: said.map_or_else(|| vec![s.message.clone()], <[String]>::to_vec),
                fix: fix(s.reason),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests;
