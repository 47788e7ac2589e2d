//! What can be known about a pod without an API call: its controller ([`controller`]), its
//! owning workloads (derived from owner references and naming conventions), service name
//! and version, as the SDK configuration, the census and the skips' Events read them.

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use crate::keys::{
    APP_INSTANCE, APP_NAME, APP_VERSION, POD_TEMPLATE_HASH, RESOURCE_ANNOTATION_PREFIX,
};

/// A pod's controller: its `ownerReferences` entry with `controller: true` (what its
/// workload is, and what the Events of its skips are about).
pub fn controller(refs: Option<&[OwnerReference]>) -> Option<&OwnerReference> {
    refs?.iter().find(|r| r.controller == Some(true))
}

/// The workloads that own a pod, derived from its owner references and labels.
/// Names (and, with them, uids) borrowed from the pod.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Owners<'a> {
    pub deployment: Option<&'a str>,
    pub replicaset: Option<(&'a str, &'a str)>,
    pub statefulset: Option<(&'a str, &'a str)>,
    pub daemonset: Option<(&'a str, &'a str)>,
    pub job: Option<(&'a str, &'a str)>,
    pub cronjob: Option<&'a str>,
}

impl<'a> Owners<'a> {
    /// A ReplicaSet made by a Deployment is named `<deployment>-<pod-template-hash>` and its
    /// pods carry that hash as a label; a Job made by a CronJob is named
    /// `<cronjob>-<scheduled minutes since the epoch>`.
    pub fn of(pod: &'a Pod) -> Self {
        let mut o = Owners::default();
        let hash = pod
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(POD_TEMPLATE_HASH));
        for r in pod.metadata.owner_references.iter().flatten() {
            let named = (r.name.as_str(), r.uid.as_str());
            let kind = |k: &str| r.kind.eq_ignore_ascii_case(k);
            if kind("replicaset") {
                if let Some(h) = hash.filter(|h| !h.is_empty()) {
                    o.deployment = r
                        .name
                        .strip_suffix(h.as_str())
                        .and_then(|p| p.strip_suffix('-'))
                        .filter(|d| !d.is_empty());
                }
                o.replicaset = Some(named);
            } else if kind("deployment") {
                o.deployment = Some(&r.name);
            } else if kind("statefulset") {
                o.statefulset = Some(named);
            } else if kind("daemonset") {
                o.daemonset = Some(named);
            } else if kind("job") {
                o.cronjob = r.name.rsplit_once('-').and_then(|(prefix, suffix)| {
                    (suffix.len() >= 8
                        && suffix.bytes().all(|b| b.is_ascii_digit())
                        && !prefix.is_empty())
                    .then_some(prefix)
                });
                o.job = Some(named);
            } else if kind("cronjob") {
                o.cronjob = Some(&r.name);
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
    pub owners: Owners<'a>,
}

impl<'a> PodInfo<'a> {
    pub fn new(pod: &'a Pod, namespace: &'a str) -> Self {
        PodInfo {
            pod,
            namespace,
            owners: Owners::of(pod),
        }
    }

    pub fn annotation(&self, attr: &str) -> Option<&'a str> {
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
                    .then(|| self.label(APP_INSTANCE).or_else(|| self.label(APP_NAME)))
                    .flatten()
            })
            .or(o.deployment)
            .or(o.replicaset.map(|r| r.0))
            .or(o.statefulset.map(|r| r.0))
            .or(o.daemonset.map(|r| r.0))
            .or(o.cronjob)
            .or(o.job.map(|r| r.0))
            .or(self.pod_name())
            .unwrap_or(&container.name)
            .to_owned()
    }

    /// `service.version`: annotation, then (opt-in) label, then the image tag and digest.
    pub fn service_version(&self, use_labels: bool, container: &Container) -> Option<String> {
        self.annotation("service.version")
            .or_else(|| use_labels.then(|| self.label(APP_VERSION)).flatten())
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn image_versions() {
        let cases = [
            ("nginx", None),
            ("nginx:1.27", Some("1.27")),
            ("registry:5000/team/app:v2", Some("v2")),
            ("registry:5000/team/app", None),
            ("app:v1@sha256:abc", Some("v1@sha256:abc")),
            ("app@sha256:abc", Some("sha256:abc")),
        ];
        for (image, want) in cases {
            assert_eq!(image_version(image).as_deref(), want, "{image}");
        }
    }

    #[test]
    fn owners_from_conventions() {
        let p = pod(json!({"metadata": {
            "generateName": "web-7d4b9c8f5-",
            "labels": {"pod-template-hash": "7d4b9c8f5"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "name": "web-7d4b9c8f5", "uid": "u1", "controller": true}]}}));
        let o = Owners::of(&p);
        assert_eq!(o.deployment, Some("web"));
        assert_eq!(o.replicaset, Some(("web-7d4b9c8f5", "u1")));

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
        assert_eq!(o.cronjob, Some("nightly-backup"));
        assert_eq!(o.job.map(|j| j.0), Some("nightly-backup-29380320"));

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
