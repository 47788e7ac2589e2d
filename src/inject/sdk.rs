//! The common OpenTelemetry SDK configuration every instrumented container gets: service
//! name, exporter endpoint, propagators, sampler and resource attributes, derived from the
//! pod alone (owner names come from naming conventions, never from an API call).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod, Volume, VolumeMount};

use super::plan::{EnvPlan, EnvValue, field_ref, literal};
use crate::crd::InstrumentationSpec;

pub const OTEL_SERVICE_NAME: &str = "OTEL_SERVICE_NAME";
pub const OTEL_EXPORTER_OTLP_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
pub const OTEL_RESOURCE_ATTRIBUTES: &str = "OTEL_RESOURCE_ATTRIBUTES";
pub const OTEL_RESOURCE_ATTRIBUTES_POD_NAME: &str = "OTEL_RESOURCE_ATTRIBUTES_POD_NAME";
pub const OTEL_RESOURCE_ATTRIBUTES_POD_UID: &str = "OTEL_RESOURCE_ATTRIBUTES_POD_UID";
pub const OTEL_RESOURCE_ATTRIBUTES_NODE_NAME: &str = "OTEL_RESOURCE_ATTRIBUTES_NODE_NAME";
pub const OTEL_PROPAGATORS: &str = "OTEL_PROPAGATORS";
pub const OTEL_TRACES_SAMPLER: &str = "OTEL_TRACES_SAMPLER";
pub const OTEL_TRACES_SAMPLER_ARG: &str = "OTEL_TRACES_SAMPLER_ARG";
pub const OTEL_POD_IP: &str = "OTEL_POD_IP";
pub const OTEL_EXPORTER_OTLP_CERTIFICATE: &str = "OTEL_EXPORTER_OTLP_CERTIFICATE";
pub const OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE: &str = "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE";
pub const OTEL_EXPORTER_OTLP_CLIENT_KEY: &str = "OTEL_EXPORTER_OTLP_CLIENT_KEY";
pub const OTEL_NODE_IP: &str = "OTEL_NODE_IP";

/// Prefix of pod annotations that set resource attributes.
pub const RESOURCE_ANNOTATION_PREFIX: &str = "resource.opentelemetry.io/";
const LABEL_APP_INSTANCE: &str = "app.kubernetes.io/instance";
const LABEL_APP_NAME: &str = "app.kubernetes.io/name";
const LABEL_APP_VERSION: &str = "app.kubernetes.io/version";
const LABEL_POD_TEMPLATE_HASH: &str = "pod-template-hash";

/// The workloads that own a pod, derived from its owner references and labels.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Owners {
    pub deployment: Option<String>,
    pub replicaset: Option<(String, String)>,
    pub statefulset: Option<(String, String)>,
    pub daemonset: Option<(String, String)>,
    pub job: Option<(String, String)>,
    pub cronjob: Option<String>,
}

impl Owners {
    /// A ReplicaSet made by a Deployment is named `<deployment>-<pod-template-hash>` and its
    /// pods carry that hash as a label; a Job made by a CronJob is named
    /// `<cronjob>-<scheduled minutes since the epoch>`.
    pub fn of(pod: &Pod) -> Self {
        let mut o = Owners::default();
        let hash = pod
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(LABEL_POD_TEMPLATE_HASH));
        for r in pod.metadata.owner_references.iter().flatten() {
            let named = (r.name.clone(), r.uid.clone());
            match r.kind.to_ascii_lowercase().as_str() {
                "replicaset" => {
                    if let Some(h) = hash.filter(|h| !h.is_empty()) {
                        o.deployment = r
                            .name
                            .strip_suffix(h.as_str())
                            .and_then(|p| p.strip_suffix('-'))
                            .filter(|d| !d.is_empty())
                            .map(str::to_owned);
                    }
                    o.replicaset = Some(named);
                }
                "deployment" => o.deployment = Some(r.name.clone()),
                "statefulset" => o.statefulset = Some(named),
                "daemonset" => o.daemonset = Some(named),
                "job" => {
                    o.cronjob = r.name.rsplit_once('-').and_then(|(prefix, suffix)| {
                        (suffix.len() >= 8
                            && suffix.bytes().all(|b| b.is_ascii_digit())
                            && !prefix.is_empty())
                        .then(|| prefix.to_owned())
                    });
                    o.job = Some(named);
                }
                "cronjob" => o.cronjob = Some(r.name.clone()),
                _ => {}
            }
        }
        o
    }
}

