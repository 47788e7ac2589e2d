//! Targeting by selector through the real control plane: a platform team's Instrumentation
//! (`otel-injector/selector`) instruments the Deployments of the namespaces labeled
//! `env=prod` whose pods are labeled `tier=backend`, with no annotation on them; `"false"` on
//! a template wins; a namespace the selector does not select is left alone; a team's own
//! selector comes before the platform's, with a warning naming both.

use std::time::Duration;

use otel_injector::keys::{INJECT_JAVA, SELECTOR_ANNOTATION, STATUS_ANNOTATION};
use serde_json::{Value, json};

use crate::harness::{Env, SCOPE_LABEL, env_value, is_injected};
use crate::rollout::{create_workload, deployment, pods_sending_to, spec_hash, until_pods_say};
use crate::support::api;
use crate::workloads::{list, template};

/// A template of `name` with these pod labels and annotations.
fn labeled(name: &str, labels: &[(&str, &str)], annotations: &[(&str, &str)]) -> Value {
    let mut t = template(name, annotations);
    for (k, v) in labels {
        t["metadata"]["labels"][*k] = json!(v);
    }
    t
}

async fn instrumentation(env: &Env, ns: &str, name: &str, selector: Value, endpoint: &str) {
    let inst = json!({
        "apiVersion": "opentelemetry.io/v1alpha1", "kind": "Instrumentation",
        "metadata": {"name": name, "namespace": ns,
                     "annotations": {SELECTOR_ANNOTATION: selector.to_string()}},
        "spec": {"exporter": {"endpoint": endpoint}}
    });
    let r = api::create_instrumentation(&env.client, ns, &inst)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 201, "{}", r.body);
}

#[tokio::test]
async fn a_selector_instruments_deployments_with_no_annotation_and_an_explicit_false_wins() {
    let env = Env::start("selector").await;
    let platform = env.namespace("platform", &[]).await;
    let prod = env.namespace_labeled("prod", &[("env", "prod")], &[]).await;
    let dev = env.namespace("dev", &[]).await;
    env.await_webhook(&prod).await;
    let limit = Duration::from_secs(90);

    // Scoped to this test's namespaces: other tests' webhooks read the same Instrumentations.
    let selector = json!({
        "languages": ["java"],
        "namespaceSelector": {"matchLabels": {"env": "prod", SCOPE_LABEL: env.id}},
        "podSelector": {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["backend", "both"]}]},
    });
    instrumentation(&env, &platform, "java", selector, "http://platform:4318").await;

    // The cache has the selector once a dry-run pod of it is injected.
    let web = labeled("web", &[("tier", "backend")], &[]);
    let mut probe = json!({"apiVersion": "v1", "kind": "Pod", "metadata": web["metadata"].clone(),
                           "spec": web["spec"].clone()});
    probe["metadata"]["name"] = json!("settle");
    env.until_dry_run(&prod, &probe, "the selector", |r| is_injected(&r.body))
        .await;

    let h = spec_hash(&env, &platform, "java").await;
    let injected = format!("java=injected {platform}/java {h}");
    create_workload(&env, &prod, "deployments", &deployment("web", 2, &web)).await;
    let off = labeled("off", &[("tier", "backend")], &[(INJECT_JAVA, "false")]);
    create_workload(&env, &prod, "deployments", &deployment("off", 1, &off)).await;
    let elsewhere = labeled("elsewhere", &[("tier", "backend")], &[]);
    create_workload(
        &env,
        &dev,
        "deployments",
        &deployment("elsewhere", 1, &elsewhere),
    )
    .await;
    let front = labeled("front", &[("tier", "frontend")], &[]);
    create_workload(&env, &prod, "deployments", &deployment("front", 1, &front)).await;

    until_pods_say(&env, &prod, "app=web", 2, &injected, limit).await;
    pods_sending_to(&env, &prod, "app=web", "http://platform:4318").await;
    // Left alone: opted out by "false", a namespace not selected, a pod not selected.
    for (ns, app) in [(&prod, "off"), (&dev, "elsewhere"), (&prod, "front")] {
        let pods = until_running(&env, ns, app, limit).await;
        for p in pods {
            assert!(!is_injected(&p), "{app}: {p}");
            let status = &p["metadata"]["annotations"][STATUS_ANNOTATION];
            assert!(status.is_null(), "{app} asked for nothing: {status}");
        }
    }

    // The team's own selector comes first, with a warning naming both.
    let own = json!({"languages": ["java"], "podSelector": {"matchLabels": {"tier": "both"}}});
    instrumentation(&env, &prod, "team", own, "http://team:4318").await;
    let both = labeled("both", &[("tier", "both")], &[]);
    let mut pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": both["metadata"].clone(),
                         "spec": both["spec"].clone()});
    pod["metadata"]["name"] = json!("both");
    let r = env
        .until_dry_run(&prod, &pod, "the team's selector", |r| {
            is_injected(&r.body)
                && env_value(&r.body, 0, "OTEL_EXPORTER_OTLP_ENDPOINT") == "http://team:4318"
        })
        .await;
    assert_eq!(
        r.warnings,
        [format!(
            "inject-java: the selectors of \"{prod}/team\" and \"{platform}/java\" both select this pod; using \"{prod}/team\""
        )]
    );
}

/// Waits until `app`'s one pod in `ns` runs; returns the pods.
async fn until_running(env: &Env, ns: &str, app: &str, limit: Duration) -> Vec<Value> {
    let t0 = std::time::Instant::now();
    loop {
        let pods = list(
            env,
            &format!("/api/v1/namespaces/{ns}/pods?labelSelector=app={app}"),
        )
        .await;
        if pods.len() == 1 && pods[0]["status"]["phase"] == "Running" {
            return pods;
        }
        assert!(
            t0.elapsed() < limit,
            "{app} in {ns} running within {limit:?}: {pods:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
