//! Authenticated callers on the real server: with `--webhook-client-ca-file` and
//! `--webhook-token-file`, a caller with a client certificate of that CA, or with a listed
//! bearer token, is answered; one with neither gets 401 from `/mutate-v1-pod` before its body
//! is read (`/convert` stays open: the API server calls it without credentials) and one with
//! another CA's certificate is refused in the handshake, each counted; the CA and the tokens
//! are reloaded from their files.

use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use otel_injector::certs::{self, DevCerts};
use tokio_rustls::TlsConnector;

use crate::support::{
    MUTATE, Response, Server, connector, connector_as, fixture, head, hosts, post, serial,
    tls_connect, uid_of,
};

const UNAUTHENTICATED: &str = "otel_injector_callers_refused_total{reason=\"unauthenticated\"}";
const BAD_CERTIFICATE: &str = "otel_injector_callers_refused_total{reason=\"bad_certificate\"}";

/// One request on a fresh connection; `Err` when the connection fails (a refused handshake).
async fn call(addr: SocketAddr, c: &TlsConnector, request: &[u8]) -> io::Result<Response> {
    let mut conn = tls_connect(addr, c).await?;
    conn.roundtrip(request).await
}

fn with_token(path: &str, body: &[u8], token: &str) -> Vec<u8> {
    let mut out = head(
        "POST",
        path,
        &[
            ("Content-Type", "application/json"),
            ("Content-Length", &body.len().to_string()),
            ("Authorization", &format!("Bearer {token}")),
            ("Connection", "close"),
        ],
    );
    out.extend_from_slice(body);
    out
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
}

/// A client of the server's CA presenting `ca`'s client certificate.
fn client_of(server: &Server, ca: &DevCerts) -> TlsConnector {
    let (cert, key) = ca.client("kube-apiserver").unwrap();
    connector_as(&[&server.certs.ca_cert], &cert, &key)
}

