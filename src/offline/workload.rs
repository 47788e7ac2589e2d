//! A manifest's pod template as the pod its controller would create, run through the
//! webhook's own [`admission::mutate`], and the patch applied back to the template.
//!
//! The pod gets the template's metadata and spec, the namespace, and the owner reference the
//! controller writes, so the engine derives the owners exactly as for the real pod. Where the
//! real owner's name is generated (a Deployment's ReplicaSet `<name>-<pod-template-hash>`,
//! a CronJob's Job `<name>-<minutes>`), a fixed stand-in is used and the resource attribute
//! that would carry it is taken out of the result: it names one pod's owner, not the
//! template's. Only `metadata.annotations` and `spec` are written back.

use json_patch::PatchOperation;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Map, Value, json};

use crate::admission;
use crate::engine::{Catalog, EngineConfig, Report, Snapshot};
use crate::keys::INJECTED_LABEL;

/// The `pod-template-hash` stand-in of a Deployment's ReplicaSet.
pub const TEMPLATE_HASH: &str = "offline";
/// The scheduled-time suffix stand-in of a CronJob's Job (minutes since the epoch).
pub const JOB_SUFFIX: &str = "00000000";
use crate::keys::POD_TEMPLATE_HASH;
const RESOURCE_ATTRIBUTES: &str = "OTEL_RESOURCE_ATTRIBUTES";

/// The kinds whose objects carry a pod (template).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ManifestKind {
    Pod,
    Deployment,
    ReplicaSet,
    StatefulSet,
    DaemonSet,
    Job,
    CronJob,
    ReplicationController,
}

impl ManifestKind {
    /// The kind of a manifest, when it is one that carries a pod.
    pub fn of(object: &Value) -> Option<ManifestKind> {
        let api_version = object.get("apiVersion").and_then(Value::as_str)?;
        let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
        let kind = object.get("kind").and_then(Value::as_str)?;
        Some(match (group, kind) {
            ("", "Pod") => ManifestKind::Pod,
            ("", "ReplicationController") => ManifestKind::ReplicationController,
            ("apps", "Deployment") => ManifestKind::Deployment,
            ("apps", "ReplicaSet") => ManifestKind::ReplicaSet,
            ("apps", "StatefulSet") => ManifestKind::StatefulSet,
            ("apps", "DaemonSet") => ManifestKind::DaemonSet,
            ("batch", "Job") => ManifestKind::Job,
            ("batch", "CronJob") => ManifestKind::CronJob,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ManifestKind::Pod => "Pod",
            ManifestKind::Deployment => "Deployment",
            ManifestKind::ReplicaSet => "ReplicaSet",
            ManifestKind::StatefulSet => "StatefulSet",
            ManifestKind::DaemonSet => "DaemonSet",
            ManifestKind::Job => "Job",
            ManifestKind::CronJob => "CronJob",
            ManifestKind::ReplicationController => "ReplicationController",
        }
    }

    /// Where the pod template is (empty: the object is the pod).
    fn template_path(self) -> &'static str {
        match self {
            ManifestKind::Pod => "",
            ManifestKind::CronJob => "/spec/jobTemplate/spec/template",
            _ => "/spec/template",
        }
    }
}

/// One object that carries a pod: its kind, name and the namespace its pods are created in.
#[derive(Clone, Debug)]
pub struct ManifestWorkload {
    pub kind: ManifestKind,
    pub name: String,
    pub namespace: String,
}

impl ManifestWorkload {
    /// `None` for an object that carries no pod; `default_namespace` when it names none.
    pub fn of(object: &Value, default_namespace: &str) -> Option<ManifestWorkload> {
        let kind = ManifestKind::of(object)?;
        let meta = object.get("metadata");
        let field = |f: &str| {
            meta.and_then(|m| m.get(f))
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
        };
        Some(ManifestWorkload {
            kind,
            name: field("name").unwrap_or("").to_owned(),
            namespace: field("namespace").unwrap_or(default_namespace).to_owned(),
        })
    }

    /// `Deployment shop/cart`.
    pub fn describe(&self) -> String {
        format!("{} {}/{}", self.kind.as_str(), self.namespace, self.name)
    }

    /// The owner reference the controller writes on its pods, the labels it adds, and the
    /// resource attribute (`key=value`) that then names a stand-in.
    fn owner(&self) -> Option<(&'static str, &'static str, String, Option<String>)> {
        let name = &self.name;
        Some(match self.kind {
            ManifestKind::Pod => return None,
            ManifestKind::Deployment => {
                let rs = format!("{name}-{TEMPLATE_HASH}");
                let stand_in = format!("k8s.replicaset.name={rs}");
                ("apps/v1", "ReplicaSet", rs, Some(stand_in))
            }
            ManifestKind::ReplicaSet => ("apps/v1", "ReplicaSet", name.clone(), None),
            ManifestKind::StatefulSet => ("apps/v1", "StatefulSet", name.clone(), None),
            ManifestKind::DaemonSet => ("apps/v1", "DaemonSet", name.clone(), None),
            ManifestKind::Job => ("batch/v1", "Job", name.clone(), None),
            ManifestKind::CronJob => {
                let job = format!("{name}-{JOB_SUFFIX}");
                let stand_in = format!("k8s.job.name={job}");
                ("batch/v1", "Job", job, Some(stand_in))
            }
            ManifestKind::ReplicationController => {
                ("v1", "ReplicationController", name.clone(), None)
            }
        })
    }
}

