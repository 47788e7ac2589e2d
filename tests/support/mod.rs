//! Shared helpers for the process-level tests: spawn the real `otel-injector serve` binary
//! with generated certificates in a temp dir, talk to it over real TLS (tokio-rustls,
//! ALPN http/1.1) with hand-written HTTP/1.1, and read its admin endpoints.
//!
//! Each test binary uses a different part of this module.

mod client;
mod server;

pub use client::{
    Conn, Response, chunk, connector, connector_as, head, http_get, post, tls_connect,
};
pub use server::Server;

pub mod router;
pub mod text;

use std::future::Future;
use std::net::TcpListener as StdListener;
use std::time::Duration;

use base64::Engine as _;
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use serde_json::Value;

/// The webhook path as the API server calls it (it always appends `?timeout=`).
pub const MUTATE: &str = "/mutate-v1-pod?timeout=10s";
/// The server's body limit (3 MiB).
pub const MAX_BODY: usize = 3 * 1024 * 1024;
/// Bound for any single exchange that is not itself the point of a test.
pub const IO_TIMEOUT: Duration = Duration::from_secs(30);

/// Instrumentations served from `--instrumentation-file`: exactly one in `shop`, two in
/// `multi`, none anywhere else.
pub const INSTRUMENTATIONS: &str = r#"apiVersion: opentelemetry.io/v1alpha1
kind: Instrumentation
metadata:
  name: java
  namespace: shop
spec:
  exporter:
    endpoint: http://otel-collector.observability.svc:4318
  propagators: [tracecontext, baggage]
  sampler:
    type: parentbased_traceidratio
    argument: "0.25"
  java:
    image: ghcr.io/open-telemetry/opentelemetry-operator/autoinstrumentation-java:2.30.0
---
apiVersion: opentelemetry.io/v1alpha1
kind: Instrumentation
metadata:
  name: java-a
  namespace: multi
spec:
  exporter:
    endpoint: http://collector-a.multi.svc:4318
---
apiVersion: opentelemetry.io/v1alpha1
kind: Instrumentation
metadata:
  name: java-b
  namespace: multi
spec:
  exporter:
    endpoint: http://collector-b.multi.svc:4318
"#;

/// Tests in one binary run one at a time: several are about time bounds, and the machine
/// has two cores shared with the server processes.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

pub async fn serial() -> tokio::sync::MutexGuard<'static, ()> {
    SERIAL.lock().await
}

/// Awaits `fut`, failing the test if it takes longer than `limit`.
pub async fn within<T>(limit: Duration, what: &str, fut: impl Future<Output = T>) -> T {
    match tokio::time::timeout(limit, fut).await {
        Ok(v) => v,
        Err(_) => panic!("{what}: no result within {limit:?}"),
    }
}

/// A fixture from `tests/data/`.
pub fn fixture(name: &str) -> Value {
    let path = format!("{}/tests/data/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The request uid of a review.
pub fn uid_of(review: &Value) -> &str {
    review["request"]["uid"]
        .as_str()
        .expect("fixture has a uid")
}

/// Host names of the serving certificate.
pub fn hosts() -> Vec<String> {
    vec!["127.0.0.1".to_owned(), "localhost".to_owned()]
}

/// Raises this process's soft open-file limit (inherited by the servers it spawns) so that
/// it holds `need` descriptors, whatever the shell set; fails the test if the hard limit
/// cannot. Returns the soft limit now in force.
pub fn raise_fd_limit(need: u64) -> u64 {
    let soft = otel_injector::server::fds::raise_nofile_limit()
        .expect("raise the open-file limit")
        .unwrap_or(u64::MAX);
    assert!(
        soft >= need,
        "this test needs {need} open files; the hard limit (ulimit -Hn) is {soft}"
    );
    soft
}

/// A `kB` field of `/proc/<pid>/status` (`VmRSS`, `VmHWM`), in bytes.
pub fn proc_status_bytes(pid: u32, field: &str) -> u64 {
    let path = format!("/proc/{pid}/status");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let kb: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().strip_suffix(" kB"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in {path}"));
    kb * 1024
}

/// A free local port (it may be taken again before the server binds it; `start` retries).
pub fn free_port() -> u16 {
    StdListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind an ephemeral port")
        .port()
}

/// The DER of the first certificate in a PEM string.
pub fn cert_der(pem: &str) -> Vec<u8> {
    CertificateDer::from_pem_slice(pem.as_bytes())
        .expect("PEM certificate")
        .as_ref()
        .to_vec()
}

// === HTTP/1.1 by hand ===

// === AdmissionReview responses ===

/// The parts of an AdmissionReview response the tests check.
#[derive(Debug)]
pub struct Review {
    pub uid: String,
    pub allowed: bool,
    pub patch_type: Option<String>,
    /// The decoded JSON patch.
    pub patch: Option<Value>,
    pub warnings: Vec<String>,
}

impl Review {
    /// The `otel-injector/status` text of a patch that records only the outcome of a pod that
    /// asked and got nothing (and has labels, as the fixtures do); panics on any other patch.
    pub fn status_only(&self) -> String {
        let patch = self.patch.as_ref().expect("a patch");
        let ops = patch.as_array().expect("a list");
        assert_eq!(ops.len(), 2, "{patch}");
        assert_eq!(
            ops[1],
            serde_json::json!({"op": "add", "path": "/metadata/labels/otel-injector~1injected",
                "value": "false"}),
            "{patch}"
        );
        assert_eq!(ops[0]["op"], "add", "{patch}");
        assert_eq!(
            ops[0]["path"], "/metadata/annotations/otel-injector~1status",
            "{patch}"
        );
        assert_eq!(self.patch_type.as_deref(), Some("JSONPatch"));
        ops[0]["value"].as_str().expect("a string").to_owned()
    }
}

/// Checks an HTTP 200 AdmissionReview response envelope and decodes it.
pub fn review_of(resp: &Response) -> Review {
    assert_eq!(
        resp.status,
        200,
        "review answered with {resp:?}: {}",
        resp.text()
    );
    assert_eq!(resp.header("content-type"), Some("application/json"));
    let v = resp.json();
    assert_eq!(v["apiVersion"], "admission.k8s.io/v1", "{v}");
    assert_eq!(v["kind"], "AdmissionReview", "{v}");
    let r = &v["response"];
    let patch = r["patch"].as_str().map(|p| {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(p)
            .expect("patch is base64");
        serde_json::from_slice(&bytes).expect("patch is JSON")
    });
    Review {
        uid: r["uid"].as_str().expect("response.uid").to_owned(),
        allowed: r["allowed"].as_bool().expect("response.allowed"),
        patch_type: r["patchType"].as_str().map(str::to_owned),
        patch,
        warnings: r["warnings"]
            .as_array()
            .map(|w| w.iter().map(|s| s.as_str().unwrap().to_owned()).collect())
            .unwrap_or_default(),
    }
}

/// The value of one series (`name{labels}`, exactly as exposed) in a metrics exposition.
pub fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        l.strip_prefix(series)
            .and_then(|rest| rest.strip_prefix(' '))
            .and_then(|v| v.trim().parse().ok())
    })
}

// === the server process ===
