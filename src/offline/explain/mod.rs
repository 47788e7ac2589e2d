//! `otel-injector explain`: why the webhook would (not) instrument a pod or workload. Nothing
//! here decides: the decision is [`workload::mutate`]'s (the webhook's own), and the
//! explanation is read from its report, the pod before and after the patch, the
//! annotations and the chosen Instrumentations.

use std::collections::BTreeMap;

mod sources;
mod text;

use serde::Serialize;
use serde_json::Value;

use super::manifests::{InputError, Source};
use super::workload::{self, Mutation, Workload};
use super::{Context, items};
use crate::agents::Language;
use crate::crd::Instrumentation;
use crate::engine::{Catalog, SkipReason};
use crate::keys::{ANNOTATION_PREFIX, RESOURCE_ANNOTATION_PREFIX};
use crate::pod::info::Owners;
use crate::pod::plan::Slot;
use crate::pod::select::{self, Annotations, Request};
use crate::policy;

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
        SkipReason::RolledBack => {
            "find out why it failed (status.rolledBack, the Warning Event, the container's last termination), then remove the otel-injector/rolled-back annotation from the workload's pod template, or change the Instrumentation: either tries again"
        }
        SkipReason::PolicyUnsupported => {
            "install the webhook too (policy mode both): it serves the pods no policy covers (docs/policy.md)"
        }
        SkipReason::NameCollision => {
            "rename the pod's container, volume or variable that uses the agent's name"
        }
        SkipReason::PodTooLarge => "instrument fewer containers, or raise --max-pod-bytes",
        SkipReason::InvalidValue => "correct the value the message names",
        SkipReason::CrossNamespaceDenied => {
            "annotate the Instrumentation otel-injector/cross-namespace: \"allowed\", use one in the pod's namespace, or change --cross-namespace-references"
        }
        SkipReason::ImageRequired => {
            "set spec.<language>.image in the v1beta1 Instrumentation (v1beta1 has no default image)"
        }
        SkipReason::DeclarativeConfigUnsupported => {
            "use an envConfig Instrumentation for this language, or add it to --declarative-config-languages if its agent reads OTEL_CONFIG_FILE"
        }
    }
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
                let Some(workload) = Workload::of(object, &ctx.default_namespace) else {
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
    let namespace = ctx.catalog.namespace(&m.workload.namespace);
    let annotations = Annotations::new(
        pod,
        namespace.as_ref().map(|n| n.keys()).unwrap_or_default(),
    );
    let report = &m.report;
    let status = report.status();
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
    let mut asked: Vec<(Language, String)> = Vec::new();
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
        asked.push((lang, value.to_owned()));
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
    let path = m.changed().then(|| {
        let asked: Vec<(Language, &str)> = asked.iter().map(|(l, v)| (*l, v.as_str())).collect();
        let injected: Vec<(Language, &str)> = report
            .injected
            .iter()
            .copied()
            .zip(report.instrumentations.iter().map(String::as_str))
            .collect();
        let targets = match targets_of.as_slice() {
            [(_, t)] => t.as_slice(),
            _ => &[],
        };
        PathExplained::of(paths.of(&m.workload.namespace, pod, &asked, &injected, targets))
    });
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
        status: status.as_ref().map(ToString::to_string),
        injected_label: status.map(|s| if s.injected() { "true" } else { "false" }),
        sdk_config: m
            .after
            .pointer(&format!(
                "/metadata/annotations/{}",
                crate::keys::CONFIG_FILE_ANNOTATION.replace('/', "~1")
            ))
            .and_then(Value::as_str)
            .map(str::to_owned),
        path,
    }
}

use sources::{containers, targets};
pub use text::text;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::EngineConfig;
    use crate::offline::manifests;

    const JAVA: &str = "tests/data/instrumentations/java.yaml";

    /// The context of `sources` with the Java Instrumentation, in namespace `shop`.
    fn context(sources: &[Source]) -> Context {
        Context::build(
            sources,
            &[JAVA.into()],
            &[],
            None,
            EngineConfig::default(),
            "shop".into(),
        )
        .unwrap()
    }

    fn explain_text(manifest: &str) -> Vec<Explanation> {
        let sources = vec![manifests::parse("m.yaml", manifest).unwrap()];
        explain(&context(&sources), &sources).unwrap()
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

        // The outcome the webhook would record, with the Instrumentation's spec digest.
        let hash = crate::crd::SpecHash::of(
            &crate::crd::parse_instrumentations(&std::fs::read_to_string(JAVA).unwrap()).unwrap()
                [0]
            .spec,
        );
        let status = format!(
            "java=injected shop/java-inst {hash}; python=skipped instrumentation_not_found shop/missing"
        );
        assert_eq!(e.status.as_deref(), Some(status.as_str()));
        assert_eq!(e.injected_label, Some("true"));
        assert!(
            text.ends_with(&format!(
                "\n  annotation otel-injector/status: {status}\n  label otel-injector/injected: true\n"
            )),
            "{text}"
        );
    }

    #[test]
    fn a_rolled_back_workload_is_explained_with_what_to_do() {
        let ctx_hash = context(&[manifests::parse("m.yaml", "").unwrap()])
            .catalog
            .instrumentations()
            .spec_hash("shop", "java-inst")
            .unwrap();
        let marked = DEPLOYMENT.replace(
            "        instrumentation.opentelemetry.io/inject-python: shop/missing\n",
            &format!("        otel-injector/rolled-back: java={ctx_hash}\n"),
        );
        let e = &explain_text(&marked)[0];
        assert!(e.injected.is_empty());
        assert_eq!(e.path.as_ref().map(|p| p.via), None, "nothing is injected");
        let skip = &e.skipped[0];
        assert_eq!(
            (skip.language.as_deref(), skip.reason),
            (Some("java"), "rolled_back")
        );
        assert_eq!(
            skip.messages,
            [format!(
                "inject-java: rolled back, failed with shop/java-inst spec {ctx_hash}; remove \
                 otel-injector/rolled-back to retry"
            )]
        );
        assert!(
            skip.fix.starts_with("find out why it failed"),
            "{}",
            skip.fix
        );
        let text = text(&explain_text(&marked));
        assert!(text.contains("  skipped java (rolled_back)\n"), "{text}");
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
        assert_eq!(
            (none[0].status.as_deref(), none[0].injected_label),
            (None, None)
        );
        assert!(text(&none).contains("nothing asked for injection"));
    }
}