/// The pod the webhook would see, built from a manifest.
#[derive(Debug)]
pub struct ControllerPod {
    /// As JSON, unknown fields included; the patch applies to it.
    pub value: Value,
    pub pod: Pod,
    /// Resource attributes (`key=value`) that name a stand-in owner.
    stand_ins: Vec<String>,
}

/// What the webhook's decision did to one manifest.
#[derive(Debug)]
pub struct Mutation {
    pub workload: ManifestWorkload,
    /// The pod as the webhook would see it.
    pub before: ControllerPod,
    /// The pod after the patch, stand-ins taken out.
    pub after: Value,
    pub ops: Vec<PatchOperation>,
    pub report: Report,
}

impl Mutation {
    /// Whether anything was injected. A pod that was only skipped would get just its outcome
    /// (`otel-injector/status`), which the webhook writes again on every pod it admits: a
    /// manifest is not rewritten for that, so `inject` leaves skipped workloads as they are.
    pub fn changed(&self) -> bool {
        !self.report.injected.is_empty() && !self.ops.is_empty()
    }
}

/// Builds the pod the controller would create from `object`'s template; `None` when the
/// object has no template (nothing to inject).
pub fn controller_pod(
    workload: &ManifestWorkload,
    object: &Value,
) -> Result<Option<ControllerPod>, String> {
    let path = workload.kind.template_path();
    let Some(template) = object.pointer(path).filter(|t| t.is_object()) else {
        return Ok(None);
    };
    let mut stand_ins = Vec::new();
    let value = match workload.owner() {
        None => template.clone(),
        Some((api_version, kind, name, stand_in)) => {
            let mut meta = template
                .get("metadata")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default();
            meta.insert("namespace".into(), json!(workload.namespace));
            meta.insert(
                "ownerReferences".into(),
                json!([{
                    "apiVersion": api_version,
                    "kind": kind,
                    "name": name,
                    "uid": "",
                    "controller": true,
                    "blockOwnerDeletion": true,
                }]),
            );
            if workload.kind == ManifestKind::Deployment {
                let labels = meta
                    .entry("labels")
                    .or_insert_with(|| Value::Object(Map::new()));
                if let Some(labels) = labels.as_object_mut() {
                    labels.insert(POD_TEMPLATE_HASH.into(), json!(TEMPLATE_HASH));
                }
            }
            stand_ins.extend(stand_in);
            let mut pod = Map::new();
            pod.insert("apiVersion".into(), json!("v1"));
            pod.insert("kind".into(), json!("Pod"));
            pod.insert("metadata".into(), Value::Object(meta));
            if let Some(spec) = template.get("spec") {
                pod.insert("spec".into(), spec.clone());
            }
            Value::Object(pod)
        }
    };
    let pod: Pod = serde_json::from_value(value.clone()).map_err(|e| {
        format!(
            "{} pod template is not a valid pod: {e}",
            workload.describe()
        )
    })?;
    Ok(Some(ControllerPod {
        value,
        pod,
        stand_ins,
    }))
}

/// Decides for `object` as the webhook would for the pods it produces; `None` for an object
/// without a pod template.
pub fn mutate(
    catalog: &dyn Catalog,
    config: &EngineConfig,
    workload: ManifestWorkload,
    object: &Value,
) -> Result<Option<Mutation>, String> {
    let Some(before) = controller_pod(&workload, object)? else {
        return Ok(None);
    };
    let bytes = serde_json::to_vec(&before.value).map_or(0, |b| b.len());
    let snapshot = Snapshot::take(catalog, &workload.namespace, config).with_pod_bytes(bytes);
    let (ops, report) = admission::mutate(&snapshot, &before.pod);
    let mut after = before.value.clone();
    if !ops.is_empty() {
        json_patch::patch(&mut after, &ops)
            .map_err(|e| format!("{}: the patch does not apply: {e}", workload.describe()))?;
        remove_stand_ins(&mut after, &before.stand_ins);
    }
    Ok(Some(Mutation {
        workload,
        before,
        after,
        ops,
        report,
    }))
}

