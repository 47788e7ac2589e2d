//! The server process's life cycle, through real sockets to the real binary: certificate
//! rotation while serving, the SIGTERM drain, and start-up while the API server is down.

mod drain;

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use drain::wait_readyz;
use otel_injector::certs::{self, DevCerts};

use crate::support;
use crate::support::{
    IO_TIMEOUT, MUTATE, Server, cert_der, fixture, hosts, post, review_of, serial, tls_connect,
    uid_of, within,
};

const RELOADS_OK: &str = "otel_injector_certificate_reloads_total{result=\"success\"}";
const RELOADS_FAILED: &str = "otel_injector_certificate_reloads_total{result=\"error\"}";

/// Writes `contents` to `path` atomically (no reader ever sees a half-written file).
fn write_atomic(path: &std::path::Path, contents: &[u8]) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, contents).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// Polls fresh connections until one is served `want`; returns how long that took.
async fn wait_for_cert(
    server: &Server,
    connector: &tokio_rustls::TlsConnector,
    want: &[u8],
) -> Duration {
    let started = Instant::now();
    loop {
        let c = within(
            IO_TIMEOUT,
            "connect",
            tls_connect(server.webhook, connector),
        )
        .await
        .expect("TLS connection during rotation");
        if c.peer_cert() == want {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "new connections still get the old certificate after 10 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_rotate_without_failed_requests() {
    let _serial = serial().await;
    let server = Server::builder()
        .args(["--tls-reload-interval", "200ms"])
        .start()
        .await;
    let second_ca = certs::generate("otel-injector second test CA", &hosts()).unwrap();
    // The client trusts both CAs, as a caBundle does while a CA is being replaced.
    let connector = support::connector(&[&server.certs.ca_cert, &second_ca.ca_cert]);
    let review = fixture("pod-create.json");
    let uid = uid_of(&review).to_owned();
    let body = serde_json::to_vec(&review).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let is_ok = move |r: &support::Response, uid: &str| {
        r.status == 200 && r.json()["response"]["uid"] == uid
    };

    // New connections, one after another, each with one request.
    let fresh = tokio::spawn({
        let (stop, connector, body, uid) =
            (stop.clone(), connector.clone(), body.clone(), uid.clone());
        let addr = server.webhook;
        async move {
            let mut seen = Vec::new();
            let mut failures = Vec::new();
            while !stop.load(Ordering::Acquire) {
                let one = async {
                    let mut c = tls_connect(addr, &connector).await?;
                    let cert = c.peer_cert();
                    let r = c.roundtrip(&post(MUTATE, &body, true)).await?;
                    Ok::<_, io::Error>((cert, r))
                };
                match tokio::time::timeout(Duration::from_secs(10), one).await {
                    Ok(Ok((cert, r))) if is_ok(&r, &uid) => seen.push(cert),
                    Ok(Ok((_, r))) => failures.push(format!("{} {}", r.status, r.text())),
                    Ok(Err(e)) => failures.push(e.to_string()),
                    Err(_) => failures.push("timed out".into()),
                }
            }
            (seen, failures)
        }
    });
    // One keep-alive connection, reused throughout.
    let kept = tokio::spawn({
        let (stop, connector, body, uid) =
            (stop.clone(), connector.clone(), body.clone(), uid.clone());
        let addr = server.webhook;
        async move {
            let mut c = tls_connect(addr, &connector)
                .await
                .expect("keep-alive connection");
            let mut ok = 0u32;
            let mut failures = Vec::new();
            while !stop.load(Ordering::Acquire) {
                let r = tokio::time::timeout(
                    Duration::from_secs(10),
                    c.roundtrip(&post(MUTATE, &body, false)),
                )
                .await;
                match r {
                    Ok(Ok(r)) if is_ok(&r, &uid) => ok += 1,
                    other => {
                        failures.push(format!("{other:?}"));
                        break;
                    }
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            (ok, failures)
        }
    });

    let loop_started = Instant::now();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut served: Vec<DevCerts> = vec![server.certs.clone()];
    let first_ca = server.certs.clone();
    let plan: [(&str, DevCerts); 3] = [
        ("reissued", first_ca.reissue(&hosts()).unwrap()),
        ("reissued again", first_ca.reissue(&hosts()).unwrap()),
        ("from a new CA", second_ca.clone()),
    ];
    let mut latencies = Vec::new();
    for (i, (what, next)) in plan.into_iter().enumerate() {
        next.write_to(&server.tls_dir).unwrap();
        let took = wait_for_cert(&server, &connector, &cert_der(&next.cert)).await;
        latencies.push((what, took));
        server
            .wait_metric(RELOADS_OK, (i + 1) as f64, Duration::from_secs(10))
            .await;
        served.push(next);
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
    // A crt/key pair read between the two renames of write_to is reported and retried.
    let racy_errors = server.metric(RELOADS_FAILED).await;

    // A broken key: the current certificate is kept and the error is counted once.
    write_atomic(&server.tls_dir.join("tls.key"), b"garbage\n");
    server
        .wait_metric(RELOADS_FAILED, racy_errors + 1.0, Duration::from_secs(10))
        .await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    let c = within(
        IO_TIMEOUT,
        "connect",
        tls_connect(server.webhook, &connector),
    )
    .await
    .expect("TLS connection with a broken key on disk");
    assert_eq!(
        c.peer_cert(),
        cert_der(&served[3].cert),
        "the good certificate is kept"
    );
    assert_eq!(
        server.metric(RELOADS_FAILED).await,
        racy_errors + 1.0,
        "reported once"
    );
    assert_eq!(server.metric(RELOADS_OK).await, 3.0);

    // Repaired files are picked up.
    let repaired = second_ca.reissue(&hosts()).unwrap();
    repaired.write_to(&server.tls_dir).unwrap();
    let took = wait_for_cert(&server, &connector, &cert_der(&repaired.cert)).await;
    latencies.push(("after repair", took));
    server
        .wait_metric(RELOADS_OK, 4.0, Duration::from_secs(10))
        .await;
    served.push(repaired);
    let rest = Duration::from_millis(3300).saturating_sub(loop_started.elapsed());
    tokio::time::sleep(rest.max(Duration::from_millis(300))).await;

    stop.store(true, Ordering::Release);
    let (seen, fresh_failures) = within(IO_TIMEOUT, "new-connection loop", fresh)
        .await
        .unwrap();
    let (kept_ok, kept_failures) = within(IO_TIMEOUT, "keep-alive loop", kept).await.unwrap();
    let loop_time = loop_started.elapsed();
    eprintln!(
        "rotation: {} new connections and {kept_ok} keep-alive requests in {loop_time:?}; \
         time to see each new certificate: {latencies:?}; racy reload errors: {racy_errors}",
        seen.len()
    );
    assert!(
        fresh_failures.is_empty(),
        "failed new-connection requests: {fresh_failures:?}"
    );
    assert!(
        kept_failures.is_empty(),
        "failed keep-alive requests: {kept_failures:?}"
    );
    assert!(loop_time >= Duration::from_secs(3));
    assert!(seen.len() >= 20, "only {} new connections", seen.len());
    assert!(kept_ok >= 20, "only {kept_ok} keep-alive requests");
    assert!(
        racy_errors <= 4.0,
        "{racy_errors} reload errors for 4 rotations"
    );

    // Connections saw the certificates in order, each of them, and never an old one again.
    let ders: Vec<Vec<u8>> = served.iter().map(|c| cert_der(&c.cert)).collect();
    let order: Vec<usize> = seen
        .iter()
        .map(|d| {
            ders.iter()
                .position(|x| x == d)
                .expect("a certificate that was written")
        })
        .collect();
    assert!(
        order.windows(2).all(|w| w[0] <= w[1]),
        "certificates out of order: {order:?}"
    );
    for i in 0..ders.len() {
        assert!(
            order.contains(&i),
            "certificate {i} never seen by a new connection: {order:?}"
        );
    }
    assert_eq!(server.metric(RELOADS_OK).await, 4.0);
}

#[tokio::test]
async fn without_the_api_server_it_serves_unready_and_allows_with_a_warning() {
    let _serial = serial().await;
    let dead = support::free_port();
    let kubeconfig = format!(
        "apiVersion: v1
kind: Config
clusters:
- name: down
  cluster:
    server: https://127.0.0.1:{dead}
    insecure-skip-tls-verify: true
users:
- name: tester
  user:
    token: not-a-real-token
contexts:
- name: down
  context:
    cluster: down
    user: tester
    namespace: default
current-context: down
"
    );
    let server = Server::builder()
        .without_instrumentation_file()
        .kubeconfig(kubeconfig)
        .start()
        .await;
    let up = server.up_after;
    let metrics = server.admin_get("/metrics").await;
    let metrics_at = server.spawned_at.elapsed();
    assert_eq!(metrics.status, 200);
    assert!(metrics.text().ends_with("# EOF\n"), "{}", metrics.text());
    assert_eq!(server.admin_get("/livez").await.status, 200);
    let readyz = server.admin_get("/readyz").await;
    assert_eq!(readyz.status, 503);
    assert_eq!(
        readyz.text(),
        "Instrumentation and Namespace caches not synced\n"
    );

    let review = fixture("pod-create-inject-java.json");
    let r = review_of(&server.review(&review).await);
    let answered_at = server.spawned_at.elapsed();
    eprintln!(
        "API down: /livez up {up:?} after spawn, /metrics answered at {metrics_at:?}, \
         review answered at {answered_at:?}"
    );
    assert_eq!(r.uid, uid_of(&review));
    assert!(r.allowed);
    assert_eq!(r.status_only(), "pod=skipped cache_not_ready");
    assert_eq!(r.warnings.len(), 1, "{:?}", r.warnings);
    assert!(
        r.warnings[0].contains("cache not synced"),
        "{:?}",
        r.warnings
    );
    assert!(
        answered_at < Duration::from_secs(1),
        "admin and webhook answered only {answered_at:?} after spawn"
    );

    let text = server.metrics().await;
    assert!(
        text.contains("otel_injector_not_injected_total{reason=\"cache_not_ready\"} 1"),
        "{text}"
    );
    // It is really trying the configured API server, and stays unready meanwhile.
    let until = Instant::now() + Duration::from_secs(10);
    while !server.log().contains("watch failed, retrying") {
        assert!(
            Instant::now() < until,
            "no watch attempt logged:\n{}",
            server.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(server.admin_get("/readyz").await.status, 503);
    let r = review_of(&server.review(&review).await);
    assert_eq!(r.status_only(), "pod=skipped cache_not_ready");
}

/// Writes `text` into the FIFO at `path` (blocks until the server opens it for reading).
async fn write_fifo(path: std::path::PathBuf, text: &'static str) {
    within(
        Duration::from_secs(10),
        "writing the instrumentation FIFO",
        tokio::task::spawn_blocking(move || std::fs::write(path, text)),
    )
    .await
    .unwrap()
    .expect("write the FIFO");
}

#[tokio::test]
async fn listeners_bind_before_the_instrumentation_file_is_read() {
    let _serial = serial().await;
    // The file is a named pipe: the server's read of it blocks until the test writes, so
    // everything answered before that was answered before the file was read.
    let server = Server::builder().instrumentation_fifo().start().await;
    assert_eq!(server.admin_get("/livez").await.status, 200);
    let metrics = server.metrics().await;
    assert!(
        metrics.contains("otel_injector_store_synced{store=\"instrumentations\"} 0"),
        "{metrics}"
    );
    let readyz = server.admin_get("/readyz").await;
    assert_eq!(readyz.status, 503);
    let review = fixture("pod-create-inject-java.json");
    let r = review_of(&server.review(&review).await);
    assert!(r.allowed);
    assert_eq!(r.status_only(), "pod=skipped cache_not_ready");
    assert!(
        r.warnings.len() == 1 && r.warnings[0].contains("cache not synced"),
        "{:?}",
        r.warnings
    );

    write_fifo(server.instrumentation_file(), support::INSTRUMENTATIONS).await;
    wait_readyz(&server, 200, Duration::from_secs(10)).await;
    assert!(
        server
            .metrics()
            .await
            .contains("otel_injector_store_synced{store=\"instrumentations\"} 1")
    );
    let r = review_of(&server.review(&review).await);
    let patch = r.patch.map(|p| p.to_string()).unwrap_or_default();
    assert!(
        patch.contains("opentelemetry-auto-instrumentation-java"),
        "{patch} {:?}",
        r.warnings
    );
    let loaded = "Instrumentations loaded from files; not watching the cluster";
    let log = server.log_with(loaded, Duration::from_secs(5)).await;
    assert!(log.contains(loaded), "{log}");
}

#[tokio::test]
async fn an_unreadable_instrumentation_file_ends_serve_after_binding() {
    let _serial = serial().await;
    let mut server = Server::builder().instrumentation_fifo().start().await;
    assert_eq!(server.admin_get("/livez").await.status, 200);
    write_fifo(server.instrumentation_file(), "kind: [not, an, object\n").await;
    let status = server
        .wait_exit(Duration::from_secs(10))
        .await
        .expect("serve still running after reading a bad file");
    assert_eq!(status.code(), Some(1), "{}", server.log());
    let log = server.log();
    assert!(
        log.contains(&format!(
            "instrumentation file {}",
            server.instrumentation_file().display()
        )),
        "{log}"
    );
}
