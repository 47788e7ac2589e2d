//! Serving a router on a listener, for both listeners: the webhook's over rustls (HTTP/1.1
//! only), the admin one in plain HTTP. Per-phase deadlines for slow clients, a cap on open
//! connections at which the oldest connection without a request gives way, and a graceful
//! drain ([`AtClose`]).

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio_rustls::TlsAcceptor;
use tracing::Instrument;

use super::auth::Peer;
use super::conns::{ConnLimits, Phase, TrackedIo, TrackedService, Tracker};
use super::metrics::{Metrics, Refusal};
use super::shutdown::Drain;

/// Connections the kernel completes and queues before we accept them: `listen(2)` lowers
/// this to `net.core.somaxconn` (4096 by default since Linux 5.4, per network namespace),
/// as Go's listeners do. The standard library's 128 overflows at once when clients that
/// are shed reconnect, and a full queue drops SYNs, legitimate ones included, which costs
/// their clients a 1 s retransmit.
const BACKLOG: u32 = 65535;
/// hyper's read and write buffers: a request head must fit (the API server's are well
/// under 1 KiB), and this bounds what one connection can make the server hold. hyper's
/// own default lets each connection grow its buffer to 408 KiB.
const MAX_BUF_SIZE: usize = 16 * 1024;

/// What a listener's connections do when it stops accepting at the end of the shutdown
/// delay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AtClose {
    /// Each connection lives on until its client closes it or its next answer (which
    /// carries `Connection: close`) ends it, within the drain's timeout; a handshake in
    /// progress finishes. The webhook's: whatever the server closes, the API server may be
    /// writing a request onto at that instant, and it does not retry a POST lost that way
    /// (it admits the pod without the agent). Its own idle timeout, 90 s, closes the
    /// connections it does not use again.
    Wait,
    /// Idle connections close at once (with a TLS close_notify), an answer in progress is
    /// finished first, a handshake is cut. The admin listener's: a lost scrape or probe
    /// costs nothing.
    CloseIdle,
}

/// Binds a listener with the deepest accept queue the system allows ([`BACKLOG`]).
pub fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = match addr {
        SocketAddr::V4(_) => TcpSocket::new_v4()?,
        SocketAddr::V6(_) => TcpSocket::new_v6()?,
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(BACKLOG)
}

/// Serves `router` over TLS on `listener` until `drain` closes; see [`serve`].
pub async fn serve_tls(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    router: Router,
    limits: ConnLimits,
    metrics: Arc<Metrics>,
    drain: Drain,
) {
    let tracker = Tracker::new("webhook", limits, metrics.clone(), drain.clone());
    serve(
        listener,
        Phase::Handshake,
        move |tcp| {
            let accept = acceptor.accept(tcp);
            let metrics = metrics.clone();
            async move {
                match accept.await {
                    Ok(tls) => {
                        let client_cert = tls.get_ref().1.peer_certificates().is_some();
                        Ok((tls, Peer { client_cert }))
                    }
                    Err(e) => {
                        if refused_certificate(&e) {
                            metrics.refused(Refusal::BadCertificate);
                        }
                        Err(e)
                    }
                }
            }
        },
        router,
        tracker,
        drain,
        AtClose::Wait,
    )
    .await;
}

/// Serves `router` in plain HTTP on `listener` until `drain` closes; see [`serve`].
pub async fn serve_plain(
    listener: TcpListener,
    router: Router,
    limits: ConnLimits,
    metrics: Arc<Metrics>,
    drain: Drain,
) {
    let tracker = Tracker::new("admin", limits, metrics, drain.clone());
    serve(
        listener,
        Phase::Fresh,
        |tcp| std::future::ready(Ok((tcp, Peer::default()))),
        router,
        tracker,
        drain,
        AtClose::CloseIdle,
    )
    .await;
}

