//! SIGTERM: connections retired, in-flight requests drained, the drain's bound, and the
//! second signal that aborts it.

use std::time::{Duration, Instant};

use tokio::net::TcpStream;

use crate::support;
use crate::support::{
    IO_TIMEOUT, MUTATE, Server, fixture, head, post, review_of, serial, uid_of, within,
};

/// Sends the request head and the first half of `body`; returns the rest of the body.
pub(super) async fn start_slow_request(
    server: &Server,
    body: &[u8],
) -> (
    support::Conn<tokio_rustls::client::TlsStream<TcpStream>>,
    Vec<u8>,
) {
    let mut c = server.connect().await;
    let mut req = head(
        "POST",
        MUTATE,
        &[
            ("Content-Type", "application/json"),
            ("Content-Length", &body.len().to_string()),
        ],
    );
    let half = body.len() / 2;
    req.extend_from_slice(&body[..half]);
    c.send(&req).await.unwrap();
    (c, body[half..].to_vec())
}

/// Polls `/readyz` until it answers `want`; returns how long that took.
pub(super) async fn wait_readyz(server: &Server, want: u16, limit: Duration) -> Duration {
    let started = Instant::now();
    loop {
        let r = server.admin_get("/readyz").await;
        if r.status == want {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < limit,
            "/readyz still {} after {limit:?}",
            r.status
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The drain retires connections instead of cutting them: from the signal on, every answer
/// carries `Connection: close` (the client then opens its next connection elsewhere, and
/// loses nothing), and the drain closes no idle connection itself, not even when the
/// listener stops: Go's HTTP client does not retry a POST written on a connection the
/// server is closing at that instant. A connection the client keeps in its pool is still
/// answered after the listener has stopped; one the client closes is gone; the process
/// exits as soon as the last one has gone, long before the timeout.
#[tokio::test]
async fn sigterm_retires_connections_drains_in_flight_requests_then_exits_zero() {
    let _serial = serial().await;
    let mut server = Server::builder()
        .args(["--shutdown-delay", "3s", "--shutdown-timeout", "30s"])
        .start()
        .await;
    let review = fixture("pod-create-inject-java.json");
    let body = serde_json::to_vec(&review).unwrap();

    // Before the signal, answers keep the connection open. Three keep-alive connections:
    // one used during the delay, one used only after the listener has stopped, one the
    // client closes.
    let mut keepalive = Vec::new();
    for _ in 0..3 {
        let mut c = server.connect().await;
        let r = within(
            IO_TIMEOUT,
            "first request",
            c.roundtrip(&post(MUTATE, &body, false)),
        )
        .await
        .unwrap();
        assert_eq!(review_of(&r).uid, uid_of(&review));
        assert_eq!(r.header("connection"), None);
        keepalive.push(c);
    }
    let (closing, mut pooled, mut busy) = {
        let mut it = keepalive.into_iter();
        (it.next().unwrap(), it.next().unwrap(), it.next().unwrap())
    };
    let (mut slow, rest) = start_slow_request(&server, &body).await;
    assert_eq!(server.admin_get("/readyz").await.status, 200);

    let term = Instant::now();
    server.signal("TERM");
    let unready_after = wait_readyz(&server, 503, Duration::from_millis(800)).await;
    let readyz = server.admin_get("/readyz").await;
    assert_eq!(readyz.text(), "shutting down\n");
    assert_eq!(
        server.admin_get("/livez").await.status,
        200,
        "/livez during the drain"
    );
    // During the delay requests are still served, each as its connection's last.
    let r = within(
        IO_TIMEOUT,
        "keep-alive request while draining",
        busy.roundtrip(&post(MUTATE, &body, false)),
    )
    .await
    .expect("a keep-alive connection is still served while draining");
    assert_eq!(review_of(&r).uid, uid_of(&review));
    assert_eq!(r.header("connection"), Some("close"));
    let eof = within(IO_TIMEOUT, "close after the last answer", busy.read_some()).await;
    assert!(matches!(eof, Ok(0)), "after Connection: close: {eof:?}");
    // New connections are still accepted (endpoints take a while to drop the replica).
    let plain = fixture("pod-create.json");
    let r = server.review(&plain).await;
    assert_eq!(review_of(&r).uid, uid_of(&plain));
    // Counted while the admin listener still answers: two answers retired their
    // connection, and nothing was closed for the drain.
    let metrics = server.metrics().await;
    for (series, want) in [
        (
            "otel_injector_connections_retired_total{listener=\"webhook\",reason=\"draining\"}",
            2.0,
        ),
        (
            "otel_injector_connections_retired_total{listener=\"webhook\",reason=\"max_age\"}",
            0.0,
        ),
    ] {
        assert_eq!(support::metric(&metrics, series), Some(want), "{series}");
    }
    let dropped: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("otel_injector_connections_dropped_total{listener=\"webhook\""))
        .collect();
    assert!(!dropped.is_empty());
    assert!(dropped.iter().all(|l| l.ends_with(" 0")), "{dropped:?}");

    // The listener still accepts until the delay ends, and then no longer.
    assert!(TcpStream::connect(server.webhook).await.is_ok());
    tokio::time::sleep(
        Duration::from_secs(3).saturating_sub(term.elapsed()) + Duration::from_millis(300),
    )
    .await;
    let refused = TcpStream::connect(server.webhook).await;
    assert!(
        refused.is_err(),
        "webhook listener still accepting after the delay"
    );
    server
        .log_with(
            "listener closed; draining connections",
            Duration::from_secs(5),
        )
        .await;

    // The connection idle in the client's pool since before the signal is still open,
    // and a request on it is answered, as its last.
    let r = within(
        IO_TIMEOUT,
        "pooled connection after the listener stopped",
        pooled.roundtrip(&post(MUTATE, &body, false)),
    )
    .await
    .expect("a request on a pooled connection after the listener stopped is answered");
    assert_eq!(review_of(&r).uid, uid_of(&review));
    assert_eq!(r.header("connection"), Some("close"));
    let eof = within(
        IO_TIMEOUT,
        "close after the last answer",
        pooled.read_some(),
    )
    .await;
    assert!(matches!(eof, Ok(0)), "after Connection: close: {eof:?}");

    // The in-flight request finishes, slowly, and is answered.
    for part in rest.chunks(rest.len().div_ceil(5)) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        slow.send(part)
            .await
            .expect("send the rest of the in-flight body");
    }
    let r = within(IO_TIMEOUT, "in-flight response", slow.response())
        .await
        .expect("the in-flight request is answered");
    assert_eq!(r.header("connection"), Some("close"));
    let r = review_of(&r);
    assert_eq!(r.uid, uid_of(&review));
    assert!(r.patch.is_some());

    // The last one is still open until its client closes it; then the process exits.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        server.wait_exit(Duration::from_millis(10)).await.is_none(),
        "exited with a client's idle connection still open"
    );
    let closed_at = Instant::now();
    drop(closing);
    let status = server
        .wait_exit(Duration::from_secs(10))
        .await
        .expect("the process exits after the drain");
    let exited = term.elapsed();
    eprintln!(
        "drain: /readyz 503 after {unready_after:?}; exit {status} after {exited:?}, {:?} after \
         the last client closed",
        closed_at.elapsed()
    );
    assert!(status.success(), "exit status {status}");
    assert!(
        closed_at.elapsed() < Duration::from_secs(2),
        "exited {:?} after the last connection closed",
        closed_at.elapsed()
    );
    let log = server.log();
    let drained = log
        .lines()
        .find(|l| l.contains("connections drained") && l.contains("listener=\"webhook\""))
        .unwrap_or_else(|| panic!("no drain line:\n{log}"));
    // Retired by an answer: busy's, the new connection's, pooled's and the slow request's;
    // closed by the client: the TCP probe of the accepting listener and `closing`.
    assert!(
        drained.contains("retired=4 client_closed=2 cut=0"),
        "{drained}"
    );
}

