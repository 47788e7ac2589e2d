//! The real binary, default flags, against hostile clients on 127.0.0.1: a 2,000-connection
//! slowloris, a reconnecting flood, a flood of half-sent admin requests, absurd `?timeout=`
//! values and pods of thousands of targeted containers. Each test is bounded in time and in
//! connections and stops its clients itself; each raises the open-file limit it needs (the
//! server inherits it). The numbers are printed (`--nocapture`); `TEST_SERVER_BIN` runs
//! them against another build of the server, e.g. a release one.

mod flood;
mod requests;

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::support;
use crate::support::{
    MUTATE, Response, Server, fixture, http_get, post, proc_status_bytes, raise_fd_limit,
    review_of, serial, tls_connect, uid_of, within,
};

/// The default `--max-connections`.
const CAP: usize = 512;
/// The default `--admin-max-connections`.
const ADMIN_CAP: usize = 64;
/// Shed connections not closed yet beyond which a listener stops accepting for a moment.
const MAX_SHEDDING: usize = otel_injector::server::conns::MAX_SHEDDING;
/// What a legitimate client's fresh connection must be answered within.
const LEGIT_BOUND: Duration = Duration::from_secs(1);

const OPEN_WEBHOOK: &str = "otel_injector_connections_open{listener=\"webhook\"}";
const OPEN_ADMIN: &str = "otel_injector_connections_open{listener=\"admin\"}";

fn dropped(listener: &str, reason: &str) -> String {
    format!(
        "otel_injector_connections_dropped_total{{listener=\"{listener}\",reason=\"{reason}\"}}"
    )
}

/// The first bytes of a TLS ClientHello record that announces 512 bytes and never sends
/// them: a handshake that never finishes.
const PARTIAL_CLIENT_HELLO: &[u8] = &[0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc];

/// The head a slowloris client trickles, one byte at a time.
const SLOW_HEAD: &[u8] =
    b"POST /mutate-v1-pod?timeout=10s HTTP/1.1\r\nHost: otel-injector.test\r\n\
    Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}";

/// `GET path` on a fresh connection from a thread and runtime of its own, as a prober in
/// another process sends it: the request right behind the connect. From this test's
/// runtime, busy with thousands of flood clients, the write can come milliseconds after the
/// connect, and at the cap the server then rightly sheds it as one more silent connection.
async fn get_from_own_thread(addr: SocketAddr, path: &'static str) -> io::Result<Response> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let answer = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .and_then(|rt| rt.block_on(http_get(addr, path)));
        let _ = tx.send(answer);
    });
    rx.await
        .unwrap_or_else(|_| Err(io::Error::other("the prober's thread ended")))
}

/// One fresh TLS connection, one review, `Connection: close`: the time to the answer.
async fn legit_review(server: &Server, body: &[u8], uid: &str) -> Duration {
    let started = Instant::now();
    let one = async {
        let mut c = tls_connect(server.webhook, &server.connector).await?;
        c.roundtrip(&post(MUTATE, body, true)).await
    };
    let r = within(Duration::from_secs(20), "legitimate review", one)
        .await
        .expect("legitimate review");
    let took = started.elapsed();
    assert_eq!(review_of(&r).uid, uid);
    took
}

/// Reads until the server closes the connection (EOF or an error).
async fn closed<S: tokio::io::AsyncRead + Unpin>(s: &mut S) {
    let mut buf = [0u8; 256];
    while let Ok(n) = s.read(&mut buf).await {
        if n == 0 {
            break;
        }
    }
}

