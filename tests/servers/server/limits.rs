//! The webhook listener's bounds through a real socket: body size, a stalled body, the head's
//! total deadline, the idle timeout and the connection age.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support;
use crate::support::{
    IO_TIMEOUT, MAX_BODY, MUTATE, Server, chunk, fixture, head, post, review_of, serial, uid_of,
    within,
};

/// A review of exactly `len` bytes (the fixture padded with trailing whitespace).
pub(super) fn padded_review(len: usize) -> (Value, Vec<u8>) {
    let review = fixture("pod-update.json");
    let mut body = serde_json::to_vec(&review).unwrap();
    assert!(body.len() <= len);
    body.resize(len, b' ');
    (review, body)
}

#[tokio::test]
async fn bodies_over_3_mib_get_413_and_the_server_carries_on() {
    let _serial = serial().await;
    let server = Server::start().await;

    // Exactly at the limit: answered (the API server sends up to 3 MiB).
    let (review, body) = padded_review(MAX_BODY);
    let resp = server.post_raw(MUTATE, &body).await;
    assert_eq!(review_of(&resp).uid, uid_of(&review));

    // One byte over, declared in Content-Length: refused at once, body sent or not.
    let (_, body) = padded_review(MAX_BODY + 1);
    let mut parts = vec![head(
        "POST",
        MUTATE,
        &[
            ("Content-Type", "application/json"),
            ("Content-Length", &body.len().to_string()),
        ],
    )];
    parts.extend(body.chunks(64 * 1024).map(<[u8]>::to_vec));
    let c = server.connect().await;
    let resp = within(
        IO_TIMEOUT,
        "413 (Content-Length)",
        c.send_while_reading(parts),
    )
    .await
    .expect("a response before the connection closes");
    assert_eq!(resp.status, 413, "{}", resp.text());
    assert_eq!(
        resp.text(),
        "AdmissionReview body exceeds the 3145728 byte limit\n"
    );

    let resp = server.review(&fixture("pod-create.json")).await;
    assert_eq!(review_of(&resp).uid, uid_of(&fixture("pod-create.json")));

    // One byte over, chunked: refused once the limit is crossed.
    let mut parts = vec![head(
        "POST",
        MUTATE,
        &[
            ("Content-Type", "application/json"),
            ("Transfer-Encoding", "chunked"),
        ],
    )];
    parts.extend(body.chunks(64 * 1024).map(chunk));
    parts.push(b"0\r\n\r\n".to_vec());
    let c = server.connect().await;
    let resp = within(IO_TIMEOUT, "413 (chunked)", c.send_while_reading(parts))
        .await
        .expect("a response before the connection closes");
    assert_eq!(resp.status, 413, "{}", resp.text());

    // A chunked body under the limit is read as usual.
    let review = fixture("pod-create-inject-java.json");
    let body = serde_json::to_vec(&review).unwrap();
    let mut req = head(
        "POST",
        MUTATE,
        &[
            ("Content-Type", "application/json"),
            ("Transfer-Encoding", "chunked"),
            ("Connection", "close"),
        ],
    );
    for part in body.chunks(1000) {
        req.extend(chunk(part));
    }
    req.extend_from_slice(b"0\r\n\r\n");
    let mut c = server.connect().await;
    let resp = within(IO_TIMEOUT, "chunked review", c.roundtrip(&req))
        .await
        .unwrap();
    let r = review_of(&resp);
    assert_eq!(r.uid, uid_of(&review));
    assert!(r.patch.is_some());

    let text = server.metrics().await;
    assert!(
        text.contains("otel_injector_admission_requests_total{outcome=\"too_large\"} 2"),
        "{text}"
    );
}

/// A client that writes its whole body before it reads the answer (the usual HTTP client):
/// an over-size ConversionReview is read and dropped, so the 413 reaches it instead of a
/// connection reset under its write.
#[tokio::test]
async fn a_client_that_writes_before_it_reads_gets_the_413() {
    let _serial = serial().await;
    let server = Server::start().await;
    let body = vec![b' '; 16 * 1024 * 1024 + 1];
    let mut req = head(
        "POST",
        "/convert",
        &[
            ("Content-Type", "application/json"),
            ("Content-Length", &body.len().to_string()),
        ],
    );
    req.extend_from_slice(&body);
    let mut c = server.connect().await;
    let resp = within(IO_TIMEOUT, "413 after the whole body", c.roundtrip(&req))
        .await
        .expect("the answer, not a reset");
    assert_eq!(resp.status, 413, "{}", resp.text());
    assert_eq!(
        resp.text(),
        "ConversionReview body exceeds the 16777216 byte limit\n"
    );
}

