//! The CEL budgets: a huge pod injected within them, and the policies' latency.

use std::time::Instant;

use serde_json::{Value, json};

use crate::harness::{self, Env, Options, SCOPE_LABEL, cluster};
use crate::support::api;

use super::build::{container, pod};
use super::corpus::instrumentations;
use super::{
    POLICY_SCOPE, create_all, create_instrumentations, delete_all, injected_java, live_render,
    namespaces, render, until,
};
use otel_injector::keys::{CONTAINER_NAMES, INJECT_JAVA, INJECTED_ANNOTATION};

/// The CEL cost stays well inside the API server's budgets: a pod far larger than any real
/// one (64 containers, all targeted, each with 50 variables of its own, 100 annotations of
/// which 50 are resource attributes) is injected by a policy whose `failurePolicy` is `Fail`,
/// so an expression over the per-expression limit or a policy over the per-call budget
/// would refuse it.
#[tokio::test]
async fn a_huge_pod_is_injected_within_the_cel_budgets() {
    let cp = cluster().await;
    let client = cp.client();
    let ns = "e2e-policy-cost";
    namespaces(&client, &[ns], &[(POLICY_SCOPE, "cost")]).await;
    let i = &instrumentations(ns, ns)[1];
    create_instrumentations(&client, std::slice::from_ref(i)).await;
    let (mut objects, _) = render(
        &cp.dir,
        std::slice::from_ref(i),
        &[
            "--mode",
            "both",
            "--name-prefix",
            "e2e-cost",
            &format!("--namespace-label={POLICY_SCOPE}=cost"),
        ],
    );
    for o in objects
        .iter_mut()
        .filter(|o| o["kind"] == "MutatingAdmissionPolicy")
    {
        o["spec"]["failurePolicy"] = json!("Fail");
    }
    create_all(&client, &objects).await;
    let env: Vec<Value> = (0..50)
        .map(|k| json!({"name": format!("APP_VAR_{k}"), "value": "x".repeat(40)}))
        .collect();
    let containers: Vec<Value> = (0..64)
        .map(|c| container(&format!("c{c}"), "shop/app:1.0", json!(env)))
        .collect();
    let names: Vec<String> = (0..64).map(|c| format!("c{c}")).collect();
    let mut annotations = serde_json::Map::new();
    annotations.insert(INJECT_JAVA.into(), json!("java"));
    annotations.insert(CONTAINER_NAMES.into(), json!(names.join(",")));
    for k in 0..50 {
        annotations.insert(format!("resource.opentelemetry.io/attr-{k}"), json!("v"));
        annotations.insert(format!("example.com/note-{k}"), json!("n"));
    }
    let huge = pod(
        "huge",
        Value::Object(annotations),
        json!({}),
        Value::Array(containers),
    );
    let small = pod(
        "small",
        json!({INJECT_JAVA: "java"}),
        json!({}),
        json!([container("app", "shop/app:1.0", json!([]))]),
    );
    until(&client, ns, &small, "the policy's injection", injected_java).await;
    let t0 = Instant::now();
    let r = api::create_pod(&client, ns, &huge, true)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    eprintln!("[e2e] policy on a 64-container pod: {:?}", t0.elapsed());
    assert_eq!(
        r.status,
        201,
        "a policy over its CEL budget refuses the pod: {}",
        r.message()
    );
    assert_eq!(
        r.body["metadata"]["annotations"][INJECTED_ANNOTATION],
        "java"
    );
    let last = &r.body["spec"]["containers"][63];
    let ra = last["env"].as_array().unwrap().last().unwrap();
    assert_eq!(ra["name"], "OTEL_RESOURCE_ATTRIBUTES");
    assert!(ra["value"].as_str().unwrap().contains("attr-49=v"), "{ra}");
    delete_all(&client, &objects).await;
}

