//! The webhook's HTTP behaviour through a real TLS socket to the real binary: reviews in and
//! out, error statuses, the body limit, deadlines, warnings and junk input.

use crate::support;
use std::time::{Duration, Instant};

use crate::support::{
    IO_TIMEOUT, MAX_BODY, MUTATE, Server, chunk, fixture, head, post, review_of, serial, uid_of,
    within,
};
use serde_json::{Value, json};

const JAVA_INIT: &str = "opentelemetry-auto-instrumentation-java";

/// A copy of `review` with the pod's `inject-java` annotation set to `value`, moved to
/// `namespace`, with a new uid.
fn variant(review: &Value, namespace: &str, value: &str, uid: &str) -> Value {
    let mut r = review.clone();
    r["request"]["uid"] = json!(uid);
    r["request"]["namespace"] = json!(namespace);
    let md = &mut r["request"]["object"]["metadata"];
    md["namespace"] = json!(namespace);
    md["annotations"]["instrumentation.opentelemetry.io/inject-java"] = json!(value);
    r
}

#[tokio::test]
async fn pod_create_with_inject_java_gets_a_patch_that_applies() {
    let _serial = serial().await;
    let server = Server::start().await;
    let review = fixture("pod-create-inject-java.json");
    let body = serde_json::to_vec(&review).unwrap();

    let mut conn = server.connect().await;
    assert_eq!(conn.alpn().as_deref(), Some(&b"http/1.1"[..]), "ALPN");
    let resp = within(
        IO_TIMEOUT,
        "review",
        conn.roundtrip(&post(MUTATE, &body, false)),
    )
    .await
    .unwrap();
    let r = review_of(&resp);
    assert_eq!(r.uid, uid_of(&review));
    assert!(r.allowed);
    assert_eq!(r.patch_type.as_deref(), Some("JSONPatch"));
    assert!(
        r.warnings.is_empty(),
        "unexpected warnings {:?}",
        r.warnings
    );
    let patch = r.patch.expect("a patch");

    let ops = patch.as_array().expect("patch is an array of operations");
    let init = ops
        .iter()
        .find(|op| op["op"] == "add" && op["path"] == "/spec/initContainers")
        .unwrap_or_else(|| panic!("no add of /spec/initContainers in {patch:#}"));
    assert_eq!(init["value"][0]["name"], JAVA_INIT, "{init:#}");
    assert_eq!(
        init["value"][0]["image"],
        "ghcr.io/open-telemetry/opentelemetry-operator/autoinstrumentation-java:2.30.0"
    );
    // Targeted operations only: nothing replaces the whole spec, metadata or managedFields.
    for op in ops {
        let path = op["path"].as_str().unwrap();
        assert!(
            !matches!(path, "" | "/spec" | "/metadata")
                && !path.starts_with("/metadata/managedFields"),
            "untargeted operation {op}"
        );
    }

    let original = review["request"]["object"].clone();
    let mut pod = original.clone();
    let ops: json_patch::Patch = serde_json::from_value(patch.clone()).unwrap();
    json_patch::patch(&mut pod, &ops).expect("the patch applies to the request's object");
    let annotations = &pod["metadata"]["annotations"];
    assert_eq!(annotations["otel-injector/injected"], "java");
    assert_eq!(
        annotations["instrumentation.opentelemetry.io/inject-java"],
        "true"
    );
    assert_eq!(
        pod["metadata"]["managedFields"],
        original["metadata"]["managedFields"]
    );
    assert_eq!(pod["spec"]["initContainers"][0]["name"], JAVA_INIT);
    let app = &pod["spec"]["containers"][0];
    let env = app["env"].as_array().unwrap();
    let tool_options = env
        .iter()
        .find(|e| e["name"] == "JAVA_TOOL_OPTIONS")
        .expect("JAVA_TOOL_OPTIONS");
    assert_eq!(
        tool_options["value"],
        "-XX:MaxRAMPercentage=75 -javaagent:/otel-auto-instrumentation-java-checkout/javaagent.jar"
    );
    assert_eq!(
        env.iter()
            .filter(|e| e["name"] == "JAVA_TOOL_OPTIONS")
            .count(),
        1
    );
    assert!(
        env.iter()
            .any(|e| e["name"] == "OTEL_EXPORTER_OTLP_ENDPOINT"
                && e["value"] == "http://otel-collector.observability.svc:4318"),
        "{env:#?}"
    );
    let volumes = pod["spec"]["volumes"].as_array().unwrap();
    assert_eq!(
        volumes[0]["name"], "kube-api-access-x7k2p",
        "existing volume kept first"
    );
    assert!(
        volumes.iter().any(|v| v["name"] == JAVA_INIT),
        "{volumes:#?}"
    );

    // The same connection is kept alive for the next review.
    let again = within(
        IO_TIMEOUT,
        "second review",
        conn.roundtrip(&post(MUTATE, &body, false)),
    )
    .await
    .expect("keep-alive connection reused");
    assert_eq!(review_of(&again).uid, uid_of(&review));

    let text = server.metrics().await;
    for needle in [
        "otel_injector_admission_requests_total{outcome=\"patched\"} 2",
        "otel_injector_injections_total{language=\"java\",outcome=\"injected\"} 2",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in\n{text}");
    }
}

