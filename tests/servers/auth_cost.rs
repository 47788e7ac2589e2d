//! A measurement, `#[ignore]`d (run by `just auth-cost`, on the release binary): what
//! client-certificate authentication costs a caller, against the same server without it, in
//! the same run. Two servers (one with `--webhook-client-ca-file`, one without) answer, in
//! turn, rounds of (a) a fresh connection per review (the handshake, with the client
//! certificate verified, plus one review: what a caller pays when it reconnects) and (b)
//! reviews on one kept-alive connection (the per-request cost once connected, as the API
//! server reuses its connections). Medians of each, and their ratios.

use std::time::{Duration, Instant};

use otel_injector::certs;
use tokio_rustls::TlsConnector;

use crate::support::{
    MUTATE, Server, connector, connector_as, fixture, hosts, post, serial, tls_connect,
};

const ROUNDS: usize = 5;
const PER_ROUND: usize = 200;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// The median time of a fresh connection plus one review, and of one review on a kept
/// connection, over [`PER_ROUND`] of each.
async fn round(server: &Server, c: &TlsConnector, body: &[u8]) -> (Duration, Duration) {
    let mut fresh = Vec::with_capacity(PER_ROUND);
    for _ in 0..PER_ROUND {
        let t0 = Instant::now();
        let mut conn = tls_connect(server.webhook, c).await.expect("connect");
        let r = conn
            .roundtrip(&post(MUTATE, body, true))
            .await
            .expect("review");
        assert_eq!(r.status, 200, "{}", r.text());
        fresh.push(t0.elapsed());
    }
    let mut kept = Vec::with_capacity(PER_ROUND);
    let mut conn = tls_connect(server.webhook, c).await.expect("connect");
    for _ in 0..PER_ROUND {
        let t0 = Instant::now();
        let r = conn
            .roundtrip(&post(MUTATE, body, false))
            .await
            .expect("review");
        assert_eq!(r.status, 200, "{}", r.text());
        kept.push(t0.elapsed());
    }
    (median(fresh), median(kept))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: just auth-cost"]
async fn client_certificates_cost_against_none() {
    let _serial = serial().await;
    let files = tempfile::tempdir().unwrap();
    let callers = certs::generate("callers CA", &hosts()).unwrap();
    let ca_file = files.path().join("ca.crt");
    std::fs::write(&ca_file, &callers.ca_cert).unwrap();
    let plain = Server::builder().start().await;
    let authenticated = Server::builder()
        .args(["--webhook-client-ca-file", ca_file.to_str().unwrap()])
        .start()
        .await;
    let anonymous = connector(&[&plain.certs.ca_cert]);
    let (cert, key) = callers.client("kube-apiserver").unwrap();
    let with_cert = connector_as(&[&authenticated.certs.ca_cert], &cert, &key);
    let body = serde_json::to_vec(&fixture("pod-create.json")).unwrap();
    // Warm both (first connections, allocator).
    round(&plain, &anonymous, &body).await;
    round(&authenticated, &with_cert, &body).await;
    let (mut plain_fresh, mut plain_kept, mut auth_fresh, mut auth_kept) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let (f, k) = round(&plain, &anonymous, &body).await;
        plain_fresh.push(f);
        plain_kept.push(k);
        let (f, k) = round(&authenticated, &with_cert, &body).await;
        auth_fresh.push(f);
        auth_kept.push(k);
    }
    let (pf, pk, af, ak) = (
        median(plain_fresh),
        median(plain_kept),
        median(auth_fresh),
        median(auth_kept),
    );
    let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64();
    eprintln!(
        "[auth-cost] binary {}",
        std::env::var("TEST_SERVER_BIN").unwrap_or_else(|_| "this build's".into())
    );
    eprintln!(
        "[auth-cost] fresh connection + review: without {pf:?}, with a client certificate {af:?} ({:.2}x)",
        ratio(af, pf)
    );
    eprintln!(
        "[auth-cost] review on a kept connection: without {pk:?}, with a client certificate {ak:?} ({:.2}x)",
        ratio(ak, pk)
    );
}
