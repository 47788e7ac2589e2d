//! The real `otel-injector serve` as its own process, watching the e2e control plane, with
//! a serving certificate for 127.0.0.1 from `otel_injector::certs`, under a watchdog.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use otel_injector::certs::{self, DevCerts};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::process::{Janitor, Supervised, free_port};

/// A running webhook. Dropping it kills the process; when a test panics, its log is printed.
pub struct Webhook {
    proc: Supervised,
    /// The harness's CA and certificate for 127.0.0.1 (served unless started with a TLS dir).
    pub certs: DevCerts,
    pub addr: SocketAddr,
    pub admin: SocketAddr,
    /// From spawn to the first `/livez` answer.
    pub up_after: Duration,
    _dir: tempfile::TempDir,
    /// Removes the dir should this process die without running destructors.
    _janitor: Janitor,
}

/// `otel_injector_admission_requests_total` by outcome.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Requests {
    pub patched: f64,
    pub unchanged: f64,
    pub other: f64,
}

impl Requests {
    pub fn total(&self) -> f64 {
        self.patched + self.unchanged + self.other
    }
}

impl Webhook {
    /// Starts `binary serve --kubeconfig KUBECONFIG` on free ports and waits for `/livez`.
    pub async fn start(binary: &Path, kubeconfig: &Path) -> Result<Webhook, String> {
        Self::start_with(binary, kubeconfig, &[]).await
    }

    /// [`Webhook::start`] with further `serve` flags (e.g. `--enabled-languages …`).
    pub async fn start_with(
        binary: &Path,
        kubeconfig: &Path,
        extra_args: &[String],
    ) -> Result<Webhook, String> {
        Self::start_serving(binary, kubeconfig, extra_args, None).await
    }