/// What the SDK configuration needs to know about the pod; computed once per review.
#[derive(Debug)]
pub struct PodInfo<'a> {
    pub pod: &'a Pod,
    /// The request's namespace (the pod's may be empty on CREATE).
    pub namespace: &'a str,
    pub owners: Owners,
}

impl<'a> PodInfo<'a> {
    pub fn new(pod: &'a Pod, namespace: &'a str) -> Self {
        PodInfo {
            pod,
            namespace,
            owners: Owners::of(pod),
        }
    }

    fn annotation(&self, attr: &str) -> Option<&'a str> {
        let annotations = self.pod.metadata.annotations.as_ref()?;
        annotations
            .iter()
            .find(|(k, _)| {
                k.strip_prefix(RESOURCE_ANNOTATION_PREFIX)
                    .is_some_and(|a| a == attr)
            })
            .map(|(_, v)| v.as_str())
            .filter(|v| !v.is_empty())
    }

    fn label(&self, key: &str) -> Option<&'a str> {
        self.pod
            .metadata
            .labels
            .as_ref()?
            .get(key)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    fn pod_name(&self) -> Option<&'a str> {
        self.pod.metadata.name.as_deref().filter(|n| !n.is_empty())
    }

    /// `OTEL_SERVICE_NAME`: annotation, then (opt-in) labels, then the owning workload, then
    /// the pod, then the container.
    pub fn service_name(&self, use_labels: bool, container: &Container) -> String {
        let o = &self.owners;
        self.annotation("service.name")
            .or_else(|| {
                use_labels
                    .then(|| {
                        self.label(LABEL_APP_INSTANCE)
                            .or_else(|| self.label(LABEL_APP_NAME))
                    })
                    .flatten()
            })
            .or(o.deployment.as_deref())
            .or(o.replicaset.as_ref().map(|r| r.0.as_str()))
            .or(o.statefulset.as_ref().map(|r| r.0.as_str()))
            .or(o.daemonset.as_ref().map(|r| r.0.as_str()))
            .or(o.cronjob.as_deref())
            .or(o.job.as_ref().map(|r| r.0.as_str()))
            .or(self.pod_name())
            .unwrap_or(&container.name)
            .to_owned()
    }

    /// `service.version`: annotation, then (opt-in) label, then the image tag and digest.
    pub fn service_version(&self, use_labels: bool, container: &Container) -> Option<String> {
        self.annotation("service.version")
            .or_else(|| use_labels.then(|| self.label(LABEL_APP_VERSION)).flatten())
            .map(str::to_owned)
            .or_else(|| image_version(container.image.as_deref()?))
    }
}