/// Polls `series` until `ok` holds; panics with the last value after `limit`.
async fn wait_until(server: &Server, series: &str, limit: Duration, ok: impl Fn(f64) -> bool) {
    let until = Instant::now() + limit;
    loop {
        let v = server.metric(series).await;
        if ok(v) {
            return;
        }
        assert!(
            Instant::now() < until,
            "{series} is still {v} after {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Attack {
    /// TLS, then a request head one byte every 5 s.
    Trickle,
    /// TLS, then nothing.
    Silent,
    /// Part of a ClientHello, then nothing.
    StalledHandshake,
}

/// Counts an attacker once it has connected or failed to (on drop at the latest).
struct Settled(Option<Arc<AtomicU64>>);

impl Settled {
    fn done(&mut self) {
        if let Some(n) = self.0.take() {
            n.fetch_add(1, Ordering::AcqRel);
        }
    }
}

impl Drop for Settled {
    fn drop(&mut self) {
        self.done();
    }
}

/// Counters of the slowloris attackers.
#[derive(Clone, Default)]
struct Tally {
    /// Connected (TLS done where the attack needs it).
    established: Arc<AtomicU64>,
    /// Connected or failed to.
    settled: Arc<AtomicU64>,
    /// Closed by the server, on the way or once connected.
    closed_by_server: Arc<AtomicU64>,
}

/// Opens one attacking connection and holds it until `stop` or until the server closes it.
async fn attack(
    server_addr: std::net::SocketAddr,
    connector: tokio_rustls::TlsConnector,
    kind: Attack,
    handshakes: Arc<Semaphore>,
    tally: Tally,
    start_trickle: Stop,
    stop: Stop,
) {
    let Tally {
        established,
        settled,
        closed_by_server,
    } = tally;
    let mut settled = Settled(Some(settled));
    let Ok(mut tcp) = TcpStream::connect(server_addr).await else {
        return;
    };
    if kind == Attack::StalledHandshake {
        if tcp.write_all(PARTIAL_CLIENT_HELLO).await.is_err() {
            return;
        }
        established.fetch_add(1, Ordering::AcqRel);
        settled.done();
        tokio::select! {
            () = closed(&mut tcp) => { closed_by_server.fetch_add(1, Ordering::AcqRel); }
            () = stop.wait() => {}
        }
        return;
    }
    let tls = {
        let _permit = handshakes.acquire().await.unwrap();
        let name = rustls_pki_types::ServerName::IpAddress(server_addr.ip().into());
        connector.connect(name, tcp).await
    };
    let Ok(mut tls) = tls else {
        closed_by_server.fetch_add(1, Ordering::AcqRel);
        return;
    };
    established.fetch_add(1, Ordering::AcqRel);
    settled.done();
    if kind == Attack::Trickle {
        tokio::select! {
            () = start_trickle.wait() => {}
            () = closed(&mut tls) => { closed_by_server.fetch_add(1, Ordering::AcqRel); return; }
            () = stop.wait() => return,
        }
        for byte in SLOW_HEAD.chunks(1) {
            if tls.write_all(byte).await.is_err() || tls.flush().await.is_err() {
                closed_by_server.fetch_add(1, Ordering::AcqRel);
                return;
            }
            tokio::select! {
                () = tokio::time::sleep(Duration::from_secs(5)) => {}
                () = closed(&mut tls) => { closed_by_server.fetch_add(1, Ordering::AcqRel); return; }
                () = stop.wait() => return,
            }
        }
    } else {
        tokio::select! {
            () = closed(&mut tls) => { closed_by_server.fetch_add(1, Ordering::AcqRel); }
            () = stop.wait() => {}
        }
    }
}

/// Tells the clients of a test to stop (or to start something).
#[derive(Clone)]
struct Stop(tokio::sync::watch::Receiver<bool>);

impl Stop {
    fn new() -> (tokio::sync::watch::Sender<bool>, Stop) {
        let (tx, rx) = tokio::sync::watch::channel(false);
        (tx, Stop(rx))
    }

    fn is_set(&self) -> bool {
        *self.0.borrow()
    }

    async fn wait(&self) {
        let mut rx = self.0.clone();
        let _ = rx.wait_for(|stop| *stop).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slowloris_of_2000_connections_does_not_delay_a_fresh_client() {
    let _serial = serial().await;
    raise_fd_limit(2000 + CAP as u64 + 512);
    let server = Server::start().await;
    let review = fixture("pod-create.json");
    let body = serde_json::to_vec(&review).unwrap();
    let uid = uid_of(&review).to_owned();
    let before = legit_review(&server, &body, &uid).await;
    let rss_idle = proc_status_bytes(server.pid(), "VmRSS");

    // 2,000 connections: 1,000 trickling a head, 500 silent after TLS, 500 stuck in the
    // handshake, all opened at once (at most 64 client handshakes in flight).
    let kinds: Vec<Attack> = (0..2000)
        .map(|i| match i % 4 {
            0 | 1 => Attack::Trickle,
            2 => Attack::Silent,
            _ => Attack::StalledHandshake,
        })
        .collect();
    let handshakes = Arc::new(Semaphore::new(64));
    let tally = Tally::default();
    let (start_trickle_tx, start_trickle) = Stop::new();
    let (stop_tx, stop) = Stop::new();
    let opening = Instant::now();
    let mut attackers = JoinSet::new();
    for kind in kinds {
        attackers.spawn(attack(
            server.webhook,
            server.connector.clone(),
            kind,
            handshakes.clone(),
            tally.clone(),
            start_trickle.clone(),
            stop.clone(),
        ));
    }
    // The cap is full, and every attacker has connected, or been closed on the way.
    wait_until(&server, OPEN_WEBHOOK, Duration::from_secs(60), |v| {
        v == CAP as f64
    })
    .await;
    let settled = Instant::now() + Duration::from_secs(10);
    while tally.settled.load(Ordering::Acquire) < 2000 && Instant::now() < settled {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let opened_in = opening.elapsed();
    start_trickle_tx.send_replace(true);
    let trickle_started = Instant::now();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let rss_full = proc_status_bytes(server.pid(), "VmRSS");

    // Fresh legitimate connections while the cap is full of slow clients.
    let mut latencies = Vec::new();
    for _ in 0..5 {
        latencies.push(legit_review(&server, &body, &uid).await);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let measured_within = trickle_started.elapsed();
    let text = server.metrics().await;
    let metric = |s: &str| support::metric(&text, s).unwrap_or(0.0);
    let shed = metric(&dropped("webhook", "shed"));
    let open = metric(OPEN_WEBHOOK);
    stop_tx.send_replace(true);
    while attackers.join_next().await.is_some() {}
    let max = *latencies.iter().max().unwrap();
    eprintln!(
        "slowloris: 2,000 attackers ({} established) accepted in {opened_in:?}; \
         legitimate review before {before:?}, during {latencies:?} (max {max:?}); \
         server shed {shed}, open {open}; RSS {} KiB idle, {} KiB with {CAP} attackers open",
        tally.established.load(Ordering::Acquire),
        rss_idle / 1024,
        rss_full / 1024,
    );
    assert!(
        max < LEGIT_BOUND,
        "a fresh client waited {max:?} during the slowloris"
    );
    assert!(
        measured_within < Duration::from_secs(5),
        "{measured_within:?}"
    );
    assert!(open <= CAP as f64, "{open} connections open, cap {CAP}");
    // One more shed at least for the first legitimate client (the cap was full), at most
    // one per legitimate client.
    let least = (2000 - CAP + 1) as f64;
    assert!(
        (least..=least + 4.0).contains(&shed),
        "{shed} connections shed for 2,000 attackers and 5 clients"
    );
    // Nothing reached a deadline yet: the cap, not a timeout, made the room.
    for reason in [
        "handshake_timeout",
        "header_timeout",
        "idle_timeout",
        "request_timeout",
    ] {
        assert_eq!(metric(&dropped("webhook", reason)), 0.0, "{reason}");
    }
    assert!(
        rss_full - rss_idle.min(rss_full) < 64 * 1024 * 1024,
        "{CAP} slow connections cost {} KiB",
        (rss_full - rss_idle) / 1024
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nine_thousand_half_sent_admin_requests_are_not_kept() {
    let _serial = serial().await;
    raise_fd_limit(9000 + CAP as u64 + 512);
    let server = Server::start().await;
    let pid = server.pid();
    let rss_before = proc_status_bytes(pid, "VmRSS");

    // 9,000 connections, each a request line and one header, never the blank line; each
    // client holds its connection until the server closes it (or the test ends).
    let half = b"GET /metrics HTTP/1.1\r\nHost: otel-injector.test\r\n";
    let (stop_tx, stop) = Stop::new();
    let sent = Arc::new(AtomicU64::new(0));
    let closed_by_server = Arc::new(AtomicU64::new(0));
    let connects = Arc::new(Semaphore::new(256));
    let mut flood = JoinSet::new();
    let started = Instant::now();
    for _ in 0..9000 {
        let (stop, sent, closed_by_server, connects) = (
            stop.clone(),
            sent.clone(),
            closed_by_server.clone(),
            connects.clone(),
        );
        let addr = server.admin;
        flood.spawn(async move {
            let permit = connects.acquire_owned().await.unwrap();
            let Ok(mut tcp) = TcpStream::connect(addr).await else {
                return;
            };
            if tcp.write_all(half).await.is_err() {
                return;
            }
            drop(permit);
            sent.fetch_add(1, Ordering::AcqRel);
            tokio::select! {
                () = closed(&mut tcp) => { closed_by_server.fetch_add(1, Ordering::AcqRel); }
                () = stop.wait() => {}
            }
        });
    }
    // /livez answers on a fresh connection while the flood is on.
    let mut livez = Vec::new();
    while sent.load(Ordering::Acquire) < 9000 {
        let t = Instant::now();
        let r = within(
            LEGIT_BOUND,
            "/livez during the flood",
            get_from_own_thread(server.admin, "/livez"),
        )
        .await
        .expect("/livez during the flood");
        assert_eq!(r.status, 200);
        assert_eq!(r.text(), "ok\n");
        livez.push(t.elapsed());
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "flood still being sent"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let sent_in = started.elapsed();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let t = Instant::now();
    let r = within(
        LEGIT_BOUND,
        "/livez after the flood",
        get_from_own_thread(server.admin, "/livez"),
    )
    .await
    .expect("/livez after the flood");
    assert_eq!(r.status, 200);
    livez.push(t.elapsed());
    let rss_after = proc_status_bytes(pid, "VmRSS");
    let hwm = proc_status_bytes(pid, "VmHWM");
    // The gauge lags a just-closed connection (the /livez above) by a moment: read it until it
    // is within the cap, for at most 2 s.
    let mut text = server.metrics().await;
    let t = Instant::now();
    while support::metric(&text, OPEN_ADMIN).unwrap_or(0.0) > ADMIN_CAP as f64
        && t.elapsed() < Duration::from_secs(2)
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
        text = server.metrics().await;
    }
    let metric = |s: &str| support::metric(&text, s).unwrap_or(0.0);
    let open = metric(OPEN_ADMIN);
    let shed = metric(&dropped("admin", "shed"));
    let closed_n = closed_by_server.load(Ordering::Acquire);
    stop_tx.send_replace(true);
    while flood.join_next().await.is_some() {}
    eprintln!(
        "admin flood: 9,000 half-sent requests in {sent_in:?}; {closed_n} closed by the server, \
         {open} open (cap {ADMIN_CAP}), {shed} shed; RSS {} KiB before, {} KiB after, \
         VmHWM {} KiB; /livez {livez:?}",
        rss_before / 1024,
        rss_after / 1024,
        hwm / 1024
    );
    // The scrape of /metrics above is the only admin connection that is not a flooder.
    assert!(open <= ADMIN_CAP as f64, "{open} admin connections open");
    assert!(
        closed_n >= 9000 - ADMIN_CAP as u64,
        "only {closed_n} of 9,000 half-sent requests closed"
    );
    assert!(shed >= (9000 - ADMIN_CAP) as f64, "{shed} shed");
    let bound = 16 * 1024 * 1024;
    assert!(
        rss_after < rss_before + bound,
        "RSS grew from {} KiB to {} KiB",
        rss_before / 1024,
        rss_after / 1024
    );
    assert!(
        hwm < rss_before + bound,
        "peak RSS {} KiB, from {} KiB",
        hwm / 1024,
        rss_before / 1024
    );
}
