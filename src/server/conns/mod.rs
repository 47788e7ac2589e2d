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
//! to reuse it, and nothing it sends is lost). The drain closes no idle connection of the
//! webhook's listener: HTTP/1.1 has no way to close one without a window in which the
//! client writes a request onto it, and Go does not retry a POST lost that way. The
//! client's own idle timeout (90 s in the API server) closes those it does not use again.

mod limits;
mod wrappers;

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;
use tokio::time::Instant;

pub use limits::*;
use limits::{retire_age, timeout};
pub use wrappers::{TrackedBody, TrackedIo, TrackedService};

use super::metrics::{ConnClose, ConnMetrics, ConnRetire, Metrics};
use super::shutdown::Drain;

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
    /// Connections that ended while draining without an answer retiring them: their
    /// client closed them.
    client_closed: AtomicU64,
}

/// How a listener's drain went, for its log lines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DrainCounts {
    /// Answers that carried `Connection: close` since the drain began.
    pub retired: u64,
    /// Connections their client closed since the drain began.
    pub client_closed: u64,
    /// Connections open now.
    pub open: usize,
}

#[derive(Default)]
struct Registry {
    next: u64,
    conns: HashMap<u64, ConnEntry>,
    /// Connections that may be shed, by (class, when they entered it): oldest first.
    queue: BTreeMap<(u8, u64), u64>,
    /// Connections chosen to give way whose task has not ended yet.
    shedding: usize,
}

struct ConnEntry {
    conn: Arc<ConnState>,
    phase: Phase,
    since: Instant,
    key: Option<(u8, u64)>,
}

/// One connection's shared state: read by its task, updated from the I/O and the service.
struct ConnState {
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
    /// Its last answer carried `Connection: close`.
    retired: AtomicBool,
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
            client_closed: AtomicU64::new(0),
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
        let shared = Arc::new(ConnState {
            id,
            tracker: self.clone(),
            opened: Instant::now(),
            phase: AtomicU8::new(phase as u8),
            answered: AtomicBool::new(false),
            shed: AtomicBool::new(false),
            wake: Notify::new(),
            retired: AtomicBool::new(false),
        });
        reg.conns.insert(
            id,
            ConnEntry {
                conn: shared.clone(),
                phase,
                since: Instant::now(),
                key: None,
            },
        );
        // Not in the shedding queue until its task starts ([`Conn::run`]): under a flood the
        // accept loop outpaces the tasks, and a connection it sheds before its task has run
        // once never had the chance to read the request already waiting on it (a probe's).
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

    /// How the drain has gone so far.
    pub fn drain_counts(&self) -> DrainCounts {
        DrainCounts {
            retired: self.metrics.retired_count(ConnRetire::Draining),
            client_closed: self.client_closed.load(Ordering::Relaxed),
            open: self.open(),
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
    fn shed_oldest(&mut self) -> Option<Arc<ConnState>> {
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
pub struct Conn(Arc<ConnState>);

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

    /// Its task has begun: from now on it may be chosen to give way.
    fn started(&self) {
        self.set(self.phase());
    }

    /// When the current phase runs out, and which phase that is.
    fn deadline(&self) -> Option<(Phase, Instant)> {
        let tracker = &self.0.tracker;
        let reg = tracker.registry();
        let slot = reg.conns.get(&self.0.id)?;
        Some((
            slot.phase,
            slot.since + timeout(&tracker.limits, slot.phase),
        ))
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
        self.started();
        tokio::pin!(work);
        let closed = loop {
            let Some((phase, deadline)) = self.deadline() else {
                break None;
            };
            tokio::select! {
                biased;
                () = &mut work => {
                    let tracker = &self.0.tracker;
                    if tracker.drain.is_draining() && !self.0.retired.load(Ordering::Acquire) {
                        tracker.client_closed.fetch_add(1, Ordering::Relaxed);
                    }
                    break None;
                }
                () = self.0.wake.notified() => {
                    if self.0.shed.load(Ordering::Acquire) {
                        break Some(ConnClose::Shed);
                    }
                }
                () = tokio::time::sleep_until(deadline) => {
                    // The phase may have changed without the task noticing yet.
                    let expired = self
                        .deadline()
                        .is_some_and(|(p, d)| p == phase && d <= Instant::now());
                    if !expired {
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

#[cfg(test)]
mod tests;
