//! The webhook's HTTPS listener: an axum router for `/mutate-v1-pod` served over rustls
//! (HTTP/1.1 only), with a body limit, per-request deadlines from `?timeout=`, handshake and
//! header timeouts for slow clients, and a graceful drain.

pub mod admin;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;
use tracing::Instrument;

use crate::admission;
use crate::engine::{Catalog, EngineConfig};
use crate::metrics::{InjectionOutcome, Metrics, RequestOutcome};

/// Largest AdmissionReview accepted: the API server's own request limit (3 MiB).
pub const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;
/// Deadline when the API server sends no `?timeout=` (its default `timeoutSeconds`).
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(10);

/// What the webhook handler needs.
pub struct Webhook {
    pub catalog: Arc<dyn Catalog + Send + Sync>,
    pub config: EngineConfig,
    pub metrics: Arc<Metrics>,
}

/// The webhook's routes.
pub fn router(state: Arc<Webhook>) -> Router {
    Router::new()
        .route("/mutate-v1-pod", post(mutate))
        .with_state(state)
}

/// Parses the API server's `timeout` query value (`10s`, also Go-style `1m0s`, `500ms`).
pub fn parse_timeout(v: &str) -> Option<Duration> {
    let mut total = Duration::ZERO;
    let mut rest = v.trim();
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let n: u64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        total += match &rest[..unit] {
            "h" => Duration::from_secs(n.checked_mul(3600)?),
            "m" => Duration::from_secs(n.checked_mul(60)?),
            "s" => Duration::from_secs(n),
            "ms" => Duration::from_millis(n),
            _ => return None,
        };
        rest = &rest[unit..];
    }
    Some(total)
}

fn deadline_of(req: &Request) -> Duration {
    req.uri()
        .query()
        .into_iter()
        .flat_map(|q| q.split('&'))
        .find_map(|kv| kv.strip_prefix("timeout="))
        .and_then(parse_timeout)
        .filter(|d| !d.is_zero())
        .unwrap_or(DEFAULT_DEADLINE)
}

/// Time kept in hand to write the answer before the caller's deadline.
fn budget(deadline: Duration) -> Duration {
    deadline.saturating_sub((deadline / 5).min(Duration::from_millis(500)))
}

fn text(status: StatusCode, msg: String) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        msg,
    )
        .into_response()
}

async fn mutate(State(wh): State<Arc<Webhook>>, req: Request) -> Response {
    let deadline = deadline_of(&req);
    let too_large = || {
        text(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("AdmissionReview body exceeds the {MAX_BODY_BYTES} byte limit\n"),
        )
    };
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY_BYTES as u64) {
        wh.metrics.request(RequestOutcome::too_large);
        return too_large();
    }
    let body = req.into_body();
    let read = tokio::time::timeout(budget(deadline), axum::body::to_bytes(body, MAX_BODY_BYTES));
    let bytes = match read.await {
        Ok(Ok(b)) => b,
        Ok(Err(e)) => {
            let too_big = std::error::Error::source(&e)
                .is_some_and(|s| s.is::<http_body_util::LengthLimitError>());
            if too_big {
                wh.metrics.request(RequestOutcome::too_large);
                return too_large();
            }
            wh.metrics.request(RequestOutcome::invalid);
            return text(
                StatusCode::BAD_REQUEST,
                format!("failed to read request body: {e}\n"),
            );
        }
        Err(_) => {
            wh.metrics.request(RequestOutcome::deadline);
            tracing::warn!(?deadline, "request body not complete before the deadline");
            return text(
                StatusCode::REQUEST_TIMEOUT,
                format!("request body not received within the {deadline:?} deadline\n"),
            );
        }
    };

    let span = tracing::info_span!(
        "review",
        uid = tracing::field::Empty,
        namespace = tracing::field::Empty,
        name = tracing::field::Empty,
        operation = tracing::field::Empty,
        outcome = tracing::field::Empty,
    );
    let _enter = span.enter();
    // Timed from the complete body: how fast the client uploads is not ours to measure.
    let started = Instant::now();
    let result = admission::review(&bytes, wh.catalog.as_ref(), &wh.config);
    let elapsed = started.elapsed();
    wh.metrics.duration.observe(elapsed.as_secs_f64());
    match result {
        Err(e) => {
            wh.metrics.request(RequestOutcome::invalid);
            span.record("outcome", "invalid");
            tracing::warn!(error = %e, "unreadable AdmissionReview");
            text(StatusCode::BAD_REQUEST, format!("{e}\n"))
        }
        Ok((body, s)) => {
            let outcome = if s.patched {
                RequestOutcome::patched
            } else {
                RequestOutcome::unchanged
            };
            wh.metrics.request(outcome);
            for l in &s.report.injected {
                wh.metrics.injection(*l, InjectionOutcome::injected);
            }
            for skip in &s.report.skipped {
                if let Some(l) = skip.language {
                    wh.metrics.injection(l, InjectionOutcome::skipped);
                }
                wh.metrics.skipped(skip.reason);
            }
            span.record("uid", s.uid.as_str());
            span.record("namespace", s.namespace.as_str());
            span.record("name", s.name.as_str());
            span.record("operation", s.operation.as_str());
            span.record("outcome", if s.patched { "patched" } else { "unchanged" });
            let injected: Vec<_> = s.report.injected.iter().map(|l| l.as_str()).collect();
            if s.report.requested || !s.report.warnings.is_empty() {
                tracing::info!(
                    kind = %s.kind,
                    dry_run = s.dry_run,
                    injected = ?injected,
                    warnings = ?s.report.warnings,
                    already_injected = s.report.already_injected,
                    micros = elapsed.as_micros() as u64,
                    "reviewed"
                );
            } else {
                tracing::debug!(kind = %s.kind, "reviewed; nothing requested");
            }
            let mut resp = Response::new(Body::from(body));
            resp.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            resp
        }
    }
}

