//! The rollback of the other restartable kinds, through the real controllers: a StatefulSet
//! with the default `OrderedReady` pod management (whose controller, as Kubernetes documents
//! for a forced rollback, does not replace a pod that never became Ready: the rollback deletes
//! its failing pods once the template is marked) and a DaemonSet. Then a Lease hand-over to
//! another identity: re-created pods stay without the agent and nothing is marked again.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::rollback::{delete_pod, marker_of, rolled_back_pod};
use super::{CRASH_WITH_AGENT, events_of, start};
use crate::harness::{Rbac, is_injected};
use crate::rollout::{create_workload, daemon_set, stateful_set};
use crate::status::get;
use crate::support::api::{self, instrumentation_path};
use crate::workloads::{running_pods, template};
use otel_injector::keys::INJECT_JAVA;

/// (resource, kind, name) of the workloads.
const WORKLOADS: [(&str, &str, &str); 2] = [
    ("statefulsets", "StatefulSet", "db"),
    ("daemonsets", "DaemonSet", "node-agent"),
];

fn crashy(app: &str) -> Value {
    let mut t = template(app, &[(INJECT_JAVA, "true")]);
    t["metadata"]["labels"][CRASH_WITH_AGENT] = json!("Error");
    t
}

#[tokio::test]
async fn a_failing_stateful_set_and_daemon_set_are_rolled_back_and_stay_so_after_a_lease_hand_over()
{
    let (mut env, ns) = start("rollback-kinds", Rbac::SafetyNet, &["--rollback=true"]).await;
    let inst = json!({"apiVersion": "opentelemetry.io/v1alpha1", "kind": "Instrumentation",
        "metadata": {"name": "java", "annotations": {"otel-injector/on-failure": "rollback"}},
        "spec": {"exporter": {"endpoint": "http://collector.example:4318"}}});
    let r = api::create_instrumentation(&env.client, &ns, &inst)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 201, "{}", r.body);
    let t = crashy("probe");
    let mut probe = json!({"apiVersion": "v1", "kind": "Pod",
                           "metadata": t["metadata"].clone(), "spec": t["spec"].clone()});
    probe["metadata"]["name"] = json!("probe");
    env.until_dry_run(&ns, &probe, "injection", |r| is_injected(&r.body))
        .await;
    create_workload(
        &env,
        &ns,
        "statefulsets",
        &stateful_set("db", &crashy("db")),
    )
    .await;
    create_workload(
        &env,
        &ns,
        "daemonsets",
        &daemon_set("node-agent", &crashy("node-agent")),
    )
    .await;
    let limit = Duration::from_secs(90);
    for (_, _, name) in WORKLOADS {
        running_pods(&env, &ns, &format!("app={name}"), 1, limit).await;
    }
    let t0 = Instant::now();
    let spec = loop {
        let s = get(&env, &instrumentation_path(&ns, "java")).await["status"].clone();
        if let Some(h) = s["specHash"].as_str().filter(|h| !h.is_empty()) {
            break h.to_owned();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };

    // Each marked with the spec it failed with; each comes back with one Ready pod without
    // the agent (the StatefulSet's only once its failing pod is deleted).
    let mut healthy = Vec::new();
    for (resource, _, name) in WORKLOADS {
        let m = marker_of(&env, &ns, resource, name, limit).await;
        assert_eq!(m, format!("java={spec}"), "{name}");
        healthy.push(rolled_back_pod(&env, &ns, name, limit).await);
    }
    eprintln!(
        "[e2e] rollback: the StatefulSet and the DaemonSet back without the agent {:?} after their pods ran",
        t0.elapsed()
    );
    // The StatefulSet's pod was deleted by the forced rollback, the DaemonSet's by its
    // controller.
    let log = env.webhook.log();
    let forced: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("forced rollback: deleted"))
        .collect();
    assert!(
        forced.len() == 1
            && forced[0].contains(&format!("StatefulSet/{ns}/db"))
            && forced[0].contains("pods=1"),
        "one forced rollback, of the StatefulSet's one pod: {forced:?}"
    );
    let status = get(&env, &instrumentation_path(&ns, "java")).await["status"].clone();
    let mut rolled: Vec<Value> = status["rolledBack"]
        .as_array()
        .expect("rolledBack")
        .iter()
        .map(|e| json!([e["kind"], e["name"], e["specHash"]]))
        .collect();
    rolled.sort_by_key(|v| v.to_string());
    assert_eq!(
        rolled,
        [
            json!(["DaemonSet", "node-agent", spec]),
            json!(["StatefulSet", "db", spec])
        ]
    );
    let events = events_of(&env, &ns, "InstrumentationRolledBack").await;
    let mut regarding: Vec<(String, String)> = events
        .iter()
        .map(|e| {
            (
                e[1].as_str().unwrap_or("").into(),
                e[2].as_str().unwrap_or("").into(),
            )
        })
        .collect();
    regarding.sort();
    assert_eq!(
        regarding,
        [
            ("DaemonSet".to_owned(), "node-agent".to_owned()),
            ("StatefulSet".to_owned(), "db".to_owned())
        ]
    );
    let generations = |objects: &[Value]| -> Vec<Value> {
        objects
            .iter()
            .map(|o| o["metadata"]["generation"].clone())
            .collect()
    };
    let mut objects = Vec::new();
    for (resource, _, name) in WORKLOADS {
        objects.push(
            get(
                &env,
                &format!("/apis/apps/v1/namespaces/{ns}/{resource}/{name}"),
            )
            .await,
        );
    }

    // The Lease changes hands: another identity leads; the re-created pods stay without the
    // agent and neither workload is marked again.
    for a in &mut env.args {
        if a.starts_with("--lease-identity=") {
            *a = "--lease-identity=rollback-kinds-b".to_owned();
        }
    }
    env.restart_webhook().await;
    env.await_webhook(&ns).await;
    for (p, (_, _, name)) in healthy.iter().zip(WORKLOADS) {
        delete_pod(&env, &ns, p).await;
        let again = rolled_back_pod(&env, &ns, name, limit).await;
        assert_ne!(again["metadata"]["uid"], p["metadata"]["uid"], "{name}");
    }
    let t_lease = Instant::now();
    loop {
        let lease = get(
            &env,
            &format!(
                "/apis/coordination.k8s.io/v1/namespaces/{}/leases/otel-injector",
                crate::support::identity::NAMESPACE
            ),
        )
        .await;
        if lease["spec"]["holderIdentity"] == "rollback-kinds-b" {
            break;
        }
        assert!(t_lease.elapsed() < limit, "the new identity leads: {lease}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Two status passes and more under the new holder.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let mut after = Vec::new();
    for (resource, _, name) in WORKLOADS {
        after.push(
            get(
                &env,
                &format!("/apis/apps/v1/namespaces/{ns}/{resource}/{name}"),
            )
            .await,
        );
    }
    assert_eq!(
        generations(&after),
        generations(&objects),
        "not marked again after the hand-over"
    );
}
