//! Where each variable of an explanation comes from: the user, a language section, the
//! common env, the Instrumentation, derived (downward API, owners) or the agent.

use serde_json::Value;

use super::{Chosen, ContainerExplained, EnvExplained, Used};
use crate::agents::Language;
use crate::keys::RESOURCE_ANNOTATION_PREFIX;
use crate::offline::workload::Mutation;
use crate::pod::info::Owners;

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
pub(super) fn containers(
    m: &Mutation,
    chosen: &Chosen<'_>,
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
    chosen: &Chosen<'_>,
    owners: &Owners<'_>,
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
        let Some(
            used @ Used {
                inst: Some(inst), ..
            },
        ) = chosen.get(l)
        else {
            continue;
        };
        let same = |e: &k8s_openapi::api::core::v1::EnvVar| {
            e.name == var && e.value.as_deref().unwrap_or("") == value
        };
        if l.section(&inst.spec)
            .is_some_and(|s| s.env().iter().any(same))
        {
            let section = section_field(*l);
            return (
                "language section",
                used.field_as(&format!("{section}.env"), &format!("{section}.env[{var}]")),
            );
        }
        if inst.spec.env.iter().any(same) {
            return ("common env", used.field_as("env", &format!("env[{var}]")));
        }
        if let Some(beta) = inst.spec.v1beta1.as_deref() {
            let beta_field = |shown: &str| used.field_as(shown, "v1beta1");
            if beta.env.iter().any(same) {
                return ("common env", beta_field("envConfig.env"));
            }
            if var == "OTEL_EXPORTER_OTLP_PROTOCOL" && beta.protocol.is_some() {
                return ("instrumentation", beta_field("envConfig.exporter.protocol"));
            }
            if var == crate::agents::declarative::OTEL_CONFIG_FILE
                || var.starts_with(crate::agents::declarative::PER_CONTAINER_PREFIX)
            {
                return (
                    "instrumentation",
                    format!(
                        "{}, rendered into the pod's otel-injector/sdk-config",
                        beta_field("declarativeConfig")
                    ),
                );
            }
        }
    }
    let of = |path: &str| {
        langs
            .iter()
            .filter_map(|l| chosen.get(l).map(|u| u.field(path)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    match var {
        "OTEL_EXPORTER_OTLP_ENDPOINT" => ("instrumentation", of("exporter.endpoint")),
        "OTEL_PROPAGATORS" => ("instrumentation", of("propagators")),
        "OTEL_TRACES_SAMPLER" | "OTEL_TRACES_SAMPLER_ARG" => ("instrumentation", of("sampler")),
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

fn service_name_origin(value: &str, owners: &Owners<'_>, m: &Mutation) -> String {
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
        ("Deployment", owners.deployment),
        ("ReplicaSet", owners.replicaset.map(|r| r.0)),
        ("StatefulSet", owners.statefulset.map(|r| r.0)),
        ("DaemonSet", owners.daemonset.map(|r| r.0)),
        ("CronJob", owners.cronjob),
        ("Job", owners.job.map(|r| r.0)),
    ];
    if let Some((kind, _)) = owned.iter().find(|(_, n)| *n == Some(value)) {
        return format!("the {kind}'s name");
    }
    if m.before.pod.metadata.name.as_deref() == Some(value) {
        return "the pod's name".into();
    }
    "the container's name (no annotation, owner or pod name)".into()
}

/// A language's section as the spec's JSON names it (`apache-httpd`: `apacheHttpd`).
fn section_field(l: Language) -> String {
    let mut out = String::new();
    for (i, part) in l.as_str().split('-').enumerate() {
        let mut chars = part.chars();
        match chars.next() {
            Some(c) if i > 0 => out.extend(c.to_uppercase().chain(chars)),
            _ => out.push_str(part),
        }
    }
    out
}
