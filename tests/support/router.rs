//! The webhook router in-process (no socket, no binary): `router.rs`, `router_logs.rs`.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, header};
use otel_injector::cluster::StaticCatalog;
use otel_injector::cluster::events::{EventSink, Notice, queue};
use otel_injector::engine::{Catalog, EngineConfig};
use otel_injector::metrics::{self, Exposition};
use otel_injector::server::{ConversionBudget, InstrumentationWait, Webhook, router};
use tokio::sync::mpsc::Receiver;
use tower::ServiceExt as _;

use super::{INSTRUMENTATIONS, Response, metric};

/// The router over the test Instrumentations, and what its `/metrics` would serve.
pub fn webhook() -> (Router, Arc<Exposition>) {
    let (router, exposition, _) = with_events(None);
    (router, exposition)
}

/// [`webhook`] with an Event queue of `capacity`, and the queue's receiving end.
pub fn webhook_with_events(capacity: usize) -> (Router, Arc<Exposition>, Receiver<Notice>) {
    let (router, exposition, rx) = with_events(Some(capacity));
    (router, exposition, rx.expect("a queue"))
}

fn with_events(capacity: Option<usize>) -> (Router, Arc<Exposition>, Option<Receiver<Notice>>) {
    let catalog = StaticCatalog::from_yaml(INSTRUMENTATIONS).expect("test Instrumentations");
    over(Arc::new(catalog), None, capacity)
}

/// The router over `catalog`, waiting for missing Instrumentations as `wait` says.
pub fn webhook_over(
    catalog: Arc<dyn Catalog + Send + Sync>,
    wait: Option<InstrumentationWait>,
) -> (Router, Arc<Exposition>) {
    let (router, exposition, _) = over(catalog, wait, None);
    (router, exposition)
}

fn over(
    catalog: Arc<dyn Catalog + Send + Sync>,
    instrumentation_wait: Option<InstrumentationWait>,
    capacity: Option<usize>,
) -> (Router, Arc<Exposition>, Option<Receiver<Notice>>) {
    let mut registry = metrics::root();
    let server = Arc::new(otel_injector::server::Metrics::register(&mut registry));
    let cluster = otel_injector::cluster::Metrics::register(&mut registry).events;
    let (events, rx) = match capacity {
        Some(n) => {
            let (events, rx) = queue(n, cluster);
            (events, Some(rx))
        }
        None => (EventSink::disabled(cluster), None),
    };
    let state = Webhook {
        catalog,
        config: EngineConfig::default(),
        metrics: server,
        events,
        conversions: ConversionBudget::default(),
        auth: Default::default(),
        instrumentation_wait,
    };
    let exposition = Arc::new(Exposition::new(registry));
    (router(Arc::new(state)), exposition, rx)
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
pub fn requests(metrics: &Exposition, outcome: &str) -> f64 {
    let series = format!("otel_injector_admission_requests_total{{outcome=\"{outcome}\"}}");
    metric(&metrics.encode(), &series).expect("series exists")
}
