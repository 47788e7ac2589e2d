//! Shared helpers for the process-level tests: spawn the real `otel-injector serve` binary
//! with generated certificates in a temp dir, talk to it over real TLS (tokio-rustls,
//! ALPN http/1.1) with hand-written HTTP/1.1, and read its admin endpoints.
//!
//! Each test binary uses a different part of this module.

pub mod router;
pub mod text;

use std::fmt::Write as _;
use std::future::Future;
use std::io;
use std::net::{SocketAddr, TcpListener as StdListener};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use otel_injector::certs::{self, DevCerts};
use rustls::client::Resumption;
use rustls::{ClientConfig, RootCertStore};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use serde_json::Value;
use tokio::io::{
    AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader,
};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

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

/// A TLS client trusting `ca_pems`, offering ALPN `http/1.1`, without session resumption
/// (as the API server's Go client: every connection does a full handshake).
pub fn connector(ca_pems: &[&str]) -> TlsConnector {
    let mut roots = RootCertStore::empty();
    for pem in ca_pems {
        roots
            .add(CertificateDer::from_pem_slice(pem.as_bytes()).expect("CA PEM"))
            .expect("add CA");
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    cfg.resumption = Resumption::disabled();
    TlsConnector::from(Arc::new(cfg))
}

// === HTTP/1.1 by hand ===

/// One HTTP response.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("response body is not JSON ({e}): {}", self.text()))
    }
}

