//! The open connections of one listener: what each is doing, the deadline that allows, and
//! which one gives way when the listener is full.
//!
//! A connection is always in one [`Phase`]. Each phase has its own deadline, counted from
//! when the phase began, so trickled bytes never extend one: a request head must be complete
//! within the header timeout of its first byte, however slowly the rest arrives. When the
//! listener is at its cap, a new connection closes the oldest one that is not serving a
//! request (see [`Tracker::admit`]) instead of waiting for a slot.
//!
//! A connection is retired, never cut: once the drain has begun, or once it is older than
//! its maximum age, its next answer carries `Connection: close` (the client then knows not
//! to reuse it, and nothing it sends is lost); while draining, one that waits without a
//! request closes after [`DRAIN_IDLE`], before the listener stops.

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;
use tokio::time::Instant;

use super::shutdown::Drain;
use crate::metrics::{ConnClose, ConnMetrics, ConnRetire, Metrics};

/// Default `--header-timeout`.
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// Default `--idle-timeout`: above the API server's 90 s idle timeout.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(120);
/// Default `--max-connections`.
pub const DEFAULT_MAX_CONNECTIONS: usize = 512;
/// Default `--admin-max-connections`.
pub const DEFAULT_ADMIN_MAX_CONNECTIONS: usize = 64;
/// Default `--max-connection-age`: after a rolling update, every client's pool has moved
/// to the replicas that serve within about this long.
pub const DEFAULT_MAX_CONNECTION_AGE: Duration = Duration::from_secs(60);
/// From a complete request head to the answer written out: the longest request deadline
/// the webhook accepts ([`super::webhook::MAX_DEADLINE`]) plus time to decide and write.
/// Past it the caller has long given up; a client that does not read its answer cannot
/// hold a slot for longer.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(35);
/// While draining, a connection without a request closes once it has waited this long.
/// A client's pool hands out its most recently used connection first, so one idle this
/// long is the one it is least likely to be writing to as it closes; a connection in use
/// gets `Connection: close` on its next answer instead, which loses nothing.
pub const DRAIN_IDLE: Duration = Duration::from_secs(2);

/// The connection layer's limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnLimits {
    /// A TLS handshake must finish within this.
    pub handshake: Duration,
    /// A request head must be complete within this of its first byte.
    pub header: Duration,
    /// A connection may wait this long for the first byte of a request, on a new
    /// connection or between requests on a keep-alive one.
    pub idle: Duration,
    /// From a complete request head to the response written out.
    pub request: Duration,
    /// Connections open at once. At the cap, a new connection closes the oldest one
    /// without a request in progress.
    pub max_connections: usize,
    /// A connection older than this (less up to a fifth, spread by connection) answers
    /// its next request with `Connection: close`, so the client opens a new one, which a
    /// Service may send to another replica. Zero: no limit.
    pub max_age: Duration,
}

impl Default for ConnLimits {
    fn default() -> Self {
        ConnLimits {
            handshake: Duration::from_secs(10),
            header: DEFAULT_HEADER_TIMEOUT,
            idle: DEFAULT_IDLE_TIMEOUT,
            request: REQUEST_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_age: DEFAULT_MAX_CONNECTION_AGE,
        }
    }
}

/// Connections chosen to give way and not closed yet beyond which a listener waits before
/// accepting more: how far open connections may briefly exceed the cap.
pub const MAX_SHEDDING: usize = 32;

/// What a connection is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Phase {
    /// The TLS handshake.
    Handshake,
    /// Connected, no byte of a request yet.
    Fresh,
    /// Part of a request head has arrived.
    Head,
    /// From a complete request head until the response is written out.
    Request,
    /// Between requests on a keep-alive connection.
    Idle,
}

impl Phase {
    const ALL: [Phase; 5] = [
        Phase::Handshake,
        Phase::Fresh,
        Phase::Head,
        Phase::Request,
        Phase::Idle,
    ];

    fn from_u8(v: u8) -> Phase {
        Phase::ALL[usize::from(v)]
    }

    /// Order in which connections at the cap give way: never a request in progress; first
    /// those that have not sent a request yet (handshake, silent, slow head), then idle
    /// keep-alive connections.
    fn shed_class(self) -> Option<u8> {
        match self {
            Phase::Handshake | Phase::Fresh | Phase::Head => Some(0),
            Phase::Idle => Some(1),
            Phase::Request => None,
        }
    }

    /// Why a connection whose phase outlived its deadline is closed.
    fn timed_out(self) -> ConnClose {
        match self {
            Phase::Handshake => ConnClose::HandshakeTimeout,
            Phase::Head => ConnClose::HeaderTimeout,
            Phase::Fresh | Phase::Idle => ConnClose::IdleTimeout,
            Phase::Request => ConnClose::RequestTimeout,
        }
    }
}

