//! A shared base through the real control plane: a team's Instrumentation laid over the
//! platform's (`otel-injector/base`, another namespace); the real controllers make the pods
//! and the webhook injects the merge. A change of the base alone makes the team's pods
//! outdated, `otel-injector rollout` restarts them with the new merge, and a deleted base
//! is a skip with its reason.

use std::time::Duration;

use otel_injector::crd::Instrumentation;
use otel_injector::engine::Instrumentations;
use otel_injector::keys::{BASE_ANNOTATION, STATUS_ANNOTATION};
use serde_json::{Value, json};

use super::{
    create_workload, deployment, java_template, otel_injector, pods_sending_to, rollout_plan,
    until_pods_say,
};
use crate::harness::{Env, env_value, is_injected};
use crate::support::api;

/// The digest the webhook records for `ns/name`: of its spec laid over its bases, read from
/// the stored objects as the webhook's index reads them.
async fn merged_hash(env: &Env, objects: &[(&str, &str)], ns: &str, name: &str) -> String {
    let mut index = Instrumentations::default();
    for (n, i) in objects {
        let stored = api::get_instrumentation(&env.client, n, i).await;
        let mut inst: Instrumentation = serde_json::from_value(stored).expect("an Instrumentation");
        inst.read_carried().expect("readable");
        index.insert(inst);
    }
    index.spec_hash(ns, name).expect("readable").to_string()
}

/// Dry-runs a pod of `template` in `ns` until the webhook injects it with `endpoint`.
async fn until_endpoint(env: &Env, ns: &str, template: &Value, endpoint: &str) -> Value {
    let mut pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": template["metadata"].clone(),
                         "spec": template["spec"].clone()});
    pod["metadata"]["name"] = json!("settle");
    let r = env
        .until_dry_run(ns, &pod, endpoint, |r| {
            is_injected(&r.body) && env_value(&r.body, 0, "OTEL_EXPORTER_OTLP_ENDPOINT") == endpoint
        })
        .await;
    r.body
}

#[tokio::test]
async fn a_base_change_makes_its_dependents_outdated_and_the_rollout_restarts_them_with_the_merge()
{
    let env = Env::start("rollout-base").await;
    let platform = env.namespace("platform", &[]).await;
    let ns = env.namespace("shop", &[]).await;
    env.await_webhook(&ns).await;
    let limit = Duration::from_secs(90);

    env.instrumentation(
        &platform,
        "java",
        json!({"exporter": {"endpoint": "http://platform-a:4318"},
               "env": [{"name": "OTEL_METRICS_EXPORTER", "value": "none"},
                       {"name": "OTEL_LOGS_EXPORTER", "value": "otlp"}]}),
    )
    .await;
    let team = json!({
        "apiVersion": "opentelemetry.io/v1alpha1", "kind": "Instrumentation",
        "metadata": {"name": "java", "namespace": ns,
                     "annotations": {BASE_ANNOTATION: format!("{platform}/java")}},
        "spec": {"env": [{"name": "OTEL_LOGS_EXPORTER", "value": "none"}],
                 "resource": {"resourceAttributes": {"team": "checkout"}}}
    });
    let r = api::create_instrumentation(&env.client, &ns, &team)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 201, "{}", r.body);

    let t = java_template("web", "java", &[]);
    let pod = until_endpoint(&env, &ns, &t, "http://platform-a:4318").await;
    assert_eq!(
        env_value(&pod, 0, "OTEL_METRICS_EXPORTER"),
        "none",
        "the base's"
    );
    assert_eq!(
        env_value(&pod, 0, "OTEL_LOGS_EXPORTER"),
        "none",
        "the team's own"
    );
    let attributes = env_value(&pod, 0, "OTEL_RESOURCE_ATTRIBUTES");
    assert!(attributes.contains("team=checkout"), "{attributes}");

    let both = [(platform.as_str(), "java"), (ns.as_str(), "java")];
    let h1 = merged_hash(&env, &both, &ns, "java").await;
    create_workload(&env, &ns, "deployments", &deployment("web", 2, &t)).await;
    let v1 = format!("java=injected {ns}/java {h1}");
    let first = until_pods_say(&env, &ns, "app=web", 2, &v1, limit).await;

    // The base alone changes: the team's pods run an older merge.
    let r = api::merge_patch(
        &env.client,
        &api::instrumentation_path(&platform, "java"),
        &json!({"spec": {"exporter": {"endpoint": "http://platform-b:4318"}}}),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 200, "{}", r.body);
    until_endpoint(&env, &ns, &t, "http://platform-b:4318").await;
    let h2 = merged_hash(&env, &both, &ns, "java").await;
    assert_ne!(h1, h2, "a base's change is a new spec of its dependents");

    let inst = format!("{ns}/java");
    let out = rollout_plan(&inst).await;
    assert_eq!(
        out,
        format!(
            "Instrumentation {ns}/java: 0 pods current, 2 outdated, 0 missed, 0 skipped for want of it\n\
             to restart (1 workload):\n\
             \x20 Deployment/{ns}/web: 2 outdated\n\
             dry run: nothing restarted\n"
        )
    );
    let (code, out, err) =
        otel_injector(&["rollout", "--instrumentation", &inst, "--timeout", "60s"]).await;
    assert_eq!((code, err.as_str()), (0, ""), "{out}");
    let v2 = format!("java=injected {ns}/java {h2}");
    let second = until_pods_say(&env, &ns, "app=web", 2, &v2, limit).await;
    assert!(first.is_disjoint(&second), "every pod replaced");
    pods_sending_to(&env, &ns, "app=web", "http://platform-b:4318").await;

    // The base deleted: the team's Instrumentation cannot be used, and says why.
    let r = api::send(
        &env.client,
        axum::http::Method::DELETE,
        &api::instrumentation_path(&platform, "java"),
        None,
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 200, "{}", r.body);
    let mut pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": t["metadata"].clone(),
                         "spec": t["spec"].clone()});
    pod["metadata"]["name"] = json!("orphan");
    let skipped = format!("java=skipped base_unresolved {ns}/java");
    let r = env
        .until_dry_run(&ns, &pod, "the base gone", |r| {
            r.body["metadata"]["annotations"][STATUS_ANNOTATION] == skipped.as_str()
        })
        .await;
    assert_eq!(
        r.warnings,
        [format!(
            "inject-java: Instrumentation \"{ns}/java\": base \"{platform}/java\" not found; not injected"
        )]
    );
}
