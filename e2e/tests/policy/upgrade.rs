//! Upgrading a cluster whose live policies were written with params (the writer's form before
//! `Form::Live`: a `paramKind` on each policy, a `paramRef` to its Instrumentation on each
//! binding), through the real API server. The new writer starts with nothing applied, so its
//! first pass writes every object again with server-side apply under the same field manager,
//! which removes the params it no longer sends; it writes the policies before their bindings.
//! Between the two, a binding still names params that its policy no longer declares: the API
//! server then gives the policy no params and ignores the `paramRef` (k8s.io/apiserver,
//! `generic.CollectParams`), so the pods created in that window are injected as well. The test
//! creates a pod every 100 ms from before the writer starts until 2 s after every object lost
//! its params, and each one must be injected.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use axum::http::Method;
use serde_json::{Value, json};

use super::build::inst;
use super::{POLICY_SCOPE, create_instrumentations, namespaces, path_of, render_as, until};
use crate::harness::{Env, Options, cluster};
use crate::support::api;
use crate::support::identity::NAMESPACE;
use otel_injector::keys::{INJECT_JAVA, INJECTED_ANNOTATION};
use otel_injector::policy::Form;
use otel_injector::policy::live::FIELD_MANAGER;

const NS: &str = "e2e-policy-upgrade";
const PREFIX: &str = "e2e-upgrade";
const SCOPE: &str = "upgrade";
const ENDPOINT: &str = "http://collector-upgrade:4318";

fn java_pod(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "annotations": {INJECT_JAVA: "true"}},
        "spec": {"containers": [{"name": "app", "image": "shop/checkout:1.4.2"}]}})
}

fn injected(pod: &Value) -> bool {
    let env = pod["spec"]["containers"][0]["env"].as_array();
    let endpoint = env
        .into_iter()
        .flatten()
        .find(|e| e["name"] == "OTEL_EXPORTER_OTLP_ENDPOINT");
    pod["metadata"]["annotations"][INJECTED_ANNOTATION] == "java"
        && endpoint.is_some_and(|e| e["value"] == ENDPOINT)
}

/// The field that gives `obj` params: `paramKind` on a policy, `paramRef` on a binding.
fn params_field(obj: &Value) -> &'static str {
    match obj["kind"]
        .as_str()
        .unwrap_or_default()
        .ends_with("Binding")
    {
        true => "paramRef",
        false => "paramKind",
    }
}

/// What is left to converge of `obj` as stored: `None` once it is gone or stored without
/// params, written by the writer's field manager alone.
async fn not_converged(client: &kube::Client, obj: &Value) -> Option<String> {
    let name = obj["metadata"]["name"].as_str().unwrap_or_default();
    let path = format!("{}/{name}", path_of(obj));
    let r = api::send(client, Method::GET, &path, None).await.unwrap();
    if r.status == 404 {
        return None;
    }
    assert_eq!(r.status, 200, "{path}: {}", r.body);
    let field = params_field(obj);
    if !r.body["spec"][field].is_null() {
        return Some(format!("{path} still has {field}"));
    }
    let managers: Vec<&str> = r.body["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["manager"].as_str())
        .collect();
    (managers != [FIELD_MANAGER]).then(|| format!("{path} managed by {managers:?}"))
}

#[tokio::test]
async fn live_objects_written_with_params_lose_them_on_upgrade_and_every_pod_is_injected() {
    let client = cluster().await.client();
    namespaces(&client, &[NS], &[(POLICY_SCOPE, SCOPE)]).await;
    let java = inst(NS, "java", json!({"exporter": {"endpoint": ENDPOINT}}));
    create_instrumentations(&client, std::slice::from_ref(&java)).await;

    // The objects as the writer before wrote them, with its field manager.
    let old = render_as(&java, NS, PREFIX, SCOPE, Form::Api);
    assert!(old.len() >= 2, "{old:?}");
    for obj in &old {
        assert!(
            obj["spec"][params_field(obj)].is_object(),
            "the API form without params: {obj}"
        );
        api::apply_doc(&client, FIELD_MANAGER, obj, false)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    until(
        &client,
        NS,
        &java_pod("before"),
        "the objects with params",
        injected,
    )
    .await;

    // A pod every 100 ms, all through the writer's start and its first pass.
    let stop = Arc::new(AtomicBool::new(false));
    let prober = {
        let (client, stop) = (client.clone(), stop.clone());
        tokio::spawn(async move {
            let mut missed = Vec::new();
            let mut created = 0;
            while !stop.load(Ordering::Relaxed) {
                let r = api::create_pod(&client, NS, &java_pod("during"), true)
                    .await
                    .unwrap_or_else(|e| panic!("{e}"));
                assert_eq!(r.status, 201, "{}", r.body);
                created += 1;
                if !injected(&r.body) {
                    missed.push(r.body["metadata"].clone());
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            (created, missed)
        })
    };
    let started = Instant::now();
    let env = Env::start_with(
        "policy-upgrade",
        Options {
            rbac: crate::harness::Rbac::LivePolicies,
            exclusive: true,
            args: [
                "--apply-policies=both",
                &format!("--policy-name-prefix={PREFIX}"),
                &format!("--policy-namespace-label={POLICY_SCOPE}={SCOPE}"),
                "--lease-identity=policy-upgrade",
                &format!("--lease-namespace={NAMESPACE}"),
                "--lease-name=otel-injector",
                "--lease-duration=3s",
                "--agent-delivery=image-volume",
            ]
            .map(|a| a.to_owned())
            .to_vec(),
            ..Options::default()
        },
    )
    .await;
    loop {
        let mut left = Vec::new();
        for obj in &old {
            left.extend(not_converged(&client, obj).await);
        }
        if left.is_empty() {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "not converged 120 s after the writer started: {left:?}\n{}",
            env.webhook.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let converged = started.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::Relaxed);
    let (created, missed) = prober.await.expect("the pods' task");
    eprintln!(
        "[e2e] upgrade to live policies without params: converged {converged:?} after the \
         writer's start; {created} pods created meanwhile, {} not injected",
        missed.len()
    );
    assert!(created >= 10, "only {created} pods created");
    assert!(
        missed.is_empty(),
        "not injected during the upgrade: {missed:?}"
    );
    let r = api::create_pod(&client, NS, &java_pod("after"), true)
        .await
        .unwrap();
    assert!(injected(&r.body), "{}", r.body["metadata"]);
    drop(env);
    super::live::delete_prefixed(&client, PREFIX).await;
}
