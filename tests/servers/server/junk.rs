//! Random bytes and malformed reviews: answered 400 or 200 quickly, the server healthy after.

use std::time::{Duration, Instant};

use crate::support;
use crate::support::{MUTATE, Server, fixture, post, review_of, serial, within};

/// xorshift64*: reproducible junk without a dependency.
pub(super) struct Rng(u64);

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
pub(super) fn junk() -> Vec<(String, Vec<u8>, Option<u16>)> {
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
