//! Pods made by the real controllers: a Deployment (through its ReplicaSet), a StatefulSet, a
//! DaemonSet, a Job and a CronJob (through its Job) are created through the apiserver; the
//! real kube-controller-manager creates their pods (generated names, `pod-template-hash`,
//! controller-written ownerReferences, a CronJob's real Job name), the real webhook injects
//! them, kube-scheduler binds them to the kwok node and kwok marks them Running. Each case
//! asserts the injected service name and the whole `OTEL_RESOURCE_ATTRIBUTES` value, built
//! from the names the controllers chose.

use otel_injector::keys::INJECT_JAVA;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::harness::{Env, JAVA_INIT, env_value, is_injected};
use crate::support::api;
use crate::support::controllers::{NODE, toleration};

/// A pod template: one container `app` (image `shop/<name>:2.1.0`), labels `app: <name>`,
/// the given annotations, the kwok node's toleration.
pub fn template(name: &str, annotations: &[(&str, &str)]) -> Value {
    let annotations: serde_json::Map<String, Value> = annotations
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    json!({
        "metadata": {"labels": {"app": name}, "annotations": annotations},
        "spec": {
            "containers": [{"name": "app", "image": format!("shop/{name}:2.1.0")}],
            "tolerations": [toleration()]
        }
    })
}

/// A pod made of a template (to dry-run until the webhook's caches are settled).
fn pod_of(name: &str, template: &Value) -> Value {
    let mut p = json!({"apiVersion": "v1", "kind": "Pod", "metadata": template["metadata"].clone(),
                       "spec": template["spec"].clone()});
    p["metadata"]["name"] = json!(format!("{name}-dry-run"));
    p
}

/// POSTs an object to `path` (must be created); returns it as stored.
pub async fn create(env: &Env, path: &str, body: &Value) -> Value {
    let r = api::send(&env.client, axum::http::Method::POST, path, Some(body))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 201, "POST {path}: {}", r.body);
    r.body
}

/// GET a list; its items.
pub async fn list(env: &Env, path: &str) -> Vec<Value> {
    let r = api::send(&env.client, axum::http::Method::GET, path, None)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 200, "GET {path}: {}", r.body);
    r.body["items"].as_array().cloned().unwrap_or_default()
}

/// Waits (at most `limit`) until `count` pods of `ns` match `selector` and each is bound to
/// the kwok node and Running; returns them sorted by name.
pub async fn running_pods(
    env: &Env,
    ns: &str,
    selector: &str,
    count: usize,
    limit: Duration,
) -> Vec<Value> {
    let t0 = Instant::now();
    let pods = crate::support::controllers::running_pods(&env.client, ns, selector, count, limit)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    eprintln!(
        "[e2e] {}: {count} pod(s) {selector} Running on {NODE} after {:?}",
        env.id,
        t0.elapsed()
    );
    pods
}

/// The controller ownerReference a controller writes.
fn owner(api_version: &str, kind: &str, object: &Value) -> Value {
    json!([{
        "apiVersion": api_version, "kind": kind,
        "name": object["metadata"]["name"], "uid": object["metadata"]["uid"],
        "controller": true, "blockOwnerDeletion": true
    }])
}

/// A test's namespace with an Instrumentation `java` (endpoint and one resource attribute),
/// the webhook live and its caches settled for `template`.
async fn setup(env: &Env, name: &str, template: &Value) -> String {
    let ns = env.namespace("shop", &[]).await;
    env.await_webhook(&ns).await;
    env.instrumentation(
        &ns,
        "java",
        json!({"exporter": {"endpoint": "http://collector.example:4318"},
               "resource": {"resourceAttributes": {"deployment.environment.name": "e2e"}}}),
    )
    .await;
    env.until_dry_run(&ns, &pod_of(name, template), "injection", |r| {
        is_injected(&r.body)
    })
    .await;
    ns
}

