//! The common OpenTelemetry SDK configuration every instrumented container gets: service
//! name, exporter endpoint, propagators, sampler and resource attributes, derived from the
//! pod alone (owner names come from naming conventions, never from an API call).

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Container;

use super::exporter_tls::exporter_tls_env;
use crate::crd::InstrumentationSpec;
use crate::keys::RESOURCE_ANNOTATION_PREFIX;
use crate::pod::env::{EnvPlan, field_ref, literal};
use crate::pod::info::PodInfo;

pub const OTEL_SERVICE_NAME: &str = "OTEL_SERVICE_NAME";
pub const OTEL_EXPORTER_OTLP_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
pub const OTEL_EXPORTER_OTLP_PROTOCOL: &str = "OTEL_EXPORTER_OTLP_PROTOCOL";
pub const OTEL_RESOURCE_ATTRIBUTES: &str = "OTEL_RESOURCE_ATTRIBUTES";
pub const OTEL_RESOURCE_ATTRIBUTES_POD_NAME: &str = "OTEL_RESOURCE_ATTRIBUTES_POD_NAME";
pub const OTEL_RESOURCE_ATTRIBUTES_POD_UID: &str = "OTEL_RESOURCE_ATTRIBUTES_POD_UID";
pub const OTEL_RESOURCE_ATTRIBUTES_NODE_NAME: &str = "OTEL_RESOURCE_ATTRIBUTES_NODE_NAME";
pub const OTEL_PROPAGATORS: &str = "OTEL_PROPAGATORS";
pub const OTEL_TRACES_SAMPLER: &str = "OTEL_TRACES_SAMPLER";
pub const OTEL_TRACES_SAMPLER_ARG: &str = "OTEL_TRACES_SAMPLER_ARG";
pub const OTEL_POD_IP: &str = "OTEL_POD_IP";
/// The variables above as a dependent variable refers to them.
pub const POD_NAME_REFERENCE: &str = "$(OTEL_RESOURCE_ATTRIBUTES_POD_NAME)";
pub const POD_UID_REFERENCE: &str = "$(OTEL_RESOURCE_ATTRIBUTES_POD_UID)";
pub const NODE_NAME_REFERENCE: &str = "$(OTEL_RESOURCE_ATTRIBUTES_NODE_NAME)";
pub const OTEL_NODE_IP: &str = "OTEL_NODE_IP";

/// Keys already present in a user's `OTEL_RESOURCE_ATTRIBUTES` value.
fn existing_keys(value: &str) -> Vec<&str> {
    value
        .split(',')
        .filter_map(|kv| kv.trim().split_once('='))
        .map(|(k, _)| k.trim())
        .collect()
}

/// The resource attributes for one container, sorted by key. `existing` are keys the user
/// already set, which are never added again.
pub fn resource_attributes<'a>(
    info: &'a PodInfo<'a>,
    spec: &'a InstrumentationSpec,
    container: &'a Container,
    existing: &[&str],
) -> BTreeMap<&'a str, Cow<'a, str>> {
    let mut res = BTreeMap::new();
    let mut put = |k: &'a str, v: Cow<'a, str>| {
        if !v.is_empty() && !existing.contains(&k) {
            res.insert(k, v);
        }
    };
    let uids = spec.add_k8s_uid_attributes();
    let use_labels = spec.use_labels_for_resource_attributes();

    // Lowest precedence: the Instrumentation's own attributes.
    for (k, v) in spec.resource.iter().flat_map(|r| &r.resource_attributes) {
        put(k, v.into());
    }
    if spec.k8s_metadata() {
        k8s_attributes(info, container, uids, &mut put);
    }
    if spec.service_metadata() {
        let instance_id = info.annotation("service.instance.id").map_or_else(
            || {
                Cow::Owned(format!(
                    "{}.{POD_NAME_REFERENCE}.{}",
                    info.namespace, container.name
                ))
            },
            Cow::Borrowed,
        );
        put("service.instance.id", instance_id);
        if let Some(v) = info.service_version(use_labels, container) {
            put("service.version", v.into());
        }
    }
    // Highest precedence: the pod's resource.opentelemetry.io/* annotations.
    for (k, v) in info.pod.metadata.annotations.iter().flatten() {
        if let Some(attr) = k.strip_prefix(RESOURCE_ANNOTATION_PREFIX)
            && attr != "service.name"
            && !attr.is_empty()
        {
            put(attr, v.into());
        }
    }
    if spec.service_metadata() {
        let service_namespace = info
            .annotation("service.namespace")
            .unwrap_or(info.namespace);
        put("service.namespace", service_namespace.into());
    }
    res
}