#[tokio::test]
async fn unreadable_reviews_get_400_with_a_text_reason() {
    let _serial = serial().await;
    let server = Server::start().await;

    let resp = server
        .post_raw(MUTATE, b"{\"apiVersion\": \"admission.k8s.io/v1\", ")
        .await;
    assert_eq!(resp.status, 400, "{}", resp.text());
    assert_eq!(
        resp.header("content-type"),
        Some("text/plain; charset=utf-8")
    );
    assert!(
        resp.text()
            .starts_with("request body is not valid AdmissionReview JSON: EOF while parsing"),
        "{}",
        resp.text()
    );

    let resp = server
        .post_raw(
            MUTATE,
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#,
        )
        .await;
    assert_eq!(resp.status, 400);
    assert_eq!(resp.text(), "AdmissionReview has no request\n");

    let resp = server
        .post_raw(
            MUTATE,
            br#"{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"x"}}"#,
        )
        .await;
    assert_eq!(resp.status, 400);
    assert_eq!(
        resp.text(),
        "expected apiVersion admission.k8s.io/v1 kind AdmissionReview, got admission.k8s.io/v1beta1/AdmissionReview\n"
    );

    let resp = server
        .post_raw(
            MUTATE,
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":""}}"#,
        )
        .await;
    assert_eq!(resp.status, 400);
    assert_eq!(resp.text(), "AdmissionReview request has an empty uid\n");

    // Only POST is routed.
    let mut c = server.connect().await;
    let resp = c
        .roundtrip(&head("GET", MUTATE, &[("Connection", "close")]))
        .await
        .unwrap();
    assert_eq!(resp.status, 405);

    let text = server.metrics().await;
    assert!(
        text.contains("otel_injector_admission_requests_total{outcome=\"invalid\"} 4"),
        "{text}"
    );
}

