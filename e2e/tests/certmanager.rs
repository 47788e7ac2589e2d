//! The cert-manager certificate mode with the real cert-manager (controller and CA injector
//! built from its Go module, its chart's CRDs): the mode's Issuers and Certificates as
//! shipped are applied, the serving Certificate becomes Ready, its Secret is projected into
//! a directory as a kubelet Secret volume is, the CA injector (not the test) writes the CA
//! into the webhook configuration's `caBundle`, the API server calls the webhook, and a
//! forced renewal rotates the served certificate while a stream of pod creations, under
//! `failurePolicy: Fail`, sees no failed admission.
//!
//! What differs from a cluster (e2e/README.md): the mode's objects live in namespace
//! `e2e-cert-manager` (not `otel-injector`, which the built-in certificate test uses); the
//! webhook runs on 127.0.0.1 and the configuration's `clientConfig` is a URL to it, so the
//! serving Certificate gets the IP address 127.0.0.1 besides the manifest's Service names.

mod renewal;

use otel_injector::keys::{INJECT_JAVA, INJECTED_ANNOTATION};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::http::Method;
use renewal::{force_renewal, stream, until_sent};
use serde_json::{Value, json};
use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};

use crate::harness::*;
use crate::selfcert::{decoded, der, peer_certificate};
use crate::support::api;
use crate::support::certmanager::{self, CertManager, SecretVolume, condition};

const ID: &str = "certmanager";
const NAMESPACE: &str = "e2e-cert-manager";

async fn get(client: &kube::Client, path: &str) -> Value {
    let r = api::send(client, Method::GET, path, None)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 200, "GET {path}: {}", r.body);
    r.body
}

fn object_path(o: &Value) -> String {
    let plural = match o["kind"].as_str() {
        Some("Issuer") => "issuers",
        Some("Certificate") => "certificates",
        k => panic!("not a namespaced cert-manager kind: {k:?}"),
    };
    format!(
        "/apis/cert-manager.io/v1/namespaces/{}/{plural}/{}",
        o["metadata"]["namespace"].as_str().unwrap_or_default(),
        o["metadata"]["name"].as_str().unwrap_or_default()
    )
}