/// Asserts the pod is injected for Java, with this service name and exactly these resource
/// attributes (`owner_attrs`: the workload's `k8s.*.name` entries, sorted with the rest).
fn assert_injected(pod: &Value, ns: &str, service: &str, owner_attrs: &[(&str, &str)]) {
    assert!(is_injected(pod), "{pod}");
    assert_eq!(pod["spec"]["initContainers"][0]["name"], JAVA_INIT, "{pod}");
    assert_eq!(env_value(pod, 0, "OTEL_SERVICE_NAME"), service, "{pod}");
    let mut attrs: Vec<String> = vec![
        "k8s.container.name=app".into(),
        format!("k8s.namespace.name={ns}"),
        "k8s.node.name=$(OTEL_RESOURCE_ATTRIBUTES_NODE_NAME)".into(),
        "k8s.pod.name=$(OTEL_RESOURCE_ATTRIBUTES_POD_NAME)".into(),
        format!("service.instance.id={ns}.$(OTEL_RESOURCE_ATTRIBUTES_POD_NAME).app"),
        format!("service.namespace={ns}"),
        "service.version=2.1.0".into(),
        "deployment.environment.name=e2e".into(),
    ];
    attrs.extend(owner_attrs.iter().map(|(k, v)| format!("{k}={v}")));
    attrs.sort();
    assert_eq!(
        env_value(pod, 0, "OTEL_RESOURCE_ATTRIBUTES"),
        attrs.join(","),
        "{pod}"
    );
}

#[tokio::test]
async fn deployment_pods_are_named_by_the_replicaset_controller_and_injected() {
    let env = Env::start("deploy").await;
    let t = template("checkout", &[(INJECT_JAVA, "true")]);
    let ns = setup(&env, "checkout", &t).await;
    let deployment = create(
        &env,
        &format!("/apis/apps/v1/namespaces/{ns}/deployments"),
        &json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "checkout"},
                "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "checkout"}},
                         "template": t}}),
    )
    .await;
    let pods = running_pods(&env, &ns, "app=checkout", 2, Duration::from_secs(60)).await;
    let rss = list(
        &env,
        &format!("/apis/apps/v1/namespaces/{ns}/replicasets?labelSelector=app=checkout"),
    )
    .await;
    assert_eq!(rss.len(), 1, "{rss:?}");
    let rs = &rss[0];
    let hash = rs["metadata"]["labels"]["pod-template-hash"]
        .as_str()
        .expect("pod-template-hash");
    let rs_name = format!("checkout-{hash}");
    assert_eq!(rs["metadata"]["name"], rs_name.as_str());
    assert_eq!(
        rs["metadata"]["ownerReferences"],
        owner("apps/v1", "Deployment", &deployment)
    );
    for pod in &pods {
        let name = pod["metadata"]["name"].as_str().unwrap();
        assert_eq!(pod["metadata"]["generateName"], format!("{rs_name}-"));
        assert_eq!(
            name.len(),
            rs_name.len() + 6,
            "{name}: <replicaset>-<5 chars>"
        );
        assert_eq!(pod["metadata"]["labels"]["pod-template-hash"], hash);
        assert_eq!(
            pod["metadata"]["ownerReferences"],
            owner("apps/v1", "ReplicaSet", rs)
        );
        assert_injected(
            pod,
            &ns,
            "checkout",
            &[
                ("k8s.deployment.name", "checkout"),
                ("k8s.replicaset.name", &rs_name),
            ],
        );
    }
}

#[tokio::test]
async fn statefulset_pods_are_injected_with_the_statefulset_name() {
    let env = Env::start("sts").await;
    let t = template("ledger", &[(INJECT_JAVA, "true")]);
    let ns = setup(&env, "ledger", &t).await;
    let sts = create(
        &env,
        &format!("/apis/apps/v1/namespaces/{ns}/statefulsets"),
        &json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
                "metadata": {"name": "ledger"},
                "spec": {"replicas": 2, "serviceName": "ledger",
                         "selector": {"matchLabels": {"app": "ledger"}}, "template": t}}),
    )
    .await;
    // OrderedReady: ledger-1 is made once ledger-0 is Running and Ready (kwok).
    let pods = running_pods(&env, &ns, "app=ledger", 2, Duration::from_secs(60)).await;
    for (i, pod) in pods.iter().enumerate() {
        assert_eq!(pod["metadata"]["name"], format!("ledger-{i}"));
        assert_eq!(
            pod["metadata"]["labels"]["statefulset.kubernetes.io/pod-name"],
            format!("ledger-{i}")
        );
        assert_eq!(
            pod["metadata"]["ownerReferences"],
            owner("apps/v1", "StatefulSet", &sts)
        );
        assert_injected(pod, &ns, "ledger", &[("k8s.statefulset.name", "ledger")]);
    }
}

