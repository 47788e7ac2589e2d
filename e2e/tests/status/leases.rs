//! The Lease: of two replicas one writes and the other takes over; two electors take turns.

use std::time::{Duration, Instant};

use axum::http::Method;
use serde_json::json;

use crate::harness::{Env, cluster};
use crate::support::api;
use crate::support::identity::NAMESPACE;
use crate::support::webhook::Webhook;

use super::{
    LEADER, LEASE, WRITES_OK, await_status, await_status_with, await_watched, deployment, metric,
    scale_with, spec_hash, start, status_args, template, want, writes_at_least,
};

/// The Lease as stored: (holder, transitions).
pub(super) async fn lease(env: &Env) -> (Option<String>, i64) {
    lease_with(&env.client).await
}

/// Waits until exactly one of `replicas` (webhook, identity) reports itself leader and holds
/// the Lease; returns its index and how long it took.
pub(super) async fn await_one_leader(
    env: &Env,
    replicas: &[(&Webhook, &str)],
    limit: Duration,
) -> (usize, Duration) {
    let t0 = Instant::now();
    loop {
        let mut leaders = Vec::new();
        for (i, (w, _)) in replicas.iter().enumerate() {
            if metric(&w.metrics().await, LEADER) == 1.0 {
                leaders.push(i);
            }
        }
        let (holder, _) = lease(env).await;
        if let [only] = leaders[..]
            && holder.as_deref() == Some(replicas[only].1)
        {
            return (only, t0.elapsed());
        }
        assert!(
            t0.elapsed() < limit,
            "one leader within {limit:?}: leaders {leaders:?}, holder {holder:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn of_two_replicas_one_writes_and_the_other_takes_over() {
    let mut env = start("status-ha").await;
    let mut second = Webhook::start_with(
        std::path::Path::new(env!("CARGO_BIN_EXE_e2e-otel-injector")),
        &env.identity.kubeconfig,
        &status_args("status-ha-b"),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    second
        .wait_ready(Duration::from_secs(30))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let names = ["status-ha-a", "status-ha-b"];
    let (first, took) = await_one_leader(
        &env,
        &[(&env.webhook, names[0]), (&second, names[1])],
        Duration::from_secs(20),
    )
    .await;
    eprintln!("[e2e] status-ha: {} leads after {took:?}", names[first]);
    let (_, transitions_before) = lease(&env).await;

    let ns = env.namespace("shop", &[]).await;
    env.instrumentation(
        &ns,
        "java",
        json!({"exporter": {"endpoint": "http://collector.example:4318"}}),
    )
    .await;
    let hash = spec_hash(&env, &ns, "java").await;
    let injected = format!("java=injected {ns}/java {hash}");
    deployment(&env, &ns, "web", 2, template("web", &injected, true)).await;
    let web = |n: u64| want(n, 0, json!([]), json!([["Deployment", "web", n, 0, 0]]));
    await_status(&env, &ns, "java", web(2), Duration::from_secs(60)).await;
    // Both watch; only the leader wrote.
    let leader_writes = writes_at_least([&env.webhook, &second][first], 1.0).await;
    let writes = [
        metric(&env.webhook.metrics().await, WRITES_OK),
        metric(&second.metrics().await, WRITES_OK),
    ];
    assert!(writes[first] >= leader_writes, "{writes:?}");
    assert_eq!(writes[1 - first], 0.0, "{writes:?}");
    for w in [&env.webhook, &second] {
        await_watched(&env.client, w).await;
    }

    // The leader dies without releasing (SIGKILL): the other takes over once the Lease
    // expires (3 s), then keeps the status current.
    let (leader, survivor) = if first == 0 {
        (&mut env.webhook, &mut second)
    } else {
        (&mut second, &mut env.webhook)
    };
    let t0 = Instant::now();
    leader.stop();
    loop {
        if metric(&survivor.metrics().await, LEADER) == 1.0 {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "{}", survivor.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let failover = t0.elapsed();
    eprintln!("[e2e] status-ha: the survivor leads {failover:?} after the leader was killed");
    // At most the duration (3 s) after the last renewal, plus one try (1 s), plus slack.
    assert!(failover < Duration::from_secs(6), "{failover:?}");
    let (holder, transitions) = lease_with(&env.client).await;
    assert_eq!(holder.as_deref(), Some(names[1 - first]));
    assert_eq!(transitions, transitions_before + 1);
    let survivor = if first == 0 {
        &mut second
    } else {
        &mut env.webhook
    };
    scale_with(&env.client, &ns, "web", 3).await;
    await_status_with(&env.client, &ns, "java", web(3), Duration::from_secs(60)).await;
    writes_at_least(survivor, 1.0).await;

    // A clean exit (SIGTERM) releases the Lease at once, well before it would expire.
    let t0 = Instant::now();
    survivor
        .terminate(Duration::from_secs(10))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let (holder, _) = lease_with(&env.client).await;
    assert_eq!(holder, None, "released; exited in {:?}", t0.elapsed());
}

pub(super) async fn lease_with(client: &kube::Client) -> (Option<String>, i64) {
    let r = api::send(
        client,
        Method::GET,
        &format!("/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{LEASE}"),
        None,
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    (
        r.body["spec"]["holderIdentity"].as_str().map(str::to_owned),
        r.body["spec"]["leaseTransitions"].as_i64().unwrap_or(0),
    )
}

/// Two electors of one Lease in this process (the library's `elect`, the admin client): one
/// leads; when it releases, the other takes over at its next try and the transitions count
/// it; when every handle of the last is dropped, the Lease is released.
#[tokio::test]
async fn two_electors_of_one_lease_take_turns() {
    use otel_injector::cluster::lease::{LeaseConfig, elect};
    let client = cluster().await.client();
    let name = "e2e-electors";
    let config = |identity: &str| LeaseConfig {
        namespace: "default".into(),
        name: name.into(),
        identity: identity.into(),
        duration: Duration::from_secs(3),
        renew_every: Duration::from_secs(1),
    };
    let path = format!("/apis/coordination.k8s.io/v1/namespaces/default/leases/{name}");
    let _ = api::send(&client, Method::DELETE, &path, None).await;
    let read = || async {
        let r = api::send(&client, Method::GET, &path, None)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        (
            r.body["spec"]["holderIdentity"].as_str().map(str::to_owned),
            r.body["spec"]["leaseTransitions"].as_i64(),
            r.body["spec"]["leaseDurationSeconds"].as_i64(),
        )
    };
    let a = elect(client.clone(), config("a"));
    let until = |l: otel_injector::cluster::Leadership, want: bool| async move {
        let t0 = Instant::now();
        while l.is_leader() != want {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "leader={want} in 10 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        t0.elapsed()
    };
    until(a.clone(), true).await;
    assert_eq!(read().await, (Some("a".into()), Some(0), Some(3)));
    let b = elect(client.clone(), config("b"));
    // b waits while a renews: well past the duration.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(a.is_leader() && !b.is_leader());
    assert_eq!(read().await.0.as_deref(), Some("a"));
    // a released: b takes over at its next try, not after the duration.
    a.release().await;
    assert!(!a.is_leader());
    let took = until(b.clone(), true).await;
    assert!(took < Duration::from_millis(2500), "{took:?}");
    assert_eq!(read().await, (Some("b".into()), Some(1), Some(3)));
    // Every handle of b dropped: its loop ends and releases the Lease.
    drop(b);
    let t0 = Instant::now();
    while read().await.0.is_some() {
        assert!(t0.elapsed() < Duration::from_secs(5), "released");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
