//! Rollout through the real control plane: Deployments, a StatefulSet and a DaemonSet whose
//! pods the real controllers make and the real webhook injects (and marks with
//! `otel-injector/status`), kube-scheduler binds and kwok runs. Changing the
//! Instrumentation's spec makes those pods outdated; `otel-injector rollout` lists them
//! exactly, restarts them (as `kubectl rollout restart` does) and afterwards every pod runs
//! the current spec; workloads that opted out, or in a namespace that did, are left alone;
//! a workload whose new pods crash-loop (kwok's `pod-restarted-held` stage) stops it.

mod automatic;
mod base;

pub use automatic::until_rollout;

use otel_injector::keys::{INJECT_JAVA, RESTARTED_AT, STATUS_ANNOTATION};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::harness::{Env, cluster, endpoint_spec, env_value, is_injected};
use crate::support::api;
use crate::workloads::{create, list, running_pods, template};

/// The pod template label kwok's `pod-restarted-held` stage reads.
const HELD: &str = "e2e.otel-injector.io/restarted-pods";

/// Runs the binary with the admin kubeconfig (the user who runs `rollout`): exit code,
/// stdout, stderr.
pub async fn otel_injector(args: &[&str]) -> (i32, String, String) {
    let kubeconfig = cluster().await.kubeconfig.display().to_string();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_e2e-otel-injector"))
        .args(args)
        .args(["--kubeconfig", &kubeconfig])
        .env_remove("KUBECONFIG")
        .output()
        .await
        .expect("run otel-injector");
    let r = (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    eprintln!(
        "[e2e] otel-injector {}: exit {}\n--- stdout\n{}--- stderr\n{}",
        args.join(" "),
        r.0,
        r.1,
        r.2
    );
    r
}

pub fn deployment(name: &str, replicas: u32, template: &Value) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
           "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                    "template": template}})
}

pub fn stateful_set(name: &str, template: &Value) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": name},
           "spec": {"replicas": 1, "serviceName": name,
                    "selector": {"matchLabels": {"app": name}}, "template": template}})
}

pub fn daemon_set(name: &str, template: &Value) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name},
           "spec": {"selector": {"matchLabels": {"app": name}}, "template": template}})
}

/// Creates a workload (`resource`: deployments, statefulsets, daemonsets) in `ns`.
pub async fn create_workload(env: &Env, ns: &str, resource: &str, object: &Value) -> Value {
    create(
        env,
        &format!("/apis/apps/v1/namespaces/{ns}/{resource}"),
        object,
    )
    .await
}

/// A template that asks for Java, with the given further labels.
pub fn java_template(name: &str, value: &str, labels: &[(&str, &str)]) -> Value {
    let mut t = template(name, &[(INJECT_JAVA, value)]);
    for (k, v) in labels {
        t["metadata"]["labels"][*k] = json!(v);
    }
    t
}

/// The digest of the Instrumentation's spec as stored (what the webhook hashes).
pub async fn spec_hash(env: &Env, ns: &str, name: &str) -> String {
    let stored = api::get_instrumentation(&env.client, ns, name).await;
    let i: otel_injector::crd::Instrumentation =
        serde_json::from_value(stored).expect("an Instrumentation");
    otel_injector::crd::SpecHash::of(&i.spec).to_string()
}

/// Sets the Instrumentation's exporter endpoint, then waits until the webhook injects a pod
/// of `template` with it (its cache has the new spec).
pub async fn change_endpoint(env: &Env, ns: &str, name: &str, endpoint: &str, template: &Value) {
    let r = api::merge_patch(
        &env.client,
        &api::instrumentation_path(ns, name),
        &json!({"spec": {"exporter": {"endpoint": endpoint}}}),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 200, "{}", r.body);
    let mut pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": template["metadata"].clone(),
                         "spec": template["spec"].clone()});
    pod["metadata"]["name"] = json!("settle");
    env.until_dry_run(ns, &pod, "the new spec", |r| {
        is_injected(&r.body) && env_value(&r.body, 0, "OTEL_EXPORTER_OTLP_ENDPOINT") == endpoint
    })
    .await;
}

