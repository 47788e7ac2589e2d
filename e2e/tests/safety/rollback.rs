//! The rollback: a failing workload rolled back, kept so, tried again on a new spec; the canary
//! that stops a bad rollout after one workload.

use std::time::{Duration, Instant};

use axum::http::Method;
use serde_json::{Value, json};

use crate::harness::{Env, Rbac, cluster, is_injected};
use crate::status::deployment;
use crate::status::get;
use crate::support::api::{self, instrumentation_path};
use crate::support::chart;
use crate::workloads::{running_pods, template};

use super::{CRASH_WITH_AGENT, events_of, start};
use otel_injector::keys::INJECT_JAVA;

/// The pods of `app` in `ns` that are not terminating.
pub(super) async fn live_pods(env: &Env, ns: &str, app: &str) -> Vec<Value> {
    let list = get(
        env,
        &format!("/api/v1/namespaces/{ns}/pods?labelSelector=app={app}"),
    )
    .await;
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .cloned()
        .collect()
}

/// Waits until `app` has exactly one live pod, Ready and skipped `rolled_back`; returns it.
pub(super) async fn rolled_back_pod(env: &Env, ns: &str, app: &str, limit: Duration) -> Value {
    let t0 = Instant::now();
    let want = format!("java=skipped rolled_back {ns}/java");
    loop {
        let pods = live_pods(env, ns, app).await;
        if let [p] = pods.as_slice()
            && p["metadata"]["annotations"]["otel-injector/status"] == want.as_str()
            && p["status"]["containerStatuses"][0]["ready"] == true
        {
            return p.clone();
        }
        assert!(
            t0.elapsed() < limit,
            "{app}: one Ready pod without the agent within {limit:?}; have {}\n{}",
            json!(
                pods.iter()
                    .map(|p| json!([
                        p["metadata"]["name"],
                        p["metadata"]["annotations"]["otel-injector/status"],
                        p["status"]["containerStatuses"][0]["ready"]
                    ]))
                    .collect::<Vec<_>>()
            ),
            env.webhook.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Deletes `pod` (its controller makes another).
pub(super) async fn delete_pod(env: &Env, ns: &str, pod: &Value) {
    let name = pod["metadata"]["name"].as_str().expect("a name");
    let r = api::send(
        &env.client,
        Method::DELETE,
        &format!("/api/v1/namespaces/{ns}/pods/{name}"),
        None,
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 200, "{}", r.body);
}

/// The Deployment's pod template annotation `otel-injector/rolled-back`, once it is set.
pub(super) async fn marker(env: &Env, ns: &str, name: &str, limit: Duration) -> String {
    marker_of(env, ns, "deployments", name, limit).await
}

/// [`marker`] of a workload of any kind (`resource`: deployments, statefulsets, daemonsets).
pub(super) async fn marker_of(
    env: &Env,
    ns: &str,
    resource: &str,
    name: &str,
    limit: Duration,
) -> String {
    let t0 = Instant::now();
    loop {
        let d = get(
            env,
            &format!("/apis/apps/v1/namespaces/{ns}/{resource}/{name}"),
        )
        .await;
        if let Some(m) =
            d["spec"]["template"]["metadata"]["annotations"]["otel-injector/rolled-back"].as_str()
        {
            return m.to_owned();
        }
        assert!(
            t0.elapsed() < limit,
            "{name} rolled back within {limit:?}\n{}",
            env.webhook.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_failing_workload_is_rolled_back_stays_so_and_is_tried_again_on_a_new_spec() {
    let (mut env, ns) = start("rollback", Rbac::SafetyNet, &["--rollback=true"]).await;
    let inst = json!({"apiVersion": "opentelemetry.io/v1alpha1", "kind": "Instrumentation",
        "metadata": {"name": "java", "annotations": {"otel-injector/on-failure": "rollback"}},
        "spec": {"exporter": {"endpoint": "http://collector.example:4318"}}});
    let r = api::create_instrumentation(&env.client, &ns, &inst)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 201, "{}", r.body);
    let mut crashy = template("crashy", &[(INJECT_JAVA, "true")]);
    crashy["metadata"]["labels"][CRASH_WITH_AGENT] = json!("Error");
    let mut probe = json!({"apiVersion": "v1", "kind": "Pod",
                           "metadata": crashy["metadata"].clone(), "spec": crashy["spec"].clone()});
    probe["metadata"]["name"] = json!("crashy-dry-run");
    env.until_dry_run(&ns, &probe, "injection", |r| is_injected(&r.body))
        .await;
    let hash = |status: &Value| status["specHash"].as_str().unwrap_or("").to_owned();
    deployment(&env, &ns, "crashy", 1, crashy).await;
    deployment(
        &env,
        &ns,
        "fine",
        1,
        template("fine", &[(INJECT_JAVA, "true")]),
    )
    .await;
    let first = running_pods(&env, &ns, "app=crashy", 1, Duration::from_secs(60)).await;
    let t0 = Instant::now();
    let failed = first[0]["metadata"]["name"].as_str().unwrap().to_owned();

    // Rolled back: the marker with the spec it failed with, then a pod without the agent.
    let spec = loop {
        let s = get(&env, &instrumentation_path(&ns, "java")).await["status"].clone();
        if !hash(&s).is_empty() {
            break hash(&s);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        marker(&env, &ns, "crashy", Duration::from_secs(30)).await,
        format!("java={spec}")
    );
    let marked = t0.elapsed();
    let healthy = rolled_back_pod(&env, &ns, "crashy", Duration::from_secs(60)).await;
    let recovered = t0.elapsed();
    assert_eq!(
        healthy["metadata"]["labels"]["otel-injector/injected"],
        "false"
    );
    assert!(
        healthy["spec"]["initContainers"].is_null(),
        "no agent: {}",
        healthy["spec"]
    );
    let reason = format!("pod {failed} container app: Error (exit code 1), 4 restarts");
    let status = get(&env, &instrumentation_path(&ns, "java")).await["status"].clone();
    let rolled: Vec<Value> = status["rolledBack"]
        .as_array()
        .expect("rolledBack")
        .iter()
        .map(|e| {
            json!([
                e["kind"],
                e["name"],
                e["languages"],
                e["specHash"],
                e["reason"]
            ])
        })
        .collect();
    assert_eq!(
        rolled,
        [json!(["Deployment", "crashy", "java", spec, reason])]
    );
    let events = events_of(&env, &ns, "InstrumentationRolledBack").await;
    assert_eq!(
        events,
        [json!([
            "Warning",
            "Deployment",
            "crashy",
            format!(
                "rolled back java of Instrumentation {ns}/java (spec {spec}): its pods failed \
                 with it ({reason}); they are replaced without the agent. Remove the pod \
                 template's annotation otel-injector/rolled-back, or change the \
                 Instrumentation, to try again"
            )
        ])]
    );
    // The healthy workload is never touched.
    let fine = get(
        &env,
        &format!("/apis/apps/v1/namespaces/{ns}/deployments/fine"),
    )
    .await;
    assert_eq!(fine["metadata"]["generation"], 1);
    assert!(
        fine["spec"]["template"]["metadata"]["annotations"]["otel-injector/rolled-back"].is_null()
    );
    eprintln!(
        "[e2e] rollback: marker set {marked:?} and a healthy pod without the agent {recovered:?} after the failing pod ran"
    );
    // `kubectl get otelinst` names it; `kubectl describe` of the Deployment shows the Event.
    let cp = cluster().await;
    let out = chart::kubectl(cp, &["get", "otelinst", "-n", &ns]).unwrap_or_else(|e| panic!("{e}"));
    assert!(out.ok, "{}", out.stderr);
    let row: Vec<&str> = out
        .stdout
        .lines()
        .nth(1)
        .unwrap_or("")
        .split_whitespace()
        .collect();
    assert_eq!(row.last(), Some(&"crashy"), "{}", out.stdout);
    let described = chart::kubectl(cp, &["describe", "deployment", "crashy", "-n", &ns])
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        described.stdout.contains("InstrumentationRolledBack"),
        "{}",
        described.stdout
    );
    eprintln!(
        "[e2e] rollback: kubectl get otelinst -n {ns}:\n{}",
        out.stdout
    );
    let events: Vec<&str> = described
        .stdout
        .lines()
        .skip_while(|l| !l.starts_with("Events:"))
        .collect();
    eprintln!(
        "[e2e] rollback: kubectl describe deployment crashy:\n{}",
        events.join("\n")
    );

    // Across a restart of the webhook: a new pod is still left without the agent.
    env.restart_webhook().await;
    env.await_webhook(&ns).await;
    delete_pod(&env, &ns, &healthy).await;
    let again = rolled_back_pod(&env, &ns, "crashy", Duration::from_secs(60)).await;
    assert_ne!(again["metadata"]["name"], healthy["metadata"]["name"]);

    // A new spec is tried again: injected, failing, rolled back with the new spec.
    let r = api::merge_patch(
        &env.client,
        &instrumentation_path(&ns, "java"),
        &json!({"spec": {"sampler": {"type": "always_on"}}}),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 200, "{}", r.body);
    let new_spec = loop {
        let s = get(&env, &instrumentation_path(&ns, "java")).await["status"].clone();
        if !hash(&s).is_empty() && hash(&s) != spec {
            break hash(&s);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    env.until_dry_run(&ns, &probe, "the new spec", |r| {
        r.body["metadata"]["annotations"]["otel-injector/status"]
            .as_str()
            .is_some_and(|s| s.contains(&new_spec))
    })
    .await;
    // Recreated: the workload's next pod asks again (the marker names the old spec).
    delete_pod(&env, &ns, &again).await;
    let t1 = Instant::now();
    let t_marker = loop {
        let m = marker(&env, &ns, "crashy", Duration::from_secs(60)).await;
        if m == format!("java={new_spec}") {
            break t1.elapsed();
        }
        assert!(
            t1.elapsed() < Duration::from_secs(60),
            "rolled back again: {m}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    rolled_back_pod(&env, &ns, "crashy", Duration::from_secs(60)).await;
    let fine = get(
        &env,
        &format!("/apis/apps/v1/namespaces/{ns}/deployments/fine"),
    )
    .await;
    assert_eq!(
        fine["metadata"]["generation"], 1,
        "the healthy workload is never touched"
    );
    eprintln!(
        "[e2e] rollback: the new spec tried again and rolled back {t_marker:?} after the pod was recreated"
    );

    // What was tried is on the workload, not in memory: with the marker removed (as
    // `kubectl rollout undo` or a person would) and a new process holding the Lease, the
    // failing pods are injected again and left so: once per language and spec.
    let path = format!("/apis/apps/v1/namespaces/{ns}/deployments/crashy");
    let tried = &get(&env, &path).await["metadata"]["annotations"]["otel-injector/rollback-tried"];
    assert_eq!(tried, &json!(format!("java={new_spec}")));
    env.restart_webhook().await;
    env.await_webhook(&ns).await;
    let unmark = json!({"spec": {"template": {"metadata": {"annotations": {"otel-injector/rolled-back": null}}}}});
    let r = api::merge_patch(&env.client, &path, &unmark)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 200, "{}", r.body);
    let t2 = Instant::now();
    let injected = loop {
        let pods = live_pods(&env, &ns, "crashy").await;
        if let Some(p) = pods.iter().find(|p| is_injected(p)) {
            break p.clone();
        }
        assert!(
            t2.elapsed() < Duration::from_secs(60),
            "the unmarked workload's pod injected again"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    // Long past the time the first mark took, it fails unmarked.
    tokio::time::sleep(marked * 2 + Duration::from_secs(10)).await;
    let d = get(&env, &path).await;
    assert!(
        d["spec"]["template"]["metadata"]["annotations"]["otel-injector/rolled-back"].is_null(),
        "marked again: {}",
        d["spec"]["template"]["metadata"]
    );
    assert!(
        live_pods(&env, &ns, "crashy")
            .await
            .iter()
            .any(|p| p["metadata"]["name"] == injected["metadata"]["name"]
                && p["status"]["containerStatuses"][0]["restartCount"].as_i64() > Some(1)),
        "the injected pod kept failing"
    );
}

/// The automatic rollout's canary with the rollback: two Deployments whose pods asked for
/// Java before the Instrumentation existed (skipped, for want of it) and whose app fails
/// with the agent. Created, the Instrumentation (`rollout: automatic`, `on-failure:
/// rollback`) has the rollout restart them, two at a time, but the canary first and alone:
/// it fails, the rollout stops after it, the other is never restarted, and the canary is
/// rolled back to a healthy pod without the agent.
#[tokio::test]
async fn the_canary_stops_a_bad_rollout_after_one_workload_and_is_rolled_back() {
    let (env, ns) = start(
        "canary",
        Rbac::SafetyNet,
        &[
            "--rollback=true",
            "--rollout=true",
            "--rollout-concurrency=2",
            "--rollout-canary-soak=3s",
        ],
    )
    .await;
    for name in ["alpha", "beta"] {
        let mut t = template(name, &[(INJECT_JAVA, "true")]);
        t["metadata"]["labels"][CRASH_WITH_AGENT] = json!("Error");
        deployment(&env, &ns, name, 1, t).await;
    }
    for name in ["alpha", "beta"] {
        let pods = running_pods(
            &env,
            &ns,
            &format!("app={name}"),
            1,
            Duration::from_secs(60),
        )
        .await;
        assert_eq!(
            pods[0]["metadata"]["annotations"]["otel-injector/status"],
            format!("java=skipped no_instrumentation {ns}/*").as_str()
        );
    }
    let inst = json!({"apiVersion": "opentelemetry.io/v1alpha1", "kind": "Instrumentation",
        "metadata": {"name": "java", "annotations": {
            "otel-injector/rollout": "automatic", "otel-injector/on-failure": "rollback"}},
        "spec": {"exporter": {"endpoint": "http://collector.example:4318"}}});
    let r = api::create_instrumentation(&env.client, &ns, &inst)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 201, "{}", r.body);
    let t0 = Instant::now();

    // The rollout stops at the canary.
    let rollout = loop {
        let s = get(&env, &instrumentation_path(&ns, "java")).await["status"].clone();
        if s["rollout"]["state"] == "Stopped" {
            break s["rollout"].clone();
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the rollout stopped within 60 s: {s}\n{}",
            env.webhook.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let stopped = t0.elapsed();
    assert_eq!(
        json!([
            rollout["workload"],
            rollout["restarted"],
            rollout["pending"]
        ]),
        json!([
            format!("Deployment/{ns}/alpha"),
            [format!("Deployment/{ns}/alpha")],
            1
        ]),
        "{rollout}"
    );
    // Whichever sees it first: the rollout its crash loop, or the safety net's rollback.
    assert!(
        ["CrashLoop", "RolledBack"].contains(&rollout["reason"].as_str().unwrap_or("")),
        "{rollout}"
    );
    let beta = get(
        &env,
        &format!("/apis/apps/v1/namespaces/{ns}/deployments/beta"),
    )
    .await;
    assert_eq!(
        beta["metadata"]["generation"], 1,
        "the other workload is never restarted"
    );

    // The canary is rolled back and healthy without the agent; the other is left as it was.
    let spec = get(&env, &instrumentation_path(&ns, "java")).await["status"]["specHash"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        marker(&env, &ns, "alpha", Duration::from_secs(30)).await,
        format!("java={spec}")
    );
    rolled_back_pod(&env, &ns, "alpha", Duration::from_secs(60)).await;
    let recovered = t0.elapsed();
    let beta = get(
        &env,
        &format!("/apis/apps/v1/namespaces/{ns}/deployments/beta"),
    )
    .await;
    assert_eq!(beta["metadata"]["generation"], 1);
    eprintln!(
        "[e2e] canary: the rollout stopped at the canary {stopped:?} and the canary was healthy without the agent {recovered:?} after the Instrumentation was created; status.rollout {rollout}"
    );
}
