//! The webhook's HTTPS listener: rustls (HTTP/1.1 only), handshake and header timeouts for
//! slow clients, a cap on open connections, and a graceful drain.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tracing::Instrument;

use super::shutdown::Drain;

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

/// Serves `router` over TLS on `listener` until `drain` closes, then stops accepting, lets
/// in-flight requests finish, closes idle keep-alive connections and returns once every
/// connection is gone or the drain's timeout has passed.
pub async fn serve_tls(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    router: Router,
    limits: ConnLimits,
    mut drain: Drain,
) {
    let graceful = GracefulShutdown::new();
    let slots = Arc::new(tokio::sync::Semaphore::new(limits.max_connections.max(1)));
    loop {
        let permit = tokio::select! {
            biased;
            _ = drain.closing() => break,
            p = slots.clone().acquire_owned() => p,
        };
        let Ok(permit) = permit else { break };
        let accepted = tokio::select! {
            biased;
            _ = drain.closing() => break,
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
        let mut drain = drain.clone();
        tokio::spawn(
            async move {
                let tls = tokio::select! {
                    r = tokio::time::timeout(limits.handshake, acceptor.accept(tcp)) => r,
                    _ = drain.closing() => return,
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
    let timeout = drain.timeout();
    tracing::info!(open, "webhook listener closed; draining connections");
    if tokio::time::timeout(timeout, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            drain = ?timeout,
            "connections still open after the drain period; closing them"
        );
    }
}
