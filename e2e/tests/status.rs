//! The status controller through the real control plane: Deployments whose pods the real
//! controller manager makes (and the garbage collector deletes) are counted in the
//! Instrumentation's status as injected, outdated, skipped or missed, per workload; `kubectl get
//! otelinst` shows the counts; a missing exporter TLS Secret degrades it; of two replicas one
//! holds the Lease and writes, and the other takes over when it dies; 1,000 pods converge in
//! seconds, and the pod watch's memory is measured.
//!
//! The first test's pods ask for injection and the test's webhook records the outcome on
//! them (`otel-injector/status`, `otel-injector/injected`); the others' pods carry the
//! outcome in their template, as the webhook writes it, so that their counts do not depend on
//! the webhook's choices (and the 1,000 pods measure the status controller alone).

use otel_injector::keys::{INJECT_JAVA, INJECTED_LABEL, STATUS_ANNOTATION};
use std::time::{Duration, Instant};

use axum::http::Method;
use futures::StreamExt as _;
use otel_injector::crd::{Instrumentation, SpecHash};
use serde_json::{Value, json};

use crate::harness::{Env, Options, Rbac, cluster, is_injected};
use crate::support::api::{self, instrumentation_path};
use crate::support::chart;
use crate::support::controllers::toleration;
use crate::support::identity::NAMESPACE;
use crate::support::process::usage;
use crate::support::webhook::{self, Webhook};
use crate::workloads::{create, running_pods};

/// The Lease of every status test (the shipped Role grants this name only).
const LEASE: &str = "otel-injector";
/// Short, so that a Lease left held by an earlier test's killed webhook expires soon.
const LEASE_DURATION: &str = "3s";

fn status_args(identity: &str) -> Vec<String> {
    vec![
        "--status=true".into(),
        format!("--lease-identity={identity}"),
        format!("--lease-namespace={NAMESPACE}"),
        format!("--lease-name={LEASE}"),
        format!("--lease-duration={LEASE_DURATION}"),
        "--verify-exporter-tls=true".into(),
    ]
}

/// A webhook with the status controller, alone in the cluster (no other test's webhook runs
/// meanwhile).
async fn start(id: &str) -> Env {
    start_with(id, &[]).await
}

/// [`start`] with further `serve` flags.
async fn start_with(id: &str, extra: &[&str]) -> Env {
    let mut args = status_args(&format!("{id}-a"));
    args.extend(extra.iter().map(|a| a.to_string()));
    Env::start_with(
        id,
        Options {
            rbac: Rbac::Status,
            exclusive: true,
            args,
            ..Options::default()
        },
    )
    .await
}

/// The spec digest of the Instrumentation as stored (what the webhook records on the pods).
async fn spec_hash(env: &Env, ns: &str, name: &str) -> String {
    let stored = get(env, &instrumentation_path(ns, name)).await;
    let inst: Instrumentation = serde_json::from_value(stored).expect("an Instrumentation");
    SpecHash::of(&inst.spec).to_string()
}

pub async fn get(env: &Env, path: &str) -> Value {
    let r = api::send(&env.client, Method::GET, path, None)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 200, "GET {path}: {}", r.body);
    r.body
}

/// A pod template (tolerating the kwok node) whose pods carry the outcome annotation and
/// label the webhook writes.
fn template(app: &str, outcome: &str, injected: bool) -> Value {
    json!({
        "metadata": {
            "labels": {"app": app, INJECTED_LABEL: injected.to_string()},
            "annotations": {STATUS_ANNOTATION: outcome}
        },
        "spec": {
            "containers": [{"name": "app", "image": format!("shop/{app}:2.1.0")}],
            "tolerations": [toleration()]
        }
    })
}

pub async fn deployment(env: &Env, ns: &str, name: &str, replicas: u32, template: Value) {
    create(
        env,
        &format!("/apis/apps/v1/namespaces/{ns}/deployments"),
        &json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": name},
                "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                         "template": template}}),
    )
    .await;
}

async fn merge_patch(env: &Env, path: &str, patch: Value) {
    let r = api::merge_patch(&env.client, path, &patch)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 200, "PATCH {path}: {}", r.body);
}