/// How long `phase` may last; shorter for a connection without a request once the drain
/// has begun.
fn timeout(limits: &ConnLimits, phase: Phase, draining: bool) -> Duration {
    match phase {
        Phase::Handshake => limits.handshake,
        Phase::Head => limits.header,
        Phase::Fresh | Phase::Idle if draining => limits.idle.min(DRAIN_IDLE),
        Phase::Fresh | Phase::Idle => limits.idle,
        Phase::Request => limits.request,
    }
}

/// The age past which connection `id` is retired: `max_age` less up to a fifth, spread by
/// id, so that connections opened together (after a restart) do not all turn over in the
/// same instant. `None` without a limit.
fn retire_age(max_age: Duration, id: u64) -> Option<Duration> {
    if max_age.is_zero() {
        return None;
    }
    let spread = u32::try_from(id % 8).unwrap_or(0);
    Some(max_age - max_age / 40 * spread)
}

/// The open connections of one listener.
pub struct Tracker {
    listener: &'static str,
    limits: ConnLimits,
    metrics: ConnMetrics,
    /// Where the shutdown stands: draining retires every connection.
    drain: Drain,
    registry: Mutex<Registry>,
    /// Signaled when a connection leaves or becomes one that could give way.
    changed: Notify,
}

#[derive(Default)]
struct Registry {
    next: u64,
    conns: HashMap<u64, Slot>,
    /// Connections that may be shed, by (class, when they entered it): oldest first.
    queue: BTreeMap<(u8, u64), u64>,
    /// Connections chosen to give way whose task has not ended yet.
    shedding: usize,
}

struct Slot {
    conn: Arc<Shared>,
    phase: Phase,
    since: Instant,
    key: Option<(u8, u64)>,
}

/// One connection's shared state: read by its task, updated from the I/O and the service.
struct Shared {
    id: u64,
    tracker: Arc<Tracker>,
    /// When it was registered; with [`ConnLimits::max_age`], when it is retired.
    opened: Instant,
    /// The phase, readable without the registry lock.
    phase: AtomicU8,
    /// The response body has been handed to hyper; the next completed flush ends the
    /// request.
    answered: AtomicBool,
    /// Chosen to give way.
    shed: AtomicBool,
    /// Wakes the connection's task: a new phase (and deadline), or shed.
    wake: Notify,
    /// Tells the connection's HTTP to close gracefully (draining, and no request for
    /// [`DRAIN_IDLE`]).
    retire: Notify,
}

impl Tracker {
    pub fn new(
        listener: &'static str,
        limits: ConnLimits,
        metrics: Arc<Metrics>,
        drain: Drain,
    ) -> Arc<Self> {
        Arc::new(Tracker {
            listener,
            limits,
            metrics: metrics.connections(listener),
            drain,
            registry: Mutex::new(Registry::default()),
            changed: Notify::new(),
        })
    }

    fn registry(&self) -> MutexGuard<'_, Registry> {
        // Nothing panics while holding the lock; a poisoned one still holds valid data.
        self.registry.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new connection in `phase`.
    pub fn register(self: &Arc<Self>, phase: Phase) -> Conn {
        let mut reg = self.registry();
        reg.next += 1;
        let id = reg.next;
        let shared = Arc::new(Shared {
            id,
            tracker: self.clone(),
            opened: Instant::now(),
            phase: AtomicU8::new(phase as u8),
            answered: AtomicBool::new(false),
            shed: AtomicBool::new(false),
            wake: Notify::new(),
            retire: Notify::new(),
        });
        reg.conns.insert(
            id,
            Slot {
                conn: shared.clone(),
                phase,
                since: Instant::now(),
                key: None,
            },
        );
        reg.enter(id, phase);
        // Counted under the registry's lock, as it is uncounted: the gauge never shows more
        // connections than the registry holds (a drop and an admission racing otherwise
        // showed one more than the cap allows).
        self.metrics.open.inc();
        drop(reg);
        Conn(shared)
    }