/// Past `--shutdown-timeout` the process exits whatever is still open: an idle webhook
/// connection is cut then (and counted), a half-sent admin request does not hold it.
#[tokio::test]
async fn the_shutdown_timeout_bounds_the_drain() {
    let _serial = serial().await;
    let mut server = Server::builder()
        .args(["--shutdown-delay", "1s", "--shutdown-timeout", "2s"])
        .start()
        .await;
    let body = serde_json::to_vec(&fixture("pod-create-inject-java.json")).unwrap();
    let mut idle = server.connect().await;
    within(
        IO_TIMEOUT,
        "request",
        idle.roundtrip(&post(MUTATE, &body, false)),
    )
    .await
    .unwrap();
    // A scraper that sent half a request and went quiet.
    let mut stuck = support::Conn::new(TcpStream::connect(server.admin).await.unwrap());
    stuck
        .send(b"GET /metrics HTTP/1.1\r\nHost: otel-injector.test\r\n")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let term = Instant::now();
    server.signal("TERM");
    let status = server
        .wait_exit(Duration::from_secs(6))
        .await
        .unwrap_or_else(|| {
            panic!(
                "still running {:?} after SIGTERM (delay 1 s + timeout 2 s)",
                term.elapsed()
            )
        });
    let exited = term.elapsed();
    assert!(status.success(), "exit status {status}");
    assert!(
        exited >= Duration::from_secs(3),
        "exited {exited:?} after SIGTERM, before the timeout"
    );
    let log = server.log();
    let cut = log
        .lines()
        .find(|l| {
            l.contains("connections still open after the drain period")
                && l.contains("listener=\"webhook\"")
        })
        .unwrap_or_else(|| panic!("no timeout line:\n{log}"));
    assert!(cut.contains("retired=0 client_closed=0 cut=1"), "{cut}");
    let eof = within(IO_TIMEOUT, "cut connection", idle.read_some()).await;
    assert!(
        !matches!(eof, Ok(n) if n > 0),
        "the cut connection: {eof:?}"
    );
}

#[tokio::test]
async fn a_second_sigterm_aborts_the_drain() {
    let _serial = serial().await;
    let mut server = Server::builder()
        .args(["--shutdown-delay", "10s", "--shutdown-timeout", "20s"])
        .start()
        .await;
    let body = serde_json::to_vec(&fixture("pod-create-inject-java.json")).unwrap();
    let (mut slow, _rest) = start_slow_request(&server, &body).await;

    server.signal("TERM");
    wait_readyz(&server, 503, Duration::from_secs(5)).await;
    let second = Instant::now();
    server.signal("TERM");
    let status = server
        .wait_exit(Duration::from_secs(5))
        .await
        .expect("a second signal ends the process");
    let took = second.elapsed();
    eprintln!("second SIGTERM: exit {status} after {took:?}");
    assert_eq!(
        status.code(),
        Some(130),
        "exit status {status} after an aborted drain (130: interrupted)"
    );
    assert!(
        took < Duration::from_secs(2),
        "exited {took:?} after the second signal"
    );
    // The unfinished request got no answer; its connection is gone.
    let r = within(IO_TIMEOUT, "aborted request", slow.response()).await;
    assert!(r.is_err(), "an aborted request was answered: {r:?}");
}
