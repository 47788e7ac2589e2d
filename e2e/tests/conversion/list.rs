//! A measurement, `#[ignore]`d: `kubectl get otelinst -A` in v1beta1 (the preferred version)
//! on a cluster with 10,000 Instrumentations, through the real API server, which sends their
//! conversion to the webhook. The replica is the product's (cluster mode: it also holds every
//! Instrumentation in its index); its peak resident memory must stay within the chart's
//! limit (128 Mi), where a review used to cost about 30 times its size.
//!
//! ```sh
//! E2E_WEBHOOK_BIN=$PWD/target/release/otel-injector \
//!   cargo test -p otel-injector-e2e --test e2e -- --ignored --nocapture conversion::list
//! ```
//! `E2E_LIST_INSTRUMENTATIONS` sets how many (default 10000).

use std::time::{Duration, Instant};

use serde_json::json;

use crate::harness::webhook_binary;
use crate::memory::{applied, create_all, instrumentation};
use crate::support::api;
use crate::support::controlplane::ControlPlane;
use crate::support::process::{mib, usage};
use crate::support::webhook::Webhook;

/// The chart's default memory limit.
const CHART_LIMIT: u64 = 128 * 1024 * 1024;

#[tokio::test]
#[ignore = "a measurement: run alone, see the module docs"]
async fn a_list_of_ten_thousand_instrumentations_in_v1beta1_within_the_charts_limit() {
    let n: usize = std::env::var("E2E_LIST_INSTRUMENTATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let cp = ControlPlane::with_crd(&[]).await;
    let client = cp.client();
    let namespaces = n.div_ceil(100);
    create_all(
        &client,
        "namespaces",
        (0..namespaces)
            .map(|i| {
                let ns = json!({"apiVersion": "v1", "kind": "Namespace",
                                "metadata": {"name": format!("list-{i:03}")}});
                ("/api/v1/namespaces".to_owned(), ns)
            })
            .collect(),
    )
    .await;
    let mut webhook = Webhook::start_with(
        &webhook_binary(),
        &cp.kubeconfig,
        &["--events=false".to_owned()],
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    webhook
        .wait_ready(Duration::from_secs(30))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    api::point_conversion(
        &client,
        &webhook.conversion_url(),
        Some(&webhook.certs.ca_cert),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    // Written as v1alpha1 (stored so, no conversion), as `kubectl apply` leaves them.
    let items = (0..n)
        .map(|i| {
            let ns = format!("list-{:03}", i / 100);
            let mut inst = instrumentation(&ns);
            inst["metadata"]["name"] = json!(format!("inst-{i:05}"));
            inst["metadata"]["annotations"] = json!({});
            (
                format!("/apis/opentelemetry.io/v1alpha1/namespaces/{ns}/instrumentations"),
                applied(inst),
            )
        })
        .collect();
    create_all(&client, "Instrumentations", items).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let pid = webhook.pid().expect("running");
    let before = usage(pid);

    let mut took = Vec::new();
    let mut bytes = 0;
    for _ in 0..3 {
        let t0 = Instant::now();
        let (status, text) =
            api::get_text(&client, "/apis/opentelemetry.io/v1beta1/instrumentations")
                .await
                .unwrap_or_else(|e| panic!("{e}"));
        took.push(t0.elapsed());
        assert_eq!(status, 200, "{}", &text[..text.len().min(500)]);
        let list: serde_json::Value = serde_json::from_str(&text).expect("a list");
        assert_eq!(list["items"].as_array().map(Vec::len), Some(n));
        assert_eq!(list["items"][0]["apiVersion"], "opentelemetry.io/v1beta1");
        bytes = text.len();
    }
    let after = usage(pid);
    let text = webhook.metrics().await;
    let converted =
        crate::support::webhook::metric(&text, "otel_injector_conversion_objects_total");
    eprintln!("[list] binary {}", webhook_binary().display());
    eprintln!(
        "[list] {n} Instrumentations, LIST in v1beta1 ({bytes} B): {took:?}; the webhook converted {converted:?} objects"
    );
    eprintln!(
        "[list] replica RSS before {:.1} MiB, after {:.1} MiB, peak {:.1} MiB (chart limit {:.0} MiB)",
        mib(before.rss),
        mib(after.rss),
        mib(after.peak),
        mib(CHART_LIMIT)
    );
    assert!(
        after.peak < CHART_LIMIT,
        "peak {:.1} MiB over the chart's limit",
        mib(after.peak)
    );
    webhook.stop();
}
