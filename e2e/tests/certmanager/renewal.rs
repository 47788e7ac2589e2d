//! A renewal forced while admissions stream, and the first admission sent after it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::http::Method;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::json;

use crate::harness::*;
use crate::support::api;

use super::get;
use otel_injector::keys::INJECT_JAVA;

/// One pod creation of the stream.
pub(super) struct Admission {
    /// When the request was sent.
    pub(super) at: Instant,
    pub(super) status: u16,
    pub(super) injected: bool,
    pub(super) message: String,
}

/// Creates pods asking for Java injection one after another, 20 ms apart, until `stop` is
/// set (at most 3000 pods or 180 s); `sent` counts the requests sent.
pub(super) async fn stream(
    client: kube::Client,
    ns: String,
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicUsize>,
) -> Vec<Admission> {
    let t0 = Instant::now();
    let mut out = Vec::new();
    while !stop.load(Ordering::Relaxed)
        && out.len() < 3000
        && t0.elapsed() < Duration::from_secs(180)
    {
        let p = pod(&format!("stream-{}", out.len()), &[(INJECT_JAVA, "true")]);
        let at = Instant::now();
        sent.fetch_add(1, Ordering::Relaxed);
        let r = api::create_pod(&client, &ns, &p, false)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        out.push(Admission {
            at,
            status: r.status,
            injected: is_injected(&r.body),
            message: r.message().to_owned(),
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    out
}

/// Waits until the stream has sent `n` requests (bounded: 60 s).
pub(super) async fn until_sent(sent: &AtomicUsize, n: usize) {
    let t0 = Instant::now();
    while sent.load(Ordering::Relaxed) < n {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the pod stream sent {} of {n} requests in 60 s",
            sent.load(Ordering::Relaxed)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// What `cmctl renew` does: the condition `Issuing=True` (reason `ManuallyTriggered`) added
/// to the Certificate's status (retried on a write conflict with cert-manager).
pub(super) async fn force_renewal(client: &kube::Client, path: &str) {
    for _ in 0..10 {
        let mut certificate = get(client, path).await;
        let now = serde_json::to_value(Time(k8s_openapi::jiff::Timestamp::now())).unwrap();
        let generation = certificate["metadata"]["generation"].clone();
        certificate["status"]["conditions"]
            .as_array_mut()
            .expect("conditions")
            .push(json!({
                "type": "Issuing", "status": "True", "reason": "ManuallyTriggered",
                "message": "Certificate re-issuance manually triggered",
                "lastTransitionTime": now, "observedGeneration": generation,
            }));
        let r = api::send(
            client,
            Method::PUT,
            &format!("{path}/status"),
            Some(&certificate),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        match r.status {
            200 => return,
            409 => tokio::time::sleep(Duration::from_millis(100)).await,
            s => panic!("PUT {path}/status: HTTP {s}: {}", r.body),
        }
    }
    panic!("PUT {path}/status: 10 conflicts in a row");
}