    /// [`Webhook::start_with`]; with `tls_dir`, the webhook serves `tls_dir/tls.crt` and
    /// `tls_dir/tls.key` (e.g. a projected Secret) instead of the harness's certificate,
    /// which [`Webhook::certs`] then still holds but nothing serves.
    pub async fn start_serving(
        binary: &Path,
        kubeconfig: &Path,
        extra_args: &[String],
        tls_dir: Option<&Path>,
    ) -> Result<Webhook, String> {
        super::tools::install_crypto_provider();
        let dir = tempfile::Builder::new()
            .prefix("otel-injector-e2e-webhook.")
            .tempdir()
            .map_err(|e| format!("temp dir: {e}"))?;
        let janitor = Janitor::watch(dir.path()).map_err(|e| format!("janitor: {e}"))?;
        let own_tls = dir.path().join("tls");
        let tls = tls_dir.unwrap_or(&own_tls);
        let certs = certs::generate(
            "otel-injector e2e webhook CA",
            &["127.0.0.1".to_owned(), "localhost".to_owned()],
        )
        .map_err(|e| e.to_string())?;
        certs.write_to(&own_tls).map_err(|e| e.to_string())?;
        let log = dir.path().join("otel-injector.log");
        for attempt in 1..=3 {
            let addr: SocketAddr = ([127, 0, 0, 1], free_port()).into();
            let admin: SocketAddr = ([127, 0, 0, 1], free_port()).into();
            let mut args: Vec<String> = vec![
                "serve".into(),
                "--kubeconfig".into(),
                kubeconfig.display().to_string(),
                "--webhook-addr".into(),
                addr.to_string(),
                "--admin-addr".into(),
                admin.to_string(),
                "--tls-cert-file".into(),
                tls.join("tls.crt").display().to_string(),
                "--tls-key-file".into(),
                tls.join("tls.key").display().to_string(),
                "--log-level".into(),
                "info".into(),
            ];
            // No drain delay, and 5 s for the API server's pooled connections to end,
            // unless a test asks otherwise: a test webhook has nobody to drain for.
            if !extra_args.iter().any(|a| a.starts_with("--shutdown-delay")) {
                args.extend(["--shutdown-delay".into(), "0s".into()]);
            }
            if !extra_args
                .iter()
                .any(|a| a.starts_with("--shutdown-timeout"))
            {
                args.extend(["--shutdown-timeout".into(), "5s".into()]);
            }
            // The status controller writes the status of every Instrumentation of the
            // cluster: off unless a test asks for it.
            if !extra_args.iter().any(|a| a.starts_with("--status=")) {
                args.push("--status=false".into());
            }
            args.extend(extra_args.iter().cloned());
            let spawned = Instant::now();
            let mut proc = Supervised::spawn("otel-injector", binary, &args, &log, |cmd| {
                for (k, _) in std::env::vars_os() {
                    if k.to_string_lossy().starts_with("OTEL_INJECTOR_") {
                        cmd.env_remove(&k);
                    }
                }
                cmd.env_remove("KUBECONFIG").env("NO_COLOR", "1");
            })
            .map_err(|e| format!("spawn {}: {e}", binary.display()))?;
            let until = Instant::now() + Duration::from_secs(30);
            loop {
                if let Some(st) = proc.exited() {
                    let text = proc.log_text();
                    if attempt < 3 && text.contains("failed to bind") {
                        break;
                    }
                    return Err(format!("otel-injector exited early ({st}):\n{text}"));
                }
                if let Ok((200, _)) = http_get(admin, "/livez").await {
                    return Ok(Webhook {
                        proc,
                        certs,
                        addr,
                        admin,
                        up_after: spawned.elapsed(),
                        _dir: dir,
                        _janitor: janitor,
                    });
                }
                if Instant::now() > until {
                    return Err(format!(
                        "otel-injector did not answer /livez in 30 s:\n{}",
                        proc.log_text()
                    ));
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        Err("otel-injector: three port clashes in a row".into())
    }

    /// `https://127.0.0.1:PORT/mutate-v1-pod`.
    pub fn url(&self) -> String {
        format!("https://{}/mutate-v1-pod", self.addr)
    }

    /// Where the API server sends this process's ConversionReviews.
    pub fn conversion_url(&self) -> String {
        format!("https://{}/convert", self.addr)
    }

    /// Waits for `/readyz` 200 (the Instrumentation and Namespace caches have synced).
    pub async fn wait_ready(&mut self, limit: Duration) -> Result<Duration, String> {
        let t0 = Instant::now();
        loop {
            if let Some(st) = self.proc.exited() {
                return Err(format!("otel-injector exited ({st}):\n{}", self.log()));
            }
            if let Ok((200, _)) = http_get(self.admin, "/readyz").await {
                return Ok(t0.elapsed());
            }
            if t0.elapsed() > limit {
                let r = http_get(self.admin, "/readyz").await;
                return Err(format!(
                    "otel-injector /readyz not 200 within {limit:?} ({r:?}):\n{}",
                    self.log()
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The `/metrics` text.
    pub async fn metrics(&self) -> String {
        match http_get(self.admin, "/metrics").await {
            Ok((200, body)) => body,
            r => panic!("GET /metrics: {r:?}\n{}", self.log()),
        }
    }

    /// The admission request counters.
    pub async fn requests(&self) -> Requests {
        let text = self.metrics().await;
        let mut r = Requests::default();
        for line in text.lines() {
            let Some(rest) = line.strip_prefix("otel_injector_admission_requests_total{") else {
                continue;
            };
            let Some((labels, value)) = rest.split_once("} ") else {
                continue;
            };
            let v: f64 = value.trim().parse().unwrap_or(0.0);
            match labels {
                l if l.contains("outcome=\"patched\"") => r.patched += v,
                l if l.contains("outcome=\"unchanged\"") => r.unchanged += v,
                _ => r.other += v,
            }
        }
        r
    }

    /// POSTs `body` to `/mutate-v1-pod` over TLS (trusting the test CA), as the API server
    /// would, with `Connection: close`: (status, JSON body). Bounded to 5 s.
    pub async fn post_review(
        &self,
        body: &serde_json::Value,
    ) -> Result<(u16, serde_json::Value), String> {
        self.post_as("/mutate-v1-pod?timeout=5s", body, None).await
    }

    /// POSTs `body` to `path` on a fresh connection, presenting the client certificate
    /// `client` (cert PEM, key PEM) if given: (status, JSON body, or `{"raw": text}`).
    pub async fn post_as(
        &self,
        path: &str,
        body: &serde_json::Value,
        client: Option<(&str, &str)>,
    ) -> Result<(u16, serde_json::Value), String> {
        self.post_with(path, body, client, None).await
    }

    /// [`Webhook::post_as`] with no client certificate and `Authorization: Bearer TOKEN`.
    pub async fn post_bearer(
        &self,
        path: &str,
        body: &serde_json::Value,
        token: &str,
    ) -> Result<(u16, serde_json::Value), String> {
        self.post_with(path, body, None, Some(token)).await
    }

    async fn post_with(
        &self,
        path: &str,
        body: &serde_json::Value,
        client: Option<(&str, &str)>,
        bearer: Option<&str>,
    ) -> Result<(u16, serde_json::Value), String> {
        use rustls_pki_types::pem::PemObject as _;
        let mut roots = rustls::RootCertStore::empty();
        for c in rustls_pki_types::CertificateDer::pem_slice_iter(self.certs.ca_cert.as_bytes()) {
            roots
                .add(c.map_err(|e| e.to_string())?)
                .map_err(|e| e.to_string())?;
        }
        let tls = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots);
        let tls = match client {
            None => tls.with_no_client_auth(),
            Some((cert, key)) => {
                let chain = rustls_pki_types::CertificateDer::pem_slice_iter(cert.as_bytes())
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| e.to_string())?;
                let key = rustls_pki_types::PrivateKeyDer::from_pem_slice(key.as_bytes())
                    .map_err(|e| e.to_string())?;
                tls.with_client_auth_cert(chain, key)
                    .map_err(|e| e.to_string())?
            }
        };
        let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(tls));
        let payload = body.to_string();
        let addr = self.addr;
        let authorization = bearer
            .map(|t| format!("Authorization: Bearer {t}\r\n"))
            .unwrap_or_default();
        let exchange = async {
            let tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
            let name = rustls_pki_types::ServerName::IpAddress(addr.ip().into());
            let mut s = connector
                .connect(name, tcp)
                .await
                .map_err(|e| format!("TLS: {e}"))?;
            s.write_all(
                format!(
                    "POST {path} HTTP/1.1\r\nHost: {addr}\r\n{authorization}\
                     Content-Type: application/json\r\nContent-Length: {}\r\n\
                     Connection: close\r\n\r\n{payload}",
                    payload.len()
                )
                .as_bytes(),
            )
            .await
            .map_err(|e| e.to_string())?;
            let mut buf = Vec::new();
            // A peer that closes without close_notify still gave us its whole answer.
            let _ = s.read_to_end(&mut buf).await;
            let text = String::from_utf8_lossy(&buf).into_owned();
            let (head, body) = text.split_once("\r\n\r\n").ok_or("no header end")?;
            let status = head
                .split_whitespace()
                .nth(1)
                .and_then(|s| s.parse().ok())
                .ok_or("no status")?;
            let chunked = head.lines().any(|l| {
                l.to_ascii_lowercase()
                    .starts_with("transfer-encoding: chunked")
            });
            let body = if chunked { dechunk(body) } else { body.into() };
            let json =
                serde_json::from_str(&body).unwrap_or_else(|_| serde_json::json!({"raw": body}));
            Ok::<_, String>((status, json))
        };
        tokio::time::timeout(Duration::from_secs(5), exchange)
            .await
            .map_err(|_| format!("POST {path}: no answer in 5 s"))?
    }

    /// Kills the process and waits for it.
    pub fn stop(&mut self) {
        self.proc.stop();
    }

    /// Sends SIGTERM (a clean shutdown: drain, release the Lease) and waits for the exit,
    /// at most `limit`.
    pub async fn terminate(&mut self, limit: Duration) -> Result<(), String> {
        self.sigterm()?;
        self.wait_exit(limit).await
    }

    /// Sends SIGTERM, without waiting.
    pub fn sigterm(&self) -> Result<(), String> {
        let pid = self.pid().ok_or("not running")?;
        let pid = rustix::process::Pid::from_raw(i32::try_from(pid).map_err(|e| e.to_string())?)
            .ok_or("pid 0")?;
        rustix::process::kill_process(pid, rustix::process::Signal::TERM)
            .map_err(|e| format!("SIGTERM: {e}"))
    }

    /// Waits for the process to exit, at most `limit`.
    pub async fn wait_exit(&mut self, limit: Duration) -> Result<(), String> {
        let t0 = Instant::now();
        while self.proc.exited().is_none() {
            if t0.elapsed() > limit {
                return Err(format!("no exit {limit:?} after SIGTERM"));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    /// Whether the process has exited.
    pub fn exited(&mut self) -> bool {
        self.proc.exited().is_some()
    }

    pub fn pid(&self) -> Option<u32> {
        self.proc.pid()
    }

    pub fn log(&self) -> String {
        self.proc.log_text()
    }

    /// The log once it holds `needle`, or as it is after `within` (lines are batched).
    pub async fn log_with(&self, needle: &str, within: std::time::Duration) -> String {
        super::text::once_it_holds(|| self.log(), needle, within).await
    }

    pub fn log_path(&self) -> PathBuf {
        self.proc.log.clone()
    }
}

impl Drop for Webhook {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "----- otel-injector log ({}) -----\n{}",
                self.proc.log.display(),
                self.proc.log_tail(60)
            );
        }
        self.proc.stop();
    }
}

/// The value of one sample of a metrics text (`series` is `name{labels}` as printed).
pub fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

/// The sum of every sample of `name` (a metric family, or one of its `_sum`/`_count`
/// series) whose labels hold each of `labels` (e.g. `operation="CREATE"`); 0 when none.
pub fn metric_sum(text: &str, name: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(name)?;
            let (set, value) = match rest.strip_prefix('{') {
                Some(r) => r.split_once("} ")?,
                None => ("", rest.strip_prefix(' ')?),
            };
            labels
                .iter()
                .all(|want| set.contains(want))
                .then(|| value.trim().parse::<f64>().ok())?
        })
        .fold(0.0, |a, b| a + b)
}

/// `(sum, count)` of the webhook's own `otel_injector_admission_duration_seconds`.
pub fn admission_time(metrics: &str) -> (f64, f64) {
    (
        metric_sum(metrics, "otel_injector_admission_duration_seconds_sum", &[]),
        metric_sum(
            metrics,
            "otel_injector_admission_duration_seconds_count",
            &[],
        ),
    )
}

/// A plain HTTP/1.1 GET with `Connection: close`: (status, body). Bounded to 5 s.
pub async fn http_get(addr: SocketAddr, path: &str) -> Result<(u16, String), String> {
    http_request(addr, "GET", path, None).await
}

/// A plain HTTP/1.1 request with `Connection: close`, and a JSON body if given: (status,
/// body, de-chunked). Bounded to 5 s.
pub async fn http_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    json: Option<&str>,
) -> Result<(u16, String), String> {
    let exchange = async {
        let mut s = TcpStream::connect(addr)
            .await
            .map_err(|e| format!("{addr}: {e}"))?;
        let body = match json {
            Some(b) => format!(
                "Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{b}",
                b.len()
            ),
            None => "\r\n".to_owned(),
        };
        s.write_all(
            format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n{body}")
                .as_bytes(),
        )
        .await
        .map_err(|e| e.to_string())?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&buf).into_owned();
        let (head, body) = text.split_once("\r\n\r\n").ok_or("no header end")?;
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or("no status")?;
        let chunked = head.lines().any(|l| {
            l.to_ascii_lowercase()
                .starts_with("transfer-encoding: chunked")
        });
        Ok::<_, String>((status, if chunked { dechunk(body) } else { body.into() }))
    };
    tokio::time::timeout(Duration::from_secs(5), exchange)
        .await
        .map_err(|_| format!("{method} {path}: no answer in 5 s"))?
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].trim_start_matches("\r\n");
    }
    out
}
