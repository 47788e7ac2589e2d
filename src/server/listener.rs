//! Serving a router on a listener, for both listeners: the webhook's over rustls (HTTP/1.1
//! only), the admin one in plain HTTP. Per-phase deadlines for slow clients, a cap on open
//! connections at which the oldest connection without a request gives way, and a graceful
//! drain.

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

use super::conns::{ConnLimits, Phase, TrackedIo, TrackedService, Tracker};
use super::shutdown::Drain;
use crate::metrics::Metrics;

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
    let tracker = Tracker::new("webhook", limits, metrics, drain.clone());
    serve(
        listener,
        Phase::Handshake,
        move |tcp| acceptor.accept(tcp),
        router,
        tracker,
        drain,
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
        |tcp| std::future::ready(Ok(tcp)),
        router,
        tracker,
        drain,
    )
    .await;
}

/// Accepts connections until `drain` closes, each set up by `handshake` (starting in
/// phase `first`) and then served HTTP/1.1 by `router`. Then stops accepting, lets
/// in-flight requests finish, closes idle connections and returns once every connection is
/// gone or the drain's timeout has passed.
async fn serve<H, F, S>(
    listener: TcpListener,
    first: Phase,
    handshake: H,
    router: Router,
    tracker: Arc<Tracker>,
    mut drain: Drain,
) where
    H: Fn(TcpStream) -> F,
    F: Future<Output = io::Result<S>> + Send + 'static,
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let follow = tokio::spawn(tracker.clone().follow_drain());
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
            let io = tokio::select! {
                r = setup => r,
                _ = drain.closing() => return,
            };
            let io = match io {
                Ok(io) => io,
                Err(e) => {
                    tracing::debug!(error = %e, "handshake failed");
                    return;
                }
            };
            conn.set(Phase::Fresh);
            let service = TrackedService::new(router, conn.clone());
            let http = hyper::server::conn::http1::Builder::new()
                .max_buf_size(MAX_BUF_SIZE)
                // Deadlines are the tracker's: hyper's would also count the idle wait.
                .header_read_timeout(None)
                .keep_alive(true)
                .serve_connection(TokioIo::new(TrackedIo::new(io, conn.clone())), service);
            tokio::pin!(http);
            // Closed gracefully (the answer in progress is finished and marked as the
            // last, an idle connection closes with a TLS close_notify) when the listener
            // closes or the tracker retires the connection while draining.
            // Biased: the connection is polled first, so a request whose bytes have arrived
            // is read (and answered with `Connection: close`) before a retirement closes an
            // idle connection; polled in random order, the close could win and drop a
            // request the client had already written (measured: 1 pod lost in about 1 run
            // in 7 of the rolling test).
            let ended = tokio::select! {
                biased;
                r = http.as_mut() => r,
                () = async { tokio::select! {
                    _ = drain.closing() => {},
                    () = conn.retired() => {},
                } } => {
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
    let open = tracker.open();
    let timeout = drain.timeout();
    let (retired, closed_idle) = tracker.drain_counts();
    tracing::info!(
        listener = tracker.name(),
        open,
        retired,
        closed_idle,
        "listener closed; draining connections"
    );
    follow.abort();
    if tokio::time::timeout(timeout, tracker.all_closed())
        .await
        .is_err()
    {
        tracing::warn!(
            listener = tracker.name(),
            drain = ?timeout,
            open = tracker.open(),
            "connections still open after the drain period; closing them"
        );
    }
}