/// The version part of an image reference: `tag`, `tag@digest` or `digest`.
pub fn image_version(image: &str) -> Option<String> {
    let (name, digest) = match image.split_once('@') {
        Some((n, d)) => (n, Some(d)),
        None => (image, None),
    };
    let last = name.rsplit('/').next().unwrap_or(name);
    let tag = last
        .rsplit_once(':')
        .map(|(_, t)| t)
        .filter(|t| !t.is_empty());
    match (tag, digest) {
        (Some(t), Some(d)) => Some(format!("{t}@{d}")),
        (None, Some(d)) => Some(d.to_owned()),
        (Some(t), None) => Some(t.to_owned()),
        (None, None) => None,
    }
}

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
pub fn resource_attributes(
    info: &PodInfo<'_>,
    spec: &InstrumentationSpec,
    container: &Container,
    existing: &[&str],
) -> BTreeMap<String, String> {
    let mut res = BTreeMap::new();
    let mut put = |k: &str, v: &str| {
        if !v.is_empty() && !existing.contains(&k) {
            res.insert(k.to_owned(), v.to_owned());
        }
    };
    let uids = spec
        .resource
        .as_ref()
        .and_then(|r| r.add_k8s_uid_attributes)
        .unwrap_or(false);
    let use_labels = use_labels(spec);

    // Lowest precedence: the Instrumentation's own attributes.
    for (k, v) in spec.resource.iter().flat_map(|r| &r.resource_attributes) {
        put(k, v);
    }
    // Then what Kubernetes tells about the pod.
    put("k8s.namespace.name", info.namespace);
    put("k8s.container.name", &container.name);
    put(
        "k8s.pod.name",
        &format!("$({OTEL_RESOURCE_ATTRIBUTES_POD_NAME})"),
    );
    if uids {
        let uid = info.pod.metadata.uid.as_deref().unwrap_or("");
        if uid.is_empty() {
            put(
                "k8s.pod.uid",
                &format!("$({OTEL_RESOURCE_ATTRIBUTES_POD_UID})"),
            );
        } else {
            put("k8s.pod.uid", uid);
        }
    }
    let node = info
        .pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or("");
    if node.is_empty() {
        put(
            "k8s.node.name",
            &format!("$({OTEL_RESOURCE_ATTRIBUTES_NODE_NAME})"),
        );
    } else {
        put("k8s.node.name", node);
    }
    let instance_id = info.annotation("service.instance.id").map_or_else(
        || {
            format!(
                "{}.$({OTEL_RESOURCE_ATTRIBUTES_POD_NAME}).{}",
                info.namespace, container.name
            )
        },
        str::to_owned,
    );
    put("service.instance.id", &instance_id);
    let o = &info.owners;
    if let Some(d) = &o.deployment {
        put("k8s.deployment.name", d);
    }
    let named = [
        ("replicaset", &o.replicaset),
        ("statefulset", &o.statefulset),
        ("daemonset", &o.daemonset),
        ("job", &o.job),
    ];
    for (kind, owner) in named {
        if let Some((name, uid)) = owner {
            put(&format!("k8s.{kind}.name"), name);
            if uids {
                put(&format!("k8s.{kind}.uid"), uid);
            }
        }
    }
    if let Some(c) = &o.cronjob {
        put("k8s.cronjob.name", c);
    }
    if let Some(v) = info.service_version(use_labels, container) {
        put("service.version", &v);
    }
    // Highest precedence: the pod's resource.opentelemetry.io/* annotations.
    for (k, v) in info.pod.metadata.annotations.iter().flatten() {
        if let Some(attr) = k.strip_prefix(RESOURCE_ANNOTATION_PREFIX)
            && attr != "service.name"
            && !attr.is_empty()
        {
            put(attr, v);
        }
    }
    let service_namespace = info
        .annotation("service.namespace")
        .unwrap_or(info.namespace);
    put("service.namespace", service_namespace);
    res
}

fn use_labels(spec: &InstrumentationSpec) -> bool {
    spec.defaults
        .as_ref()
        .and_then(|d| d.use_labels_for_resource_attributes)
        .unwrap_or(false)
}

/// Variables every instrumented container gets before the language's own: the pod and node
/// IPs (first, so user variables can reference them) and the Instrumentation's `spec.env`.
pub fn inject_common_env(env: &mut EnvPlan<'_>, spec: &InstrumentationSpec) {
    env.prepend_if_absent(field_ref(OTEL_POD_IP, "status.podIP"));
    env.prepend_if_absent(field_ref(OTEL_NODE_IP, "status.hostIP"));
    for e in &spec.env {
        env.append_if_absent(e.clone());
    }
}