    /// The listener's name in logs and metrics.
    pub fn name(&self) -> &'static str {
        self.listener
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.registry().conns.len()
    }

    /// Of the drain so far: answers that retired their connection, and connections closed
    /// after waiting [`DRAIN_IDLE`] without a request (for the drain's log line).
    pub fn drain_counts(&self) -> (u64, u64) {
        (
            self.metrics.retired_count(ConnRetire::Draining),
            self.metrics.dropped_count(ConnClose::Draining),
        )
    }

    /// Waits for the drain to begin, then wakes every open connection, so that those
    /// without a request start their shorter wait ([`DRAIN_IDLE`]); connections opened
    /// later see the drain when they first compute a deadline. One waiter on the drain per
    /// listener, not one per connection: a flood of connections costs no more than before.
    pub async fn follow_drain(self: Arc<Self>) {
        let mut drain = self.drain.clone();
        drain.draining().await;
        let conns: Vec<Arc<Shared>> = self
            .registry()
            .conns
            .values()
            .map(|s| s.conn.clone())
            .collect();
        for conn in conns {
            conn.wake.notify_one();
        }
    }

    /// Resolves once no connection is open (after the listener has stopped accepting).
    pub async fn all_closed(&self) {
        loop {
            let changed = self.changed.notified();
            if self.open() == 0 {
                return;
            }
            changed.await;
        }
    }

    /// Returns once a new connection may be registered: below the cap, counting the
    /// connections already chosen to give way as gone; at the cap, once the oldest
    /// connection without a request has been chosen ([`Tracker::shed_oldest`]). It waits
    /// only while every connection is in a request, or while [`MAX_SHEDDING`] chosen ones
    /// have not closed yet (they close as soon as their tasks run next; if the runtime is
    /// too busy to run them, accepting slows down with it).
    ///
    /// It does not wait for the chosen connection to close, so the accept loop keeps
    /// draining the kernel's queue during a flood.
    pub async fn admit(&self) {
        loop {
            if self.try_admit() {
                return;
            }
            self.changed.notified().await;
        }
    }

    fn try_admit(&self) -> bool {
        let cap = self.limits.max_connections.max(1);
        let mut reg = self.registry();
        if reg.conns.len() - reg.shedding < cap {
            return true;
        }
        if reg.shedding >= MAX_SHEDDING {
            return false;
        }
        let victim = reg.shed_oldest();
        drop(reg);
        victim.is_some_and(|conn| {
            conn.wake.notify_one();
            true
        })
    }

    /// Closes the connection that has waited longest without a request in progress: the
    /// oldest that has not completed a request head yet (in its handshake, silent, or
    /// sending its head), else the longest idle keep-alive one. `false` if every
    /// connection is in a request. The connection closes as soon as its task runs next.
    pub fn shed_oldest(&self) -> bool {
        let victim = self.registry().shed_oldest();
        victim.is_some_and(|conn| {
            conn.wake.notify_one();
            true
        })
    }
}

impl Registry {
    /// Takes the first connection of the shedding queue out of it and counts it as
    /// shedding.
    fn shed_oldest(&mut self) -> Option<Arc<Shared>> {
        let (_, id) = self.queue.pop_first()?;
        let slot = self.conns.get_mut(&id)?;
        slot.key = None;
        let conn = slot.conn.clone();
        // Under the lock, so that the connection's unregistering counts it out.
        conn.shed.store(true, Ordering::Release);
        self.shedding += 1;
        Some(conn)
    }

    /// Puts connection `id` in the shedding queue if `phase` allows, at the end.
    fn enter(&mut self, id: u64, phase: Phase) -> bool {
        let Some(class) = phase.shed_class() else {
            return false;
        };
        self.next += 1;
        let key = (class, self.next);
        self.queue.insert(key, id);
        if let Some(slot) = self.conns.get_mut(&id) {
            slot.key = Some(key);
        }
        true
    }
}

/// A handle on one registered connection. The connection's task holds a [`Registration`]
/// (from [`Conn::registration`]), which unregisters it when the task ends.
#[derive(Clone)]
pub struct Conn(Arc<Shared>);

impl Conn {
    pub fn phase(&self) -> Phase {
        Phase::from_u8(self.0.phase.load(Ordering::Acquire))
    }

    /// Moves the connection to `phase`, restarting its deadline.
    pub fn set(&self, phase: Phase) {
        let tracker = &self.0.tracker;
        let mut reg = tracker.registry();
        let Some(slot) = reg.conns.get_mut(&self.0.id) else {
            return;
        };
        let old = slot.key.take();
        slot.phase = phase;
        slot.since = Instant::now();
        if let Some(key) = old {
            reg.queue.remove(&key);
        }
        // A connection already chosen to give way stays out of the queue.
        let sheddable = !self.0.shed.load(Ordering::Acquire) && reg.enter(self.0.id, phase);
        self.0.phase.store(phase as u8, Ordering::Release);
        drop(reg);
        if sheddable {
            tracker.changed.notify_one();
        }
        self.0.wake.notify_one();
    }

