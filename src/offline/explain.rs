//! `otel-injector explain`: why the webhook would (not) instrument a pod or workload. Nothing
//! here decides: the decision is [`workload::mutate`]'s (the webhook's own), and the
//! explanation is read from its report, the pod before and after the patch, the
//! annotations and the chosen Instrumentations.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;
use serde_json::Value;

use super::manifests::{InputError, Source};
use super::workload::{self, Mutation, Workload};
use super::{Context, items};
use crate::agents::{ANNOTATION_PREFIX, Language};
use crate::crd::Instrumentation;
use crate::engine::{Catalog, SkipReason};
use crate::pod::info::{Owners, RESOURCE_ANNOTATION_PREFIX};
use crate::pod::plan::Slot;
use crate::pod::select::{self, Annotations, Request};

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
    /// The containers it targets.
    pub targets: Vec<String>,
    /// Why those.
    pub targets_why: String,
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

/// What to change so that a skipped language is injected.
pub fn fix(reason: SkipReason) -> &'static str {
    match reason {
        SkipReason::CacheNotReady => "wait for the webhook's caches to sync",
        SkipReason::NoInstrumentation => {
            "create an Instrumentation in the pod's namespace (offline: --instrumentation-file), or name one as ns/name in the annotation"
        }
        SkipReason::MultipleInstrumentations => {
            "name the Instrumentation in the annotation instead of \"true\""
        }
        SkipReason::InstrumentationNotFound => {
            "create that Instrumentation, or correct the name in the annotation"
        }
        SkipReason::InstrumentationInvalid => {
            "correct the Instrumentation as the message says (`otel-injector crd` prints its schema)"
        }
        SkipReason::InvalidContainerNames => {
            "name existing containers, each once; with several languages, set <lang>-container-names for each"
        }
        SkipReason::LanguageDisabled => "add the language to --enabled-languages",
        SkipReason::PodSecurity => {
            "run the workload in a namespace whose Pod Security level allows privileged pods"
        }
        SkipReason::ExporterTlsMissing => {
            "create the Secret or ConfigMap that spec.exporter.tls names, in the pod's namespace"
        }
        SkipReason::NothingInstrumented => {
            "see the warnings: no targeted container could be instrumented"
        }
        SkipReason::NoContainers => "give the pod at least one container",
        SkipReason::NameCollision => {
            "rename the pod's container, volume or variable that uses the agent's name"
        }
        SkipReason::PodTooLarge => "instrument fewer containers, or raise --max-pod-bytes",
        SkipReason::InvalidValue => "correct the value the message names",
        SkipReason::CrossNamespaceDenied => {
            "annotate the Instrumentation otel-injector/cross-namespace: \"allowed\", use one in the pod's namespace, or change --cross-namespace-references"
        }
    }
}

/// Explains every pod and workload of `sources`.
pub fn explain(ctx: &Context, sources: &[Source]) -> Result<Vec<Explanation>, InputError> {
    let mut out = Vec::new();
    for source in sources {
        for doc in &source.documents {
            let Some(value) = &doc.value else { continue };
            let objects: Vec<&Value> = match items(value) {
                Some(items) => items.iter().collect(),
                None => vec![value],
            };
            for object in objects {
                let Some(workload) = Workload::of(object, &ctx.default_namespace) else {
                    continue;
                };
                let mutation = workload::mutate(&ctx.catalog, &ctx.config, workload, object)
                    .map_err(|e| InputError::document(&source.name, doc.index, doc.line, e))?;
                if let Some(m) = mutation {
                    out.push(explain_one(ctx, &m, &source.name, doc.index));
                }
            }
        }
    }
    Ok(out)
}