/// The SDK configuration, after the language's variables: service name, exporter,
/// downward-API variables, propagators, sampler, and `OTEL_RESOURCE_ATTRIBUTES` last.
/// `app` is the container whose telemetry this is (the target itself, except for Go).
pub fn inject_sdk_config(
    env: &mut EnvPlan<'_>,
    info: &PodInfo<'_>,
    spec: &InstrumentationSpec,
    app: &Container,
) {
    let use_labels = use_labels(spec);
    let uids = spec
        .resource
        .as_ref()
        .and_then(|r| r.add_k8s_uid_attributes)
        .unwrap_or(false);
    env.append_if_absent(literal(
        OTEL_SERVICE_NAME,
        info.service_name(use_labels, app),
    ));
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

    if !spec.propagators.is_empty() {
        let joined = spec
            .propagators
            .iter()
            .map(|p| p.as_str())
            .collect::<Vec<_>>()
            .join(",");
        env.append_if_absent(literal(OTEL_PROPAGATORS, joined));
    }
    if let Some(sampler) = &spec.sampler
        && let Some(kind) = &sampler.type_
        && !env.contains(OTEL_TRACES_SAMPLER)
        && !env.contains(OTEL_TRACES_SAMPLER_ARG)
    {
        env.append_if_absent(literal(OTEL_TRACES_SAMPLER, kind.as_str()));
        if let Some(arg) = sampler.argument.as_deref().filter(|a| !a.is_empty()) {
            env.append_if_absent(literal(OTEL_TRACES_SAMPLER_ARG, arg));
        }
    }

    match env.get(OTEL_RESOURCE_ATTRIBUTES) {
        // Set with valueFrom: the webhook cannot merge into it; the user's value wins.
        Some(EnvValue::ValueFrom) => {}
        Some(EnvValue::Literal(current)) => {
            let current = current.to_owned();
            let attrs = resource_attributes(info, spec, app, &existing_keys(&current));
            if !attrs.is_empty() {
                let sep = if current.is_empty() || current.ends_with(',') {
                    ""
                } else {
                    ","
                };
                let merged = format!("{current}{sep}{}", join_attributes(&attrs));
                env.set_literal(OTEL_RESOURCE_ATTRIBUTES, merged);
            }
        }
        None => {
            let attrs = resource_attributes(info, spec, app, &[]);
            env.append_if_absent(literal(OTEL_RESOURCE_ATTRIBUTES, join_attributes(&attrs)));
        }
    }
    env.move_to_end(OTEL_RESOURCE_ATTRIBUTES);
}

/// Exporter TLS files: where `spec.exporter.tls` puts them and how the SDK finds them.
pub struct ExporterTls<'s> {
    secret: Option<&'s str>,
    config_map: Option<&'s str>,
    ca: Option<&'s str>,
    cert: Option<&'s str>,
    key: Option<&'s str>,
}

fn non_empty(v: &Option<String>) -> Option<&str> {
    v.as_deref().filter(|v| !v.is_empty())
}

impl<'s> ExporterTls<'s> {
    pub fn of(spec: &'s InstrumentationSpec) -> Option<Self> {
        let tls = spec.exporter.as_ref()?.tls.as_ref()?;
        Some(ExporterTls {
            secret: non_empty(&tls.secret_name),
            config_map: non_empty(&tls.config_map_name),
            ca: non_empty(&tls.ca_file),
            cert: non_empty(&tls.cert_file),
            key: non_empty(&tls.key_file),
        })
    }

