//! Built-in certificate mode (`--certificate-secret`): the webhook makes its CA and serving
//! certificate, keeps them in a Secret, writes the `caBundle` of its own configuration, and
//! the apiserver then calls it over TLS; a second replica serves the same certificate. Both
//! run with the RBAC of `manifests/base/otel-injector.yaml` and `manifests/components/built-in` only,
//! on the names those grant (Secret `otel-injector/otel-injector-tls`, configuration
//! `otel-injector`).

use otel_injector::keys::{INJECT_JAVA, INJECTED_ANNOTATION, SERVING_NOT_AFTER};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use serde_json::Value;

use crate::harness::*;
use crate::support::api;
use crate::support::webhook::Webhook;

/// The certificate `addr` presents, checked against `ca_pem` for 127.0.0.1.
pub async fn peer_certificate(addr: std::net::SocketAddr, ca_pem: &[u8]) -> Vec<u8> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem) {
        roots.add(c.expect("CA PEM")).expect("CA certificate");
    }
    let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("protocol versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(cfg));
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let name = ServerName::try_from("127.0.0.1").expect("server name");
    let tls = connector
        .connect(name, tcp)
        .await
        .unwrap_or_else(|e| panic!("TLS to {addr} with the Secret's CA: {e}"));
    tls.get_ref()
        .1
        .peer_certificates()
        .expect("a peer certificate")[0]
        .to_vec()
}

/// A Secret's `data[key]`, decoded.
pub fn decoded(secret: &Value, key: &str) -> Vec<u8> {
    use base64::Engine as _;
    let b64 = secret["data"][key]
        .as_str()
        .unwrap_or_else(|| panic!("Secret has no {key}: {secret}"));
    base64::engine::general_purpose::STANDARD
        .decode(b64)
        .expect("base64")
}

/// The DER of the first certificate of a PEM text.
pub fn der(pem: &[u8]) -> Vec<u8> {
    CertificateDer::from_pem_slice(pem)
        .expect("PEM certificate")
        .to_vec()
}