#[tokio::test]
async fn a_stalled_body_is_answered_408_before_the_deadline() {
    let _serial = serial().await;
    let server = Server::start().await;
    let review = fixture("pod-create-inject-java.json");
    let body = serde_json::to_vec(&review).unwrap();
    let path = "/mutate-v1-pod?timeout=1s";

    // A normal request with the same deadline is answered.
    let started = Instant::now();
    let resp = server.post_raw(path, &body).await;
    assert_eq!(review_of(&resp).uid, uid_of(&review));
    let normal = started.elapsed();

    // Headers and half the body, then nothing.
    let mut c = server.connect().await;
    let mut req = head(
        "POST",
        path,
        &[
            ("Content-Type", "application/json"),
            ("Content-Length", &body.len().to_string()),
        ],
    );
    req.extend_from_slice(&body[..body.len() / 2]);
    let started = Instant::now();
    c.send(&req).await.unwrap();
    let resp = within(Duration::from_secs(5), "408", c.response())
        .await
        .expect("an answer to the stalled request");
    let stalled = started.elapsed();
    eprintln!(
        "normal request with timeout=1s: {normal:?}; stalled body answered after {stalled:?}"
    );
    assert_eq!(resp.status, 408, "{}", resp.text());
    assert_eq!(
        resp.text(),
        "request body not received within the 1s deadline\n"
    );
    assert!(
        stalled < Duration::from_secs(1),
        "answered after {stalled:?}, past the caller's 1 s deadline"
    );
    assert!(
        stalled >= Duration::from_millis(700),
        "answered after {stalled:?}: the server did not wait for the body"
    );
    // The connection is not reused after an unread body.
    let eof = within(IO_TIMEOUT, "close after 408", c.read_some()).await;
    assert!(
        matches!(eof, Ok(0)) || eof.is_err(),
        "connection still open: {eof:?}"
    );

    let text = server.metrics().await;
    assert!(
        text.contains("otel_injector_admission_requests_total{outcome=\"deadline\"} 1"),
        "{text}"
    );
}

/// Reads until the server closes the connection; returns how long that took from `since`.
pub(super) async fn closed_after<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    c: &mut support::Conn<S>,
    since: Instant,
) -> Duration {
    let end = within(Duration::from_secs(10), "server close", c.read_some()).await;
    assert!(matches!(end, Ok(0)) || end.is_err(), "{end:?}");
    since.elapsed()
}

/// Sends `bytes` one every `every` until the server closes the connection; returns how
/// long after the first byte that was.
pub(super) async fn trickle<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    c: &mut support::Conn<S>,
    bytes: &[u8],
    every: Duration,
) -> Duration {
    let first = Instant::now();
    for b in bytes {
        if c.send(&[*b]).await.is_err() {
            return first.elapsed();
        }
        tokio::select! {
            end = c.read_some() => {
                assert!(matches!(end, Ok(0)) || end.is_err(), "{end:?}");
                return first.elapsed();
            }
            () = tokio::time::sleep(every) => {}
        }
    }
    panic!("a head trickled over {:?} was accepted", first.elapsed());
}