fn explain_one(ctx: &Context, m: &Mutation, file: &str, document: usize) -> Explanation {
    let pod = &m.before.pod;
    let namespace = ctx.catalog.namespace(&m.workload.namespace);
    let annotations = Annotations::new(
        pod,
        namespace.as_ref().map(|n| n.keys()).unwrap_or_default(),
    );
    let report = &m.report;
    let index = ctx.catalog.instrumentations();
    let chosen: BTreeMap<Language, (&str, Option<&Instrumentation>)> = report
        .injected
        .iter()
        .zip(&report.instrumentations)
        .map(|(l, q)| {
            let (ns, name) = q.split_once('/').unwrap_or(("", q));
            let inst = match index.get(ns, name) {
                Some(Ok(i)) => Some(i.as_ref()),
                _ => None,
            };
            (*l, (q.as_str(), inst))
        })
        .collect();

    let mut requests = Vec::new();
    let mut targets_of: Vec<(Language, Vec<String>)> = Vec::new();
    for &lang in Language::ALL {
        let key = lang.inject_annotation();
        let (on_pod, on_ns) = (annotations.pod(key), annotations.namespace(key));
        let Some(value) = select::effective(on_ns, on_pod) else {
            continue;
        };
        let request = Request::parse(Some(value));
        if request == Request::No {
            continue;
        }
        let from = if on_pod.is_some_and(|p| std::ptr::eq(p, value)) {
            "pod"
        } else {
            "namespace"
        };
        let (targets, targets_why) = targets(pod, &annotations, lang);
        targets_of.push((lang, targets.clone()));
        let (instrumentation, why) = match chosen.get(&lang) {
            Some((q, _)) => {
                let why = match request {
                    Request::Default => format!(
                        "the only Instrumentation in namespace {:?} (the annotation says \"true\")",
                        m.workload.namespace
                    ),
                    Request::Named(_) => "named by the annotation, in the pod's namespace".into(),
                    _ => "named by the annotation as namespace/name".into(),
                };
                (Some((*q).to_owned()), Some(why))
            }
            None => (None, None),
        };
        requests.push(RequestExplained {
            language: lang.to_string(),
            annotation: key.to_owned(),
            value: value.to_owned(),
            from,
            instrumentation,
            why,
            targets,
            targets_why,
        });
    }

    let containers = if m.changed() {
        containers(m, &chosen, &targets_of)
    } else {
        Vec::new()
    };
    let skipped = report
        .skipped
        .iter()
        .map(|s| {
            let messages = report
                .warnings
                .iter()
                .filter(|w| match s.language {
                    Some(l) => {
                        w.starts_with(&format!("inject-{l}:"))
                            || w.starts_with(&format!("{l}:"))
                            || w.starts_with(
                                l.container_names_annotation()
                                    .trim_start_matches(ANNOTATION_PREFIX),
                            )
                    }
                    None => !Language::ALL
                        .iter()
                        .any(|l| w.starts_with(&format!("inject-{l}:"))),
                })
                .cloned()
                .collect();
            SkipExplained {
                language: s.language.map(|l| l.to_string()),
                reason: s.reason.as_str(),
                messages,
                fix: fix(s.reason),
            }
        })
        .collect();
    Explanation {
        object: m.workload.describe(),
        file: file.to_owned(),
        document,
        injected: report.injected.iter().map(|l| l.to_string()).collect(),
        already_injected: report.already_injected,
        requests,
        containers,
        skipped,
        warnings: report.warnings.clone(),
    }
}

/// The containers a language targets, with the reason, as the engine resolves them.
fn targets(
    pod: &k8s_openapi::api::core::v1::Pod,
    annotations: &Annotations<'_>,
    lang: Language,
) -> (Vec<String>, String) {
    let common = annotations.get(select::CONTAINER_NAMES);
    let own = annotations.get(lang.container_names_annotation());
    let mut names = select::split_names(common);
    names.extend(select::split_names(own));
    let why = match (common, own) {
        (None, None) => "the first container: no container-names annotation".to_owned(),
        (Some(c), None) => format!("{}: {c:?}", select::CONTAINER_NAMES),
        (None, Some(o)) => format!("{}: {o:?}", lang.container_names_annotation()),
        (Some(c), Some(o)) => format!(
            "{}: {c:?} and {}: {o:?}",
            select::CONTAINER_NAMES,
            lang.container_names_annotation()
        ),
    };
    let spec = pod.spec.as_ref();
    let name = |slot: Slot| -> Option<String> {
        let spec = spec?;
        Some(match slot {
            Slot::Init(i) => spec.init_containers.as_ref()?.get(i)?.name.clone(),
            Slot::App(i) => spec.containers.get(i)?.name.clone(),
        })
    };
    match select::resolve_targets(pod, &names) {
        Ok(slots) => (slots.into_iter().filter_map(name).collect(), why),
        Err(e) => (Vec::new(), format!("{why}: {e}")),
    }
}

