//! The API server's second pass over a pod a policy injected: the injection policies'
//! conditions are not evaluated again.
//!
//! A mutation that changes the pod makes the API server run the admission chain once more
//! (reinvocation). The injection policies never mutate then (`reinvocationPolicy: Never`),
//! but the API server evaluates a policy's match conditions before it looks at that, each
//! evaluation converting the pod for CEL: for a pod injected where seven per-language
//! policies are bound, seven more evaluations. Their bindings leave out the pods labeled
//! `otel-injector/injected=true`, which a label selector decides without CEL. The API
//! server counts the pods each policy's conditions leave out
//! (`apiserver_admission_match_condition_evaluation_seconds`), so the test reads them.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::json;

use super::build::{container, pod};
use super::corpus::instrumentations;
use super::{
    POLICY_SCOPE, create_all, create_instrumentations, delete_all, injected_java, live_render,
    namespaces, until,
};
use crate::harness::cluster;
use crate::support::api;
use otel_injector::keys::INJECT_JAVA;

/// Pods created and injected by the policy.
const PODS: usize = 8;

#[tokio::test]
async fn a_pod_a_policy_injected_is_not_matched_again_when_the_chain_runs_twice() {
    let cp = cluster().await;
    let client = cp.client();
    let ns = "e2e-policy-reinvoke";
    namespaces(&client, &[ns], &[(POLICY_SCOPE, "reinvoke")]).await;
    let inst = instrumentations(ns, ns).remove(1);
    create_instrumentations(&client, std::slice::from_ref(&inst)).await;
    let objects = live_render(&inst, ns, "e2e-reinvoke", "reinvoke");
    create_all(&client, &objects).await;
    let policies: Vec<String> = objects
        .iter()
        .filter(|o| o["kind"] == "MutatingAdmissionPolicy")
        .map(|o| o["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    assert!(policies.len() > 1, "a policy per language: {policies:?}");
    let java = |name: &str| {
        pod(
            name,
            json!({INJECT_JAVA: "java"}),
            json!({"app": "web"}),
            json!([container("app", "shop/app:1.0", json!([]))]),
        )
    };
    until(&client, ns, &java("warm"), "the policy", injected_java).await;
    // Each policy is compiled when the API server sees it, the Java one not always last:
    // every other language's policy has left out a Java pod once when all are in effect.
    let t0 = Instant::now();
    let before = loop {
        api::create_pod(&client, ns, &java("warm"), true)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let seen = excluded(&client, &policies).await;
        let waiting: Vec<&String> = seen
            .iter()
            .filter(|(p, n)| !p.ends_with(".java") && **n == 0.0)
            .map(|(p, _)| p)
            .collect();
        if waiting.is_empty() {
            break seen;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "not in effect: {waiting:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    for k in 0..PODS {
        let r = api::create_pod(&client, ns, &java(&format!("java-{k}")), false)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.status, 201, "{}", r.body);
        assert!(injected_java(&r.body), "{}", r.body["metadata"]);
    }
    let after = excluded(&client, &policies).await;
    // The first pass: every other language's policy leaves each pod out, the Java policy
    // takes it. A second pass that reached the conditions would leave each pod out of every
    // policy once more (of Java's by `not-injected-before`).
    let counted: BTreeMap<&String, f64> =
        policies.iter().map(|p| (p, after[p] - before[p])).collect();
    let first_pass: BTreeMap<&String, f64> = policies
        .iter()
        .map(|p| {
            (
                p,
                if p.ends_with(".java") {
                    0.0
                } else {
                    PODS as f64
                },
            )
        })
        .collect();
    assert_eq!(
        counted, first_pass,
        "pods left out by match conditions, {PODS} pods"
    );
    delete_all(&client, &objects).await;
}

/// How many times each policy's match conditions have left a pod out: the API server's
/// histogram of their evaluation time, which it observes only for a condition that is
/// false (or fails), not for a pod the conditions admit.
async fn excluded(client: &kube::Client, policies: &[String]) -> BTreeMap<String, f64> {
    let request = axum::http::Request::get("/metrics")
        .body(Vec::new())
        .unwrap();
    let text = client.request_text(request).await.unwrap_or_default();
    let series = "apiserver_admission_match_condition_evaluation_seconds_count{";
    policies
        .iter()
        .map(|p| {
            let name = format!("name=\"{p}\"");
            let n = text
                .lines()
                .filter(|l| l.starts_with(series) && l.contains("kind=\"policy\""))
                .filter(|l| l.contains(&name))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum();
            (p.clone(), n)
        })
        .collect()
}
