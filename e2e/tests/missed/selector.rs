//! A selector added while its pods run: the pods it now asks for (no key of theirs, admitted
//! before it existed) are found and counted missed, and the automatic rollout restarts their
//! Deployment, whose new pods the webhook injects by the selector. The status counts them
//! as the selector's, per workload (`selected`), missed and injected alike.

use std::time::{Duration, Instant};

use otel_injector::keys::{ROLLOUT_ANNOTATION, SELECTOR_ANNOTATION};
use serde_json::json;

use super::{finder_env, status, template, until_missed, until_stored, w};
use crate::harness::Env;
use crate::harness::endpoint_spec;
use crate::rollout::{create_workload, deployment, spec_hash, until_pods_say};
use crate::support::api;

#[tokio::test]
async fn pods_a_new_selector_asks_for_are_found_missed_and_restarted_injected() {
    let env = finder_env("missed-selector").await;
    let ns = env.namespace("shop", &[]).await;
    env.await_webhook(&ns).await;
    let limit = Duration::from_secs(90);

    // Asks for nothing: the webhook leaves it, unmarked.
    create_workload(
        &env,
        &ns,
        "deployments",
        &deployment("web", 2, &template("web", None)),
    )
    .await;
    until_stored(&env, &ns, "app=web", 2, limit).await;
    let pods = crate::workloads::running_pods(&env, &ns, "app=web", 2, limit).await;
    assert!(
        pods.iter()
            .all(|p| p["metadata"]["annotations"]["otel-injector/status"].is_null())
    );

    let selector = json!({"languages": ["java"], "podSelector": {"matchLabels": {"app": "web"}}});
    let inst = json!({
        "apiVersion": "opentelemetry.io/v1alpha1", "kind": "Instrumentation",
        "metadata": {"name": "java", "namespace": ns,
                     "annotations": {SELECTOR_ANNOTATION: selector.to_string(),
                                     ROLLOUT_ANNOTATION: "automatic"}},
        "spec": endpoint_spec("http://collector:4318")
    });
    let r = api::create_instrumentation(&env.client, &ns, &inst)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 201, "{}", r.body);

    // Counted missed, then restarted: the new pods are injected by the selector.
    until_missed(&env, &ns, &(2, vec![w("Deployment", "web", 2)]), limit).await;
    until_selected(&env, &ns, "missed", 2, limit).await;
    let h = spec_hash(&env, &ns, "java").await;
    until_pods_say(
        &env,
        &ns,
        "app=web",
        2,
        &format!("java=injected {ns}/java {h}"),
        limit,
    )
    .await;
    until_missed(&env, &ns, &(0, vec![]), limit).await;
    until_selected(&env, &ns, "injected", 2, limit).await;
}

/// Waits until the status of `ns/java` counts the Deployment `web`'s `count` pods as
/// `field` (`missed`, `injected`) and all of them as its selector's (`selected`).
async fn until_selected(env: &Env, ns: &str, field: &str, count: i64, limit: Duration) {
    let t0 = Instant::now();
    loop {
        let s = status(env, ns).await;
        let web = s["workloads"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|w| w["kind"] == "Deployment" && w["name"] == "web");
        if web.is_some_and(|w| w[field] == count && w["selected"] == count) {
            return;
        }
        assert!(
            t0.elapsed() < limit,
            "{count} pods of web {field} and selected within {limit:?}: {s}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