/// Measurement (ignored): pod-create latency through the real API server, p50 and p99 of
/// `E2E_POLICY_PODS` (default 300) creates each, in one run: no injection, the webhook
/// (image volumes), the policy, and a pod that asks for nothing where the policy is bound
/// (what its evaluation costs the pods it leaves; docs/performance.md).
#[tokio::test]
#[ignore = "measurement: just policy-latency"]
async fn policy_latency() {
    let env = Env::start_with(
        "policy-lat",
        Options {
            args: vec!["--agent-delivery=image-volume".into()],
            ..Options::default()
        },
    )
    .await;
    let cp = cluster().await;
    let client = env.client.clone();
    let count: usize = std::env::var("E2E_POLICY_PODS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let none = "e2e-policy-lat-none";
    let hook = "e2e-policy-lat-webhook";
    let policy = "e2e-policy-lat-policy";
    let keyed = "e2e-policy-lat-keyed";
    namespaces(&client, &[none], &[]).await;
    namespaces(&client, &[hook], &[(SCOPE_LABEL, &env.id)]).await;
    namespaces(&client, &[policy, keyed], &[(POLICY_SCOPE, "lat")]).await;
    let all: Vec<Value> = [none, hook, policy, keyed]
        .iter()
        .map(|ns| instrumentations(ns, ns).remove(1))
        .collect();
    create_instrumentations(&client, &all).await;
    let insts = &all[2..3];
    // `keyed`'s as live policies render it, reading the namespaces: it asks for nothing, so
    // only pods with a key of their own reach the policy.
    let mut keyed_objects = live_render(&all[3], keyed, "e2e-lat-keyed", "lat");
    let (mut objects, _) = render(
        &cp.dir,
        insts,
        &[
            "--mode",
            "both",
            "--name-prefix",
            "e2e-lat",
            &format!("--namespace-label={POLICY_SCOPE}=lat"),
            "--agent-delivery=image-volume",
        ],
    );
    // `E2E_POLICY_ONLY_JAVA=1`: the live render's Java policy alone is bound, so the runs
    // with and without it tell what the other languages' policies cost a Java pod and one
    // that asks for nothing (docs/performance.md).
    if std::env::var_os("E2E_POLICY_ONLY_JAVA").is_some() {
        keyed_objects.retain(|o| {
            let kind = o["kind"].as_str().unwrap_or("");
            let name = o["metadata"]["name"].as_str().unwrap_or("");
            !kind.starts_with("MutatingAdmissionPolicy") || name.ends_with(".java")
        });
        let kept = keyed_objects
            .iter()
            .filter(|o| o["kind"] == "MutatingAdmissionPolicy")
            .count();
        assert_eq!(
            kept, 1,
            "the live render's Java policy, by its name's suffix"
        );
        eprintln!("[e2e] live policies: the Java policy alone");
    }
    objects.append(&mut keyed_objects);
    create_all(&client, &objects).await;
    let asking = |name: &str| {
        pod(
            name,
            json!({INJECT_JAVA: "java"}),
            json!({"app": "web"}),
            json!([container(
                "app",
                "shop/app:1.0",
                json!([{"name": "PORT", "value": "8080"}])
            )]),
        )
    };
    env.await_webhook(hook).await;
    until(
        &client,
        policy,
        &asking("warm"),
        "the policy",
        injected_java,
    )
    .await;
    until(
        &client,
        keyed,
        &asking("warm"),
        "the keyed-only policy",
        injected_java,
    )
    .await;
    env.until_dry_run(hook, &asking("warm"), "the webhook", |r| {
        injected_java(&r.body)
    })
    .await;
    // The paths take turns, pod by pod, so that what drifts during the run (the pods stored
    // so far, the API server's and etcd's own work) weighs on each alike.
    let paths = [
        ("none", none, false),
        ("webhook", hook, true),
        ("policy", policy, true),
        ("policy bound, nothing asked", policy, false),
        ("policy, namespaces read", keyed, true),
        ("policy bound, namespaces read, nothing asked", keyed, false),
    ];
    let mut times = vec![Vec::with_capacity(count); paths.len()];
    let before = admission_seconds(&client).await;
    for k in 0..count {
        for (i, (what, ns, ask)) in paths.iter().enumerate() {
            let mut p = asking(&format!("p{i}-{k}"));
            if !ask {
                p["metadata"]["annotations"] = json!({});
            }
            let t0 = Instant::now();
            let r = api::create_pod(&client, ns, &p, false)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            times[i].push(t0.elapsed());
            assert_eq!(r.status, 201);
            assert_eq!(
                r.body["metadata"]["annotations"][INJECTED_ANNOTATION].is_string(),
                *ask,
                "{what}"
            );
        }
    }
    let results: Vec<_> = paths
        .iter()
        .zip(&mut times)
        .map(|((what, ..), times)| {
            times.sort();
            (
                *what,
                harness::percentile(times, 50),
                harness::percentile(times, 99),
            )
        })
        .collect();
    let after = admission_seconds(&client).await;
    for (what, p50, p99) in &results {
        eprintln!("[e2e] pod create, {what}: p50 {p50:.2} ms, p99 {p99:.2} ms ({count} pods)");
    }
    // The API server's own time per admission (its metrics, the sums over this run).
    for (i, what) in [
        "the policy's mutation",
        "the webhook's call",
        "a live policy's match conditions that left a pod out",
    ]
    .iter()
    .enumerate()
    {
        let (sum, n) = (after[i].0 - before[i].0, after[i].1 - before[i].1);
        eprintln!(
            "[e2e] the API server's time in {what}: mean {:.3} ms over {n} admissions",
            1e3 * sum / n.max(1.0)
        );
    }
    delete_all(&client, &objects).await;
}

/// The sums and counts of the API server's histograms of the time in a MutatingAdmissionPolicy's
/// mutations, in webhook calls, and in the match conditions of the live policies of
/// `keyed`'s Instrumentation (observed for each pod a policy's conditions leave out):
/// `[(policy seconds, count), (webhook seconds, count), (conditions seconds, count)]`.
async fn admission_seconds(client: &kube::Client) -> [(f64, f64); 3] {
    let request = axum::http::Request::get("/metrics")
        .body(Vec::new())
        .unwrap();
    let text = client.request_text(request).await.unwrap_or_default();
    let total = |prefix: &str, only: &[&str], suffix: &str| -> f64 {
        text.lines()
            .filter(|l| l.starts_with(&format!("{prefix}{suffix}")))
            .filter(|l| only.iter().all(|o| l.contains(o)))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    let policy = "apiserver_mutating_admission_policy_check_duration_seconds";
    let webhook = "apiserver_admission_webhook_admission_duration_seconds";
    let conditions = "apiserver_admission_match_condition_evaluation_seconds";
    let keyed = ["kind=\"policy\"", "name=\"e2e-lat-keyed."];
    [
        (total(policy, &[], "_sum"), total(policy, &[], "_count")),
        (total(webhook, &[], "_sum"), total(webhook, &[], "_count")),
        (
            total(conditions, &keyed, "_sum"),
            total(conditions, &keyed, "_count"),
        ),
    ]
}
