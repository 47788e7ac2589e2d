//! `otel-injector inject` and `explain` against the real API server (`--kubeconfig`, with
//! the webhook's own read-only identity), compared with what really happens: for every
//! workload kind whose pods kube-controller-manager creates here (Deployment, ReplicaSet,
//! StatefulSet, DaemonSet, Job, CronJob, ReplicationController), `inject`'s pod template
//! must be the pod the controller created and the webhook mutated, field by field.
//!
//! The namespace asks for Java by its annotation and the Instrumentation exists only in the
//! cluster, so `inject` can only get either from the cluster.
//!
//! What may differ, and nothing else (each removed from the real pod before comparing, and
//! checked to be there): the fields that depend on the running pod or that the API server
//! fills in:
//! - metadata other than labels and annotations (name, generateName, uid, ownerReferences,
//!   finalizers, ...): `inject` writes back only a template's annotations and spec;
//! - the labels the controllers add ([`CONTROLLER_LABELS`]);
//! - `spec.nodeName` (the scheduler), `spec.hostname`/`spec.subdomain` (the StatefulSet
//!   controller), `spec.affinity` (the DaemonSet controller pins its pod to the node);
//! - tolerations with a `node.kubernetes.io/` key (the DefaultTolerationSeconds admission
//!   plugin, the DaemonSet controller);
//! - in `OTEL_RESOURCE_ATTRIBUTES`, the generated owner name the webhook derives from the
//!   real pod and `inject` cannot know: `k8s.replicaset.name=<deployment>-<hash>` of a
//!   Deployment's pod and `k8s.job.name=<cronjob>-<minutes>` of a CronJob's;
//! - the API server's defaults of a pod spec ([`APISERVER_DEFAULTS`], with their values).
//!   (The ServiceAccount admission plugin is off in this control plane, so no token volume.)

use otel_injector::keys::INJECT_JAVA;
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};

use crate::harness::{Env, assert_stored_as_expected, endpoint_spec};
use crate::workloads::{create, running_pods, template};

/// Labels a controller adds to the pods it creates, by the workload's kind.
const CONTROLLER_LABELS: &[(&str, &[&str])] = &[
    ("Deployment", &["pod-template-hash"]),
    ("ReplicaSet", &[]),
    (
        "StatefulSet",
        &[
            "controller-revision-hash",
            "statefulset.kubernetes.io/pod-name",
            "apps.kubernetes.io/pod-index",
        ],
    ),
    (
        "DaemonSet",
        &["controller-revision-hash", "pod-template-generation"],
    ),
    (
        "Job",
        &[
            "batch.kubernetes.io/controller-uid",
            "batch.kubernetes.io/job-name",
            "controller-uid",
            "job-name",
        ],
    ),
    (
        "CronJob",
        &[
            "batch.kubernetes.io/controller-uid",
            "batch.kubernetes.io/job-name",
            "controller-uid",
            "job-name",
        ],
    ),
    ("ReplicationController", &[]),
];

/// The workloads, one of each kind, each with one pod: (kind, object).
fn workloads(ns: &str) -> Vec<(&'static str, Value)> {
    let t = |name: &str| template(name, &[]);
    let run_once = |name: &str| {
        let mut t = t(name);
        t["spec"]["restartPolicy"] = json!("Never");
        t
    };
    let selector = |name: &str| json!({"matchLabels": {"app": name}});
    let meta = |name: &str| json!({"name": name, "namespace": ns});
    vec![
        (
            "Deployment",
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta("web"),
                   "spec": {"replicas": 1, "selector": selector("web"), "template": t("web")}}),
        ),
        (
            "ReplicaSet",
            json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": meta("cache"),
                   "spec": {"replicas": 1, "selector": selector("cache"), "template": t("cache")}}),
        ),
        (
            "StatefulSet",
            json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": meta("db"),
                   "spec": {"replicas": 1, "serviceName": "db", "selector": selector("db"),
                            "template": t("db")}}),
        ),
        (
            "DaemonSet",
            json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": meta("agent"),
                   "spec": {"selector": selector("agent"), "template": t("agent")}}),
        ),
        (
            "Job",
            json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": meta("report"),
                   "spec": {"template": run_once("report")}}),
        ),
        (
            "CronJob",
            json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": meta("nightly"),
                   "spec": {"schedule": "* * * * *", "concurrencyPolicy": "Forbid",
                            "jobTemplate": {"spec": {"template": run_once("nightly")}}}}),
        ),
        (
            "ReplicationController",
            json!({"apiVersion": "v1", "kind": "ReplicationController", "metadata": meta("legacy"),
                   "spec": {"replicas": 1, "selector": {"app": "legacy"}, "template": t("legacy")}}),
        ),
    ]
}

fn path_of(kind: &str, ns: &str) -> String {
    match kind {
        "Deployment" | "ReplicaSet" | "StatefulSet" | "DaemonSet" => {
            format!("/apis/apps/v1/namespaces/{ns}/{}s", kind.to_lowercase())
        }
        "Job" | "CronJob" => format!("/apis/batch/v1/namespaces/{ns}/{}s", kind.to_lowercase()),
        _ => format!("/api/v1/namespaces/{ns}/replicationcontrollers"),
    }
}

fn pod_template(kind: &str, object: &Value) -> Value {
    let t = if kind == "CronJob" {
        &object["spec"]["jobTemplate"]["spec"]["template"]
    } else {
        &object["spec"]["template"]
    };
    json!({"metadata": {"labels": t["metadata"]["labels"], "annotations": t["metadata"]["annotations"]},
           "spec": t["spec"]})
}