fn annotation<'a>(o: &'a Value, key: &str) -> Option<&'a str> {
    o["metadata"]["annotations"][key].as_str()
}

fn name(o: &Value) -> String {
    o["metadata"]["name"].as_str().unwrap_or("").to_owned()
}

/// Waits (at most `limit`) until `selector` in `ns` has exactly `count` pods, all Running and
/// all with this status annotation; returns their uids (a StatefulSet's new pod keeps the
/// name).
/// `otel-injector rollout --instrumentation <inst> --dry-run`, which must succeed and say
/// nothing on stderr: the plan it prints.
pub async fn rollout_plan(inst: &str) -> String {
    let (code, out, err) =
        otel_injector(&["rollout", "--instrumentation", inst, "--dry-run"]).await;
    assert_eq!((code, err.as_str()), (0, ""), "{out}");
    out
}

/// The pods of `selector` in `ns`, each asserted to send to `endpoint` (its first
/// container's `OTEL_EXPORTER_OTLP_ENDPOINT`).
pub async fn pods_sending_to(env: &Env, ns: &str, selector: &str, endpoint: &str) -> Vec<Value> {
    let pods = list(
        env,
        &format!("/api/v1/namespaces/{ns}/pods?labelSelector={selector}"),
    )
    .await;
    for p in &pods {
        assert_eq!(
            env_value(p, 0, "OTEL_EXPORTER_OTLP_ENDPOINT"),
            endpoint,
            "{p}"
        );
    }
    pods
}