/// Polls `path` until its `Ready` condition is `True` (bounded); returns the object.
async fn until_ready(client: &kube::Client, path: &str, cm: &mut CertManager) -> Value {
    let t0 = Instant::now();
    loop {
        let o = get(client, path).await;
        if condition(&o, "Ready").is_some_and(|(s, _, _)| s == "True") {
            return o;
        }
        cm.check_alive().unwrap_or_else(|e| panic!("{e}"));
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "{path} not Ready within 60 s: {}",
            o["status"]
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Polls the Certificate at `path` until it is Ready at `revision` with no Issuing
/// condition (issuance finished); returns it.
async fn until_issued(
    client: &kube::Client,
    path: &str,
    revision: u64,
    cm: &mut CertManager,
) -> Value {
    let t0 = Instant::now();
    loop {
        let c = until_ready(client, path, cm).await;
        if c["status"]["revision"] == revision && condition(&c, "Issuing").is_none() {
            return c;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "{path}: not issued at revision {revision} within 60 s: {}",
            c["status"]
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// (serial as hex, DNS SANs, IP SANs, issuer, subject public key) of a DER certificate.
struct Leaf {
    serial: String,
    dns: Vec<String>,
    ips: Vec<String>,
    issuer: String,
    key: Vec<u8>,
}

fn leaf(der: &[u8]) -> Leaf {
    let (_, c) = X509Certificate::from_der(der).expect("X.509 certificate");
    let mut dns = Vec::new();
    let mut ips = Vec::new();
    let san = c
        .subject_alternative_name()
        .expect("SAN extension")
        .expect("a SAN extension");
    for n in &san.value.general_names {
        match n {
            GeneralName::DNSName(d) => dns.push((*d).to_owned()),
            GeneralName::IPAddress(ip) => ips.push(
                <[u8; 4]>::try_from(*ip)
                    .map(|a| std::net::Ipv4Addr::from(a).to_string())
                    .unwrap_or_else(|_| format!("{ip:?}")),
            ),
            other => panic!("unexpected SAN {other:?}"),
        }
    }
    Leaf {
        serial: c.raw_serial_as_string(),
        dns,
        ips,
        issuer: c.issuer().to_string(),
        key: c.public_key().raw.to_vec(),
    }
}

/// Checks that `leaf_der` is signed by the CA certificate `ca_der`, which is a CA.
fn assert_signed_by(leaf_der: &[u8], ca_der: &[u8]) {
    let (_, ca) = X509Certificate::from_der(ca_der).expect("CA certificate");
    let (_, l) = X509Certificate::from_der(leaf_der).expect("leaf certificate");
    assert!(ca.is_ca(), "ca.crt is not a CA: {}", ca.subject());
    assert_eq!(l.issuer(), ca.subject());
    l.verify_signature(Some(ca.public_key()))
        .expect("the leaf is signed by ca.crt");
}

#[tokio::test]
async fn cert_manager_issues_injects_the_ca_and_rotates_without_a_failed_admission() {
    let cp = cluster().await;
    let client = cp.client();
    let t0 = Instant::now();
    certmanager::install_crds(&client)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let version = certmanager::version().unwrap_or_else(|e| panic!("{e}"));
    let crds_after = t0.elapsed();
    // The chart's six CRDs, rendered with the module's version as the chart's.
    let crds = api::read_yaml_docs(&certmanager::dir().unwrap().join("crds.yaml"))
        .unwrap_or_else(|e| panic!("{e}"));
    let names: Vec<&str> = crds
        .iter()
        .map(|c| c["metadata"]["name"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        names,
        [
            "challenges.acme.cert-manager.io",
            "orders.acme.cert-manager.io",
            "certificaterequests.cert-manager.io",
            "certificates.cert-manager.io",
            "clusterissuers.cert-manager.io",
            "issuers.cert-manager.io"
        ]
    );
    for c in &crds {
        assert_eq!(
            c["metadata"]["labels"]["app.kubernetes.io/version"],
            version.as_str()
        );
        assert_eq!(c["metadata"]["annotations"], Value::Null, "crds.keep=false");
    }

    // The mode as shipped, in this test's namespace; the serving Certificate also names the
    // address the API server dials.
    let mut mode = certmanager::mode()
        .unwrap_or_else(|e| panic!("{e}"))
        .in_namespace(NAMESPACE);
    let serving = mode.serving_certificate().unwrap_or_else(|e| panic!("{e}"));
    let dns_names: Vec<String> = serde_json::from_value(serving["spec"]["dnsNames"].clone())
        .expect("the serving Certificate's dnsNames");
    let secret_name = serving["spec"]["secretName"].as_str().unwrap().to_owned();
    let serving_path = object_path(serving);
    mode.serving_certificate_mut().unwrap()["spec"]["ipAddresses"] = json!(["127.0.0.1"]);
    api::create_namespace(&client, NAMESPACE, &[], &[])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    for o in &mode.objects {
        api::apply_doc(&client, "otel-injector-e2e-cert-manager", o, false)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }

    // cert-manager issues: every Issuer and Certificate of the mode becomes Ready.
    let t1 = Instant::now();
    let mut cm = CertManager::start(&cp.kubeconfig)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    for o in &mode.objects {
        until_ready(&client, &object_path(o), &mut cm).await;
    }
    until_issued(&client, &serving_path, 1, &mut cm).await;
    let issued_after = t1.elapsed();

    // Its Secret holds the serving pair and the CA that signed it.
    let secret_path = format!("/api/v1/namespaces/{NAMESPACE}/secrets/{secret_name}");
    let secret = get(&client, &secret_path).await;
    assert_eq!(secret["type"], "kubernetes.io/tls");
    let mut keys: Vec<&str> = secret["data"]
        .as_object()
        .expect("data")
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort();
    assert_eq!(keys, ["ca.crt", "tls.crt", "tls.key"]);
    let ca_pem = decoded(&secret, "ca.crt");
    let ca_der = der(&ca_pem);
    let first_der = der(&decoded(&secret, "tls.crt"));
    assert_ne!(
        first_der, ca_der,
        "the serving certificate is not its own CA"
    );
    assert_signed_by(&first_der, &ca_der);
    let first = leaf(&first_der);
    assert_eq!(
        first.dns, dns_names,
        "DNS SANs: the manifest's Service names"
    );
    assert_eq!(first.ips, ["127.0.0.1"]);

    // The webhook serves the projected Secret; its configuration (failurePolicy Fail) carries
    // the mode's inject-ca-from annotation and an empty caBundle.
    let volume_dir = tempfile::Builder::new()
        .prefix("otel-injector-e2e-secret-volume.")
        .tempdir()
        .expect("temp dir");
    let mut volume = SecretVolume::new(&volume_dir.path().join("tls")).unwrap();
    volume.project(&secret).unwrap_or_else(|e| panic!("{e}"));
    let env = Env::start_with(
        ID,
        Options {
            failure_policy: "Fail",
            register_ca_bundle: false,
            tls_dir: Some(volume.dir.clone()),
            configuration_annotations: mode.webhook_annotations.clone(),
            args: ["--tls-reload-interval", "500ms"]
                .map(String::from)
                .to_vec(),
            ..Options::default()
        },
    )
    .await;
    let config_path = format!(
        "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{}",
        env.configuration
    );

    // The CA injector writes ca.crt into every entry's caBundle.
    let ca_b64 = api::base64_of(&ca_pem);
    let t2 = Instant::now();
    loop {
        let config = get(&client, &config_path).await;
        let entries = config["webhooks"].as_array().expect("webhooks");
        if entries
            .iter()
            .all(|w| w["clientConfig"]["caBundle"] == ca_b64.as_str())
        {
            break;
        }
        cm.check_alive().unwrap_or_else(|e| panic!("{e}"));
        assert!(
            t2.elapsed() < Duration::from_secs(30),
            "caBundle not injected within 30 s: {config}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let injected_after = t2.elapsed();

    // The API server trusts the webhook once it has seen the caBundle: until then a marker
    // dry-run fails (failurePolicy Fail), after it every call succeeds.
    let ns = env.namespace("app", &[]).await;
    let t3 = Instant::now();
    let before = env.requests().await.total();
    loop {
        let marker = pod("marker", &[(INJECT_JAVA, "false")]);
        let r = api::create_pod(&client, &ns, &marker, true)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        if r.status == 201 && env.requests().await.total() > before {
            break;
        }
        assert!(
            t3.elapsed() < Duration::from_secs(30),
            "the API server did not call the webhook within 30 s: HTTP {}: {}",
            r.status,
            r.message()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let trusted_after = t3.elapsed();
    env.instrumentation(&ns, "java", endpoint_spec("http://collector:4318"))
        .await;
    let p = pod("first", &[(INJECT_JAVA, "true")]);
    env.until_dry_run(&ns, &p, "injection", |r| is_injected(&r.body))
        .await;
    env.create(&ns, &p).await;
    let stored = env.stored(&ns, "first").await;
    assert!(is_injected(&stored), "not injected: {stored}");
    assert_eq!(
        stored["metadata"]["annotations"][INJECTED_ANNOTATION],
        "java"
    );
    assert_eq!(
        peer_certificate(env.webhook.addr, &ca_pem).await,
        first_der,
        "served: the Secret's certificate"
    );

    // Renewal while pods are created: cmctl renew's way, the Issuing condition on the
    // Certificate's status.
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicUsize::new(0));
    let pods = tokio::spawn(stream(
        client.clone(),
        ns.clone(),
        stop.clone(),
        sent.clone(),
    ));
    until_sent(&sent, 10).await;
    force_renewal(&client, &serving_path).await;
    let t4 = Instant::now();
    let renewed = loop {
        let s = get(&client, &secret_path).await;
        if der(&decoded(&s, "tls.crt")) != first_der {
            break s;
        }
        cm.check_alive().unwrap_or_else(|e| panic!("{e}"));
        assert!(
            t4.elapsed() < Duration::from_secs(60),
            "the Secret was not renewed within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let renewed_after = t4.elapsed();
    let second_der = der(&decoded(&renewed, "tls.crt"));
    let second = leaf(&second_der);
    assert_ne!(second.serial, first.serial, "a new serial");
    assert_ne!(second.key, first.key, "rotationPolicy Always: a new key");
    assert_eq!((&second.dns, &second.ips), (&first.dns, &first.ips));
    assert_eq!(second.issuer, first.issuer);
    assert_eq!(decoded(&renewed, "ca.crt"), ca_pem, "the CA is unchanged");
    assert_signed_by(&second_der, &ca_der);
    until_issued(&client, &serving_path, 2, &mut cm).await;

    // The kubelet updates a Secret volume some time after the Secret: until then the old
    // certificate is served, still trusted through the unchanged caBundle.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(peer_certificate(env.webhook.addr, &ca_pem).await, first_der);
    volume.project(&renewed).unwrap_or_else(|e| panic!("{e}"));
    let projected = Instant::now();
    loop {
        if peer_certificate(env.webhook.addr, &ca_pem).await == second_der {
            break;
        }
        assert!(
            projected.elapsed() < Duration::from_secs(10),
            "the renewed certificate not served within 10 s:\n{}",
            env.webhook.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let served = Instant::now();
    let swapped_after = served - projected;
    until_sent(&sent, sent.load(Ordering::Relaxed) + 20).await;
    stop.store(true, Ordering::Relaxed);
    let admissions = pods.await.expect("the pod stream");

    // Zero failed admissions, pods on both sides of the swap.
    let failed: Vec<String> = admissions
        .iter()
        .enumerate()
        .filter(|(_, a)| a.status != 201 || !a.injected)
        .map(|(i, a)| {
            format!(
                "stream-{i}: HTTP {} injected={} {}",
                a.status, a.injected, a.message
            )
        })
        .collect();
    assert!(failed.is_empty(), "failed admissions: {failed:?}");
    let old_cert = admissions.iter().filter(|a| a.at < projected).count();
    let new_cert = admissions.iter().filter(|a| a.at > served).count();
    assert!(
        old_cert >= 10 && new_cert >= 19,
        "{old_cert} pods before the swap, {new_cert} after"
    );
    let config = get(&client, &config_path).await;
    for w in config["webhooks"].as_array().expect("webhooks") {
        assert_eq!(
            w["clientConfig"]["caBundle"],
            ca_b64.as_str(),
            "caBundle kept"
        );
    }
    let metrics = env.webhook.metrics().await;
    assert!(
        metrics
            .lines()
            .any(|l| l == "otel_injector_certificate_reloads_total{result=\"success\"} 1"),
        "one certificate swap counted: {metrics}"
    );
    cm.check_alive().unwrap_or_else(|e| panic!("{e}"));
    let _ = api::delete_doc(&client, &config).await;
    eprintln!(
        "[e2e] certmanager: cert-manager {version}; CRDs installed in {crds_after:?}; \
         Issuers and Certificates Ready {issued_after:?} after start; caBundle injected \
         {injected_after:?} after registration; API server called the webhook \
         {trusted_after:?} later; forced renewal: new Secret in {renewed_after:?} (serial \
         {} -> {}); renewed certificate served {swapped_after:?} after projection; {} pods \
         created during the rotation ({old_cert} before the swap, {new_cert} after), 0 failed; \
         test {:?}",
        first.serial,
        second.serial,
        admissions.len(),
        t0.elapsed()
    );
}