/// The real pod with the fields that depend on the running pod taken out (see the module
/// doc); each of them must be there.
fn normalised(kind: &str, pod: &Value) -> Value {
    let what = format!("{kind} pod {}", pod["metadata"]["name"]);
    let mut labels = pod["metadata"]["labels"].clone();
    let added = CONTROLLER_LABELS
        .iter()
        .find(|(k, _)| *k == kind)
        .map(|(_, l)| *l)
        .unwrap_or_default();
    for label in added {
        let removed = labels.as_object_mut().and_then(|l| l.remove(*label));
        assert!(removed.is_some(), "{what}: no label {label}: {pod}");
    }
    let mut spec = pod["spec"].clone();
    let s = spec.as_object_mut().expect("spec");
    assert!(s.remove("nodeName").is_some(), "{what}: not scheduled");
    if kind == "StatefulSet" {
        assert_eq!(s.remove("hostname"), Some(pod["metadata"]["name"].clone()));
        assert_eq!(s.remove("subdomain"), Some(json!("db")));
    }
    if kind == "DaemonSet" {
        assert!(s.remove("affinity").is_some(), "{what}: no node affinity");
    }
    if let Some(tolerations) = s.get_mut("tolerations").and_then(Value::as_array_mut) {
        tolerations.retain(|t| {
            !t["key"]
                .as_str()
                .is_some_and(|k| k.starts_with("node.kubernetes.io/"))
        });
    }
    let owner_attr = match kind {
        "Deployment" => Some("k8s.replicaset.name="),
        "CronJob" => Some("k8s.job.name="),
        _ => None,
    };
    if let Some(prefix) = owner_attr {
        for c in s["containers"].as_array_mut().into_iter().flatten() {
            for var in c["env"].as_array_mut().into_iter().flatten() {
                if var["name"] != "OTEL_RESOURCE_ATTRIBUTES" {
                    continue;
                }
                let value = var["value"].as_str().unwrap_or("").to_owned();
                let kept: Vec<&str> = value
                    .split(',')
                    .filter(|a| !a.starts_with(prefix))
                    .collect();
                assert_eq!(kept.len() + 1, value.split(',').count(), "{what}: {value}");
                var["value"] = json!(kept.join(","));
            }
        }
    }
    json!({"metadata": {"labels": labels, "annotations": pod["metadata"]["annotations"]},
           "spec": spec})
}

fn otel_injector(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_e2e-otel-injector"))
        .args(args)
        .env_remove("KUBECONFIG")
        .output()
        .expect("run otel-injector");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn inject_reads_the_cluster_and_gives_the_pods_the_controllers_and_the_webhook_make() {
    let env = Env::start("offline").await;
    let ns = env.namespace("shop", &[(INJECT_JAVA, "true")]).await;
    env.await_webhook(&ns).await;
    env.instrumentation(&ns, "java", endpoint_spec("http://collector.example:4318"))
        .await;
    // The webhook's cache has the Instrumentation once a bare pod of the namespace is
    // injected.
    env.until_dry_run(&ns, &crate::harness::pod("settle", &[]), "injection", |r| {
        crate::harness::is_injected(&r.body)
    })
    .await;

    let objects = workloads(&ns);
    let dir = tempfile::tempdir().unwrap();
    let manifest = dir.path().join("workloads.yaml");
    let text: Vec<String> = objects.iter().map(|(_, o)| o.to_string()).collect();
    // YAML documents (each a JSON object, which is YAML).
    std::fs::write(&manifest, format!("---\n{}\n", text.join("\n---\n"))).unwrap();

    // With the webhook's own identity: list on Instrumentations and namespaces, no /metrics.
    let kubeconfig = env.identity.kubeconfig.display().to_string();
    let file = manifest.display().to_string();
    let t0 = std::time::Instant::now();
    let (code, out, err) = otel_injector(&[
        "inject",
        "-f",
        &file,
        "--kubeconfig",
        &kubeconfig,
        "-o",
        "json",
        "--strict",
    ]);
    eprintln!(
        "[e2e] inject --kubeconfig of 7 workloads took {:?}",
        t0.elapsed()
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(err, "", "no warning");
    let injected: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let items = injected["items"].as_array().expect("a List");
    assert_eq!(items.len(), objects.len());

    let (code, explained, err) =
        otel_injector(&["explain", "-f", &file, "--kubeconfig", &kubeconfig]);
    assert_eq!(code, 0, "{err}");
    assert!(
        explained.starts_with(&format!(
            "Deployment {ns}/web ({file}, document 1)\n  java: asked by the namespace annotation \
             {INJECT_JAVA}: \"true\"\n    Instrumentation {ns}/java: the only Instrumentation in \
             namespace \"{ns}\" (the annotation says \"true\")\n    targets: app (the first \
             container: no container-names annotation)\n"
        )),
        "{explained}"
    );
    assert_eq!(
        explained
            .matches("  java: asked by the namespace annotation")
            .count(),
        objects.len(),
        "{explained}"
    );

    // Now for real: the controllers make the pods, the webhook injects them.
    for (kind, object) in &objects {
        create(&env, &path_of(kind, &ns), object).await;
    }
    for ((kind, object), item) in objects.iter().zip(items) {
        let name = object["metadata"]["name"].as_str().unwrap();
        assert_eq!(item["kind"], *kind);
        let limit = Duration::from_secs(if *kind == "CronJob" { 100 } else { 60 });
        let pods = running_pods(&env, &ns, &format!("app={name}"), 1, limit).await;
        let expected = pod_template(kind, item);
        assert_eq!(
            expected["metadata"]["annotations"]["otel-injector/injected"], "java",
            "{kind}: {item}"
        );
        let actual = normalised(kind, &pods[0]);
        eprintln!(
            "[e2e] {kind} {name}: comparing inject's template with pod {}",
            pods[0]["metadata"]["name"]
        );
        assert_stored_as_expected(&actual, &expected);
    }
}