/// Takes the stand-in attributes out of every `OTEL_RESOURCE_ATTRIBUTES` literal, and out of
/// the declarative configuration file the pod carries.
fn remove_stand_ins(pod: &mut Value, stand_ins: &[String]) {
    if stand_ins.is_empty() {
        return;
    }
    let file = format!(
        "/metadata/annotations/{}",
        crate::keys::CONFIG_FILE_ANNOTATION.replace('/', "~1")
    );
    // Read back as the webhook wrote it (the same types), so the file keeps its order.
    if let Some(Value::String(text)) = pod.pointer_mut(&file)
        && let Ok(mut config) = serde_saphyr::from_str::<crate::crd::DeclarativeConfig>(text)
        && let Some(resource) = &mut config.resource
    {
        resource.attributes.retain(|a| {
            let kv = format!("{}={}", a.name, a.value.as_str().unwrap_or_default());
            !stand_ins.contains(&kv)
        });
        if let Ok(rendered) = serde_saphyr::to_string(&config) {
            *text = rendered;
        }
    }
    for list in ["initContainers", "containers"] {
        let Some(containers) = pod
            .pointer_mut(&format!("/spec/{list}"))
            .and_then(Value::as_array_mut)
        else {
            continue;
        };
        for env in containers
            .iter_mut()
            .filter_map(|c| c.get_mut("env")?.as_array_mut())
        {
            for var in env.iter_mut() {
                if var.get("name").and_then(Value::as_str) != Some(RESOURCE_ATTRIBUTES) {
                    continue;
                }
                if let Some(Value::String(v)) = var.get_mut("value") {
                    *v = v
                        .split(',')
                        .filter(|kv| !stand_ins.iter().any(|s| s == kv.trim()))
                        .collect::<Vec<_>>()
                        .join(",");
                }
            }
        }
    }
}

/// Writes the mutated pod's annotations and spec back into `object`'s template.
pub fn write_back(mutation: &Mutation, object: &mut Value) {
    let path = mutation.workload.kind.template_path();
    let Some(template) = object.pointer_mut(path).and_then(Value::as_object_mut) else {
        return;
    };
    if let Some(annotations) = mutation.after.pointer("/metadata/annotations") {
        let meta = template
            .entry("metadata")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(meta) = meta.as_object_mut() {
            meta.insert("annotations".into(), annotations.clone());
        }
    }
    // Of the labels, only the one the webhook writes: the others of the pod may be stand-ins
    // (`pod-template-hash`) that the template must not get.
    if let Some(label) = mutation
        .after
        .pointer("/metadata/labels")
        .and_then(|l| l.get(INJECTED_LABEL))
    {
        let meta = template
            .entry("metadata")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(meta) = meta.as_object_mut() {
            let labels = meta
                .entry("labels")
                .or_insert_with(|| Value::Object(Map::new()));
            if let Some(labels) = labels.as_object_mut() {
                labels.insert(INJECTED_LABEL.into(), label.clone());
            }
        }
    }
    if let Some(spec) = mutation.after.get("spec") {
        template.insert("spec".into(), spec.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_need_their_api_group() {
        let of = |v: &str, k: &str| ManifestKind::of(&json!({"apiVersion": v, "kind": k}));
        assert_eq!(of("apps/v1", "Deployment"), Some(ManifestKind::Deployment));
        assert_eq!(of("batch/v1", "CronJob"), Some(ManifestKind::CronJob));
        assert_eq!(of("v1", "Pod"), Some(ManifestKind::Pod));
        assert_eq!(
            of("v1", "ReplicationController"),
            Some(ManifestKind::ReplicationController)
        );
        assert_eq!(of("example.com/v1", "Deployment"), None);
        assert_eq!(of("v1", "ConfigMap"), None);
    }

    #[test]
    fn stand_ins_leave_the_other_attributes() {
        let mut pod = json!({"spec": {"containers": [{"name": "a", "env": [
            {"name": "OTEL_RESOURCE_ATTRIBUTES", "value": "a=1,k8s.replicaset.name=web-offline,b=2"},
            {"name": "OTHER", "value": "k8s.replicaset.name=web-offline"},
        ]}]}});
        remove_stand_ins(&mut pod, &["k8s.replicaset.name=web-offline".to_owned()]);
        assert_eq!(pod["spec"]["containers"][0]["env"][0]["value"], "a=1,b=2");
        assert_eq!(
            pod["spec"]["containers"][0]["env"][1]["value"],
            "k8s.replicaset.name=web-offline"
        );

        // And out of the declarative configuration file, which keeps the webhook's order.
        let file = "file_format: \"1.0\"\nresource:\n  attributes:\n  - name: a\n    value: \"1\"\n  - name: k8s.replicaset.name\n    value: web-offline\n";
        let mut pod = json!({"metadata": {"annotations": {"otel-injector/sdk-config": file}}});
        remove_stand_ins(&mut pod, &["k8s.replicaset.name=web-offline".to_owned()]);
        assert_eq!(
            pod["metadata"]["annotations"]["otel-injector/sdk-config"],
            "file_format: \"1.0\"\nresource:\n  attributes:\n  - name: a\n    value: \"1\"\n"
        );
    }
}