/// A review of exactly `len` bytes (the fixture padded with trailing whitespace).
fn padded_review(len: usize) -> (Value, Vec<u8>) {
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

#[tokio::test]
async fn other_kinds_and_updates_are_allowed_unchanged() {
    let _serial = serial().await;
    let server = Server::start().await;

    for name in [
        "deployment-create.json",
        "pod-update.json",
        "pod-create.json",
    ] {
        let review = fixture(name);
        let resp = server.review(&review).await;
        let raw = resp.json();
        let r = review_of(&resp);
        assert_eq!(r.uid, uid_of(&review), "{name}");
        assert!(r.allowed, "{name}");
        assert_eq!(r.patch, None, "{name}");
        assert_eq!(r.patch_type, None, "{name}");
        assert!(r.warnings.is_empty(), "{name}: {:?}", r.warnings);
        // Absent, not null: exactly uid and allowed.
        assert_eq!(
            raw["response"],
            json!({"uid": uid_of(&review), "allowed": true}),
            "{name}"
        );
    }

    let text = server.metrics().await;
    assert!(
        text.contains("otel_injector_admission_requests_total{outcome=\"unchanged\"} 3"),
        "{text}"
    );
    assert!(
        text.contains("otel_injector_admission_requests_total{outcome=\"patched\"} 0"),
        "{text}"
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
async fn closed_after<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    c: &mut support::Conn<S>,
    since: Instant,
) -> Duration {
    let end = within(Duration::from_secs(10), "server close", c.read_some()).await;
    assert!(matches!(end, Ok(0)) || end.is_err(), "{end:?}");
    since.elapsed()
}

/// Sends `bytes` one every `every` until the server closes the connection; returns how
/// long after the first byte that was.
async fn trickle<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
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

#[tokio::test]
async fn unresolvable_instrumentations_are_warned_about_and_counted() {
    let _serial = serial().await;
    let server = Server::start().await;
    let base = fixture("pod-create-inject-java.json");

    let named = variant(
        &base,
        "shop",
        "does-not-exist",
        "6a1e0c8f-0000-4000-8000-000000000001",
    );
    let r = review_of(&server.review(&named).await);
    assert_eq!(r.uid, uid_of(&named));
    assert!(r.allowed);
    assert_eq!(
        r.status_only(),
        "java=skipped instrumentation_not_found shop/does-not-exist"
    );
    assert_eq!(r.warnings.len(), 1, "{:?}", r.warnings);
    assert!(r.warnings[0].contains("not found"), "{:?}", r.warnings);
    assert!(
        r.warnings[0].contains("shop/does-not-exist"),
        "{:?}",
        r.warnings
    );

    let two = variant(
        &base,
        "multi",
        "true",
        "6a1e0c8f-0000-4000-8000-000000000002",
    );
    let r = review_of(&server.review(&two).await);
    assert_eq!(r.uid, uid_of(&two));
    assert!(r.allowed);
    assert_eq!(
        r.status_only(),
        "java=skipped multiple_instrumentations multi/*"
    );
    assert_eq!(r.warnings.len(), 1, "{:?}", r.warnings);
    assert!(
        r.warnings[0].contains("2 Instrumentations"),
        "{:?}",
        r.warnings
    );

    let none = variant(
        &base,
        "empty",
        "true",
        "6a1e0c8f-0000-4000-8000-000000000003",
    );
    let r = review_of(&server.review(&none).await);
    assert_eq!(r.status_only(), "java=skipped no_instrumentation empty/*");
    assert_eq!(r.warnings.len(), 1, "{:?}", r.warnings);
    assert!(
        r.warnings[0].contains("no Instrumentation"),
        "{:?}",
        r.warnings
    );

    // Named across namespaces (`ns/name`) resolves.
    let qualified = variant(
        &base,
        "empty",
        "multi/java-b",
        "6a1e0c8f-0000-4000-8000-000000000004",
    );
    let r = review_of(&server.review(&qualified).await);
    let patch = r.patch.map(|p| p.to_string()).unwrap_or_default();
    assert!(
        patch.contains("java=injected multi/java-b "),
        "{patch} {:?}",
        r.warnings
    );

    let text = server.metrics().await;
    for needle in [
        "otel_injector_not_injected_total{reason=\"instrumentation_not_found\"} 1",
        "otel_injector_not_injected_total{reason=\"multiple_instrumentations\"} 1",
        "otel_injector_not_injected_total{reason=\"no_instrumentation\"} 1",
        "otel_injector_injections_total{language=\"java\",outcome=\"skipped\"} 3",
        "otel_injector_injections_total{language=\"java\",outcome=\"injected\"} 1",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in\n{text}");
    }
}

/// xorshift64*: reproducible junk without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Bodies with the status they must get; `None` means 200 or 400.
fn junk() -> Vec<(String, Vec<u8>, Option<u16>)> {
    let mut out: Vec<(String, Vec<u8>, Option<u16>)> = Vec::new();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for i in 0..200 {
        let len = rng.below(4096);
        let mut b: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        if i % 2 == 0 && !b.is_empty() {
            b[0] = b'{';
        }
        out.push((format!("random #{i} ({len} bytes)"), b, Some(400)));
    }
    out.push(("empty body".into(), Vec::new(), Some(400)));

    let good = serde_json::to_vec(&fixture("pod-create-inject-java.json")).unwrap();
    for i in 0..100 {
        let cut = rng.below(good.len());
        out.push((
            format!("truncated #{i} at {cut}"),
            good[..cut].to_vec(),
            Some(400),
        ));
    }

    let deep = 100_000;
    let open = "[".repeat(deep);
    let close = "]".repeat(deep);
    let objects = "{\"a\":".repeat(deep) + "1" + &"}".repeat(deep);
    out.push(("100k [".into(), open.clone().into_bytes(), Some(400)));
    out.push((
        "100k [] balanced".into(),
        format!("{open}{close}").into_bytes(),
        Some(400),
    ));
    out.push((
        "100k nested objects".into(),
        objects.clone().into_bytes(),
        Some(400),
    ));
    let envelope = |request: &str| {
        format!(
            r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{request}}}"#
        )
        .into_bytes()
    };
    let pod_request = |object: &str| {
        envelope(&format!(
            r#"{{"uid":"junk-uid","kind":{{"group":"","version":"v1","kind":"Pod"}},"namespace":"shop","operation":"CREATE","object":{object}}}"#
        ))
    };
    out.push((
        "100k [ in userInfo".into(),
        envelope(&format!(r#"{{"uid":"u","userInfo":{open}{close}}}"#)),
        None,
    ));
    out.push((
        "100k [ as the object".into(),
        pod_request(&format!("{open}{close}")),
        None,
    ));
    out.push((
        "100k nested objects in an unknown pod field".into(),
        pod_request(&format!(
            r#"{{"spec":{{"containers":[{{"name":"a"}}],"x":{objects}}}}}"#
        )),
        None,
    ));
    out.push((
        "unclosed 100k [ as the object".into(),
        pod_request(&open),
        Some(400),
    ));

    // Wrong types.
    let typed: [(&str, Vec<u8>, u16); 16] = [
        ("request is an array", envelope("[]"), 400),
        ("request is a string", envelope("\"x\""), 400),
        ("uid is a number", envelope(r#"{"uid":5}"#), 400),
        ("uid is null", envelope(r#"{"uid":null}"#), 400),
        ("uid missing", envelope(r#"{"operation":"CREATE"}"#), 400),
        (
            "operation is a number",
            envelope(r#"{"uid":"u","operation":7}"#),
            400,
        ),
        (
            "dryRun is a string",
            envelope(r#"{"uid":"u","dryRun":"yes"}"#),
            400,
        ),
        (
            "kind is a string",
            envelope(r#"{"uid":"u","kind":"Pod"}"#),
            400,
        ),
        (
            "apiVersion is a number",
            br#"{"apiVersion":1,"kind":"AdmissionReview"}"#.to_vec(),
            400,
        ),
        ("top level array", b"[1,2,3]".to_vec(), 400),
        ("top level null", b"null".to_vec(), 400),
        ("object is a string", pod_request("\"pod\""), 200),
        ("object is a number", pod_request("42"), 200),
        (
            "annotations of numbers",
            pod_request(
                r#"{"metadata":{"annotations":{"instrumentation.opentelemetry.io/inject-java":1}}}"#,
            ),
            200,
        ),
        (
            "containers is an object",
            pod_request(
                r#"{"metadata":{"annotations":{"instrumentation.opentelemetry.io/inject-java":"true"}},"spec":{"containers":{}}}"#,
            ),
            200,
        ),
        (
            "lone surrogate in uid",
            envelope(r#"{"uid":"\ud800"}"#),
            400,
        ),
    ];
    out.extend(
        typed
            .into_iter()
            .map(|(n, b, s)| (n.to_owned(), b, Some(s))),
    );
    let mut control = envelope(r#"{"uid":"a_b"}"#);
    let at = control.iter().position(|&b| b == b'_').unwrap();
    control[at] = 0;
    out.push(("NUL byte in a string".into(), control.clone(), Some(400)));
    control[at] = 0xff;
    out.push(("invalid UTF-8 in a string".into(), control, Some(400)));
    out.push((
        "huge number for dryRun".into(),
        envelope(&format!(
            r#"{{"uid":"u","dryRun":1{}}}"#,
            "0".repeat(10_000)
        )),
        Some(400),
    ));
    out
}

#[tokio::test]
async fn junk_gets_400_or_200_quickly_and_the_server_stays_healthy() {
    let _serial = serial().await;
    let server = Server::start().await;
    let cases = junk();
    let mut conn = server.connect().await;
    let mut invalid = 0;
    let mut slowest = Duration::ZERO;
    let mut reconnects = 0;
    let all = Instant::now();
    for (name, body, want) in &cases {
        let started = Instant::now();
        let resp = match within(
            Duration::from_secs(10),
            name,
            conn.roundtrip(&post(MUTATE, body, false)),
        )
        .await
        {
            Ok(r) => r,
            Err(e) => panic!("{name}: {e}"),
        };
        let took = started.elapsed();
        slowest = slowest.max(took);
        assert!(
            took < Duration::from_secs(2),
            "{name}: answered after {took:?}"
        );
        match (resp.status, want) {
            (400, Some(400) | None) => invalid += 1,
            (200, Some(200) | None) => {
                let r = review_of(&resp);
                assert!(r.allowed, "{name}");
                assert_eq!(r.patch, None, "{name}");
            }
            (s, w) => panic!("{name}: status {s}, expected {w:?}: {}", resp.text()),
        }
        if resp.header("connection") == Some("close") {
            reconnects += 1;
            conn = server.connect().await;
        }
    }
    eprintln!(
        "{} junk bodies in {:?}; slowest {slowest:?}; {invalid} answered 400; {reconnects} reconnects",
        cases.len(),
        all.elapsed()
    );

    // Still healthy, still injecting, and every 400 was counted.
    assert_eq!(server.admin_get("/livez").await.status, 200);
    assert_eq!(server.admin_get("/readyz").await.status, 200);
    let good = fixture("pod-create-inject-java.json");
    let r = review_of(&server.review(&good).await);
    assert!(r.patch.is_some());
    let text = server.metrics().await;
    let counted = support::metric(
        &text,
        "otel_injector_admission_requests_total{outcome=\"invalid\"}",
    );
    assert_eq!(counted, Some(f64::from(invalid)), "{text}");
}
