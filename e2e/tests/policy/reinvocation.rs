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

use kube::Client;
use serde_json::{Value, json};

use super::build::{container, pod};
use super::corpus::instrumentations;
use super::{
    POLICY_SCOPE, create_all, create_instrumentations, delete_all, injected_java, live_render,
    namespaces, render, until,
};
use crate::harness::cluster;
use crate::support::api;
use otel_injector::keys::{INJECT_JAVA, INSTRUMENTATION_ANNOTATION};

/// Pods created and injected by the policy, per request form.
const PODS: usize = 8;

/// Live policies (a policy per language; mode both, image volumes), for pods that ask by
/// annotation and by label; then the CLI's render (one policy; mode policy, copied by an
/// init container) for pods whose namespace asks.
#[tokio::test]
async fn a_pod_a_policy_injected_is_not_matched_again_when_the_chain_runs_twice() {
    let cp = cluster().await;
    let client = cp.client();
    let live = "e2e-policy-reinvoke";
    namespaces(&client, &[live], &[(POLICY_SCOPE, "reinvoke")]).await;
    let by_namespace = "e2e-policy-reinvoke-ns";
    api::create_namespace(
        &client,
        by_namespace,
        &[(POLICY_SCOPE, "reinvoke-ns")],
        &[(INJECT_JAVA, "true")],
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let insts = [live, by_namespace].map(|ns| instrumentations(ns, ns).remove(1));
    create_instrumentations(&client, &insts).await;

    let objects = live_render(&insts[0], live, "e2e-reinvoke", "reinvoke");
    create_all(&client, &objects).await;
    // The first pass: every other language's policy leaves each pod out, the Java policy
    // takes it. A second pass that reached the conditions would leave each pod out of every
    // policy once more (of Java's because the pod was injected before).
    let first_pass = |p: &str| {
        if p.ends_with(".java") {
            0.0
        } else {
            PODS as f64
        }
    };
    let container = json!([container("app", "shop/app:1.0", json!([]))]);
    for (form, annotations, labels) in [
        (
            "annotation",
            json!({INJECT_JAVA: "java"}),
            json!({"app": "web"}),
        ),
        (
            "label",
            json!({}),
            json!({"app": "web", INJECT_JAVA: "java"}),
        ),
    ] {
        let java = |name: &str| {
            pod(
                &format!("{form}-{name}"),
                annotations.clone(),
                labels.clone(),
                container.clone(),
            )
        };
        left_out_once(&client, live, &objects, &java, first_pass).await;
    }
    delete_all(&client, &objects).await;

    let (objects, _) = render(
        &cp.dir,
        &insts[1..],
        &[
            "--mode",
            "policy",
            "--name-prefix",
            "e2e-reinvoke-cli",
            &format!("--namespace-label={POLICY_SCOPE}=reinvoke-ns"),
            "--agent-delivery=init-container",
        ],
    );
    create_all(&client, &objects).await;
    // Its one policy takes each pod on the first pass and is not asked again.
    let keyless = |name: &str| {
        pod(
            &format!("keyless-{name}"),
            json!({}),
            json!({}),
            container.clone(),
        )
    };
    left_out_once(&client, by_namespace, &objects, &keyless, |_| 0.0).await;
    delete_all(&client, &objects).await;
}

/// Creates [`PODS`] pods of `make` in `ns`, each injected with Java by the injection
/// policies of `objects`, and checks how many times each policy's conditions left them out:
/// `expected` of its name.
async fn left_out_once(
    client: &Client,
    ns: &str,
    objects: &[Value],
    make: &dyn Fn(&str) -> Value,
    expected: impl Fn(&str) -> f64,
) {
    let policies: Vec<String> = objects
        .iter()
        .filter(|o| o["kind"] == "MutatingAdmissionPolicy")
        .filter(|o| o["metadata"]["annotations"][INSTRUMENTATION_ANNOTATION].is_string())
        .map(|o| o["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        !policies.is_empty(),
        "no injection policy rendered for {ns}"
    );
    until(client, ns, &make("warm"), "the policy", injected_java).await;
    // Each policy is compiled when the API server sees it, in no set order: a policy that
    // leaves pods out has left out one dry run once it is in effect.
    let t0 = Instant::now();
    let before = loop {
        api::create_pod(client, ns, &make("warm"), true)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let seen = excluded(client, &policies).await;
        let waiting: Vec<&String> = policies
            .iter()
            .filter(|p| expected(p) > 0.0 && seen[*p] == 0.0)
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
        let r = api::create_pod(client, ns, &make(&k.to_string()), false)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.status, 201, "{}", r.body);
        assert!(injected_java(&r.body), "{}", r.body["metadata"]);
    }
    let after = excluded(client, &policies).await;
    let counted: BTreeMap<&String, f64> =
        policies.iter().map(|p| (p, after[p] - before[p])).collect();
    let wanted: BTreeMap<&String, f64> = policies.iter().map(|p| (p, expected(p))).collect();
    assert_eq!(
        counted, wanted,
        "pods left out by match conditions in {ns}, {PODS} pods"
    );
}

/// How many times each policy's match conditions have left a pod out: the API server's
/// histogram of their evaluation time, which it observes only for a condition that is
/// false (or fails), not for a pod the conditions admit.
async fn excluded(client: &Client, policies: &[String]) -> BTreeMap<String, f64> {
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