/// What Kubernetes tells about the pod: namespace, container, pod, node and owners.
fn k8s_attributes<'a>(
    info: &'a PodInfo<'a>,
    container: &'a Container,
    uids: bool,
    put: &mut impl FnMut(&'a str, Cow<'a, str>),
) {
    put("k8s.namespace.name", info.namespace.into());
    put("k8s.container.name", container.name.as_str().into());
    put("k8s.pod.name", POD_NAME_REFERENCE.into());
    if uids {
        let uid = info.pod.metadata.uid.as_deref().unwrap_or("");
        if uid.is_empty() {
            put("k8s.pod.uid", POD_UID_REFERENCE.into());
        } else {
            put("k8s.pod.uid", uid.into());
        }
    }
    let node = info
        .pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or("");
    if node.is_empty() {
        put("k8s.node.name", NODE_NAME_REFERENCE.into());
    } else {
        put("k8s.node.name", node.into());
    }
    let o = &info.owners;
    if let Some(d) = o.deployment {
        put("k8s.deployment.name", d.into());
    }
    let named = [
        ("k8s.replicaset.name", "k8s.replicaset.uid", o.replicaset),
        ("k8s.statefulset.name", "k8s.statefulset.uid", o.statefulset),
        ("k8s.daemonset.name", "k8s.daemonset.uid", o.daemonset),
        ("k8s.job.name", "k8s.job.uid", o.job),
    ];
    for (name_key, uid_key, owner) in named {
        if let Some((name, uid)) = owner {
            put(name_key, name.into());
            if uids {
                put(uid_key, uid.into());
            }
        }
    }
    if let Some(c) = o.cronjob {
        put("k8s.cronjob.name", c.into());
    }
}

/// Variables every instrumented container gets before the language's own: the pod and node
/// IPs (first, so user variables can reference them) and the Instrumentation's `spec.env`.
pub fn inject_common_env(env: &mut EnvPlan<'_>, spec: &InstrumentationSpec) {
    inject_common_env_except(env, spec, &[]);
}

/// [`inject_common_env`], leaving out the `spec.env` entries named in `reserved` (variables
/// the caller sets itself and that the user must not replace).
pub fn inject_common_env_except(
    env: &mut EnvPlan<'_>,
    spec: &InstrumentationSpec,
    reserved: &[&str],
) {
    env.prepend_if_absent(field_ref(OTEL_POD_IP, "status.podIP"));
    env.prepend_if_absent(field_ref(OTEL_NODE_IP, "status.hostIP"));
    // v1beta1's envConfig.env ranks below spec.env, and the protocol below both.
    let carried = spec.v1beta1.as_deref();
    let config_env = carried.map(|b| b.env.as_slice()).unwrap_or_default();
    for e in spec
        .env
        .iter()
        .chain(config_env)
        .filter(|e| !reserved.contains(&e.name.as_str()))
    {
        env.append_if_absent(e.clone());
    }
    if let Some(protocol) = carried.and_then(|b| b.protocol) {
        env.append_if_absent(literal(OTEL_EXPORTER_OTLP_PROTOCOL, protocol.as_str()));
    }
}

