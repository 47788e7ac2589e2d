//! The admin listener (plain HTTP): `/metrics`, `/livez`, `/readyz`. Bound before anything
//! waits on the API server, on every replica.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::net::TcpListener;

use super::conns::ConnLimits;
use super::listener::serve_plain;
use super::metrics::Metrics;
use super::shutdown::Drain;
use crate::engine::Catalog;
use crate::metrics::Exposition;

/// Process health as the probes see it.
pub struct Health {
    pub catalog: Arc<dyn Catalog + Send + Sync>,
    /// What `/metrics` serves.
    pub exposition: Arc<Exposition>,
    /// The servers' series (the admin listener's connections among them).
    pub metrics: Arc<Metrics>,
    /// Not ready once the drain has begun.
    pub drain: Drain,
    /// False while the served certificate is not yet the one to serve (built-in
    /// certificate mode, before the Secret is read); true otherwise.
    pub certificate_ready: Arc<AtomicBool>,
}

impl Health {
    /// `certificate_ready`: whether the certificate served from the start is the one to
    /// serve.
    pub fn new(
        catalog: Arc<dyn Catalog + Send + Sync>,
        exposition: Arc<Exposition>,
        metrics: Arc<Metrics>,
        drain: Drain,
        certificate_ready: bool,
    ) -> Arc<Self> {
        Arc::new(Health {
            catalog,
            exposition,
            metrics,
            drain,
            certificate_ready: Arc::new(AtomicBool::new(certificate_ready)),
        })
    }
}

/// Serves the admin endpoints on `listener` until `drain` closes, then finishes the open
/// requests (the caller bounds how long it waits for that). The same connection handling
/// as the webhook's, with its own cap: half-sent requests are cut at the header deadline,
/// and at the cap a new connection (a probe) displaces the oldest one without a request.
pub async fn serve(listener: TcpListener, health: Arc<Health>, limits: ConnLimits, drain: Drain) {
    let metrics = health.metrics.clone();
    serve_plain(listener, router(health), limits, metrics, drain).await;
}

pub fn router(health: Arc<Health>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/livez", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .with_state(health)
}

async fn metrics(State(h): State<Arc<Health>>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        h.exposition.encode(),
    )
}

async fn readyz(State(h): State<Arc<Health>>) -> impl IntoResponse {
    if h.drain.is_draining() {
        (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n")
    } else if !h.catalog.ready() {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "Instrumentation and Namespace caches not synced\n",
        )
    } else if !h.certificate_ready.load(Ordering::Acquire) {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "serving certificate not yet taken from the certificate Secret\n",
        )
    } else {
        (StatusCode::OK, "ok\n")
    }
}