pub async fn until_pods_say(
    env: &Env,
    ns: &str,
    selector: &str,
    count: usize,
    status: &str,
    limit: Duration,
) -> BTreeSet<String> {
    let t0 = Instant::now();
    loop {
        let pods = list(
            env,
            &format!("/api/v1/namespaces/{ns}/pods?labelSelector={selector}"),
        )
        .await;
        let ok = pods.len() == count
            && pods.iter().all(|p| {
                p["status"]["phase"] == "Running"
                    && p["metadata"]["deletionTimestamp"].is_null()
                    && annotation(p, STATUS_ANNOTATION) == Some(status)
            });
        if ok {
            return pods
                .iter()
                .map(|p| p["metadata"]["uid"].as_str().unwrap_or("").to_owned())
                .collect();
        }
        assert!(
            t0.elapsed() < limit,
            "{count} pods {selector} in {ns} saying {status:?} within {limit:?}; have {}",
            Value::from(pods)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The restartedAt annotation of a workload's pod template.
async fn restarted_at(env: &Env, ns: &str, resource: &str, name: &str) -> Option<String> {
    let r = api::send(
        &env.client,
        axum::http::Method::GET,
        &format!("/apis/apps/v1/namespaces/{ns}/{resource}/{name}"),
        None,
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 200, "{}", r.body);
    annotation(&r.body["spec"]["template"], RESTARTED_AT).map(str::to_owned)
}

#[tokio::test]
async fn rollout_command_lists_the_outdated_workloads_then_restarts_them_to_the_current_spec() {
    let env = Env::start("rollout-cmd").await;
    let ns = env.namespace("shop", &[]).await;
    let off = env.namespace("off", &[]).await;
    env.await_webhook(&ns).await;
    let limit = Duration::from_secs(90);

    // Created before its Instrumentation exists: skipped for want of it.
    let early = java_template("early", "java", &[]);
    create_workload(&env, &ns, "deployments", &deployment("early", 1, &early)).await;
    until_pods_say(
        &env,
        &ns,
        "app=early",
        1,
        &format!("java=skipped instrumentation_not_found {ns}/java"),
        limit,
    )
    .await;

    env.instrumentation(&ns, "java", endpoint_spec("http://collector-a:4318"))
        .await;
    let t = |name: &str| java_template(name, "true", &[]);
    change_endpoint(&env, &ns, "java", "http://collector-a:4318", &t("web")).await;
    create_workload(&env, &ns, "deployments", &deployment("web", 2, &t("web"))).await;
    create_workload(
        &env,
        &ns,
        "deployments",
        &deployment("quiet", 1, &t("quiet")),
    )
    .await;
    create_workload(&env, &ns, "statefulsets", &stateful_set("db", &t("db"))).await;
    create_workload(&env, &ns, "daemonsets", &daemon_set("agent", &t("agent"))).await;
    let x = java_template("x", &format!("{ns}/java"), &[]);
    create_workload(&env, &off, "deployments", &deployment("x", 1, &x)).await;
    let h1 = spec_hash(&env, &ns, "java").await;
    let v1 = format!("java=injected {ns}/java {h1}");
    let mut before = BTreeSet::new();
    for (n, sel, count) in [
        (&ns, "app=web", 2),
        (&ns, "app=quiet", 1),
        (&ns, "app=db", 1),
        (&ns, "app=agent", 1),
        (&off, "app=x", 1),
    ] {
        before.extend(until_pods_say(&env, n, sel, count, &v1, limit).await);
    }

    // Opted out after the fact: the workload by its annotation, the namespace by its label.
    let r = api::merge_patch(
        &env.client,
        &format!("/apis/apps/v1/namespaces/{ns}/deployments/quiet"),
        &json!({"metadata": {"annotations": {"otel-injector/rollout": "disabled"}}}),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 200, "{}", r.body);
    let r = api::merge_patch(
        &env.client,
        &format!("/api/v1/namespaces/{off}"),
        &json!({"metadata": {"labels": {"otel-injector/inject": "disabled"}}}),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 200, "{}", r.body);

    change_endpoint(&env, &ns, "java", "http://collector-b:4318", &t("web")).await;
    let h2 = spec_hash(&env, &ns, "java").await;
    assert_ne!(h1, h2);
    let inst = format!("{ns}/java");

    let out = rollout_plan(&inst).await;
    assert_eq!(
        out,
        format!(
            "Instrumentation {ns}/java: 0 pods current, 6 outdated, 0 missed, 1 skipped for want of it\n\
             to restart (4 workloads):\n\
             \x20 DaemonSet/{ns}/agent: 1 outdated\n\
             \x20 Deployment/{ns}/early: 1 skipped (instrumentation_not_found)\n\
             \x20 Deployment/{ns}/web: 2 outdated\n\
             \x20 StatefulSet/{ns}/db: 1 outdated\n\
             left alone (2 workloads):\n\
             \x20 Deployment/{off}/x: namespace labeled otel-injector/inject=disabled\n\
             \x20 Deployment/{ns}/quiet: annotated otel-injector/rollout: disabled\n\
             dry run: nothing restarted\n"
        )
    );
    for (n, resource, w) in [
        (&ns, "deployments", "early"),
        (&ns, "deployments", "web"),
        (&ns, "deployments", "quiet"),
        (&ns, "statefulsets", "db"),
        (&ns, "daemonsets", "agent"),
        (&off, "deployments", "x"),
    ] {
        assert_eq!(
            restarted_at(&env, n, resource, w).await,
            None,
            "{w} restarted by a dry run"
        );
    }

    let t0 = Instant::now();
    let (code, out, err) = otel_injector(&[
        "rollout",
        "--instrumentation",
        &inst,
        "--concurrency",
        "2",
        "--timeout",
        "60s",
    ])
    .await;
    eprintln!("[e2e] rollout of 4 workloads took {:?}", t0.elapsed());
    assert_eq!((code, err.as_str()), (0, ""), "{out}");
    let lines: Vec<&str> = out.lines().collect();
    let restarted: Vec<&str> = lines
        .iter()
        .filter_map(|l| l.strip_prefix("restarted "))
        .map(|l| l.split(" (restartedAt ").next().unwrap_or(""))
        .collect();
    let planned = [
        format!("DaemonSet/{ns}/agent"),
        format!("Deployment/{ns}/early"),
        format!("Deployment/{ns}/web"),
        format!("StatefulSet/{ns}/db"),
    ];
    assert_eq!(restarted, planned, "{out}");
    let complete: BTreeSet<&str> = lines
        .iter()
        .filter_map(|l| l.strip_prefix("complete  "))
        .map(|l| l.split(" in ").next().unwrap_or(""))
        .collect();
    assert_eq!(
        complete,
        planned.iter().map(String::as_str).collect(),
        "{out}"
    );
    assert_eq!(
        lines.last(),
        Some(&"done: 4 restarted and complete"),
        "{out}"
    );

    // Every pod of the restarted workloads runs the current spec; the others are untouched.
    let v2 = format!("java=injected {ns}/java {h2}");
    for (sel, count) in [
        ("app=web", 2),
        ("app=db", 1),
        ("app=agent", 1),
        ("app=early", 1),
    ] {
        let names = until_pods_say(&env, &ns, sel, count, &v2, limit).await;
        assert!(
            names.is_disjoint(&before),
            "{sel}: {names:?} were there before"
        );
        for pod in pods_sending_to(&env, &ns, sel, "http://collector-b:4318").await {
            assert!(annotation(&pod, RESTARTED_AT).is_some(), "{pod}");
        }
    }
    for (n, sel, resource, w) in [
        (&ns, "app=quiet", "deployments", "quiet"),
        (&off, "app=x", "deployments", "x"),
    ] {
        let names = until_pods_say(&env, n, sel, 1, &v1, limit).await;
        assert!(names.is_subset(&before), "{sel}: {names:?}");
        assert_eq!(restarted_at(&env, n, resource, w).await, None);
    }

    let (code, out, _) = otel_injector(&["rollout", "--instrumentation", &inst, "--dry-run"]).await;
    assert_eq!(code, 0);
    assert_eq!(
        out,
        format!(
            "Instrumentation {ns}/java: 5 pods current, 2 outdated, 0 missed, 0 skipped for want of it\n\
             nothing to restart\n\
             left alone (2 workloads):\n\
             \x20 Deployment/{off}/x: namespace labeled otel-injector/inject=disabled\n\
             \x20 Deployment/{ns}/quiet: annotated otel-injector/rollout: disabled\n\
             dry run: nothing restarted\n"
        )
    );
}

#[tokio::test]
async fn rollout_command_stops_at_a_workload_whose_new_pods_crash_loop() {
    let env = Env::start("rollout-crash").await;
    let ns = env.namespace("shop", &[]).await;
    env.await_webhook(&ns).await;
    env.instrumentation(&ns, "java", endpoint_spec("http://collector-a:4318"))
        .await;
    let crashy = java_template("crashy", "true", &[(HELD, "crash-loop")]);
    change_endpoint(&env, &ns, "java", "http://collector-a:4318", &crashy).await;
    let fine = java_template("fine", "true", &[]);
    create_workload(&env, &ns, "deployments", &deployment("crashy", 1, &crashy)).await;
    create_workload(&env, &ns, "deployments", &deployment("fine", 1, &fine)).await;
    running_pods(&env, &ns, "app=crashy", 1, Duration::from_secs(60)).await;
    running_pods(&env, &ns, "app=fine", 1, Duration::from_secs(60)).await;
    change_endpoint(&env, &ns, "java", "http://collector-b:4318", &fine).await;

    let inst = format!("{ns}/java");
    let (code, out, err) =
        otel_injector(&["rollout", "--instrumentation", &inst, "--timeout", "60s"]).await;
    assert_eq!(code, 1, "{out}{err}");
    let stamp = restarted_at(&env, &ns, "deployments", "crashy")
        .await
        .expect("crashy restarted");
    let pods = list(
        &env,
        &format!("/api/v1/namespaces/{ns}/pods?labelSelector=app=crashy"),
    )
    .await;
    let new: Vec<String> = pods
        .iter()
        .filter(|p| annotation(p, RESTARTED_AT) == Some(stamp.as_str()))
        .map(name)
        .collect();
    assert_eq!(new.len(), 1, "{pods:?}");
    assert_eq!(
        err,
        format!(
            "Error: rollout stopped at Deployment/{ns}/crashy: CrashLoop: pod {} container app: \
             CrashLoopBackOff, 4 restarts; not restarted: Deployment/{ns}/fine\n",
            new[0]
        )
    );
    assert!(
        out.contains(&format!(
            "restarted Deployment/{ns}/crashy (restartedAt {stamp})\n"
        )),
        "{out}"
    );
    assert!(!out.contains("complete"), "{out}");
    assert_eq!(restarted_at(&env, &ns, "deployments", "fine").await, None);
}
