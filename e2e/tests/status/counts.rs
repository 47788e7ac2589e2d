//! The status counts as deployments scale, are deleted and change spec, and the degraded
//! condition of a missing exporter TLS Secret.

use std::time::{Duration, Instant};

use axum::http::Method;
use serde_json::{Value, json};

use crate::harness::{cluster, is_injected};
use crate::support::api::{self, instrumentation_path};
use crate::support::chart;
use crate::workloads::{create, running_pods};

use super::{
    LEADER, await_status, await_watched, deployment, get, merge_patch, metric, scale, spec_hash,
    start, want, writes_at_least,
};
use otel_injector::keys::{INJECT_JAVA, INJECTED_LABEL, STATUS_ANNOTATION};

#[tokio::test]
async fn status_counts_follow_deployments_scaling_deletion_and_spec_changes() {
    // Through the webhook: the pods ask (inject-java) and the webhook records the outcome.
    let env = start("status").await;
    let ns = env.namespace("shop", &[]).await;
    env.await_webhook(&ns).await;
    // Made before its Instrumentation exists: skipped, for want of it.
    let legacy = crate::workloads::template("legacy", &[(INJECT_JAVA, "java")]);
    deployment(&env, &ns, "legacy", 1, legacy).await;
    let pods = running_pods(&env, &ns, "app=legacy", 1, Duration::from_secs(60)).await;
    assert_eq!(
        pods[0]["metadata"]["annotations"][STATUS_ANNOTATION],
        format!("java=skipped instrumentation_not_found {ns}/java").as_str()
    );
    assert_eq!(pods[0]["metadata"]["labels"][INJECTED_LABEL], "false");
    env.instrumentation(
        &ns,
        "java",
        json!({"exporter": {"endpoint": "http://collector.example:4318"}}),
    )
    .await;
    let checkout = crate::workloads::template("checkout", &[(INJECT_JAVA, "true")]);
    let mut probe = json!({"apiVersion": "v1", "kind": "Pod",
                           "metadata": checkout["metadata"].clone(), "spec": checkout["spec"].clone()});
    probe["metadata"]["name"] = json!("checkout-dry-run");
    env.until_dry_run(&ns, &probe, "injection", |r| is_injected(&r.body))
        .await;
    let hash = spec_hash(&env, &ns, "java").await;
    deployment(&env, &ns, "checkout", 3, checkout).await;
    let pods = running_pods(&env, &ns, "app=checkout", 3, Duration::from_secs(60)).await;
    for p in &pods {
        assert_eq!(
            p["metadata"]["annotations"][STATUS_ANNOTATION],
            format!("java=injected {ns}/java {hash}").as_str()
        );
        assert_eq!(p["metadata"]["labels"][INJECTED_LABEL], "true");
    }
    let reasons = json!([{"reason": "instrumentation_not_found", "pods": 1}]);

    // The stalest workload first.
    let (status, took) = await_status(
        &env,
        &ns,
        "java",
        want(
            3,
            0,
            reasons.clone(),
            json!([
                ["Deployment", "legacy", 0, 0, 1],
                ["Deployment", "checkout", 3, 0, 0]
            ]),
        ),
        Duration::from_secs(60),
    )
    .await;
    eprintln!("[e2e] status: 3 injected and 1 skipped pods counted {took:?} after they ran");
    assert_eq!(status["specHash"], hash.as_str());
    assert_eq!(status["observedGeneration"], 1);
    let conditions: Vec<Value> = status["conditions"]
        .as_array()
        .expect("conditions")
        .iter()
        .map(|c| json!([c["type"], c["status"], c["reason"]]))
        .collect();
    assert_eq!(
        conditions,
        [
            json!(["Ready", "True", "Readable"]),
            json!(["Degraded", "False", "AsExpected"])
        ]
    );
    // Only its own fields, under its own field manager.
    let stored = get(&env, &instrumentation_path(&ns, "java")).await;
    let managers: Vec<Value> = stored["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["subresource"] == "status")
        .map(|m| json!([m["manager"], m["operation"]]))
        .collect();
    assert_eq!(managers, [json!(["otel-injector-status", "Apply"])]);

    // `kubectl get otelinst`: the columns (kubectl reads the preferred version, v1beta1,
    // through the conversion webhook).
    let cp = cluster().await;
    let out = chart::kubectl(cp, &["get", "otelinst", "-n", &ns]).unwrap_or_else(|e| panic!("{e}"));
    assert!(out.ok, "{}", out.stderr);
    eprintln!("[e2e] kubectl get otelinst -n {ns}:\n{}", out.stdout);
    let lines: Vec<Vec<&str>> = out
        .stdout
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        lines[0],
        [
            "NAME", "AGE", "ENDPOINT", "PROTOCOL", "SAMPLER", "SAMPLER", "ARG", "INJECTED",
            "OUTDATED", "SKIPPED", "MISSED", "FAILING", "ROLLED", "BACK"
        ]
    );
    assert_eq!(lines.len(), 2, "{}", out.stdout);
    // The protocol and sampler columns are blank, and the failing count (no
    // --detect-failures): the row is name, age, endpoint and the four counts.
    let row = &lines[1];
    assert_eq!(row.len(), 7, "{}", out.stdout);
    assert_eq!(row[0], "java");
    assert_eq!(
        row[2..],
        ["http://collector.example:4318", "3", "0", "1", "0"]
    );

    // Scaled up and down: the counts follow.
    scale(&env, &ns, "checkout", 5).await;
    await_status(
        &env,
        &ns,
        "java",
        want(
            5,
            0,
            reasons.clone(),
            json!([
                ["Deployment", "legacy", 0, 0, 1],
                ["Deployment", "checkout", 5, 0, 0]
            ]),
        ),
        Duration::from_secs(60),
    )
    .await;
    scale(&env, &ns, "checkout", 1).await;
    await_status(
        &env,
        &ns,
        "java",
        want(
            1,
            0,
            reasons.clone(),
            json!([
                ["Deployment", "legacy", 0, 0, 1],
                ["Deployment", "checkout", 1, 0, 0]
            ]),
        ),
        Duration::from_secs(60),
    )
    .await;

    // A new spec: the running pod was injected with the old one.
    merge_patch(
        &env,
        &instrumentation_path(&ns, "java"),
        json!({"spec": {"exporter": {"endpoint": "http://collector.example:4317"}}}),
    )
    .await;
    let new_hash = spec_hash(&env, &ns, "java").await;
    assert_ne!(new_hash, hash);
    let (status, _) = await_status(
        &env,
        &ns,
        "java",
        want(
            0,
            1,
            reasons.clone(),
            json!([
                ["Deployment", "checkout", 0, 1, 0],
                ["Deployment", "legacy", 0, 0, 1]
            ]),
        ),
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(status["specHash"], new_hash.as_str());
    assert_eq!(status["observedGeneration"], 2);
    // Restarted (as `kubectl rollout restart` does): the webhook injects the new spec.
    merge_patch(
        &env,
        &format!("/apis/apps/v1/namespaces/{ns}/deployments/checkout"),
        json!({"spec": {"template": {"metadata": {"annotations": {
            "kubectl.kubernetes.io/restartedAt": "2026-12-01T07:00:00Z"}}}}}),
    )
    .await;
    await_status(
        &env,
        &ns,
        "java",
        want(
            1,
            0,
            reasons.clone(),
            json!([
                ["Deployment", "legacy", 0, 0, 1],
                ["Deployment", "checkout", 1, 0, 0]
            ]),
        ),
        Duration::from_secs(90),
    )
    .await;

    // Deleted: its pods go, and with them its counts. The harness runs no garbage collector
    // (see support/controllers.rs), so the Deployment is scaled to zero first, as the
    // collector would delete its ReplicaSet's pods.
    scale(&env, &ns, "legacy", 0).await;
    let r = api::send(
        &env.client,
        Method::DELETE,
        &format!("/apis/apps/v1/namespaces/{ns}/deployments/legacy"),
        None,
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 200, "{}", r.body);
    await_status(
        &env,
        &ns,
        "java",
        want(
            1,
            0,
            json!([]),
            json!([["Deployment", "checkout", 1, 0, 0]]),
        ),
        Duration::from_secs(90),
    )
    .await;
    let metrics = env.webhook.metrics().await;
    assert_eq!(metric(&metrics, LEADER), 1.0);
    await_watched(&env.client, &env.webhook).await;
    // One write per state awaited above.
    writes_at_least(&env.webhook, 6.0).await;
}

#[tokio::test]
async fn a_missing_exporter_tls_secret_degrades_until_it_exists() {
    let env = start("status-tls").await;
    let ns = env.namespace("shop", &[]).await;
    env.instrumentation(
        &ns,
        "secure",
        json!({"exporter": {"endpoint": "https://collector.example:4318",
                            "tls": {"secretName": "otel-tls", "ca_file": "ca.crt"}}}),
    )
    .await;
    let condition = |status: &Value, type_: &str| -> Value {
        status["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == type_)
            .map(|c| json!([c["status"], c["reason"], c["message"]]))
            .unwrap_or(Value::Null)
    };
    let message = format!(
        "spec.exporter.tls names objects that do not exist: Secret {ns}/otel-tls; pods there \
         are not injected"
    );
    let t0 = Instant::now();
    loop {
        let status = get(&env, &instrumentation_path(&ns, "secure")).await["status"].clone();
        if condition(&status, "Degraded") != Value::Null {
            assert_eq!(
                condition(&status, "Degraded"),
                json!(["True", "ExporterTLSSecretMissing", message])
            );
            assert_eq!(
                condition(&status, "Ready"),
                json!(["False", "ExporterTLSSecretMissing", message])
            );
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "{status}\n{}",
            env.webhook.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let secret = json!({"apiVersion": "v1", "kind": "Secret",
                        "metadata": {"name": "otel-tls"}, "data": {"ca.crt": "Q0EK"}});
    create(&env, &format!("/api/v1/namespaces/{ns}/secrets"), &secret).await;
    let t0 = Instant::now();
    loop {
        let status = get(&env, &instrumentation_path(&ns, "secure")).await["status"].clone();
        if condition(&status, "Degraded")[0] == "False" {
            assert_eq!(
                condition(&status, "Ready"),
                json!([
                    "True",
                    "Readable",
                    "readable; the Secret and ConfigMap of spec.exporter.tls exist"
                ])
            );
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "{status}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