    /// When the current phase runs out, and which phase that is; `draining`: with the
    /// drain's shorter wait for a request.
    fn deadline(&self, draining: bool) -> Option<(Phase, Instant)> {
        let tracker = &self.0.tracker;
        let reg = tracker.registry();
        let slot = reg.conns.get(&self.0.id)?;
        Some((
            slot.phase,
            slot.since + timeout(&tracker.limits, slot.phase, draining),
        ))
    }

    /// Resolves when the connection is to close gracefully: the drain has begun and it
    /// waited [`DRAIN_IDLE`] without a request.
    pub async fn retired(&self) {
        self.0.retire.notified().await;
    }

    /// Why the answer being written must be this connection's last, if it must: the drain
    /// has begun, or the connection is past its age.
    fn retiring(&self) -> Option<ConnRetire> {
        let tracker = &self.0.tracker;
        if tracker.drain.is_draining() {
            return Some(ConnRetire::Draining);
        }
        retire_age(tracker.limits.max_age, self.0.id)
            .filter(|age| self.0.opened.elapsed() >= *age)
            .map(|_| ConnRetire::MaxAge)
    }

    /// Plaintext bytes arrived: the first of a request head starts its deadline.
    fn bytes_read(&self) {
        if matches!(self.phase(), Phase::Fresh | Phase::Idle) {
            self.set(Phase::Head);
        }
    }

    /// Everything written so far is flushed: a written answer ends the request.
    fn flushed(&self) {
        if self.0.answered.swap(false, Ordering::AcqRel) {
            self.set(Phase::Idle);
        }
    }

    /// Drives `work` (the connection's handshake and HTTP) until it ends, its phase runs
    /// out of time, or the connection is shed; then unregisters it. Returns why it was
    /// closed early, if it was.
    pub async fn run(self, work: impl Future<Output = ()>) -> Option<ConnClose> {
        let _registered = Registration(self.clone());
        tokio::pin!(work);
        // Asked to close gracefully because it waited without a request while draining.
        let mut retired = false;
        let closed = loop {
            // The drain shortens the wait for a request ([`Tracker::follow_drain`] wakes
            // every connection when it begins).
            let draining = !retired && self.0.tracker.drain.is_draining();
            let Some((phase, deadline)) = self.deadline(draining) else {
                break None;
            };
            tokio::select! {
                biased;
                () = &mut work => break retired.then_some(ConnClose::Draining),
                () = self.0.wake.notified() => {
                    if self.0.shed.load(Ordering::Acquire) {
                        break Some(ConnClose::Shed);
                    }
                }
                () = tokio::time::sleep_until(deadline) => {
                    // The phase may have changed without the task noticing yet.
                    let expired = self
                        .deadline(draining)
                        .is_some_and(|(p, d)| p == phase && d <= Instant::now());
                    if !expired {
                        continue;
                    }
                    if draining && matches!(phase, Phase::Fresh | Phase::Idle) {
                        // hyper closes it at once if no request has begun, else after
                        // answering it; the phase's own deadline still bounds that.
                        retired = true;
                        self.0.retire.notify_one();
                        continue;
                    }
                    break Some(phase.timed_out());
                }
            }
        };
        if let Some(reason) = closed {
            tracing::debug!(
                listener = self.0.tracker.listener,
                reason = reason.as_str(),
                "connection closed"
            );
            self.0.tracker.metrics.dropped(reason);
        }
        closed
    }
}

/// Unregisters the connection when dropped.
struct Registration(Conn);

impl Drop for Registration {
    fn drop(&mut self) {
        let shared = &(self.0).0;
        let mut reg = shared.tracker.registry();
        if let Some(slot) = reg.conns.remove(&shared.id) {
            if let Some(key) = slot.key {
                reg.queue.remove(&key);
            }
            if shared.shed.load(Ordering::Acquire) {
                reg.shedding -= 1;
            }
        }
        shared.tracker.metrics.open.dec();
        drop(reg);
        shared.tracker.changed.notify_one();
    }
}

// === I/O ===

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
}

impl TrackedService {
    pub fn new(router: Router, conn: Conn) -> Self {
        TrackedService {
            inner: TowerToHyperService::new(router),
            conn,
        }
    }
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl hyper::service::Service<http::Request<Incoming>> for TrackedService {
    type Response = http::Response<TrackedBody>;
    type Error = Infallible;
    type Future = BoxFuture<Result<Self::Response, Infallible>>;

    fn call(&self, req: http::Request<Incoming>) -> Self::Future {
        self.conn.set(Phase::Request);
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
struct Answered(Conn);

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

#[cfg(test)]
mod tests;