/// Whether a handshake failed on the client's certificate (one the client CA did not sign,
/// or not a valid one).
fn refused_certificate(e: &io::Error) -> bool {
    matches!(
        e.get_ref().and_then(|e| e.downcast_ref::<rustls::Error>()),
        Some(rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented)
    )
}

/// Accepts connections until `drain` closes, each set up by `handshake` (starting in
/// phase `first`) and then served HTTP/1.1 by `router`. Then stops accepting, treats the
/// open connections as `at_close` says and returns once every connection is gone or the
/// drain's timeout has passed.
async fn serve<H, F, S>(
    listener: TcpListener,
    first: Phase,
    handshake: H,
    router: Router,
    tracker: Arc<Tracker>,
    mut drain: Drain,
    at_close: AtClose,
) where
    H: Fn(TcpStream) -> F,
    F: Future<Output = io::Result<(S, Peer)>> + Send + 'static,
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    loop {
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
        // At the cap, the oldest connection without a request gives way; only if every
        // connection is in a request does the new one wait.
        let admitted = tokio::select! {
            biased;
            _ = drain.closing() => false,
            () = tracker.admit() => true,
        };
        if !admitted {
            break;
        }
        let _ = tcp.set_nodelay(true);
        let conn = tracker.register(first);
        let handle = conn.clone();
        let setup = handshake(tcp);
        let router = router.clone();
        let mut drain = drain.clone();
        let work = async move {
            // Resolves when this connection must close early ([`AtClose::CloseIdle`]).
            let close = async move {
                match at_close {
                    AtClose::CloseIdle => drain.closing().await,
                    AtClose::Wait => std::future::pending().await,
                }
            };
            let mut close = std::pin::pin!(close);
            let io = tokio::select! {
                r = setup => r,
                () = &mut close => return,
            };
            let (io, peer) = match io {
                Ok(io) => io,
                Err(e) => {
                    tracing::debug!(error = %e, "handshake failed");
                    return;
                }
            };
            conn.set(Phase::Fresh);
            let service = TrackedService::new(router, conn.clone(), peer);
            let http = hyper::server::conn::http1::Builder::new()
                .max_buf_size(MAX_BUF_SIZE)
                // Deadlines are the tracker's: hyper's would also count the idle wait.
                .header_read_timeout(None)
                .keep_alive(true)
                .serve_connection(TokioIo::new(TrackedIo::new(io, conn.clone())), service);
            tokio::pin!(http);
            // With [`AtClose::CloseIdle`], closed gracefully when the listener closes (the
            // answer in progress is finished and marked as the last, an idle connection
            // closes with a TLS close_notify). Biased: the connection is polled first, so a
            // request whose bytes have arrived is read and answered before the close.
            let ended = tokio::select! {
                biased;
                r = http.as_mut() => r,
                () = &mut close => {
                    http.as_mut().graceful_shutdown();
                    http.await
                }
            };
            if let Err(e) = ended {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        };
        tokio::spawn(
            handle
                .run(work)
                .instrument(tracing::debug_span!("conn", %peer)),
        );
    }
    drop(listener);
    let timeout = drain.timeout();
    let at = tracker.drain_counts();
    tracing::info!(
        listener = tracker.name(),
        open = at.open,
        retired = at.retired,
        client_closed = at.client_closed,
        "listener closed; draining connections"
    );
    let waited = tokio::time::timeout(timeout, tracker.all_closed()).await;
    let end = tracker.drain_counts();
    if waited.is_err() {
        // Past the API server's idle timeout only if the timeout is shorter than it
        // (`--shutdown-timeout`), or a client without one holds connections open.
        tracing::warn!(
            listener = tracker.name(),
            drain = ?timeout,
            retired = end.retired,
            client_closed = end.client_closed,
            cut = end.open,
            "connections still open after the drain period; closing them"
        );
    } else {
        tracing::info!(
            listener = tracker.name(),
            retired = end.retired,
            client_closed = end.client_closed,
            cut = 0,
            "connections drained"
        );
    }
}
