//! Hostile requests rather than connections: absurd `?timeout=` values (at the clock's edges)
//! and pods of thousands of containers.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{
    MUTATE, Server, fixture, head, post, proc_status_bytes, review_of, serial, uid_of, within,
};

/// The server's monotonic clock (CLOCK_MONOTONIC, as `Instant`), read in this process.
pub(super) fn monotonic_now() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// `?timeout=` values that put the body-read deadline within the last millisecond of the
/// clock (`Instant` holds `i64::MAX` seconds): tokio rounds a deadline up to the next
/// millisecond, which overflows there and panics. The server clock is guessed from ours,
/// the request's delay swept in quarter milliseconds.
pub(super) fn clock_edge_timeouts(delays_us: impl Iterator<Item = u64>) -> Vec<String> {
    let end = Duration::new(i64::MAX as u64, 999_999_999);
    delays_us
        .map(|delay| {
            let budget =
                end - monotonic_now() - Duration::from_micros(delay) - Duration::from_micros(500);
            // The server keeps 500 ms in hand: deadline = budget + 500 ms.
            let deadline = budget + Duration::from_millis(500);
            format!("{}s{}ms", deadline.as_secs(), deadline.subsec_millis())
        })
        .collect()
}

#[tokio::test]
async fn absurd_timeouts_are_answered_and_never_panic() {
    let _serial = serial().await;
    let server = Server::start().await;
    let review = fixture("pod-create-inject-java.json");
    let body = serde_json::to_vec(&review).unwrap();
    let uid = uid_of(&review);
    let fixed = [
        "18446744073709551615s1s",
        "18446744073709551615s",
        "18446744073709551615s999ms",
        "18446744073709551616s",
        "9223372036854775807s",
        "5124095576030431h",
        "99999999999999999999999999999ms",
        "1h",
        "0s",
        "-1s",
        "1.5s",
        "%00",
    ];
    let mut answered = 0;
    let mut c = server.connect().await;
    let started = Instant::now();
    for value in fixed.iter().map(|v| (*v).to_owned()) {
        let path = format!("/mutate-v1-pod?timeout={value}");
        let r = within(
            Duration::from_secs(5),
            &path,
            c.roundtrip(&post(&path, &body, false)),
        )
        .await
        .unwrap_or_else(|e| panic!("{path}: no answer ({e})"));
        let r = review_of(&r);
        assert_eq!(r.uid, uid, "{path}");
        assert!(r.patch.is_some(), "{path}");
        answered += 1;
    }
    // Values aimed at the end of the clock, each on the same keep-alive connection. The
    // body follows the head after a moment, so that the server waits for it (a body that is
    // all there is read before any timer starts).
    for round in 0..3 {
        for value in clock_edge_timeouts((0..40).map(|i| i * 250)) {
            let path = format!("/mutate-v1-pod?timeout={value}");
            let one = async {
                c.send(&head(
                    "POST",
                    &path,
                    &[("Content-Length", &body.len().to_string())],
                ))
                .await?;
                tokio::time::sleep(Duration::from_millis(5)).await;
                c.send(&body).await?;
                c.response().await
            };
            let r = within(Duration::from_secs(5), &path, one)
                .await
                .unwrap_or_else(|e| panic!("round {round}, {path}: no answer ({e})"));
            assert_eq!(review_of(&r).uid, uid, "{path}");
            answered += 1;
        }
    }
    let took = started.elapsed();
    eprintln!("absurd timeouts: {answered} answered on one connection in {took:?}");
    let log = server.log();
    assert!(!log.contains("panicked"), "{log}");
}

/// An AdmissionReview of a pod in `shop` asking for Java in `n` containers, each named in
/// `container-names`.
pub(super) fn many_containers(n: usize) -> Value {
    let mut review = fixture("pod-create-inject-java.json");
    let names: Vec<String> = (0..n).map(|i| format!("c{i}")).collect();
    let containers: Vec<Value> = names
        .iter()
        .map(|name| json!({"name": name, "image": "i"}))
        .collect();
    let object = &mut review["request"]["object"];
    object["metadata"]["annotations"] = json!({
        "instrumentation.opentelemetry.io/inject-java": "true",
        "instrumentation.opentelemetry.io/container-names": names.join(","),
    });
    object["spec"]["containers"] = Value::Array(containers);
    review
}

/// Sends a review of `n` targeted tiny containers to a fresh server: it is admitted
/// unchanged but for its outcome, with the `pod_too_large` warning, quickly, with a bounded peak RSS.
pub(super) async fn too_large_pod(n: usize) {
    let server = Server::start().await;
    let review = many_containers(n);
    let body = serde_json::to_vec(&review).unwrap();
    let object_bytes = serde_json::to_vec(&review["request"]["object"])
        .unwrap()
        .len();
    let hwm_before = proc_status_bytes(server.pid(), "VmHWM");
    let started = Instant::now();
    let r = server.post_raw(MUTATE, &body).await;
    let took = started.elapsed();
    let hwm = proc_status_bytes(server.pid(), "VmHWM");
    let rss_after = proc_status_bytes(server.pid(), "VmRSS");
    let answer_bytes = r.body.len();
    let r = review_of(&r);
    // Peak RSS: what the server held before, plus 16 times the body, plus 32 MiB.
    let bound = hwm_before + 16 * body.len() as u64 + 32 * 1024 * 1024;
    eprintln!(
        "{n} containers: review {} KiB answered in {took:?} ({answer_bytes} bytes); \
         VmHWM {} KiB before, {} KiB after (bound {} KiB); VmRSS after {} KiB",
        body.len() / 1024,
        hwm_before / 1024,
        hwm / 1024,
        bound / 1024,
        rss_after / 1024
    );
    assert_eq!(r.uid, uid_of(&review));
    assert!(r.allowed);
    // Only the outcome is recorded (from a metadata-only read).
    assert_eq!(r.status_only(), "pod=skipped pod_too_large");
    // Refused before the pod is even decoded: its containers would take far more memory
    // decoded than the review's size.
    assert_eq!(
        r.warnings,
        [format!(
            "otel-injector: the pod has too many containers for its size ({object_bytes} bytes); not injected"
        )]
    );
    assert!(answer_bytes < 1024, "a {answer_bytes}-byte answer");
    assert_eq!(
        server
            .metric("otel_injector_not_injected_total{reason=\"pod_too_large\"}")
            .await,
        1.0
    );
    assert!(took < Duration::from_secs(2), "answered after {took:?}");
    assert!(
        hwm < bound,
        "peak RSS {} KiB for a {} KiB review (bound {} KiB)",
        hwm / 1024,
        body.len() / 1024,
        bound / 1024
    );
}

#[tokio::test]
async fn a_pod_of_3000_targeted_containers_is_admitted_unchanged_quickly() {
    let _serial = serial().await;
    too_large_pod(3_000).await;
}

#[tokio::test]
async fn a_pod_of_40000_targeted_containers_is_admitted_unchanged_quickly() {
    let _serial = serial().await;
    too_large_pod(40_000).await;
}
