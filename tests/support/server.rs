//! The real `otel-injector serve` process: its flags ([`Builder`]), its certificates and
//! ports, started until it answers and killed on drop.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use otel_injector::certs::{self, DevCerts};
use serde_json::Value;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use super::client::{Conn, Response, connector, http_get, post, tls_connect};
use super::{INSTRUMENTATIONS, IO_TIMEOUT, MUTATE, free_port, hosts, metric, text, within};

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
pub(super) fn server_binary() -> PathBuf {
    std::env::var_os("TEST_SERVER_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_otel-injector")))
}

/// Kills a child that is not (yet) owned by a [`Server`].
pub(super) struct KillOnDrop(Option<Child>);

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
pub(super) async fn wait_up(
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
