//! The safety net on the API server's path: the MutatingAdmissionPolicies inject a
//! Deployment's, a StatefulSet's and a DaemonSet's pods (mode `policy`: the webhook out of
//! the namespace's scope, the status policy writes the outcome; mode `both`: the webhook
//! behind them), the pods fail only with the agent, the status controller marks each
//! workload, and the policies leave its new pods without the agent.

use std::time::Instant;

use serde_json::{Value, json};

use super::rollback::{marker_of, rolled_back_pod};
use super::{CRASH_WITH_AGENT, start};
use crate::harness::{Env, Rbac, SCOPE_LABEL, cluster};
use crate::policy::{POLICY_SCOPE, create_all, delete_all, render, until};
use crate::rollout::{create_workload, daemon_set, deployment, stateful_set};
use crate::status::get;
use crate::support::api::{self, instrumentation_path};
use crate::workloads::template;
use otel_injector::keys::{
    INJECT_JAVA, INJECTED_ANNOTATION, ROLLED_BACK_ANNOTATION, STATUS_ANNOTATION,
};

/// (resource, name, object) of the three workloads of a mode.
fn workloads(mode: &str) -> Vec<(&'static str, String, Value)> {
    let crashy = |app: &str| {
        let mut t = template(app, &[(INJECT_JAVA, "true")]);
        t["metadata"]["labels"][CRASH_WITH_AGENT] = json!("Error");
        t
    };
    let (d, s, ds) = (
        format!("{mode}-web"),
        format!("{mode}-db"),
        format!("{mode}-agent"),
    );
    vec![
        ("deployments", d.clone(), deployment(&d, 1, &crashy(&d))),
        ("statefulsets", s.clone(), stateful_set(&s, &crashy(&s))),
        ("daemonsets", ds.clone(), daemon_set(&ds, &crashy(&ds))),
    ]
}

/// One mode in namespace `ns`: the policies rendered from the stored Instrumentation,
/// seen to inject, then the workloads rolled back; returns the policies (to delete).
async fn roll_back_through_policies(env: &Env, ns: &str, mode: &str) -> Vec<Value> {
    let cp = cluster().await;
    let client = &env.client;
    let inst = json!({"apiVersion": "opentelemetry.io/v1alpha1", "kind": "Instrumentation",
        "metadata": {"name": "java", "annotations": {"otel-injector/on-failure": "rollback"}},
        "spec": {"exporter": {"endpoint": "http://collector.example:4318"}}});
    let r = api::create_instrumentation(client, ns, &inst)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 201, "{}", r.body);
    // Rendered from the object as stored, so that the policy's spec is the status's.
    let stored = get(env, &instrumentation_path(ns, "java")).await;
    let scope = format!("{POLICY_SCOPE}=rollback-{mode}");
    let (policies, _) = render(
        &cp.dir,
        &[stored],
        &[
            "--mode",
            mode,
            "--name-prefix",
            &format!("e2e-safety-{mode}"),
            &format!("--namespace-label={scope}"),
            "--agent-delivery=image-volume",
        ],
    );
    create_all(client, &policies).await;
    let label = json!({"metadata": {"labels": {POLICY_SCOPE: format!("rollback-{mode}")}}});
    let r = api::merge_patch(client, &format!("/api/v1/namespaces/{ns}"), &label)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 200, "{}", r.body);
    let probe = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "probe", "annotations": {INJECT_JAVA: "true"}},
        "spec": {"containers": [{"name": "app", "image": "shop/app:1.0.0"}]}});
    until(client, ns, &probe, "the policy's injection", |p| {
        p["metadata"]["annotations"][INJECTED_ANNOTATION] == "java"
    })
    .await;
    // The spec the policies were rendered from: the one the marker must name.
    let spec = policies
        .iter()
        .find_map(|p| p["metadata"]["annotations"]["otel-injector/spec-hash"].as_str())
        .expect("the policies name their spec hash")
        .to_owned();
    // Every policy in force, the one that records the skip of a rolled-back pod included (the
    // API server takes each policy in its own time): a marked probe is skipped.
    let mut marked = probe.clone();
    marked["metadata"]["annotations"][ROLLED_BACK_ANNOTATION] = json!(format!("java={spec}"));
    let skipped = format!("java=skipped rolled_back {ns}/java");
    until(client, ns, &marked, "the rolled-back skip", |p| {
        p["metadata"]["annotations"][STATUS_ANNOTATION] == skipped.as_str()
    })
    .await;

    let t0 = Instant::now();
    for (resource, _, object) in workloads(mode) {
        create_workload(env, ns, resource, &object).await;
    }
    let limit = std::time::Duration::from_secs(120);
    for (resource, name, _) in workloads(mode) {
        let m = marker_of(env, ns, resource, &name, limit).await;
        assert_eq!(m, format!("java={spec}"), "{name}");
        let p = rolled_back_pod(env, ns, &name, limit).await;
        assert!(
            p["metadata"]["annotations"][INJECTED_ANNOTATION].is_null()
                && p["spec"]["volumes"].is_null(),
            "{name}: no agent: {}",
            p["metadata"]
        );
    }
    eprintln!(
        "[e2e] mode {mode}: a Deployment, a StatefulSet and a DaemonSet injected by the policies, rolled back {:?} after they were created",
        t0.elapsed()
    );
    policies
}

#[tokio::test]
async fn failing_workloads_injected_by_the_policies_are_rolled_back_in_modes_policy_and_both() {
    let (env, both) = start(
        "rollback-policy",
        Rbac::SafetyNet,
        &["--rollback=true", "--agent-delivery=image-volume"],
    )
    .await;
    // Mode both: the webhook's namespace. Mode policy: one the webhook does not serve.
    let policy_only = format!("{}-policy", env.id);
    api::create_namespace(&env.client, &policy_only, &[], &[])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let namespace = get(&env, &format!("/api/v1/namespaces/{policy_only}")).await;
    assert!(namespace["metadata"]["labels"][SCOPE_LABEL].is_null());
    let mut created = roll_back_through_policies(&env, &both, "both").await;
    created.extend(roll_back_through_policies(&env, &policy_only, "policy").await);
    delete_all(&env.client, &created).await;
}
