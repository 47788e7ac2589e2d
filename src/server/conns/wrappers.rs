//! The connection's I/O and service wrappers: they tell the [`Conn`] which phase it is in.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::{Conn, Phase};
use crate::server::auth::Peer;

/// The connection's stream as hyper sees it: reads mark the start of a request head,
/// completed flushes the end of an answer.
pub struct TrackedIo<T> {
    inner: T,
    conn: Conn,
}

impl<T> TrackedIo<T> {
    pub fn new(inner: T, conn: Conn) -> Self {
        TrackedIo { inner, conn }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for TrackedIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.conn.bytes_read();
        }
        r
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for TrackedIo<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let r = Pin::new(&mut self.inner).poll_flush(cx);
        if matches!(r, Poll::Ready(Ok(()))) {
            self.conn.flushed();
        }
        r
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

// === the service ===

/// The router as hyper calls it: a request head marks the start of a request, the end of
/// the response body its answer.
#[derive(Clone)]
pub struct TrackedService {
    inner: TowerToHyperService<Router>,
    conn: Conn,
    /// What the handshake learnt of the caller, set on every request.
    peer: Peer,
}

impl TrackedService {
    pub fn new(router: Router, conn: Conn, peer: Peer) -> Self {
        TrackedService {
            inner: TowerToHyperService::new(router),
            conn,
            peer,
        }
    }
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl hyper::service::Service<http::Request<Incoming>> for TrackedService {
    type Response = http::Response<TrackedBody>;
    type Error = Infallible;
    type Future = BoxFuture<Result<Self::Response, Infallible>>;

    fn call(&self, mut req: http::Request<Incoming>) -> Self::Future {
        self.conn.set(Phase::Request);
        // Only what the default lacks: an extension map is an allocation per request.
        if self.peer != Peer::default() {
            req.extensions_mut().insert(self.peer);
        }
        let answered = Answered(self.conn.clone());
        let response = self.inner.call(req);
        Box::pin(async move {
            let Ok(mut response) = response.await;
            // Decided when the answer is ready, so a drain that began during the request
            // still retires the connection. hyper closes it once this answer is written.
            let conn = &answered.0;
            if let Some(reason) = conn.retiring() {
                response.headers_mut().insert(
                    http::header::CONNECTION,
                    http::HeaderValue::from_static("close"),
                );
                conn.0.tracker.metrics.retired(reason);
                conn.0.retired.store(true, Ordering::Release);
            }
            Ok(response.map(|inner| TrackedBody {
                inner,
                _answered: answered,
            }))
        })
    }
}

/// Marks the answer as handed over when the response body is dropped: hyper drops it once
/// it has taken all of it (or given up on the connection).
pub(super) struct Answered(pub(super) Conn);

impl Drop for Answered {
    fn drop(&mut self) {
        (self.0).0.answered.store(true, Ordering::Release);
    }
}

/// A response body that reports when hyper is done with it.
pub struct TrackedBody {
    inner: Body,
    _answered: Answered,
}

impl hyper::body::Body for TrackedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
