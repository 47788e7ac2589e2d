//! The automatic rollout on the Lease holder: outdated workloads replaced one at a time, watched
//! through their status, stopped at one that never becomes ready.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::harness::{Env, endpoint_spec};
use crate::support::api;
use crate::workloads::list;

use super::{
    HELD, RESTARTED_AT, change_endpoint, create_workload, deployment, java_template, restarted_at,
    spec_hash, until_pods_say,
};

/// The Instrumentation's `status.rollout`, as stored.
pub async fn rollout_status(env: &Env, ns: &str, name: &str) -> Value {
    api::get_instrumentation(&env.client, ns, name).await["status"]["rollout"].clone()
}

/// Waits (at most `limit`) until `status.rollout` has this state for this spec.
pub async fn until_rollout(env: &Env, ns: &str, state: &str, spec: &str, limit: Duration) -> Value {
    let t0 = Instant::now();
    loop {
        let s = rollout_status(env, ns, "java").await;
        if s["state"] == state && s["specHash"] == spec {
            eprintln!("[e2e] status.rollout {state} after {:?}: {s}", t0.elapsed());
            return s;
        }
        assert!(
            t0.elapsed() < limit,
            "status.rollout {state} for {spec} within {limit:?}; have {s}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Follows the namespace's Deployments by a watch and records, after every event, which
/// of them are mid-rollout: restarted (template stamped) and not complete by the same rule
/// the rollout uses. Returns the largest such set seen and the order of first stamps.
/// (most Deployments mid-rollout at once, which, the order they were stamped in).
pub(super) type Seen = (usize, Vec<String>, Vec<String>);

pub(super) struct Observer {
    seen: std::sync::Arc<std::sync::Mutex<Seen>>,
    task: tokio::task::JoinHandle<()>,
}

impl Observer {
    async fn start(env: &Env, ns: &str) -> Observer {
        use futures::StreamExt as _;
        use k8s_openapi::api::apps::v1::Deployment;
        use kube::runtime::watcher;
        use otel_injector::cluster::rollout::{Progress, progress::progress};
        use otel_injector::cluster::workloads::WorkloadObject;
        let api = kube::Api::<Deployment>::namespaced(env.client.clone(), ns);
        let seen = std::sync::Arc::new(std::sync::Mutex::new((0, Vec::new(), Vec::new())));
        let out = seen.clone();
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(async move {
            let mut ready = Some(ready_tx);
            let mut mid: std::collections::BTreeMap<String, bool> = Default::default();
            let mut stream = watcher(api, watcher::Config::default()).boxed();
            while let Some(event) = stream.next().await {
                let objects = match event {
                    Ok(watcher::Event::Apply(d) | watcher::Event::InitApply(d)) => vec![d],
                    Ok(watcher::Event::InitDone) => {
                        if let Some(tx) = ready.take() {
                            let _ = tx.send(());
                        }
                        continue;
                    }
                    _ => continue,
                };
                let mut s = out.lock().unwrap();
                for d in objects {
                    let name = d.metadata.name.clone().unwrap_or_default();
                    let stamped = d
                        .spec
                        .template
                        .metadata
                        .as_ref()
                        .and_then(|m| m.annotations.as_ref())
                        .is_some_and(|a| a.contains_key(RESTARTED_AT));
                    if stamped && !s.1.contains(&name) {
                        s.1.push(name.clone());
                    }
                    let rolling = stamped
                        && progress(&WorkloadObject::Deployment(Box::new(d))) != Progress::Complete;
                    mid.insert(name, rolling);
                }
                let now: Vec<String> = mid
                    .iter()
                    .filter(|(_, m)| **m)
                    .map(|(n, _)| n.clone())
                    .collect();
                if now.len() > s.0 {
                    s.0 = now.len();
                    s.2 = now;
                }
            }
        });
        let _ = tokio::time::timeout(Duration::from_secs(10), ready_rx).await;
        Observer { seen, task }
    }

    fn result(&self) -> Seen {
        let s = self.seen.lock().unwrap();
        (s.0, s.2.clone(), s.1.clone())
    }
}

impl Drop for Observer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[tokio::test]
async fn automatic_rollout_replaces_outdated_workloads_one_at_a_time_and_stops_at_one_never_ready()
{
    let env = Env::start_with(
        "rollout-auto",
        crate::harness::Options {
            rbac: crate::harness::Rbac::Rollout,
            args: [
                "--status=false",
                "--rollout=true",
                "--rollout-concurrency=1",
                "--rollout-timeout=15s",
                "--lease-namespace=otel-injector",
                "--lease-name=otel-injector",
            ]
            .map(String::from)
            .to_vec(),
            ..Default::default()
        },
    )
    .await;
    let ns = env.namespace("shop", &[]).await;
    env.await_webhook(&ns).await;
    let limit = Duration::from_secs(90);
    let inst = json!({
        "apiVersion": "opentelemetry.io/v1alpha1", "kind": "Instrumentation",
        "metadata": {"name": "java", "namespace": ns,
                     "annotations": {"otel-injector/rollout": "automatic"}},
        "spec": endpoint_spec("http://collector-a:4318")
    });
    let r = api::create_instrumentation(&env.client, &ns, &inst)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 201, "{}", r.body);
    let h1 = spec_hash(&env, &ns, "java").await;
    // Nothing ran it before: rolled out at once, with nothing to restart.
    let s = until_rollout(&env, &ns, "Complete", &h1, Duration::from_secs(60)).await;
    assert_eq!(s["message"], "nothing to restart", "{s}");
    assert_eq!(
        (s["restartedCount"].as_i64(), s["pending"].as_i64()),
        (Some(0), Some(0)),
        "{s}"
    );

    let t = |name: &str, labels: &[(&str, &str)]| java_template(name, "true", labels);
    change_endpoint(&env, &ns, "java", "http://collector-a:4318", &t("a", &[])).await;
    for name in ["a", "b", "c"] {
        create_workload(
            &env,
            &ns,
            "deployments",
            &deployment(name, 2, &t(name, &[])),
        )
        .await;
    }
    let mut quiet = deployment("quiet", 1, &t("quiet", &[]));
    quiet["metadata"]["annotations"] = json!({"otel-injector/rollout": "disabled"});
    create_workload(&env, &ns, "deployments", &quiet).await;
    let held = t("z-held", &[(HELD, "not-ready")]);
    create_workload(&env, &ns, "deployments", &deployment("z-held", 1, &held)).await;
    let v1 = format!("java=injected {ns}/java {h1}");
    for (sel, n) in [
        ("app=a", 2),
        ("app=b", 2),
        ("app=c", 2),
        ("app=quiet", 1),
        ("app=z-held", 1),
    ] {
        until_pods_say(&env, &ns, sel, n, &v1, limit).await;
    }

    let observer = Observer::start(&env, &ns).await;
    let t0 = Instant::now();
    change_endpoint(&env, &ns, "java", "http://collector-b:4318", &t("a", &[])).await;
    let h2 = spec_hash(&env, &ns, "java").await;
    let s = until_rollout(&env, &ns, "Stopped", &h2, Duration::from_secs(120)).await;
    eprintln!(
        "[e2e] automatic rollout stopped {:?} after the spec change",
        t0.elapsed()
    );
    let workload = format!("Deployment/{ns}/z-held");
    let message = "not complete within 15s: 1 old pods still running";
    assert_eq!(s["workload"], workload.as_str(), "{s}");
    assert_eq!(s["reason"], "Timeout", "{s}");
    assert_eq!(s["message"], message, "{s}");
    assert_eq!(
        s["restarted"],
        json!([
            format!("Deployment/{ns}/a"),
            format!("Deployment/{ns}/b"),
            format!("Deployment/{ns}/c"),
            workload
        ]),
        "{s}"
    );
    assert_eq!(
        (s["restartedCount"].as_i64(), s["pending"].as_i64()),
        (Some(4), Some(0)),
        "{s}"
    );

    // The cap: never two Deployments restarted and incomplete at once.
    let (most, which, order) = observer.result();
    eprintln!(
        "[e2e] at most {most} Deployment(s) mid-rollout at once ({which:?}); stamped in order {order:?}"
    );
    assert_eq!(most, 1, "{which:?}");
    assert_eq!(order, ["a", "b", "c", "z-held"]);

    // The restarted workloads run the new spec; the opted-out one was never restarted.
    let v2 = format!("java=injected {ns}/java {h2}");
    for sel in ["app=a", "app=b", "app=c"] {
        until_pods_say(&env, &ns, sel, 2, &v2, limit).await;
    }
    until_pods_say(&env, &ns, "app=quiet", 1, &v1, limit).await;
    assert_eq!(restarted_at(&env, &ns, "deployments", "quiet").await, None);

    // A Warning Event on the Instrumentation names the workload and why.
    let events = list(
        &env,
        &format!("/apis/events.k8s.io/v1/namespaces/{ns}/events"),
    )
    .await;
    let stopped: Vec<&Value> = events
        .iter()
        .filter(|e| e["reason"] == "RolloutStopped")
        .collect();
    assert_eq!(stopped.len(), 1, "{events:?}");
    let e = stopped[0];
    assert_eq!(
        (
            e["type"].as_str(),
            e["action"].as_str(),
            e["reportingController"].as_str()
        ),
        (Some("Warning"), Some("Rollout"), Some("otel-injector")),
        "{e}"
    );
    assert_eq!(
        (
            e["regarding"]["kind"].as_str(),
            e["regarding"]["name"].as_str()
        ),
        (Some("Instrumentation"), Some("java")),
        "{e}"
    );
    assert_eq!(
        (e["related"]["kind"].as_str(), e["related"]["name"].as_str()),
        (Some("Deployment"), Some("z-held")),
        "{e}"
    );
    assert_eq!(e["note"], format!("{workload}: Timeout: {message}"), "{e}");
    eprintln!("[e2e] event: {e}");

    // Not retried for this spec: still Stopped, the held Deployment stamped once.
    let stamp = restarted_at(&env, &ns, "deployments", "z-held").await;
    tokio::time::sleep(Duration::from_secs(7)).await;
    let again = rollout_status(&env, &ns, "java").await;
    assert_eq!(
        (again["state"].as_str(), again["specHash"].as_str()),
        (Some("Stopped"), Some(h2.as_str()))
    );
    assert_eq!(
        restarted_at(&env, &ns, "deployments", "z-held").await,
        stamp
    );

    // Without the annotation, status.rollout goes; with it again, the spec is rolled out
    // again: only z-held is still outdated, and it stops there again.
    let path = format!("/apis/opentelemetry.io/v1alpha1/namespaces/{ns}/instrumentations/java");
    let annotate =
        |v: Option<&str>| json!({"metadata": {"annotations": {"otel-injector/rollout": v}}});
    let r = api::merge_patch(&env.client, &path, &annotate(None))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 200, "{}", r.body);
    let t0 = Instant::now();
    while !rollout_status(&env, &ns, "java").await.is_null() {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "status.rollout still there"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let r = api::merge_patch(&env.client, &path, &annotate(Some("automatic")))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 200, "{}", r.body);
    let s = until_rollout(&env, &ns, "Stopped", &h2, Duration::from_secs(90)).await;
    assert_eq!(s["restarted"], json!([workload]), "{s}");
    assert_eq!(s["reason"], "Timeout", "{s}");
    assert_ne!(
        restarted_at(&env, &ns, "deployments", "z-held").await,
        stamp
    );
}