fn bad(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

async fn read_line<R: AsyncBufRead + Unpin>(r: &mut R) -> io::Result<String> {
    let mut line = String::new();
    if r.read_line(&mut line).await? == 0 {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    Ok(line.trim_end_matches(['\r', '\n']).to_owned())
}

/// Reads one response: status line, headers, then a `Content-Length`, chunked or
/// until-close body. EOF before the status line is `UnexpectedEof`.
pub async fn read_response<R: AsyncBufRead + Unpin>(r: &mut R) -> io::Result<Response> {
    let status_line = read_line(r).await?;
    let status = status_line
        .strip_prefix("HTTP/1.1 ")
        .and_then(|s| s.get(..3))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad(format!("bad status line {status_line:?}")))?;
    let mut headers = Vec::new();
    loop {
        let line = read_line(r).await?;
        if line.is_empty() {
            break;
        }
        let (k, v) = line
            .split_once(':')
            .ok_or_else(|| bad(format!("bad header {line:?}")))?;
        headers.push((k.trim().to_owned(), v.trim().to_owned()));
    }
    let mut resp = Response {
        status,
        headers,
        body: Vec::new(),
    };
    if let Some(len) = resp.header("content-length") {
        let len: usize = len
            .parse()
            .map_err(|_| bad(format!("content-length {len}")))?;
        resp.body.resize(len, 0);
        r.read_exact(&mut resp.body).await?;
    } else if resp
        .header("transfer-encoding")
        .is_some_and(|v| v.eq_ignore_ascii_case("chunked"))
    {
        loop {
            let size = read_line(r).await?;
            let size = usize::from_str_radix(size.split(';').next().unwrap_or("").trim(), 16)
                .map_err(|_| bad(format!("chunk size {size:?}")))?;
            if size == 0 {
                while !read_line(r).await?.is_empty() {}
                break;
            }
            let start = resp.body.len();
            resp.body.resize(start + size, 0);
            r.read_exact(&mut resp.body[start..]).await?;
            read_line(r).await?;
        }
    } else {
        r.read_to_end(&mut resp.body).await?;
    }
    Ok(resp)
}

/// A POST with a `Content-Length` body; `close` asks the server to close afterwards.
pub fn post(path: &str, body: &[u8], close: bool) -> Vec<u8> {
    let mut out = head(
        "POST",
        path,
        &[
            ("Content-Type", "application/json"),
            ("Content-Length", &body.len().to_string()),
            ("Connection", if close { "close" } else { "keep-alive" }),
        ],
    );
    out.extend_from_slice(body);
    out
}

/// A request head (request line, Host, the given headers, blank line), no body.
pub fn head(method: &str, path: &str, headers: &[(&str, &str)]) -> Vec<u8> {
    let mut s = format!("{method} {path} HTTP/1.1\r\nHost: otel-injector.test\r\n");
    for (k, v) in headers {
        let _ = write!(s, "{k}: {v}\r\n");
    }
    s.push_str("\r\n");
    s.into_bytes()
}

/// One chunk of a chunked body.
pub fn chunk(data: &[u8]) -> Vec<u8> {
    let mut out = format!("{:x}\r\n", data.len()).into_bytes();
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
    out
}

/// A connection with buffered reads; writes go straight to the stream.
pub struct Conn<S> {
    io: BufReader<S>,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Conn<S> {
    pub fn new(stream: S) -> Self {
        Conn {
            io: BufReader::new(stream),
        }
    }

    pub async fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        let w = self.io.get_mut();
        w.write_all(bytes).await?;
        w.flush().await
    }

    pub async fn response(&mut self) -> io::Result<Response> {
        read_response(&mut self.io).await
    }

    pub async fn roundtrip(&mut self, request: &[u8]) -> io::Result<Response> {
        self.send(request).await?;
        self.response().await
    }

    /// Reads whatever comes next: `Ok(0)` is an orderly close.
    pub async fn read_some(&mut self) -> io::Result<usize> {
        let mut buf = [0u8; 1024];
        self.io.read(&mut buf).await
    }

    /// Writes `parts` one after another while reading the response, and returns it as soon
    /// as it is complete (the server may answer, and close, before the body is all sent).
    pub async fn send_while_reading(self, parts: Vec<Vec<u8>>) -> io::Result<Response> {
        let (rd, mut wr) = tokio::io::split(self.io);
        let mut rd = BufReader::new(rd);
        let writer = async move {
            for p in parts {
                if wr.write_all(&p).await.is_err() || wr.flush().await.is_err() {
                    break;
                }
            }
            // Keep the write half open: dropping it would not close a split stream anyway.
            std::future::pending::<()>().await
        };
        tokio::select! {
            r = read_response(&mut rd) => r,
            _ = writer => unreachable!(),
        }
    }
}

impl Conn<TlsStream<TcpStream>> {
    /// The DER of the certificate the server presented.
    pub fn peer_cert(&self) -> Vec<u8> {
        let (_, tls) = self.io.get_ref().get_ref();
        tls.peer_certificates()
            .and_then(|c| c.first())
            .expect("server presented a certificate")
            .as_ref()
            .to_vec()
    }

    pub fn alpn(&self) -> Option<Vec<u8>> {
        let (_, tls) = self.io.get_ref().get_ref();
        tls.alpn_protocol().map(<[u8]>::to_vec)
    }
}

/// Opens a TLS connection to `addr` (server name 127.0.0.1).
pub async fn tls_connect(
    addr: SocketAddr,
    connector: &TlsConnector,
) -> io::Result<Conn<TlsStream<TcpStream>>> {
    let tcp = TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    let name = ServerName::IpAddress(addr.ip().into());
    Ok(Conn::new(connector.connect(name, tcp).await?))
}

/// A plain-HTTP GET with `Connection: close` on a fresh connection.
pub async fn http_get(addr: SocketAddr, path: &str) -> io::Result<Response> {
    let tcp = TcpStream::connect(addr).await?;
    let mut c = Conn::new(tcp);
    c.roundtrip(&head("GET", path, &[("Connection", "close")]))
        .await
}

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

/// How to start the server.
pub struct Builder {
    args: Vec<String>,
    instrumentations: bool,
    /// The instrumentation file is a FIFO that the test writes [`INSTRUMENTATIONS`] into.
    fifo: bool,
    kubeconfig: Option<String>,
}

/// A running `otel-injector serve`, killed (and reaped) on drop. Its log is printed when
/// the test fails.
pub struct Server {
    child: Child,
    pub dir: tempfile::TempDir,
    pub tls_dir: PathBuf,
    pub certs: DevCerts,
    pub webhook: SocketAddr,
    pub admin: SocketAddr,
    pub connector: TlsConnector,
    /// When the process was spawned.
    pub spawned_at: Instant,
    /// From spawn to the first `/livez` answer (`start` also waits for `/readyz` when the
    /// server reads an Instrumentation file).
    pub up_after: Duration,
    log: PathBuf,
}

impl Server {
    pub fn builder() -> Builder {
        Builder {
            args: Vec::new(),
            instrumentations: true,
            fifo: false,
            kubeconfig: None,
        }
    }

    /// A server with the default settings and [`INSTRUMENTATIONS`].
    pub async fn start() -> Server {
        Self::builder().start().await
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends a signal (`TERM`, `INT`, …) with kill(1).
    pub fn signal(&self, sig: &str) {
        let st = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.pid().to_string())
            .status()
            .expect("run kill");
        assert!(st.success(), "kill -{sig} {} failed", self.pid());
    }

    /// Waits for the process to exit, polling; `None` if it is still running at `limit`.
    pub async fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let until = Instant::now() + limit;
        loop {
            if let Some(st) = self.child.try_wait().expect("try_wait") {
                return Some(st);
            }
            if Instant::now() >= until {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The log once it holds `needle`, or as it is after `within` (lines are batched).
    pub async fn log_with(&self, needle: &str, within: std::time::Duration) -> String {
        text::once_it_holds(|| self.log(), needle, within).await
    }

    /// The `--instrumentation-file` path (when the builder wrote one).
    pub fn instrumentation_file(&self) -> PathBuf {
        self.dir.path().join("instrumentations.yaml")
    }

    pub async fn connect(&self) -> Conn<TlsStream<TcpStream>> {
        within(
            IO_TIMEOUT,
            "TLS connect",
            tls_connect(self.webhook, &self.connector),
        )
        .await
        .expect("TLS connection to the webhook")
    }

    /// POSTs `body` to `path` on a fresh connection.
    pub async fn post_raw(&self, path: &str, body: &[u8]) -> Response {
        let mut c = self.connect().await;
        within(IO_TIMEOUT, "POST", c.roundtrip(&post(path, body, true)))
            .await
            .expect("webhook response")
    }

    /// Sends a review to `/mutate-v1-pod?timeout=10s` on a fresh connection.
    pub async fn review(&self, review: &Value) -> Response {
        self.post_raw(MUTATE, &serde_json::to_vec(review).unwrap())
            .await
    }

    pub async fn admin_get(&self, path: &str) -> Response {
        within(IO_TIMEOUT, path, http_get(self.admin, path))
            .await
            .unwrap_or_else(|e| panic!("GET {path} on the admin port: {e}"))
    }

    pub async fn metrics(&self) -> String {
        let r = self.admin_get("/metrics").await;
        assert_eq!(r.status, 200);
        r.text()
    }

    /// The current value of a series, 0 when absent.
    pub async fn metric(&self, series: &str) -> f64 {
        metric(&self.metrics().await, series).unwrap_or(0.0)
    }

    /// Polls `series` until it reaches `want`; panics after `limit`.
    pub async fn wait_metric(&self, series: &str, want: f64, limit: Duration) {
        let until = Instant::now() + limit;
        loop {
            let v = self.metric(series).await;
            if v == want {
                return;
            }
            assert!(
                Instant::now() < until,
                "{series} is {v}, expected {want} within {limit:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let log = self.log();
            let tail = &log[log.len().saturating_sub(20_000)..];
            eprintln!(
                "----- otel-injector log (pid {}) -----\n{tail}",
                self.child.id()
            );
        }
    }
}

impl Builder {
    /// Extra command line arguments after `serve`.
    pub fn args<I: IntoIterator<Item = S>, S: Into<String>>(mut self, args: I) -> Self {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Start without `--instrumentation-file` (the server then watches a cluster).
    pub fn without_instrumentation_file(mut self) -> Self {
        self.instrumentations = false;
        self
    }

    /// Make `--instrumentation-file` a named pipe (`Server::instrumentation_file`): the server
    /// blocks reading it until the test writes it.
    pub fn instrumentation_fifo(mut self) -> Self {
        self.fifo = true;
        self
    }

    /// Write this kubeconfig and pass `--kubeconfig`.
    pub fn kubeconfig(mut self, yaml: String) -> Self {
        self.kubeconfig = Some(yaml);
        self
    }

    /// Spawns the server and waits until its admin port answers `/livez`.
    pub async fn start(self) -> Server {
        let dir = tempfile::tempdir().expect("temp dir");
        let tls_dir = dir.path().join("tls");
        let certs = certs::generate("otel-injector test CA", &hosts()).expect("certificates");
        certs.write_to(&tls_dir).expect("write certificates");
        let mut args: Vec<String> = vec![
            "serve".into(),
            "--tls-cert-file".into(),
            tls_dir.join("tls.crt").display().to_string(),
            "--tls-key-file".into(),
            tls_dir.join("tls.key").display().to_string(),
            "--log-format".into(),
            "plain".into(),
            "--log-level".into(),
            "info".into(),
        ];
        if self.instrumentations {
            let path = dir.path().join("instrumentations.yaml");
            if self.fifo {
                let st = Command::new("mkfifo").arg(&path).status().expect("mkfifo");
                assert!(st.success(), "mkfifo {}", path.display());
            } else {
                std::fs::write(&path, INSTRUMENTATIONS).unwrap();
            }
            args.extend(["--instrumentation-file".into(), path.display().to_string()]);
        }
        if let Some(kc) = &self.kubeconfig {
            let path = dir.path().join("kubeconfig");
            std::fs::write(&path, kc).unwrap();
            args.extend(["--kubeconfig".into(), path.display().to_string()]);
        }
        args.extend(self.args);
        let log = dir.path().join("server.log");
        let connector = connector(&[&certs.ca_cert]);

        // A free port can be taken between probing and binding: retry on a bind failure.
        for attempt in 1..=5 {
            let webhook: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
            let admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
            let out = std::fs::File::create(&log).unwrap();
            let mut cmd = Command::new(server_binary());
            for (k, _) in std::env::vars_os() {
                if k.to_string_lossy().starts_with("OTEL_INJECTOR_") {
                    cmd.env_remove(&k);
                }
            }
            cmd.args(&args)
                .arg("--webhook-addr")
                .arg(webhook.to_string())
                .arg("--admin-addr")
                .arg(admin.to_string())
                .env_remove("KUBECONFIG")
                .stdin(Stdio::null())
                .stdout(out.try_clone().unwrap())
                .stderr(out);
            let spawned_at = Instant::now();
            let mut child = KillOnDrop(Some(cmd.spawn().expect("spawn otel-injector")));
            let read_log = || std::fs::read_to_string(&log).unwrap_or_default();
            let up = wait_up(child.0.as_mut().unwrap(), admin, "/livez").await;
            let up_after = spawned_at.elapsed();
            // With an Instrumentation file the server is ready once it has read it (right
            // after binding); the tests send their reviews after that.
            let up = match up {
                Ok(()) if self.instrumentations && !self.fifo => {
                    wait_up(child.0.as_mut().unwrap(), admin, "/readyz").await
                }
                up => up,
            };
            match up {
                Ok(()) => {
                    return Server {
                        child: child.0.take().unwrap(),
                        dir,
                        tls_dir,
                        certs,
                        webhook,
                        admin,
                        connector,
                        spawned_at,
                        up_after,
                        log,
                    };
                }
                Err(Some(st)) if attempt < 5 && read_log().contains("failed to bind") => {
                    eprintln!("otel-injector exited ({st}) on a port clash; retrying");
                }
                Err(Some(st)) => panic!("otel-injector exited early ({st}):\n{}", read_log()),
                Err(None) => panic!("otel-injector did not answer /livez:\n{}", read_log()),
            }
        }
        unreachable!("five port clashes in a row")
    }
}

/// The binary to spawn: this build's, or the one named by `TEST_SERVER_BIN` (to measure a
/// release build: `TEST_SERVER_BIN=target/release/otel-injector cargo test --test hostile`).
fn server_binary() -> PathBuf {
    std::env::var_os("TEST_SERVER_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_otel-injector")))
}

/// Kills a child that is not (yet) owned by a [`Server`].
struct KillOnDrop(Option<Child>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(c) = &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Polls `/livez` until it answers 200. `Err(Some(status))` if the process exited,
/// `Err(None)` if it is still not answering after a generous bound.
async fn wait_up(
    child: &mut Child,
    admin: SocketAddr,
    path: &str,
) -> Result<(), Option<ExitStatus>> {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(st) = child.try_wait().expect("try_wait") {
            return Err(Some(st));
        }
        let probe = tokio::time::timeout(Duration::from_secs(2), http_get(admin, path));
        if let Ok(Ok(r)) = probe.await
            && r.status == 200
        {
            return Ok(());
        }
        if Instant::now() >= until {
            return Err(None);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
