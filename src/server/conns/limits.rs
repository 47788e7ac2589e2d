//! The limits of a listener's connections: each [`Phase`]'s deadline, the cap, the maximum
//! age, and the defaults of their flags.

use std::time::Duration;

use crate::server::metrics::ConnClose;

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
/// accepting more: how far open connections may briefly exceed the cap. A chosen one closes
/// when its task runs next, which under a flood can be a while: at 32, the admin listener's
/// accept loop waited often enough for a 9,000-connection flood to fill the kernel's queue
/// (4,096), whose overflow drops SYNs, a probe's included (a 1 s retransmit for the kubelet,
/// whose probe times out at 1 s). At 64 and 256 it no longer did (`hostile` tests).
pub const MAX_SHEDDING: usize = 128;

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

    pub(super) fn from_u8(v: u8) -> Phase {
        Phase::ALL[usize::from(v)]
    }

    /// Order in which connections at the cap give way: never a request in progress; first
    /// those that have not sent a request yet (handshake, silent, slow head), then idle
    /// keep-alive connections.
    pub(super) fn shed_class(self) -> Option<u8> {
        match self {
            Phase::Handshake | Phase::Fresh | Phase::Head => Some(0),
            Phase::Idle => Some(1),
            Phase::Request => None,
        }
    }

    /// Why a connection whose phase outlived its deadline is closed.
    pub(super) fn timed_out(self) -> ConnClose {
        match self {
            Phase::Handshake => ConnClose::HandshakeTimeout,
            Phase::Head => ConnClose::HeaderTimeout,
            Phase::Fresh | Phase::Idle => ConnClose::IdleTimeout,
            Phase::Request => ConnClose::RequestTimeout,
        }
    }
}

/// How long `phase` may last. The drain shortens none of them: a connection the server
/// closes while idle can lose the request its client is writing on it at that instant.
pub(super) fn timeout(limits: &ConnLimits, phase: Phase) -> Duration {
    match phase {
        Phase::Handshake => limits.handshake,
        Phase::Head => limits.header,
        Phase::Fresh | Phase::Idle => limits.idle,
        Phase::Request => limits.request,
    }
}

/// The age past which connection `id` is retired: `max_age` less up to a fifth, spread by
/// id, so that connections opened together (after a restart) do not all turn over in the
/// same instant. `None` without a limit.
pub(super) fn retire_age(max_age: Duration, id: u64) -> Option<Duration> {
    if max_age.is_zero() {
        return None;
    }
    let spread = u32::try_from(id % 8).unwrap_or(0);
    Some(max_age - max_age / 40 * spread)
}