fn env_of(container: &Value) -> Vec<(String, Value)> {
    container
        .get("env")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|e| Some((e.get("name")?.as_str()?.to_owned(), e.clone())))
        .collect()
}

fn shown(var: &Value) -> String {
    match (var.get("value"), var.get("valueFrom")) {
        (Some(Value::String(v)), _) => v.clone(),
        (_, Some(from)) => from.to_string(),
        _ => String::new(),
    }
}

/// Every variable of the mutated containers that the injection set, changed or kept.
fn containers(
    m: &Mutation,
    chosen: &BTreeMap<Language, (&str, Option<&Instrumentation>)>,
    targets_of: &[(Language, Vec<String>)],
) -> Vec<ContainerExplained> {
    let list = |pod: &Value, key: &str| -> Vec<Value> {
        pod.pointer(&format!("/spec/{key}"))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let owners = Owners::of(&m.before.pod);
    let mut out = Vec::new();
    for key in ["initContainers", "containers"] {
        let before = list(&m.before.value, key);
        for c in list(&m.after, key) {
            let name = c
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            let original = before.iter().find(|b| b.get("name") == c.get("name"));
            if original == Some(&c) {
                continue;
            }
            let langs: Vec<Language> = targets_of
                .iter()
                .filter(|(l, t)| t.contains(&name) && chosen.contains_key(l))
                .map(|(l, _)| *l)
                .collect();
            let old = original.map(env_of).unwrap_or_default();
            let mut env = Vec::new();
            for (var, spec) in env_of(&c) {
                let previous = old.iter().find(|(n, _)| *n == var).map(|(_, v)| v);
                let value = shown(&spec);
                let (source, detail) = match previous {
                    Some(p) if *p == spec => {
                        if !var.starts_with("OTEL_") {
                            continue;
                        }
                        ("user", "set by the pod; the webhook keeps it".to_owned())
                    }
                    Some(_) => (
                        "user, extended",
                        "the pod's value, extended by the injection".to_owned(),
                    ),
                    None => origin(&var, &spec, &langs, chosen, &owners, m),
                };
                env.push(EnvExplained {
                    name: var,
                    value,
                    source,
                    detail,
                });
            }
            out.push(ContainerExplained {
                name,
                added: original.is_none(),
                env,
            });
        }
    }
    out
}

/// Where a variable the injection added comes from.
fn origin(
    var: &str,
    spec: &Value,
    langs: &[Language],
    chosen: &BTreeMap<Language, (&str, Option<&Instrumentation>)>,
    owners: &Owners,
    m: &Mutation,
) -> (&'static str, String) {
    if let Some(path) = spec
        .pointer("/valueFrom/fieldRef/fieldPath")
        .and_then(Value::as_str)
    {
        return ("derived", format!("downward API: {path}"));
    }
    let value = spec.get("value").and_then(Value::as_str).unwrap_or("");
    for l in langs {
        let Some((q, Some(inst))) = chosen.get(l) else {
            continue;
        };
        let same = |e: &k8s_openapi::api::core::v1::EnvVar| {
            e.name == var && e.value.as_deref().unwrap_or("") == value
        };
        if l.agent()
            .section(&inst.spec)
            .is_some_and(|s| s.env().iter().any(same))
        {
            return ("language section", format!("spec.{l}.env of {q}"));
        }
        if inst.spec.env.iter().any(same) {
            return ("common env", format!("spec.env of {q}"));
        }
    }
    let of = || {
        langs
            .iter()
            .filter_map(|l| chosen.get(l).map(|(q, _)| *q))
            .collect::<Vec<_>>()
            .join(", ")
    };
    match var {
        "OTEL_EXPORTER_OTLP_ENDPOINT" => ("instrumentation", format!("spec.exporter.endpoint of {}", of())),
        "OTEL_PROPAGATORS" => ("instrumentation", format!("spec.propagators of {}", of())),
        "OTEL_TRACES_SAMPLER" | "OTEL_TRACES_SAMPLER_ARG" => {
            ("instrumentation", format!("spec.sampler of {}", of()))
        }
        "OTEL_SERVICE_NAME" => ("derived", service_name_origin(value, owners, m)),
        "OTEL_RESOURCE_ATTRIBUTES" => (
            "derived",
            "the namespace, owners, container and image, spec.resource and resource.opentelemetry.io/* annotations".to_owned(),
        ),
        _ => {
            let agents: Vec<String> = langs.iter().map(|l| l.to_string()).collect();
            ("agent", format!("set by the {} agent", agents.join(", ")))
        }
    }
}

fn service_name_origin(value: &str, owners: &Owners, m: &Mutation) -> String {
    let annotated = m
        .before
        .pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(&format!("{RESOURCE_ANNOTATION_PREFIX}service.name")));
    if annotated.is_some_and(|a| a == value) {
        return format!("the pod annotation {RESOURCE_ANNOTATION_PREFIX}service.name");
    }
    let owned = [
        ("Deployment", owners.deployment.as_deref()),
        (
            "ReplicaSet",
            owners.replicaset.as_ref().map(|r| r.0.as_str()),
        ),
        (
            "StatefulSet",
            owners.statefulset.as_ref().map(|r| r.0.as_str()),
        ),
        ("DaemonSet", owners.daemonset.as_ref().map(|r| r.0.as_str())),
        ("CronJob", owners.cronjob.as_deref()),
        ("Job", owners.job.as_ref().map(|r| r.0.as_str())),
    ];
    if let Some((kind, _)) = owned.iter().find(|(_, n)| *n == Some(value)) {
        return format!("the {kind}'s name");
    }
    if m.before.pod.metadata.name.as_deref() == Some(value) {
        return "the pod's name".into();
    }
    "the container's name (no annotation, owner or pod name)".into()
}

