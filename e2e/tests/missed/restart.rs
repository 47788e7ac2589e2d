//! The OpenTelemetry Operator's #1329 (instrumentation lost after a cluster restart or
//! hibernation), through the real control plane: three Deployments whose pod templates ask by
//! annotation, with the Instrumentation in their namespace and a namespace that asks for
//! nothing, as Operator users write them. Every replica of the webhook is down while their
//! pods are deleted and re-created by their ReplicaSets (`failurePolicy: Ignore` admits them
//! uninstrumented); once the webhook is back, every re-created pod is counted in
//! `status.missed`, announced by one `InjectionMissed` Event per Deployment, and, with
//! `otel-injector/rollout: automatic`, restarted injected.

use otel_injector::keys::{INJECT_JAVA, INJECTED_LABEL};
use std::time::{Duration, Instant};

use axum::http::Method;
use serde_json::{Value, json};

use super::{
    finder_env, missed_events, missed_of, status, template, until_missed, until_stored, w,
};
use crate::harness::{Env, endpoint_spec};
use crate::rollout::{create_workload, deployment, spec_hash, until_pods_say, until_rollout};
use crate::support::api;

/// The Deployments and their replicas.
const DEPLOYMENTS: [(&str, i64); 3] = [("cart", 2), ("checkout", 1), ("catalog", 1)];

/// A pod template asking for Java by annotation alone.
fn annotated(app: &str) -> Value {
    let mut t = template(app, None);
    t["metadata"]["annotations"] = json!({INJECT_JAVA: "true"});
    t
}

/// `status.rollout.restarted`, sorted.
async fn restarted(env: &Env, ns: &str) -> Vec<String> {
    let s = status(env, ns).await;
    let mut r: Vec<String> = s["rollout"]["restarted"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect();
    r.sort();
    r
}

#[tokio::test]
async fn pods_recreated_while_the_webhook_was_down_are_found_announced_and_restarted_injected() {
    let mut env = finder_env("missed-1329").await;
    let limit = Duration::from_secs(60);
    let ns = env.namespace("shop", &[]).await;
    env.await_webhook(&ns).await;
    let inst = json!({
        "apiVersion": "opentelemetry.io/v1alpha1", "kind": "Instrumentation",
        "metadata": {"name": "java", "namespace": &ns,
                     "annotations": {"otel-injector/rollout": "automatic"}},
        "spec": endpoint_spec("http://collector:4318")
    });
    let r = api::create_instrumentation(&env.client, &ns, &inst)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 201, "{}", r.body);
    let hash = spec_hash(&env, &ns, "java").await;
    let s = until_rollout(&env, &ns, "Complete", &hash, limit).await;
    assert_eq!(s["message"], "nothing to restart", "{s}");

    // Injected while the webhook runs.
    let injected = format!("java=injected {ns}/java {hash}");
    for (app, n) in DEPLOYMENTS {
        create_workload(
            &env,
            &ns,
            "deployments",
            &deployment(app, n as u32, &annotated(app)),
        )
        .await;
    }
    for (app, n) in DEPLOYMENTS {
        let sel = format!("app={app}");
        until_pods_say(&env, &ns, &sel, n as usize, &injected, limit).await;
    }

    // The cluster restarts: every replica down, every pod re-created by its ReplicaSet.
    env.stop_webhook().await;
    let selector = "app%20in%20(cart,checkout,catalog)";
    let r = api::send(
        &env.client,
        Method::DELETE,
        &format!("/api/v1/namespaces/{ns}/pods?labelSelector={selector}&gracePeriodSeconds=0"),
        None,
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 200, "delete the pods: {}", r.body);
    for (app, n) in DEPLOYMENTS {
        let uninstrumented = format!("app={app},!{INJECTED_LABEL}");
        until_stored(&env, &ns, &uninstrumented, n as usize, limit).await;
    }

    // The webhook is back: each re-created pod is found, counted and announced.
    let t_back = Instant::now();
    env.restart_webhook().await;
    let mut want: Vec<_> = DEPLOYMENTS
        .iter()
        .map(|(app, n)| w("Deployment", app, *n))
        .collect();
    want.sort();
    until_missed(&env, &ns, &(4, want), limit).await;
    let counted = t_back.elapsed();
    let note = |n: i64, app: &str| {
        let (pods, were, them) = if n == 1 {
            ("pod", "was", "it")
        } else {
            ("pods", "were", "them")
        };
        format!(
            "{n} {pods} of Deployment/{ns}/{app} asked for Instrumentation {ns}/java and {were} \
             admitted without injection: the webhook was unreachable or not registered when \
             created; a restart injects {them}"
        )
    };
    let mut events: Vec<(String, String, String)> = DEPLOYMENTS
        .iter()
        .map(|(app, n)| ("Deployment".to_owned(), (*app).to_owned(), note(*n, app)))
        .collect();
    events.sort();
    let t0 = Instant::now();
    while missed_events(&env, &ns).await != events {
        assert!(
            t0.elapsed() < limit,
            "one InjectionMissed Event per Deployment: {:?}",
            missed_events(&env, &ns).await
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Restarted by the automatic rollout, each pod injected with the current spec.
    for (app, n) in DEPLOYMENTS {
        let sel = format!("app={app}");
        until_pods_say(&env, &ns, &sel, n as usize, &injected, limit).await;
    }
    until_missed(&env, &ns, &(0, vec![]), limit).await;
    let all_injected = t_back.elapsed();
    let mut names: Vec<String> = DEPLOYMENTS
        .iter()
        .map(|(app, _)| format!("Deployment/{ns}/{app}"))
        .collect();
    names.sort();
    let t0 = Instant::now();
    while restarted(&env, &ns).await != names {
        assert!(
            t0.elapsed() < limit,
            "status.rollout.restarted names the three Deployments: {}",
            status(&env, &ns).await
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(missed_of(&status(&env, &ns).await), (0, vec![]));
    eprintln!(
        "[e2e] #1329: the re-created pods counted {counted:?} after the webhook was back, all \
         injected again {all_injected:?} after"
    );
}
