//! Upgrading a cluster whose live policies were written with params (the writer's form before
//! `Form::Live`: a `paramKind` on each policy, a `paramRef` to its Instrumentation on each
//! binding), through the real API server. The new writer starts with nothing applied, so its
//! first pass writes every object again with server-side apply under the same field manager,
//! which removes the params it no longer sends; it writes the policies before their bindings.
//! Between the two, a binding still names params that its policy no longer declares: the API
//! server then gives the policy no params and ignores the `paramRef` (k8s.io/apiserver,
//! `generic.CollectParams`), so the pods created in that window are injected as well. The test
//! creates a pod every 100 ms (asking by annotation and by label in turn) from before the
//! writer starts until 2 s after every object lost its params, and each one must be injected;
//! in modes `both` and `policy` (whose status policy and warning never had params).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use axum::http::Method;
use serde_json::{Value, json};

use super::build::inst;
use super::live::{asking, delete_prefixed, endpoint, start_writer};
use super::{POLICY_SCOPE, create_instrumentations, namespaces, path_of, render_as, until};
use crate::harness::cluster;
use crate::support::api;
use otel_injector::keys::{INJECT_JAVA, INJECTED_ANNOTATION};
use otel_injector::policy::live::FIELD_MANAGER;
use otel_injector::policy::{Form, Mode};

const ENDPOINT: &str = "http://collector-upgrade:4318";

/// A pod of `ns` asking for Java by annotation, or by label when `labeled`.
fn java_pod(ns: &str, name: &str, labeled: bool) -> Value {
    let mut pod = asking(ns, name, INJECT_JAVA);
    if labeled {
        pod["metadata"]["labels"] = pod["metadata"]["annotations"].take();
    }
    pod
}

fn injected(pod: &Value) -> bool {
    pod["metadata"]["annotations"][INJECTED_ANNOTATION] == "java" && endpoint(pod) == Some(ENDPOINT)
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
/// params, written by the writer's field manager alone (the status of a
/// ValidatingAdmissionPolicy is the API server's own, its type check).
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
        .filter(|m| m["subresource"].is_null())
        .filter_map(|m| m["manager"].as_str())
        .collect();
    (managers != [FIELD_MANAGER]).then(|| format!("{path} managed by {managers:?}"))
}

#[tokio::test]
async fn live_objects_written_with_params_lose_them_on_upgrade_with_every_pod_injected() {
    upgrade("both", Mode::Both).await;
}

#[tokio::test]
async fn live_objects_of_mode_policy_written_with_params_lose_them_on_upgrade_too() {
    upgrade("policy", Mode::Policy).await;
}

async fn upgrade(flag: &str, mode: Mode) {
    let ns = &format!("e2e-policy-upgrade-{flag}");
    let (prefix, scope) = (&format!("e2e-upgrade-{flag}"), &format!("upgrade-{flag}"));
    let client = cluster().await.client();
    namespaces(&client, &[ns], &[(POLICY_SCOPE, scope)]).await;
    let java = inst(ns, "java", json!({"exporter": {"endpoint": ENDPOINT}}));
    create_instrumentations(&client, std::slice::from_ref(&java)).await;

    // The objects as the writer before wrote them, with its field manager: every object of the
    // Instrumentation had params (a policy and a binding per language), mode `policy`'s status
    // policy and warning none.
    let old = render_as(&java, ns, prefix, scope, mode, Form::Api);
    let own = format!("{prefix}.{ns}.");
    for obj in &old {
        let name = obj["metadata"]["name"].as_str().unwrap_or_default();
        assert_eq!(
            obj["spec"][params_field(obj)].is_object(),
            name.starts_with(&own),
            "{obj}"
        );
        api::apply_doc(&client, FIELD_MANAGER, obj, false)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    assert!(
        old.iter()
            .filter(|o| o["spec"][params_field(o)].is_object())
            .count()
            >= 14
    );
    for labeled in [false, true] {
        let pod = java_pod(ns, "before", labeled);
        until(&client, ns, &pod, "the objects with params", injected).await;
    }

    // A pod every 100 ms, all through the writer's start and its first pass.
    let stop = Arc::new(AtomicBool::new(false));
    let prober = {
        let (client, stop, ns) = (client.clone(), stop.clone(), ns.clone());
        tokio::spawn(async move {
            let mut missed = Vec::new();
            let mut created = 0;
            while !stop.load(Ordering::Relaxed) {
                let pod = java_pod(&ns, "during", created % 2 == 1);
                let r = api::create_pod(&client, &ns, &pod, true)
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
    // (The start waits for the other tests that hold the Lease to end.)
    let env = start_writer(&format!("policy-upgrade-{flag}"), flag, prefix, scope).await;
    let started = Instant::now();
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
        "[e2e] upgrade to live policies without params ({flag}): converged {converged:?} after \
         the writer's start; {created} pods created meanwhile, {} not injected",
        missed.len()
    );
    assert!(created >= 10, "only {created} pods created");
    assert!(
        missed.is_empty(),
        "not injected during the upgrade: {missed:?}"
    );
    drop(env);
    delete_prefixed(&client, prefix).await;
}