#[tokio::test]
async fn daemonset_pod_on_the_node_is_injected_with_the_daemonset_name() {
    let env = Env::start("ds").await;
    let t = template("node-agent", &[(INJECT_JAVA, "true")]);
    let ns = setup(&env, "node-agent", &t).await;
    let ds = create(
        &env,
        &format!("/apis/apps/v1/namespaces/{ns}/daemonsets"),
        &json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
                "metadata": {"name": "node-agent"},
                "spec": {"selector": {"matchLabels": {"app": "node-agent"}}, "template": t}}),
    )
    .await;
    let pods = running_pods(&env, &ns, "app=node-agent", 1, Duration::from_secs(60)).await;
    let pod = &pods[0];
    assert_eq!(pod["metadata"]["generateName"], "node-agent-");
    assert_eq!(
        pod["metadata"]["ownerReferences"],
        owner("apps/v1", "DaemonSet", &ds)
    );
    // The DaemonSet controller pins its pod to the node by affinity.
    assert_eq!(
        pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
            [0]["matchFields"],
        json!([{"key": "metadata.name", "operator": "In", "values": [NODE]}])
    );
    assert_injected(
        pod,
        &ns,
        "node-agent",
        &[("k8s.daemonset.name", "node-agent")],
    );
}

#[tokio::test]
async fn job_pod_is_injected_with_the_job_name() {
    let env = Env::start("job").await;
    let mut t = template("report", &[(INJECT_JAVA, "true")]);
    t["spec"]["restartPolicy"] = json!("Never");
    let ns = setup(&env, "report", &t).await;
    let job = create(
        &env,
        &format!("/apis/batch/v1/namespaces/{ns}/jobs"),
        &json!({"apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": "report"},
                "spec": {"template": t}}),
    )
    .await;
    let pods = running_pods(
        &env,
        &ns,
        "batch.kubernetes.io/job-name=report",
        1,
        Duration::from_secs(60),
    )
    .await;
    let pod = &pods[0];
    assert_eq!(pod["metadata"]["generateName"], "report-");
    assert_eq!(
        pod["metadata"]["labels"]["batch.kubernetes.io/controller-uid"],
        job["metadata"]["uid"]
    );
    assert_eq!(
        pod["metadata"]["ownerReferences"],
        owner("batch/v1", "Job", &job)
    );
    assert_injected(pod, &ns, "report", &[("k8s.job.name", "report")]);
}

#[tokio::test]
async fn cronjob_pod_is_injected_with_the_cronjob_and_its_real_job_name() {
    let env = Env::start("cron").await;
    let mut t = template("nightly", &[(INJECT_JAVA, "true")]);
    t["spec"]["restartPolicy"] = json!("Never");
    let ns = setup(&env, "nightly", &t).await;
    let cronjob = create(
        &env,
        &format!("/apis/batch/v1/namespaces/{ns}/cronjobs"),
        &json!({"apiVersion": "batch/v1", "kind": "CronJob",
                "metadata": {"name": "nightly"},
                "spec": {"schedule": "* * * * *", "concurrencyPolicy": "Forbid",
                         "jobTemplate": {"spec": {"template": t}}}}),
    )
    .await;
    // The first run is at the next full minute.
    let pods = running_pods(&env, &ns, "app=nightly", 1, Duration::from_secs(100)).await;
    let jobs = list(&env, &format!("/apis/batch/v1/namespaces/{ns}/jobs")).await;
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    let job = &jobs[0];
    let job_name = job["metadata"]["name"].as_str().unwrap();
    // `<cronjob>-<scheduled time in minutes since the epoch>`.
    let minutes = job_name
        .strip_prefix("nightly-")
        .and_then(|m| m.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("job name {job_name}"));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        / 60;
    assert!(
        minutes <= now && now - minutes <= 3,
        "{job_name}: minutes {minutes}, now {now}"
    );
    assert_eq!(
        job["metadata"]["ownerReferences"],
        owner("batch/v1", "CronJob", &cronjob)
    );
    let pod = &pods[0];
    assert_eq!(pod["metadata"]["generateName"], format!("{job_name}-"));
    assert_eq!(
        pod["metadata"]["ownerReferences"],
        owner("batch/v1", "Job", job)
    );
    assert_injected(
        pod,
        &ns,
        "nightly",
        &[("k8s.cronjob.name", "nightly"), ("k8s.job.name", job_name)],
    );
}
