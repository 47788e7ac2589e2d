//! What the default configuration, which sends every pod, costs a pod that asks for
//! nothing: its creation time through the real API server with and without the webhook.
//! A measurement, so `#[ignore]`d; run it alone (other tests' webhooks would share the
//! machine's two cores), in release for the product's numbers:
//!
//! ```sh
//! cargo test --release -p otel-injector-e2e --test e2e -- --ignored --nocapture latency
//! ```
//! `E2E_LATENCY_PODS` sets the pods per series (default 300).

use std::time::{Duration, Instant};

use crate::harness::*;
use crate::support::api;
use crate::support::webhook::{Requests, admission_time};

/// Creates `n` pods that ask for nothing in each namespace of `namespaces`, alternating
/// between them; returns each namespace's creation times (client side: POST to 201).
async fn series(
    client: &kube::Client,
    namespaces: &[&str],
    prefix: &str,
    n: usize,
) -> Vec<Vec<Duration>> {
    let mut times = vec![Vec::with_capacity(n); namespaces.len()];
    for i in 0..n {
        for (k, ns) in namespaces.iter().enumerate() {
            let p = pod(&format!("{prefix}-{i}"), &[]);
            let t0 = Instant::now();
            let r = api::create_pod(client, ns, &p, false)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            times[k].push(t0.elapsed());
            assert_eq!(r.status, 201, "{ns}/{prefix}-{i}: {}", r.body);
            assert!(r.warnings.is_empty(), "{:?}", r.warnings);
        }
    }
    times
}

/// (p50, p99) in milliseconds.
fn percentiles(times: &[Duration]) -> (f64, f64) {
    let mut t = times.to_vec();
    t.sort();
    (percentile(&t, 50), percentile(&t, 99))
}

fn report(what: &str, times: &[Duration]) -> (f64, f64) {
    let (p50, p99) = percentiles(times);
    eprintln!(
        "[latency] {what:<58} n={:<4} p50 {p50:.3} ms  p99 {p99:.3} ms",
        times.len()
    );
    (p50, p99)
}

#[tokio::test]
#[ignore = "a measurement; prints the numbers (see the module doc)"]
async fn pod_create_latency_with_and_without_the_webhook() {
    let n: usize = std::env::var("E2E_LATENCY_PODS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let warm = 50;
    let cp = cluster().await;
    let client = cp.client();
    // Never matched by any configuration: no scope label.
    let off = "latency-unmatched";
    api::create_namespace(&client, off, &[], &[])
        .await
        .unwrap_or_else(|e| panic!("{e}"));

    // 1. No configuration of ours registered.
    series(&client, &[off], "warm-a", warm).await;
    let before = series(&client, &[off], "a", n).await.remove(0);

    // 2. The default configuration registered, its webhook serving: pods alternate between
    // a namespace it matches (every pod sent, answered by the fast path) and one it does not.
    let env = Env::start("latency").await;
    let on = env.namespace("matched", &[]).await;
    env.await_webhook(&on).await;
    series(&client, &[&on, off], "warm-b", warm).await;
    let requests = env.requests().await;
    let (sum0, count0) = admission_time(&env.webhook.metrics().await);
    let mut both = series(&client, &[&on, off], "b", n).await;
    let (sum1, count1) = admission_time(&env.webhook.metrics().await);
    // Exactly the matched pods were sent, and none was changed.
    assert_eq!(
        env.requests().await,
        Requests {
            unchanged: requests.unchanged + n as f64,
            ..requests
        }
    );
    assert_eq!(count1 - count0, n as f64);
    let (sent, unmatched) = (both.remove(0), both.remove(0));

    // 3. The configuration deleted again.
    let name = env.configuration.clone();
    drop(env);
    let path =
        format!("/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{name}");
    let r = api::send(&client, axum::http::Method::DELETE, &path, None)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 200, "DELETE {name}: {}", r.body);
    series(&client, &[off], "warm-c", warm).await;
    let after = series(&client, &[off], "c", n).await.remove(0);

    eprintln!(
        "[latency] pods that ask for nothing, created one at a time (real creates, etcd \
         without fsync), {n} per series after {warm} warm-up creations"
    );
    let a = report("no webhook registered (before)", &before);
    let s = report("registered, pod sent to the webhook (fast path)", &sent);
    let u = report(
        "registered, namespace not matched (same run, alternating)",
        &unmatched,
    );
    let c = report("no webhook registered (after)", &after);
    let mut none = before.clone();
    none.extend(&after);
    let b = report("no webhook registered (before and after)", &none);
    eprintln!(
        "[latency] added by the webhook, p50: {:+.3} ms against not matched (same run), \
         {:+.3} ms against not registered (before {:+.3}, after {:+.3}); p99: {:+.3} / {:+.3} ms",
        s.0 - u.0,
        s.0 - b.0,
        s.0 - a.0,
        s.0 - c.0,
        s.1 - u.1,
        s.1 - b.1,
    );
    eprintln!(
        "[latency] the webhook's own time per review (otel_injector_admission_duration_seconds, \
         mean): {:.1} µs",
        (sum1 - sum0) / (count1 - count0) * 1e6
    );
}