/// The SDK configuration, after the language's variables: service name, exporter,
/// downward-API variables, propagators, sampler, and `OTEL_RESOURCE_ATTRIBUTES` last. With a
/// declarative configuration only the service name and the downward-API variables (the file
/// refers to them).
/// `app` is the container whose telemetry this is (the target itself, except for Go).
pub fn inject_sdk_config(
    env: &mut EnvPlan<'_>,
    info: &PodInfo<'_>,
    spec: &InstrumentationSpec,
    app: &Container,
) {
    let use_labels = spec.use_labels_for_resource_attributes();
    let uids = spec.add_k8s_uid_attributes();
    let service_name = match spec.service_metadata() {
        true => Some(info.service_name(use_labels, app)),
        false => info.annotation("service.name").map(str::to_owned),
    };
    if let Some(name) = service_name {
        env.append_if_absent(literal(OTEL_SERVICE_NAME, name));
    }
    let declarative = spec.declarative_config().is_some();
    if let Some(endpoint) = spec
        .exporter
        .as_ref()
        .and_then(|e| e.endpoint.as_deref())
        .filter(|e| !e.is_empty())
    {
        env.append_if_absent(literal(OTEL_EXPORTER_OTLP_ENDPOINT, endpoint));
    }
    for (name, value) in exporter_tls_env(spec) {
        env.append_if_absent(literal(name, value));
    }
    env.append_if_absent(field_ref(
        OTEL_RESOURCE_ATTRIBUTES_POD_NAME,
        "metadata.name",
    ));
    if uids && info.pod.metadata.uid.as_deref().unwrap_or("").is_empty() {
        env.append_if_absent(field_ref(OTEL_RESOURCE_ATTRIBUTES_POD_UID, "metadata.uid"));
    }
    let node_known = info
        .pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty());
    if !node_known {
        env.append_if_absent(field_ref(
            OTEL_RESOURCE_ATTRIBUTES_NODE_NAME,
            "spec.nodeName",
        ));
    }

    // The configuration file holds the rest (agents::declarative); the SDK would ignore
    // these variables.
    if declarative {
        return;
    }
    if !spec.propagators.is_empty() {
        let names: Vec<&str> = spec.propagators.iter().map(|p| p.as_str()).collect();
        env.append_if_absent(literal(OTEL_PROPAGATORS, names.join(",")));
    }
    if let Some(sampler) = &spec.sampler
        && let Some(kind) = &sampler.type_
    {
        // The user's sampler replaces the whole setting, either variable of it.
        let arg = sampler.argument.as_deref().filter(|a| !a.is_empty());
        let vars = std::iter::once(literal(OTEL_TRACES_SAMPLER, kind.as_str()))
            .chain(arg.map(|arg| literal(OTEL_TRACES_SAMPLER_ARG, arg)));
        env.append_all_unless_any(vars, &[OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG]);
    }

    // Set with valueFrom, the user's value wins as it is (the webhook cannot merge into it);
    // a literal gets the attributes of keys it does not set.
    env.merge_last(OTEL_RESOURCE_ATTRIBUTES, |current| match current {
        None => Some(join_attributes(&resource_attributes(info, spec, app, &[]))),
        Some(current) => {
            let attrs = resource_attributes(info, spec, app, &existing_keys(current));
            let sep = if current.is_empty() || current.ends_with(',') {
                ""
            } else {
                ","
            };
            (!attrs.is_empty()).then(|| format!("{current}{sep}{}", join_attributes(&attrs)))
        }
    });
}

fn join_attributes(attrs: &BTreeMap<&str, Cow<'_, str>>) -> String {
    let len = attrs.iter().map(|(k, v)| k.len() + v.len() + 2).sum();
    let mut out = String::with_capacity(len);
    for (k, v) in attrs {
        if !out.is_empty() {
            out.push(',');
        }
        out.push_str(k);
        out.push('=');
        out.push_str(v);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_name_the_variables() {
        let reference = |name: &str| format!("$({name})");
        assert_eq!(
            POD_NAME_REFERENCE,
            reference(OTEL_RESOURCE_ATTRIBUTES_POD_NAME)
        );
        assert_eq!(
            POD_UID_REFERENCE,
            reference(OTEL_RESOURCE_ATTRIBUTES_POD_UID)
        );
        assert_eq!(
            NODE_NAME_REFERENCE,
            reference(OTEL_RESOURCE_ATTRIBUTES_NODE_NAME)
        );
    }
}
