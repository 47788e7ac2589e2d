//! The request span. The binary's tests share one process-wide log subscriber that writes
//! each thread's lines to that thread's buffer: a scoped subscriber (`set_default`) misses
//! spans while other tests run handlers on other threads (tracing caches a call site's
//! interest for the whole process), and a `#[tokio::test]` runs its handlers on its own
//! thread.

use std::cell::RefCell;
use std::sync::OnceLock;

use crate::support::router::{call, post, webhook};
use crate::support::{MUTATE, fixture, uid_of};
use axum::body::{Body, Bytes};
use axum::http::{Request, header};
use otel_injector::server::MAX_BODY_BYTES;
use serde_json::Value;

thread_local! {
    /// What the process-wide subscriber wrote on this thread.
    static LINES: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// The subscriber's writer: the current thread's buffer.
struct ThreadSink;

impl std::io::Write for ThreadSink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        LINES.with_borrow_mut(|l| l.extend_from_slice(buf));
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// This thread's log lines from now on.
struct Logs;

impl Logs {
    fn capture() -> Logs {
        static INSTALLED: OnceLock<()> = OnceLock::new();
        INSTALLED.get_or_init(|| {
            let subscriber = tracing_subscriber::fmt()
                .json()
                .flatten_event(true)
                .with_current_span(true)
                .with_span_list(false)
                .with_writer(|| ThreadSink)
                .finish();
            tracing::subscriber::set_global_default(subscriber)
                .expect("no other subscriber in this test binary");
        });
        LINES.with_borrow_mut(Vec::clear);
        Logs
    }

    fn lines(&self) -> Vec<Value> {
        let bytes = LINES.with_borrow(Clone::clone);
        String::from_utf8(bytes)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON log line"))
            .collect()
    }
}

#[tokio::test]
async fn every_answer_is_logged_inside_the_review_span() {
    let _serial = crate::support::serial().await;
    let logs = Logs::capture();

    let review = fixture("pod-create-inject-java.json");
    let too_large = Request::post(MUTATE)
        .header(header::CONTENT_LENGTH, MAX_BODY_BYTES + 1)
        .body(Body::empty())
        .unwrap();
    let stalled = post(
        "/mutate-v1-pod?timeout=100ms",
        Body::from_stream(futures::stream::pending::<Result<Bytes, std::io::Error>>()),
    );
    // (request, status, the span's outcome)
    let table = [
        (
            post(MUTATE, serde_json::to_vec(&review).unwrap()),
            200,
            "patched",
        ),
        (post(MUTATE, "not json"), 400, "invalid"),
        (too_large, 413, "too_large"),
        (stalled, 408, "deadline"),
    ];
    for (req, status, outcome) in table {
        let before = logs.lines().len();
        let (router, _) = webhook();
        let r = call(router, req).await;
        assert_eq!(r.status, status, "{outcome}");
        let lines = logs.lines();
        let new = &lines[before..];
        assert!(!new.is_empty(), "{outcome}: nothing logged");
        for line in new {
            assert_eq!(line["span"]["name"], "review", "{outcome}: {line}");
            assert_eq!(line["span"]["outcome"], outcome, "{outcome}: {line}");
        }
    }
    // The reviewed pod's identity is on the span of its log line.
    let reviewed = logs
        .lines()
        .into_iter()
        .find(|l| l["message"] == "reviewed")
        .expect("a reviewed line");
    assert_eq!(reviewed["span"]["uid"], uid_of(&review));
    assert_eq!(reviewed["span"]["namespace"], "shop");
    assert_eq!(reviewed["span"]["operation"], "CREATE");
    // The audit line: kind, languages and time; fields at their defaults are left out.
    let fields: Vec<&str> = reviewed
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        fields,
        [
            "injected",
            "kind",
            "level",
            "message",
            "micros",
            "span",
            "target",
            "timestamp"
        ]
    );
    assert_eq!(reviewed["kind"], "Pod");
    assert_eq!(reviewed["injected"], r#"["java"]"#);
    assert!(reviewed["micros"].as_u64().is_some());

    // A dry run says so; warnings are listed.
    let mut dry = review.clone();
    dry["request"]["dryRun"] = true.into();
    dry["request"]["object"]["metadata"]["annotations"]["instrumentation.opentelemetry.io/inject-python"] =
        "true".into();
    let before = logs.lines().len();
    let (router, _) = webhook();
    let r = call(router, post(MUTATE, serde_json::to_vec(&dry).unwrap())).await;
    assert_eq!(r.status, 200);
    let lines = logs.lines();
    let line = lines[before..]
        .iter()
        .find(|l| l["message"] == "reviewed")
        .expect("a reviewed line");
    assert_eq!(line["dry_run"], true, "{line}");
    assert_eq!(line["injected"], "[]", "{line}");
    assert!(
        line["warnings"]
            .as_str()
            .is_some_and(|w| w.contains("several languages requested")),
        "{line}"
    );
    assert!(line.get("already_injected").is_none(), "{line}");

    // A pod injected before says so, and nothing else that is at its default.
    let mut again = review.clone();
    again["request"]["object"]["metadata"]["annotations"]["otel-injector/injected"] = "java".into();
    let before = logs.lines().len();
    let (router, _) = webhook();
    let r = call(router, post(MUTATE, serde_json::to_vec(&again).unwrap())).await;
    assert_eq!(r.status, 200);
    let lines = logs.lines();
    let line = lines[before..]
        .iter()
        .find(|l| l["message"] == "reviewed")
        .expect("a reviewed line");
    assert_eq!(line["already_injected"], true, "{line}");
    assert_eq!(line["injected"], "[]", "{line}");
    assert!(line.get("dry_run").is_none(), "{line}");
    assert!(line.get("warnings").is_none(), "{line}");
}