/// Timeouts for the connection layer.
#[derive(Clone, Copy, Debug)]
pub struct ConnLimits {
    /// A TLS handshake must finish within this.
    pub handshake: Duration,
    /// Idle keep-alive connections, and requests whose headers are incomplete, are closed
    /// after this (hyper runs one timer for both).
    pub idle: Duration,
    /// Connections served at once.
    pub max_connections: usize,
}

impl Default for ConnLimits {
    fn default() -> Self {
        ConnLimits {
            handshake: Duration::from_secs(10),
            idle: Duration::from_secs(120),
            max_connections: 1024,
        }
    }
}

/// Serves `router` over TLS on `listener` until `stop` turns true, then stops accepting,
/// lets in-flight requests finish, closes idle keep-alive connections and returns once
/// every connection is gone or `drain` has passed.
pub async fn serve_tls(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    router: Router,
    limits: ConnLimits,
    mut stop: watch::Receiver<bool>,
    drain: Duration,
) {
    let graceful = GracefulShutdown::new();
    let slots = Arc::new(tokio::sync::Semaphore::new(limits.max_connections.max(1)));
    loop {
        let permit = tokio::select! {
            biased;
            _ = stop.wait_for(|s| *s) => break,
            p = slots.clone().acquire_owned() => p,
        };
        let Ok(permit) = permit else { break };
        let accepted = tokio::select! {
            biased;
            _ = stop.wait_for(|s| *s) => break,
            a = listener.accept() => a,
        };
        let (tcp, peer): (_, SocketAddr) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // Out of file descriptors and the like: back off instead of spinning.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let acceptor = acceptor.clone();
        let router = router.clone();
        let watcher = graceful.watcher();
        let mut stop = stop.clone();
        tokio::spawn(
            async move {
                let tls = tokio::select! {
                    r = tokio::time::timeout(limits.handshake, acceptor.accept(tcp)) => r,
                    _ = stop.wait_for(|s| *s) => return,
                };
                let tls = match tls {
                    Ok(Ok(s)) => s,
                    Ok(Err(e)) => {
                        tracing::debug!(error = %e, "TLS handshake failed");
                        return;
                    }
                    Err(_) => {
                        tracing::debug!("TLS handshake timed out");
                        return;
                    }
                };
                let service = TowerToHyperService::new(router);
                let conn = hyper::server::conn::http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(limits.idle)
                    .keep_alive(true)
                    .serve_connection(TokioIo::new(tls), service);
                if let Err(e) = watcher.watch(conn).await {
                    tracing::debug!(error = %e, "connection ended with an error");
                }
                drop(permit);
            }
            .instrument(tracing::debug_span!("conn", %peer)),
        );
    }
    drop(listener);
    let open = graceful.count();
    tracing::info!(open, "webhook listener closed; draining connections");
    if tokio::time::timeout(drain, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            ?drain,
            "connections still open after the drain period; closing them"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts() {
        assert_eq!(parse_timeout("10s"), Some(Duration::from_secs(10)));
        assert_eq!(parse_timeout("1m0s"), Some(Duration::from_secs(60)));
        assert_eq!(parse_timeout("1m30s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_timeout("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_timeout("10"), None);
        assert_eq!(parse_timeout("s"), None);
        assert_eq!(parse_timeout(""), None);
        assert_eq!(parse_timeout("99999999999999999999h"), None);
        assert_eq!(budget(Duration::from_secs(10)), Duration::from_millis(9500));
        assert_eq!(budget(Duration::from_secs(1)), Duration::from_millis(800));
    }
}