    pub fn secret(&self) -> Option<&'s str> {
        self.secret
    }

    pub fn config_map(&self) -> Option<&'s str> {
        self.config_map
    }

    fn secret_mount(&self) -> String {
        format!(
            "/otel-auto-instrumentation-secret-{}",
            self.secret.unwrap_or("")
        )
    }

    fn config_map_mount(&self) -> String {
        format!(
            "/otel-auto-instrumentation-configmap-{}",
            self.config_map.unwrap_or("")
        )
    }

    /// The volumes (and where each is mounted) that carry the files.
    pub fn volumes(&self) -> Vec<(Volume, VolumeMount)> {
        use k8s_openapi::api::core::v1::{ConfigMapVolumeSource, SecretVolumeSource};
        let mut out = Vec::new();
        if let Some(secret) = self.secret {
            let name = volume_name("otel-auto-secret-", secret);
            out.push((
                Volume {
                    name: name.clone(),
                    secret: Some(SecretVolumeSource {
                        secret_name: Some(secret.to_owned()),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                VolumeMount {
                    name,
                    mount_path: self.secret_mount(),
                    read_only: Some(true),
                    ..Default::default()
                },
            ));
        }
        if let Some(cm) = self.config_map {
            let name = volume_name("otel-auto-configmap-", cm);
            out.push((
                Volume {
                    name: name.clone(),
                    config_map: Some(ConfigMapVolumeSource {
                        name: cm.to_owned(),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                VolumeMount {
                    name,
                    mount_path: self.config_map_mount(),
                    read_only: Some(true),
                    ..Default::default()
                },
            ));
        }
        out
    }
}

/// `prefix + name` cut to 63 characters (a volume name is a DNS label), without a trailing
/// `-` or `.` left by the cut.
fn volume_name(prefix: &str, name: &str) -> String {
    let mut v = format!("{prefix}{name}");
    v.truncate(63);
    while v.ends_with(['-', '.']) {
        v.pop();
    }
    v
}

/// The TLS variables for `spec.exporter.tls`, in the Operator's order. Absolute paths are
/// used as they are; relative ones are inside the mounted Secret (CA: the ConfigMap when
/// one is named).
pub fn exporter_tls_env(spec: &InstrumentationSpec) -> Vec<(&'static str, String)> {
    let Some(tls) = ExporterTls::of(spec) else {
        return Vec::new();
    };
    let path = |dir: String, file: &str| {
        if file.starts_with('/') {
            file.to_owned()
        } else {
            format!("{dir}/{file}")
        }
    };
    let mut out = Vec::new();
    if let Some(ca) = tls.ca {
        let dir = if tls.config_map.is_some() {
            tls.config_map_mount()
        } else {
            tls.secret_mount()
        };
        out.push((OTEL_EXPORTER_OTLP_CERTIFICATE, path(dir, ca)));
    }
    if let Some(cert) = tls.cert {
        out.push((
            OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE,
            path(tls.secret_mount(), cert),
        ));
    }
    if let Some(key) = tls.key {
        out.push((OTEL_EXPORTER_OTLP_CLIENT_KEY, path(tls.secret_mount(), key)));
    }
    out
}

fn join_attributes(attrs: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
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
    use serde_json::json;

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn image_versions() {
        assert_eq!(image_version("nginx"), None);
        assert_eq!(image_version("nginx:1.27").as_deref(), Some("1.27"));
        assert_eq!(
            image_version("registry:5000/team/app:v2").as_deref(),
            Some("v2")
        );
        assert_eq!(image_version("registry:5000/team/app"), None);
        assert_eq!(
            image_version("app:v1@sha256:abc").as_deref(),
            Some("v1@sha256:abc")
        );
        assert_eq!(
            image_version("app@sha256:abc").as_deref(),
            Some("sha256:abc")
        );
    }

    #[test]
    fn owners_from_conventions() {
        let p = pod(json!({"metadata": {
            "generateName": "web-7d4b9c8f5-",
            "labels": {"pod-template-hash": "7d4b9c8f5"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "name": "web-7d4b9c8f5", "uid": "u1", "controller": true}]}}));
        let o = Owners::of(&p);
        assert_eq!(o.deployment.as_deref(), Some("web"));
        assert_eq!(o.replicaset, Some(("web-7d4b9c8f5".into(), "u1".into())));

        // A ReplicaSet without the hash label is not guessed to be a Deployment's.
        let p = pod(
            json!({"metadata": {"ownerReferences": [{"apiVersion": "apps/v1",
            "kind": "ReplicaSet", "name": "web-7d4b9c8f5", "uid": "u1"}]}}),
        );
        assert_eq!(Owners::of(&p).deployment, None);

        let p = pod(
            json!({"metadata": {"ownerReferences": [{"apiVersion": "batch/v1",
            "kind": "Job", "name": "nightly-backup-29380320", "uid": "u2"}]}}),
        );
        let o = Owners::of(&p);
        assert_eq!(o.cronjob.as_deref(), Some("nightly-backup"));
        assert_eq!(
            o.job.as_ref().map(|j| j.0.as_str()),
            Some("nightly-backup-29380320")
        );

        let p = pod(
            json!({"metadata": {"ownerReferences": [{"apiVersion": "batch/v1",
            "kind": "Job", "name": "migrate-2", "uid": "u2"}]}}),
        );
        assert_eq!(Owners::of(&p).cronjob, None);
    }

    #[test]
    fn service_name_order() {
        let c = Container {
            name: "app".into(),
            ..Default::default()
        };
        let p = pod(json!({"metadata": {"name": "p1",
            "labels": {"app.kubernetes.io/name": "from-label"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db", "uid": "u"}]}}));
        let info = PodInfo::new(&p, "ns");
        assert_eq!(info.service_name(false, &c), "db");
        assert_eq!(info.service_name(true, &c), "from-label");
        let p = pod(
            json!({"metadata": {"annotations": {"resource.opentelemetry.io/service.name": "explicit"}}}),
        );
        assert_eq!(PodInfo::new(&p, "ns").service_name(true, &c), "explicit");
        let p = pod(json!({"metadata": {"name": "p1"}}));
        assert_eq!(PodInfo::new(&p, "ns").service_name(false, &c), "p1");
        let p = pod(json!({"metadata": {"generateName": "p-"}}));
        assert_eq!(PodInfo::new(&p, "ns").service_name(false, &c), "app");
    }
}