/// A request head must be complete within `--header-timeout` of its first byte, however
/// its bytes trickle in, on a new connection and on a keep-alive one, on both listeners;
/// waiting for the first byte is bounded by `--idle-timeout` instead.
#[tokio::test]
async fn request_heads_have_a_total_deadline_apart_from_the_idle_timeout() {
    let _serial = serial().await;
    let server = Server::builder()
        .args(["--header-timeout", "1s", "--idle-timeout", "3s"])
        .start()
        .await;
    let review = fixture("pod-create.json");
    let body = serde_json::to_vec(&review).unwrap();
    let slow: &[u8] =
        b"POST /mutate-v1-pod?timeout=10s HTTP/1.1\r\nHost: otel-injector.test\r\nContent-Type: application/json\r\n\r\n";
    let every = Duration::from_millis(200);
    let cut_at_header_deadline = Duration::from_millis(900)..Duration::from_millis(1500);

    // A new connection that sends nothing lives until the idle timeout.
    let mut silent = server.connect().await;
    let silent = tokio::spawn(async move {
        let since = Instant::now();
        closed_after(&mut silent, since).await
    });

    // A trickled head on a new connection.
    let mut c = server.connect().await;
    let first = trickle(&mut c, slow, every).await;

    // A keep-alive connection idle past the header timeout still serves; a head trickled
    // on it later is cut like the first.
    let mut ka = server.connect().await;
    let r = within(
        IO_TIMEOUT,
        "first",
        ka.roundtrip(&post(MUTATE, &body, false)),
    )
    .await
    .unwrap();
    assert_eq!(review_of(&r).uid, uid_of(&review));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let r = within(
        IO_TIMEOUT,
        "second",
        ka.roundtrip(&post(MUTATE, &body, false)),
    )
    .await
    .expect("a keep-alive connection idle for 1.5 s, past the header timeout");
    assert_eq!(review_of(&r).uid, uid_of(&review));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let keep_alive = trickle(&mut ka, slow, every).await;

    // A half-sent request on the admin listener.
    let mut admin = support::Conn::new(tokio::net::TcpStream::connect(server.admin).await.unwrap());
    admin
        .send(b"GET /metrics HTTP/1.1\r\nHost: otel-injector.test\r\n")
        .await
        .unwrap();
    let admin_cut = closed_after(&mut admin, Instant::now()).await;

    let silent = silent.await.unwrap();
    eprintln!(
        "header deadline 1 s, idle 3 s: trickled head cut after {first:?}, on a keep-alive \
         connection after {keep_alive:?}, admin half-sent request after {admin_cut:?}; \
         silent connection closed after {silent:?}"
    );
    for (what, took) in [
        ("new connection", first),
        ("keep-alive connection", keep_alive),
        ("admin", admin_cut),
    ] {
        assert!(
            cut_at_header_deadline.contains(&took),
            "{what}: trickled head cut after {took:?}"
        );
    }
    assert!(
        (Duration::from_millis(2900)..Duration::from_millis(3600)).contains(&silent),
        "silent connection closed after {silent:?}"
    );
    let text = server.metrics().await;
    for (series, want) in [
        ("{listener=\"webhook\",reason=\"header_timeout\"}", 2.0),
        ("{listener=\"webhook\",reason=\"idle_timeout\"}", 1.0),
        ("{listener=\"admin\",reason=\"header_timeout\"}", 1.0),
        ("{listener=\"webhook\",reason=\"shed\"}", 0.0),
    ] {
        let series = format!("otel_injector_connections_dropped_total{series}");
        assert_eq!(support::metric(&text, &series), Some(want), "{series}");
    }
}

/// The API server keeps idle webhook connections for up to 90 s and reuses them; a server
/// that closes them sooner races the next POST on them ("failed calling webhook: EOF").
#[tokio::test]
async fn idle_keep_alive_connections_live_until_the_idle_timeout() {
    let _serial = serial().await;
    let server = Server::builder()
        .args(["--idle-timeout", "5s"])
        .start()
        .await;
    let review = fixture("pod-create.json");
    let body = serde_json::to_vec(&review).unwrap();
    let mut c = server.connect().await;
    let r = within(
        IO_TIMEOUT,
        "first",
        c.roundtrip(&post(MUTATE, &body, false)),
    )
    .await
    .unwrap();
    assert_eq!(review_of(&r).uid, uid_of(&review));
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let r = within(
        IO_TIMEOUT,
        "after idling",
        c.roundtrip(&post(MUTATE, &body, false)),
    )
    .await
    .expect("the idle keep-alive connection is still usable after 2.5 s");
    assert_eq!(review_of(&r).uid, uid_of(&review));
}

/// After a rolling update every client's pooled connections sit on the replica that came
/// back first; past `--max-connection-age` a connection's next answer carries
/// `Connection: close`, so the client reconnects and a Service spreads it again.
#[tokio::test]
async fn connections_past_their_age_are_told_to_close_after_an_answer() {
    let _serial = serial().await;
    let server = Server::builder()
        .args(["--max-connection-age", "1s"])
        .start()
        .await;
    let review = fixture("pod-create.json");
    let body = serde_json::to_vec(&review).unwrap();
    let mut c = server.connect().await;
    let r = within(
        IO_TIMEOUT,
        "young",
        c.roundtrip(&post(MUTATE, &body, false)),
    )
    .await
    .unwrap();
    assert_eq!(r.header("connection"), None);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let r = within(IO_TIMEOUT, "old", c.roundtrip(&post(MUTATE, &body, false)))
        .await
        .expect("an old connection is still served");
    assert_eq!(review_of(&r).uid, uid_of(&review));
    assert_eq!(r.header("connection"), Some("close"));
    let eof = within(IO_TIMEOUT, "close", c.read_some()).await;
    assert!(matches!(eof, Ok(0)), "after Connection: close: {eof:?}");
    let series = "otel_injector_connections_retired_total{listener=\"webhook\",reason=\"max_age\"}";
    assert_eq!(server.metric(series).await, 1.0);
}