#[tokio::test]
async fn built_in_certificate_is_stored_trusted_by_the_apiserver_and_shared() {
    let id = "selfcert";
    let cp = cluster().await;
    let t0 = Instant::now();
    let client = cp.client();
    // The names of manifests/components/built-in, whose RBAC (bound to this webhook's identity
    // with that of base/otel-injector.yaml) grants access to these and nothing else.
    let secret_ns = "otel-injector";
    let secret_name = "otel-injector-tls";
    let configuration = "otel-injector";
    // The shared control plane's CRD converts through the harness's webhook: this one must
    // not write its CA there (conversion.rs proves that write on a control plane of its own).
    let args: Vec<String> = [
        "--certificate-secret",
        &format!("{secret_ns}/{secret_name}"),
        "--webhook-configuration",
        configuration,
        "--certificate-host",
        "127.0.0.1",
        "--conversion-crd=",
    ]
    .map(String::from)
    .to_vec();
    // Ready means: the certificate served is the Secret's. Registered without a caBundle.
    let env = Env::start_with(
        id,
        Options {
            args: args.clone(),
            register_ca_bundle: false,
            rbac: Rbac::SelfSigned,
            configuration_name: Some(configuration.to_owned()),
            ..Options::default()
        },
    )
    .await;
    let ready_after = t0.elapsed();

    // The Secret: type kubernetes.io/tls with the four keys.
    let path = format!("/api/v1/namespaces/{secret_ns}/secrets/{secret_name}");
    let r = api::send(&client, axum::http::Method::GET, &path, None)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 200, "GET {path}: {}", r.body);
    let secret = r.body;
    assert_eq!(secret["type"], "kubernetes.io/tls");
    let mut keys: Vec<&str> = secret["data"]
        .as_object()
        .expect("data")
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort();
    assert_eq!(keys, ["ca.crt", "ca.key", "tls.crt", "tls.key"]);
    let ca_b64 = secret["data"]["ca.crt"].as_str().unwrap().to_owned();

    // Every entry of the configuration gets the caBundle.
    let manifest_entries = api::read_yaml_docs(&Variant::Default.manifest())
        .unwrap_or_else(|e| panic!("{e}"))[0]["webhooks"]
        .as_array()
        .expect("webhooks")
        .len();
    let mwc = format!(
        "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{configuration}"
    );
    let t1 = Instant::now();
    loop {
        let r = api::send(&client, axum::http::Method::GET, &mwc, None)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.status, 200, "GET {mwc}: {}", r.body);
        let entries = r.body["webhooks"].as_array().expect("webhooks").clone();
        assert_eq!(entries.len(), manifest_entries, "{}", r.body);
        if entries
            .iter()
            .all(|w| w["clientConfig"]["caBundle"] == ca_b64.as_str())
        {
            break;
        }
        assert!(
            t1.elapsed() < Duration::from_secs(15),
            "caBundle not set within 15 s: {}\n{}",
            r.body,
            env.webhook.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let bundle_after = t1.elapsed();
    env.assert_registered_as_the_manifest().await;

    // The apiserver calls the webhook over TLS with that CA: a pod is injected.
    let ns = env.namespace("app", &[]).await;
    env.await_webhook(&ns).await;
    let trusted_after = t1.elapsed();
    env.instrumentation(&ns, "java", endpoint_spec("http://collector:4318"))
        .await;
    let p = pod("self-signed", &[(INJECT_JAVA, "true")]);
    env.until_dry_run(&ns, &p, "injection", |r| is_injected(&r.body))
        .await;
    env.create(&ns, &p).await;
    let stored = env.stored(&ns, "self-signed").await;
    assert!(is_injected(&stored), "not injected: {stored}");
    assert_eq!(
        stored["metadata"]["annotations"][INJECTED_ANNOTATION],
        "java"
    );

    // Served is the Secret's certificate, verified with its CA.
    let ca = decoded(&secret, "ca.crt");
    let tls_crt = der(&decoded(&secret, "tls.crt"));
    assert_eq!(peer_certificate(env.webhook.addr, &ca).await, tls_crt);

    // A second replica on the same Secret serves the same certificate and rewrites nothing.
    let t2 = Instant::now();
    let mut second = Webhook::start_with(
        Path::new(env!("CARGO_BIN_EXE_e2e-otel-injector")),
        &env.identity.kubeconfig,
        &[["--label-namespaces=false".to_owned()].as_slice(), &args].concat(),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    second
        .wait_ready(Duration::from_secs(30))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let second_ready = t2.elapsed();
    assert_eq!(peer_certificate(second.addr, &ca).await, tls_crt);
    let again = api::send(&client, axum::http::Method::GET, &path, None)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        again.body["metadata"]["resourceVersion"], secret["metadata"]["resourceVersion"],
        "the second replica rewrote the Secret"
    );
    assert_eq!(again.body["data"], secret["data"]);
    let metrics = second.metrics().await;
    assert!(
        metrics
            .lines()
            .any(|l| l == "otel_injector_certificate_reloads_total{result=\"success\"} 1"),
        "one certificate swap counted: {metrics}"
    );
    // The expiry gauge is the served certificate's, the one the Secret's annotation records.
    let not_after = &secret["metadata"]["annotations"][SERVING_NOT_AFTER];
    let expiry = format!(
        "otel_injector_certificate_expiry_timestamp_seconds {}",
        not_after.as_str().unwrap()
    );
    assert!(
        metrics.lines().any(|l| l == expiry),
        "{expiry:?} in {metrics}"
    );
    eprintln!(
        "[e2e] selfcert: first webhook started and ready (Secret made, certificate swapped) in \
         {ready_after:?}; caBundle on every entry {bundle_after:?} after registration; \
         apiserver called the webhook {trusted_after:?} after registration; second replica \
         ready in {second_ready:?}; test (after the shared control plane) {:?}",
        t0.elapsed()
    );
}