/// Waits until `request` through `c` ends as `ok` says (a file reload took effect).
async fn until(
    addr: SocketAddr,
    c: &TlsConnector,
    request: &[u8],
    ok: impl Fn(&io::Result<Response>) -> bool,
    what: &str,
) {
    let t0 = Instant::now();
    loop {
        if ok(&call(addr, c, request).await) {
            return;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "{what} within 10 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_callers_with_the_client_certificate_or_a_token_are_answered() {
    let _serial = serial().await;
    let files = tempfile::tempdir().unwrap();
    let (ca_file, token_file) = (files.path().join("ca.crt"), files.path().join("tokens"));
    let ours = certs::generate("callers CA", &hosts()).unwrap();
    let theirs = certs::generate("another CA", &hosts()).unwrap();
    write(&ca_file, &ours.ca_cert);
    write(&token_file, "s3cret-token\n");
    let server = Server::builder()
        .args([
            "--webhook-client-ca-file",
            ca_file.to_str().unwrap(),
            "--webhook-token-file",
            token_file.to_str().unwrap(),
            "--tls-reload-interval",
            "100ms",
        ])
        .start()
        .await;
    let addr = server.webhook;
    let review = fixture("pod-create.json");
    let body = serde_json::to_vec(&review).unwrap();
    let uid = uid_of(&review).to_owned();
    let answered = |r: &io::Result<Response>| {
        r.as_ref()
            .is_ok_and(|r| r.status == 200 && r.json()["response"]["uid"] == uid.as_str())
    };

    // The client certificate of the callers' CA: answered.
    let apiserver = client_of(&server, &ours);
    assert!(answered(
        &call(addr, &apiserver, &post(MUTATE, &body, true)).await
    ));

    // No certificate, no token: 401, counted.
    let anonymous = connector(&[&server.certs.ca_cert]);
    let r = call(addr, &anonymous, &post(MUTATE, &body, true))
        .await
        .unwrap();
    assert_eq!(r.status, 401, "{}", r.text());
    assert_eq!(r.header("www-authenticate"), Some("Bearer"));
    assert!(!r.text().contains("patch"), "nothing learnt: {}", r.text());
    // The conversion stays open: it converts what it is sent, and nothing else.
    let conversion = serde_json::json!({"apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview", "request": {"uid": "c1",
        "desiredAPIVersion": "opentelemetry.io/v1beta1", "objects": []}});
    let conversion = serde_json::to_vec(&conversion).unwrap();
    let r = call(addr, &anonymous, &post("/convert", &conversion, true))
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.json()["response"]["result"]["status"],
        "Success",
        "{}",
        r.text()
    );
    assert_eq!(server.metric(UNAUTHENTICATED).await, 1.0);
    // Before the body: a head that announces 1 MiB and sends none is answered at once.
    let started = Instant::now();
    let announced = head(
        "POST",
        MUTATE,
        &[
            ("Content-Type", "application/json"),
            ("Content-Length", "1048576"),
        ],
    );
    let r = call(addr, &anonymous, &announced).await.unwrap();
    assert_eq!(r.status, 401);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );

    // A listed token: answered; another: 401.
    assert!(answered(
        &call(addr, &anonymous, &with_token(MUTATE, &body, "s3cret-token")).await
    ));
    let r = call(addr, &anonymous, &with_token(MUTATE, &body, "guess"))
        .await
        .unwrap();
    assert_eq!(r.status, 401);
    assert_eq!(server.metric(UNAUTHENTICATED).await, 3.0);

    // Another CA's certificate: refused in the handshake, no answer at all, counted.
    let stranger = client_of(&server, &theirs);
    let r = call(addr, &stranger, &post(MUTATE, &body, true)).await;
    assert!(r.is_err(), "no answer for another CA's certificate: {r:?}");
    server
        .wait_metric(BAD_CERTIFICATE, 1.0, Duration::from_secs(5))
        .await;

    // Rotation of the callers' CA: both during the change, then only the new one.
    write(&ca_file, &format!("{}{}", ours.ca_cert, theirs.ca_cert));
    let request = post(MUTATE, &body, true);
    until(addr, &stranger, &request, answered, "the new CA trusted").await;
    assert!(
        answered(&call(addr, &apiserver, &request).await),
        "the old one still"
    );
    write(&ca_file, &theirs.ca_cert);
    until(
        addr,
        &apiserver,
        &request,
        |r| r.is_err(),
        "the old CA dropped",
    )
    .await;
    assert!(answered(&call(addr, &stranger, &request).await));
    // A broken file keeps the CA in force.
    write(&ca_file, "not a certificate");
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(answered(&call(addr, &stranger, &request).await));

    // The tokens are reloaded too.
    write(&token_file, "rotated-token\n");
    let rotated = with_token(MUTATE, &body, "rotated-token");
    until(
        addr,
        &anonymous,
        &rotated,
        answered,
        "the new token accepted",
    )
    .await;
    let r = call(addr, &anonymous, &with_token(MUTATE, &body, "s3cret-token")).await;
    assert_eq!(r.unwrap().status, 401, "the old token refused");
    // Health and metrics stay on the admin listener, unauthenticated.
    assert_eq!(server.admin_get("/readyz").await.status, 200);
}

#[test]
fn an_unusable_client_ca_or_token_file_fails_the_start() {
    let files = tempfile::tempdir().unwrap();
    let tls = files.path().join("tls");
    certs::generate("otel-injector test CA", &hosts())
        .unwrap()
        .write_to(&tls)
        .unwrap();
    let empty = files.path().join("empty");
    write(&empty, "\n");
    for flag in ["--webhook-client-ca-file", "--webhook-token-file"] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_otel-injector"))
            .args(["serve", "--tls-cert-file"])
            .arg(tls.join("tls.crt"))
            .arg("--tls-key-file")
            .arg(tls.join("tls.key"))
            .args(["--instrumentation-file", "/dev/null", flag])
            .arg(&empty)
            .args([
                "--webhook-addr",
                "127.0.0.1:0",
                "--admin-addr",
                "127.0.0.1:0",
            ])
            .env_remove("KUBECONFIG")
            .output()
            .unwrap();
        let log = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{flag}: {log}");
        assert!(log.contains(flag), "{flag} named: {log}");
    }
}
