//! The webhook router in-process (no socket, no binary): `router.rs`, `router_logs.rs`.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, header};
use otel_injector::cluster::StaticCatalog;
use otel_injector::cluster::events::{EventSink, Notice, queue};
use otel_injector::engine::EngineConfig;
use otel_injector::metrics::Metrics;
use otel_injector::server::{Webhook, router};
use tokio::sync::mpsc::Receiver;
use tower::ServiceExt as _;

use super::{INSTRUMENTATIONS, Response, metric};

/// The router over the test Instrumentations, and its metrics.
pub fn webhook() -> (Router, Arc<Metrics>) {
    let metrics = Arc::new(Metrics::new());
    let catalog = StaticCatalog::from_yaml(INSTRUMENTATIONS).expect("test Instrumentations");
    let state = Webhook {
        catalog: Arc::new(catalog),
        config: EngineConfig::default(),
        metrics: metrics.clone(),
        events: EventSink::disabled(metrics.clone()),
    };
    (router(Arc::new(state)), metrics)
}

/// [`webhook`] with an Event queue of `capacity`, and the queue's receiving end.
pub fn webhook_with_events(capacity: usize) -> (Router, Arc<Metrics>, Receiver<Notice>) {
    let metrics = Arc::new(Metrics::new());
    let catalog = StaticCatalog::from_yaml(INSTRUMENTATIONS).expect("test Instrumentations");
    let (events, rx) = queue(capacity, metrics.clone());
    let state = Webhook {
        catalog: Arc::new(catalog),
        config: EngineConfig::default(),
        metrics: metrics.clone(),
        events,
    };
    (router(Arc::new(state)), metrics, rx)
}

/// A POST of `body` as JSON.
pub fn post(uri: &str, body: impl Into<Body>) -> Request<Body> {
    Request::post(uri)
        .header(header::CONTENT_TYPE, "application/json")
        .body(body.into())
        .unwrap()
}

/// Sends one request through the router and reads the whole answer.
pub async fn call(router: Router, req: Request<Body>) -> Response {
    let resp = router.oneshot(req).await.expect("the router is infallible");
    let status = resp.status().as_u16();
    let headers = resp
        .headers()
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_owned()))
        .collect();
    let body = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .expect("response body")
        .to_vec();
    Response {
        status,
        headers,
        body,
    }
}

/// `otel_injector_admission_requests_total` for one outcome.
pub fn requests(metrics: &Metrics, outcome: &str) -> f64 {
    let series = format!("otel_injector_admission_requests_total{{outcome=\"{outcome}\"}}");
    metric(&metrics.encode(), &series).expect("series exists")
}