async fn scale(env: &Env, ns: &str, name: &str, replicas: u32) {
    scale_with(&env.client, ns, name, replicas).await;
}

async fn scale_with(client: &kube::Client, ns: &str, name: &str, replicas: u32) {
    let path = format!("/apis/apps/v1/namespaces/{ns}/deployments/{name}");
    let r = api::merge_patch(client, &path, &json!({"spec": {"replicas": replicas}}))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 200, "PATCH {path}: {}", r.body);
}

/// What the tests compare of a status: the counts, the reasons and the workloads (times
/// left out).
fn counts(status: &Value) -> Value {
    let workloads: Vec<Value> = status["workloads"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|w| {
            json!([
                w["kind"],
                w["name"],
                w["injected"],
                w["outdated"],
                w["skipped"]
            ])
        })
        .collect();
    json!({
        "injected": status["injected"], "outdated": status["outdated"],
        "skipped": status["skipped"], "skippedReasons": status["skippedReasons"],
        "workloads": workloads,
    })
}

/// Waits (at most `limit`) until the Instrumentation's status shows `want` (see [`counts`]);
/// returns the whole status and how long it took.
async fn await_status(
    env: &Env,
    ns: &str,
    name: &str,
    want: Value,
    limit: Duration,
) -> (Value, Duration) {
    let t0 = Instant::now();
    loop {
        let stored = get(env, &instrumentation_path(ns, name)).await;
        let status = stored["status"].clone();
        if counts(&status) == want {
            return (status, t0.elapsed());
        }
        assert!(
            t0.elapsed() < limit,
            "status of {ns}/{name} within {limit:?}: want {want}, have {}\n{}",
            counts(&status),
            env.webhook.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// [`await_status`] with a client only (also the policy tests': the status counts their pods).
pub async fn await_status_with(
    client: &kube::Client,
    ns: &str,
    name: &str,
    want: Value,
    limit: Duration,
) {
    let t0 = Instant::now();
    let path = instrumentation_path(ns, name);
    loop {
        let r = api::send(client, Method::GET, &path, None)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        if counts(&r.body["status"]) == want {
            return;
        }
        assert!(
            t0.elapsed() < limit,
            "status of {ns}/{name} within {limit:?}: want {want}, have {}",
            counts(&r.body["status"])
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub fn want(injected: u64, outdated: u64, skipped: Value, workloads: Value) -> Value {
    let total: u64 = skipped
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["pods"].as_u64())
        .sum();
    json!({"injected": injected, "outdated": outdated, "skipped": total,
           "skippedReasons": if total == 0 { Value::Null } else { skipped },
           "workloads": workloads})
}

/// The value of one sample of the metrics text (`name{labels} value`), 0 when absent.
fn metric(text: &str, series: &str) -> f64 {
    webhook::metric(text, series).unwrap_or(0.0)
}

/// The pods of the whole cluster (other tests' too) that carry the injected label and are
/// not terminating: what the status controller's watch holds.
async fn labeled_pods(client: &kube::Client) -> f64 {
    let r = api::send(
        client,
        Method::GET,
        &format!("/api/v1/pods?labelSelector={INJECTED_LABEL}"),
        None,
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 200, "{}", r.body);
    r.body["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .count() as f64
}

/// Waits (at most 10 s: the watch may still be taking another test's deletions) until the
/// webhook's watch holds as many pods as the cluster has labeled ones (other tests' too).
async fn await_watched(client: &kube::Client, w: &Webhook) {
    let t0 = Instant::now();
    loop {
        let (watched, labeled) = (
            metric(&w.metrics().await, "otel_injector_status_pods_watched"),
            labeled_pods(client).await,
        );
        if watched == labeled {
            return;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "pods watched {watched}, labeled in the cluster {labeled}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

const WRITES_OK: &str = "otel_injector_status_writes_total{result=\"success\"}";
const LEADER: &str = "otel_injector_leader";

/// The replica's successful status writes, once at least `n`: a write is counted when the
/// API server's answer reaches it, just after the API server stored the status the test
/// already read (reading the counter at once lost that race in a run of the repeated suite).
async fn writes_at_least(w: &Webhook, n: f64) -> f64 {
    let t0 = Instant::now();
    loop {
        let writes = metric(&w.metrics().await, WRITES_OK);
        if writes >= n {
            return writes;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "{writes} status writes counted, not {n}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn status_counts_follow_deployments_scaling_deletion_and_spec_changes() {
    // Through the webhook: the pods ask (inject-java) and the webhook records the outcome.
    let env = start("status").await;
    let ns = env.namespace("shop", &[]).await;
    env.await_webhook(&ns).await;
    // Made before its Instrumentation exists: skipped, for want of it.
    let legacy = crate::workloads::template("legacy", &[(INJECT_JAVA, "java")]);
    deployment(&env, &ns, "legacy", 1, legacy).await;
    let pods = running_pods(&env, &ns, "app=legacy", 1, Duration::from_secs(60)).await;
    assert_eq!(
        pods[0]["metadata"]["annotations"][STATUS_ANNOTATION],
        format!("java=skipped instrumentation_not_found {ns}/java").as_str()
    );
    assert_eq!(pods[0]["metadata"]["labels"][INJECTED_LABEL], "false");
    env.instrumentation(
        &ns,
        "java",
        json!({"exporter": {"endpoint": "http://collector.example:4318"}}),
    )
    .await;
    let checkout = crate::workloads::template("checkout", &[(INJECT_JAVA, "true")]);
    let mut probe = json!({"apiVersion": "v1", "kind": "Pod",
                           "metadata": checkout["metadata"].clone(), "spec": checkout["spec"].clone()});
    probe["metadata"]["name"] = json!("checkout-dry-run");
    env.until_dry_run(&ns, &probe, "injection", |r| is_injected(&r.body))
        .await;
    let hash = spec_hash(&env, &ns, "java").await;
    deployment(&env, &ns, "checkout", 3, checkout).await;
    let pods = running_pods(&env, &ns, "app=checkout", 3, Duration::from_secs(60)).await;
    for p in &pods {
        assert_eq!(
            p["metadata"]["annotations"][STATUS_ANNOTATION],
            format!("java=injected {ns}/java {hash}").as_str()
        );
        assert_eq!(p["metadata"]["labels"][INJECTED_LABEL], "true");
    }
    let reasons = json!([{"reason": "instrumentation_not_found", "pods": 1}]);

    // The stalest workload first.
    let (status, took) = await_status(
        &env,
        &ns,
        "java",
        want(
            3,
            0,
            reasons.clone(),
            json!([
                ["Deployment", "legacy", 0, 0, 1],
                ["Deployment", "checkout", 3, 0, 0]
            ]),
        ),
        Duration::from_secs(60),
    )
    .await;
    eprintln!("[e2e] status: 3 injected and 1 skipped pods counted {took:?} after they ran");
    assert_eq!(status["specHash"], hash.as_str());
    assert_eq!(status["observedGeneration"], 1);
    let conditions: Vec<Value> = status["conditions"]
        .as_array()
        .expect("conditions")
        .iter()
        .map(|c| json!([c["type"], c["status"], c["reason"]]))
        .collect();
    assert_eq!(
        conditions,
        [
            json!(["Ready", "True", "Readable"]),
            json!(["Degraded", "False", "AsExpected"])
        ]
    );
    // Only its own fields, under its own field manager.
    let stored = get(&env, &instrumentation_path(&ns, "java")).await;
    let managers: Vec<Value> = stored["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["subresource"] == "status")
        .map(|m| json!([m["manager"], m["operation"]]))
        .collect();
    assert_eq!(managers, [json!(["otel-injector-status", "Apply"])]);

    // `kubectl get otelinst`: the columns (kubectl reads the preferred version, v1beta1,
    // through the conversion webhook).
    let cp = cluster().await;
    let out = chart::kubectl(cp, &["get", "otelinst", "-n", &ns]).unwrap_or_else(|e| panic!("{e}"));
    assert!(out.ok, "{}", out.stderr);
    eprintln!("[e2e] kubectl get otelinst -n {ns}:\n{}", out.stdout);
    let lines: Vec<Vec<&str>> = out
        .stdout
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        lines[0],
        [
            "NAME", "AGE", "ENDPOINT", "PROTOCOL", "SAMPLER", "SAMPLER", "ARG", "INJECTED",
            "OUTDATED", "SKIPPED", "MISSED", "FAILING", "ROLLED", "BACK"
        ]
    );
    assert_eq!(lines.len(), 2, "{}", out.stdout);
    // The protocol and sampler columns are blank, and the failing count (no
    // --detect-failures): the row is name, age, endpoint and the four counts.
    let row = &lines[1];
    assert_eq!(row.len(), 7, "{}", out.stdout);
    assert_eq!(row[0], "java");
    assert_eq!(
        row[2..],
        ["http://collector.example:4318", "3", "0", "1", "0"]
    );

    // Scaled up and down: the counts follow.
    scale(&env, &ns, "checkout", 5).await;
    await_status(
        &env,
        &ns,
        "java",
        want(
            5,
            0,
            reasons.clone(),
            json!([
                ["Deployment", "legacy", 0, 0, 1],
                ["Deployment", "checkout", 5, 0, 0]
            ]),
        ),
        Duration::from_secs(60),
    )
    .await;
    scale(&env, &ns, "checkout", 1).await;
    await_status(
        &env,
        &ns,
        "java",
        want(
            1,
            0,
            reasons.clone(),
            json!([
                ["Deployment", "legacy", 0, 0, 1],
                ["Deployment", "checkout", 1, 0, 0]
            ]),
        ),
        Duration::from_secs(60),
    )
    .await;

    // A new spec: the running pod was injected with the old one.
    merge_patch(
        &env,
        &instrumentation_path(&ns, "java"),
        json!({"spec": {"exporter": {"endpoint": "http://collector.example:4317"}}}),
    )
    .await;
    let new_hash = spec_hash(&env, &ns, "java").await;
    assert_ne!(new_hash, hash);
    let (status, _) = await_status(
        &env,
        &ns,
        "java",
        want(
            0,
            1,
            reasons.clone(),
            json!([
                ["Deployment", "checkout", 0, 1, 0],
                ["Deployment", "legacy", 0, 0, 1]
            ]),
        ),
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(status["specHash"], new_hash.as_str());
    assert_eq!(status["observedGeneration"], 2);
    // Restarted (as `kubectl rollout restart` does): the webhook injects the new spec.
    merge_patch(
        &env,
        &format!("/apis/apps/v1/namespaces/{ns}/deployments/checkout"),
        json!({"spec": {"template": {"metadata": {"annotations": {
            "kubectl.kubernetes.io/restartedAt": "2026-12-01T07:00:00Z"}}}}}),
    )
    .await;
    await_status(
        &env,
        &ns,
        "java",
        want(
            1,
            0,
            reasons.clone(),
            json!([
                ["Deployment", "legacy", 0, 0, 1],
                ["Deployment", "checkout", 1, 0, 0]
            ]),
        ),
        Duration::from_secs(90),
    )
    .await;

    // Deleted: its pods go, and with them its counts. The harness runs no garbage collector
    // (see support/controllers.rs), so the Deployment is scaled to zero first, as the
    // collector would delete its ReplicaSet's pods.
    scale(&env, &ns, "legacy", 0).await;
    let r = api::send(
        &env.client,
        Method::DELETE,
        &format!("/apis/apps/v1/namespaces/{ns}/deployments/legacy"),
        None,
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 200, "{}", r.body);
    await_status(
        &env,
        &ns,
        "java",
        want(
            1,
            0,
            json!([]),
            json!([["Deployment", "checkout", 1, 0, 0]]),
        ),
        Duration::from_secs(90),
    )
    .await;
    let metrics = env.webhook.metrics().await;
    assert_eq!(metric(&metrics, LEADER), 1.0);
    await_watched(&env.client, &env.webhook).await;
    // One write per state awaited above.
    writes_at_least(&env.webhook, 6.0).await;
}

#[tokio::test]
async fn a_missing_exporter_tls_secret_degrades_until_it_exists() {
    let env = start("status-tls").await;
    let ns = env.namespace("shop", &[]).await;
    env.instrumentation(
        &ns,
        "secure",
        json!({"exporter": {"endpoint": "https://collector.example:4318",
                            "tls": {"secretName": "otel-tls", "ca_file": "ca.crt"}}}),
    )
    .await;
    let condition = |status: &Value, type_: &str| -> Value {
        status["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == type_)
            .map(|c| json!([c["status"], c["reason"], c["message"]]))
            .unwrap_or(Value::Null)
    };
    let message = format!(
        "spec.exporter.tls names objects that do not exist: Secret {ns}/otel-tls; pods there \
         are not injected"
    );
    let t0 = Instant::now();
    loop {
        let status = get(&env, &instrumentation_path(&ns, "secure")).await["status"].clone();
        if condition(&status, "Degraded") != Value::Null {
            assert_eq!(
                condition(&status, "Degraded"),
                json!(["True", "ExporterTLSSecretMissing", message])
            );
            assert_eq!(
                condition(&status, "Ready"),
                json!(["False", "ExporterTLSSecretMissing", message])
            );
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "{status}\n{}",
            env.webhook.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let secret = json!({"apiVersion": "v1", "kind": "Secret",
                        "metadata": {"name": "otel-tls"}, "data": {"ca.crt": "Q0EK"}});
    create(&env, &format!("/api/v1/namespaces/{ns}/secrets"), &secret).await;
    let t0 = Instant::now();
    loop {
        let status = get(&env, &instrumentation_path(&ns, "secure")).await["status"].clone();
        if condition(&status, "Degraded")[0] == "False" {
            assert_eq!(
                condition(&status, "Ready"),
                json!([
                    "True",
                    "Readable",
                    "readable; the Secret and ConfigMap of spec.exporter.tls exist"
                ])
            );
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "{status}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The Lease as stored: (holder, transitions).
async fn lease(env: &Env) -> (Option<String>, i64) {
    lease_with(&env.client).await
}

/// Waits until exactly one of `replicas` (webhook, identity) reports itself leader and holds
/// the Lease; returns its index and how long it took.
async fn await_one_leader(
    env: &Env,
    replicas: &[(&Webhook, &str)],
    limit: Duration,
) -> (usize, Duration) {
    let t0 = Instant::now();
    loop {
        let mut leaders = Vec::new();
        for (i, (w, _)) in replicas.iter().enumerate() {
            if metric(&w.metrics().await, LEADER) == 1.0 {
                leaders.push(i);
            }
        }
        let (holder, _) = lease(env).await;
        if let [only] = leaders[..]
            && holder.as_deref() == Some(replicas[only].1)
        {
            return (only, t0.elapsed());
        }
        assert!(
            t0.elapsed() < limit,
            "one leader within {limit:?}: leaders {leaders:?}, holder {holder:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn of_two_replicas_one_writes_and_the_other_takes_over() {
    let mut env = start("status-ha").await;
    let mut second = Webhook::start_with(
        std::path::Path::new(env!("CARGO_BIN_EXE_e2e-otel-injector")),
        &env.identity.kubeconfig,
        &status_args("status-ha-b"),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    second
        .wait_ready(Duration::from_secs(30))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let names = ["status-ha-a", "status-ha-b"];
    let (first, took) = await_one_leader(
        &env,
        &[(&env.webhook, names[0]), (&second, names[1])],
        Duration::from_secs(20),
    )
    .await;
    eprintln!("[e2e] status-ha: {} leads after {took:?}", names[first]);
    let (_, transitions_before) = lease(&env).await;

    let ns = env.namespace("shop", &[]).await;
    env.instrumentation(
        &ns,
        "java",
        json!({"exporter": {"endpoint": "http://collector.example:4318"}}),
    )
    .await;
    let hash = spec_hash(&env, &ns, "java").await;
    let injected = format!("java=injected {ns}/java {hash}");
    deployment(&env, &ns, "web", 2, template("web", &injected, true)).await;
    let web = |n: u64| want(n, 0, json!([]), json!([["Deployment", "web", n, 0, 0]]));
    await_status(&env, &ns, "java", web(2), Duration::from_secs(60)).await;
    // Both watch; only the leader wrote.
    let leader_writes = writes_at_least([&env.webhook, &second][first], 1.0).await;
    let writes = [
        metric(&env.webhook.metrics().await, WRITES_OK),
        metric(&second.metrics().await, WRITES_OK),
    ];
    assert!(writes[first] >= leader_writes, "{writes:?}");
    assert_eq!(writes[1 - first], 0.0, "{writes:?}");
    for w in [&env.webhook, &second] {
        await_watched(&env.client, w).await;
    }

    // The leader dies without releasing (SIGKILL): the other takes over once the Lease
    // expires (3 s), then keeps the status current.
    let (leader, survivor) = if first == 0 {
        (&mut env.webhook, &mut second)
    } else {
        (&mut second, &mut env.webhook)
    };
    let t0 = Instant::now();
    leader.stop();
    loop {
        if metric(&survivor.metrics().await, LEADER) == 1.0 {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "{}", survivor.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let failover = t0.elapsed();
    eprintln!("[e2e] status-ha: the survivor leads {failover:?} after the leader was killed");
    // At most the duration (3 s) after the last renewal, plus one try (1 s), plus slack.
    assert!(failover < Duration::from_secs(6), "{failover:?}");
    let (holder, transitions) = lease_with(&env.client).await;
    assert_eq!(holder.as_deref(), Some(names[1 - first]));
    assert_eq!(transitions, transitions_before + 1);
    let survivor = if first == 0 {
        &mut second
    } else {
        &mut env.webhook
    };
    scale_with(&env.client, &ns, "web", 3).await;
    await_status_with(&env.client, &ns, "java", web(3), Duration::from_secs(60)).await;
    writes_at_least(survivor, 1.0).await;

    // A clean exit (SIGTERM) releases the Lease at once, well before it would expire.
    let t0 = Instant::now();
    survivor
        .terminate(Duration::from_secs(10))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let (holder, _) = lease_with(&env.client).await;
    assert_eq!(holder, None, "released; exited in {:?}", t0.elapsed());
}

async fn lease_with(client: &kube::Client) -> (Option<String>, i64) {
    let r = api::send(
        client,
        Method::GET,
        &format!("/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{LEASE}"),
        None,
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    (
        r.body["spec"]["holderIdentity"].as_str().map(str::to_owned),
        r.body["spec"]["leaseTransitions"].as_i64().unwrap_or(0),
    )
}

/// Two electors of one Lease in this process (the library's `elect`, the admin client): one
/// leads; when it releases, the other takes over at its next try and the transitions count
/// it; when every handle of the last is dropped, the Lease is released.
#[tokio::test]
async fn two_electors_of_one_lease_take_turns() {
    use otel_injector::cluster::lease::{LeaseConfig, elect};
    let client = cluster().await.client();
    let name = "e2e-electors";
    let config = |identity: &str| LeaseConfig {
        namespace: "default".into(),
        name: name.into(),
        identity: identity.into(),
        duration: Duration::from_secs(3),
        renew_every: Duration::from_secs(1),
    };
    let path = format!("/apis/coordination.k8s.io/v1/namespaces/default/leases/{name}");
    let _ = api::send(&client, Method::DELETE, &path, None).await;
    let read = || async {
        let r = api::send(&client, Method::GET, &path, None)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        (
            r.body["spec"]["holderIdentity"].as_str().map(str::to_owned),
            r.body["spec"]["leaseTransitions"].as_i64(),
            r.body["spec"]["leaseDurationSeconds"].as_i64(),
        )
    };
    let a = elect(client.clone(), config("a"));
    let until = |l: otel_injector::cluster::Leadership, want: bool| async move {
        let t0 = Instant::now();
        while l.is_leader() != want {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "leader={want} in 10 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        t0.elapsed()
    };
    until(a.clone(), true).await;
    assert_eq!(read().await, (Some("a".into()), Some(0), Some(3)));
    let b = elect(client.clone(), config("b"));
    // b waits while a renews: well past the duration.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(a.is_leader() && !b.is_leader());
    assert_eq!(read().await.0.as_deref(), Some("a"));
    // a released: b takes over at its next try, not after the duration.
    a.release().await;
    assert!(!a.is_leader());
    let took = until(b.clone(), true).await;
    assert!(took < Duration::from_millis(2500), "{took:?}");
    assert_eq!(read().await, (Some("b".into()), Some(1), Some(3)));
    // Every handle of b dropped: its loop ends and releases the Lease.
    drop(b);
    let t0 = Instant::now();
    while read().await.0.is_some() {
        assert!(t0.elapsed() < Duration::from_secs(5), "released");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Creates `n` bare pods (unscheduled: they do not tolerate the kwok node) carrying the
/// outcome, 32 at a time; returns when the last was created.
async fn bare_pods(env: &Env, ns: &str, n: usize, outcome: &str) {
    let pods = futures::stream::iter(0..n).map(|i| {
        let body = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("p-{i:05}"),
                         "labels": {INJECTED_LABEL: "true"},
                         "annotations": {STATUS_ANNOTATION: outcome}},
            "spec": {"containers": [{"name": "app", "image": "shop/app:1"}]}});
        let client = env.client.clone();
        let path = format!("/api/v1/namespaces/{ns}/pods");
        async move {
            let r = api::send(&client, Method::POST, &path, Some(&body))
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(r.status, 201, "{}", r.body);
        }
    });
    pods.buffer_unordered(32).collect::<Vec<()>>().await;
}

/// 1,000 pods (and, ignored by default, 3,000): the time from the last pod's creation to the
/// status counting them all, and the webhook's resident memory before and after.
/// Creates `n` injected pods and waits for the status to count them; returns the webhook's
/// RSS growth per pod and how long the count took after the last pod was created.
async fn many_pods(id: &str, n: usize, extra: &[&str]) -> (u64, Duration) {
    let env = start_with(id, extra).await;
    let ns = env.namespace("load", &[]).await;
    env.instrumentation(
        &ns,
        "java",
        json!({"exporter": {"endpoint": "http://collector.example:4318"}}),
    )
    .await;
    let hash = spec_hash(&env, &ns, "java").await;
    await_status(
        &env,
        &ns,
        "java",
        want(0, 0, json!([]), json!([])),
        Duration::from_secs(30),
    )
    .await;
    let pid = env.webhook.pid().expect("running");
    let before = usage(pid).rss;
    bare_pods(&env, &ns, n, &format!("java=injected {ns}/java {hash}")).await;
    let n64 = u64::try_from(n).unwrap();
    let (_, took) = await_status(
        &env,
        &ns,
        "java",
        want(n64, 0, json!([]), json!([])),
        Duration::from_secs(30),
    )
    .await;
    let after = usage(pid).rss;
    let per_pod = after.saturating_sub(before) / n64;
    eprintln!(
        "[e2e] status of {n} pods ({extra:?}) converged {took:?} after the last pod was created; \
         webhook VmRSS {before} -> {after} bytes: {per_pod} bytes per pod, {} KiB per 1,000 pods",
        per_pod * 1000 / 1024
    );
    assert!(took < Duration::from_secs(30));
    await_watched(&env.client, &env.webhook).await;
    // Delete the namespace's pods at once, so that later tests do not wait for them.
    let _ = api::send(
        &env.client,
        Method::DELETE,
        &format!("/api/v1/namespaces/{ns}/pods?gracePeriodSeconds=0"),
        None,
    )
    .await;
    (per_pod, took)
}

#[tokio::test]
async fn a_thousand_pods_converge_within_seconds() {
    many_pods("status-1k", 1000, &[]).await;
}

#[tokio::test]
#[ignore = "a measurement: cargo test -p otel-injector-e2e --test e2e -- --ignored status_memory"]
async fn status_memory_of_three_thousand_pods() {
    many_pods("status-3k", 3000, &[]).await;
}

/// The safety net's cost: the same 3,000 pods watched as metadata, then whole
/// (`--detect-failures`), in one run.
#[tokio::test]
#[ignore = "a measurement: cargo test -p otel-injector-e2e --test e2e -- --ignored status_memory"]
async fn status_memory_with_and_without_failure_detection() {
    let (meta, meta_took) = many_pods("status-3k-meta", 3000, &[]).await;
    let (whole, whole_took) = many_pods("status-3k-whole", 3000, &["--detect-failures=true"]).await;
    eprintln!(
        "[e2e] --detect-failures: {whole} vs {meta} bytes per pod ({:.2}x), converged {whole_took:?} vs {meta_took:?}",
        whole as f64 / meta.max(1) as f64
    );
}