/// The explanations as text for people.
pub fn text(explanations: &[Explanation]) -> String {
    let mut out = String::new();
    for (i, e) in explanations.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let _ = writeln!(out, "{} ({}, document {})", e.object, e.file, e.document);
        if e.requests.is_empty() {
            let _ = writeln!(
                out,
                "  nothing asked for injection: no instrumentation.opentelemetry.io/inject-* annotation on the pod or its namespace"
            );
        }
        if e.already_injected {
            let _ = writeln!(
                out,
                "  already injected (otel-injector/injected or the Operator's containers): left unchanged"
            );
        }
        for r in &e.requests {
            let _ = writeln!(
                out,
                "  {}: asked by the {} annotation {}: {:?}",
                r.language, r.from, r.annotation, r.value
            );
            match (&r.instrumentation, &r.why) {
                (Some(q), Some(why)) => {
                    let _ = writeln!(out, "    Instrumentation {q}: {why}");
                }
                _ => {
                    let _ = writeln!(out, "    not injected (see skipped)");
                }
            }
            let _ = writeln!(
                out,
                "    targets: {} ({})",
                if r.targets.is_empty() {
                    "none".to_owned()
                } else {
                    r.targets.join(", ")
                },
                r.targets_why
            );
        }
        for c in &e.containers {
            let added = if c.added { " (added)" } else { "" };
            let _ = writeln!(out, "  container {}{added}:", c.name);
            for v in &c.env {
                let _ = writeln!(out, "    {} = {:?}", v.name, v.value);
                let _ = writeln!(out, "      from {}: {}", v.source, v.detail);
            }
        }
        for s in &e.skipped {
            let _ = writeln!(
                out,
                "  skipped {} ({})",
                s.language.as_deref().unwrap_or("the pod"),
                s.reason
            );
            for msg in &s.messages {
                let _ = writeln!(out, "    {msg}");
            }
            let _ = writeln!(out, "    fix: {}", s.fix);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::EngineConfig;
    use crate::offline::manifests;

    const JAVA: &str = "tests/data/instrumentations/java.yaml";

    fn explain_text(manifest: &str) -> Vec<Explanation> {
        let sources = vec![manifests::parse("m.yaml", manifest).unwrap()];
        let ctx = Context::build(
            &sources,
            &[JAVA.into()],
            &[],
            EngineConfig::default(),
            "shop".into(),
        )
        .unwrap();
        explain(&ctx, &sources).unwrap()
    }

    const DEPLOYMENT: &str = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: cart}\nspec:\n  template:\n    metadata:\n      annotations:\n        instrumentation.opentelemetry.io/inject-java: \"true\"\n        instrumentation.opentelemetry.io/inject-python: shop/missing\n        instrumentation.opentelemetry.io/python-container-names: app\n        instrumentation.opentelemetry.io/java-container-names: app\n    spec:\n      containers:\n      - name: app\n        image: cart:1.0\n        env:\n        - {name: OTEL_LOGS_EXPORTER, value: none}\n";

    #[test]
    fn explains_requests_choices_targets_env_and_skips() {
        let e = &explain_text(DEPLOYMENT)[0];
        assert_eq!(e.object, "Deployment shop/cart");
        assert_eq!(e.injected, ["java"]);
        assert_eq!(e.requests.len(), 2);
        let java = &e.requests[0];
        assert_eq!(
            (java.language.as_str(), java.from, java.value.as_str()),
            ("java", "pod", "true")
        );
        assert_eq!(java.instrumentation.as_deref(), Some("shop/java-inst"));
        assert_eq!(
            java.why.as_deref(),
            Some("the only Instrumentation in namespace \"shop\" (the annotation says \"true\")")
        );
        assert_eq!(java.targets, ["app"]);
        assert_eq!(
            java.targets_why,
            "instrumentation.opentelemetry.io/java-container-names: \"app\""
        );
        let python = &e.requests[1];
        assert_eq!(python.instrumentation, None);

        let app = e.containers.iter().find(|c| c.name == "app").unwrap();
        let source = |n: &str| {
            let v = app.env.iter().find(|v| v.name == n).unwrap();
            (v.source, v.detail.as_str())
        };
        assert_eq!(
            source("OTEL_LOGS_EXPORTER"),
            ("user", "set by the pod; the webhook keeps it")
        );
        assert_eq!(
            source("OTEL_INSTRUMENTATION_JDBC_ENABLED"),
            ("language section", "spec.java.env of shop/java-inst")
        );
        assert_eq!(
            source("OTEL_SERVICE_NAME"),
            ("derived", "the Deployment's name")
        );
        assert_eq!(
            source("OTEL_POD_IP"),
            ("derived", "downward API: status.podIP")
        );
        assert_eq!(
            source("OTEL_EXPORTER_OTLP_ENDPOINT"),
            (
                "instrumentation",
                "spec.exporter.endpoint of shop/java-inst"
            )
        );
        assert_eq!(
            source("JAVA_TOOL_OPTIONS"),
            ("agent", "set by the java agent")
        );
        assert!(
            e.containers
                .iter()
                .any(|c| c.added && c.name == "opentelemetry-auto-instrumentation-java")
        );

        assert_eq!(e.skipped.len(), 1);
        let s = &e.skipped[0];
        assert_eq!(
            (s.language.as_deref(), s.reason),
            (Some("python"), "instrumentation_not_found")
        );
        assert_eq!(
            s.messages,
            ["inject-python: Instrumentation \"shop/missing\" not found; not injected"]
        );
        assert_eq!(s.fix, fix(SkipReason::InstrumentationNotFound));

        let text = text(&explain_text(DEPLOYMENT));
        assert!(text.starts_with("Deployment shop/cart (m.yaml, document 1)\n  java: asked by the pod annotation instrumentation.opentelemetry.io/inject-java: \"true\"\n    Instrumentation shop/java-inst: the only Instrumentation"), "{text}");
        assert!(text.contains("\n  skipped python (instrumentation_not_found)\n    inject-python: Instrumentation \"shop/missing\" not found; not injected\n    fix: "), "{text}");
    }

    #[test]
    fn namespace_requests_and_nothing_asked() {
        let ns = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: shop\n  annotations:\n    instrumentation.opentelemetry.io/inject-java: java-inst\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers: [{name: app}]\n";
        let e = &explain_text(ns)[0];
        assert_eq!(e.requests[0].from, "namespace");
        assert_eq!(
            e.requests[0].why.as_deref(),
            Some("named by the annotation, in the pod's namespace")
        );
        assert_eq!(
            e.requests[0].targets_why,
            "the first container: no container-names annotation"
        );

        let none = explain_text(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers: [{name: app}]\n",
        );
        assert!(none[0].requests.is_empty() && none[0].containers.is_empty());
        assert!(text(&none).contains("nothing asked for injection"));
    }
}
