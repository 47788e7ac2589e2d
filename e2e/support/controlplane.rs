//! A throwaway control plane: the real etcd and kube-apiserver (built by
//! `scripts/e2e-build.sh`) on free 127.0.0.1 ports in a temp dir, with a kubeconfig and a
//! `kube::Client` for it. The flags are the ones `e2e/README.md` records as working with
//! v1.37.2. Both servers run under a watchdog (see `process.rs`): they die with this process
//! however it ends, and dropping the [`ControlPlane`] stops them and removes the temp dir.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kube::Client;

use super::controllers::{Cluster, Controllers};
use super::process::{Janitor, Supervised, free_port, random_hex};
use super::tools::{binaries, install_crypto_provider, kube_config};

/// How long the steps took.
#[derive(Clone, Copy, Debug, Default)]
pub struct Timings {
    /// Finding (or building) the binaries.
    pub binaries: Duration,
    /// From spawning etcd to `/readyz` answering 200.
    pub ready: Duration,
}

/// A running etcd + kube-apiserver.
pub struct ControlPlane {
    /// The temp dir: certs, keys, token file, kubeconfig, logs, etcd data.
    pub dir: PathBuf,
    pub url: String,
    pub token: String,
    /// CA of the apiserver's serving certificate (PEM).
    pub ca_pem: String,
    pub kubeconfig: PathBuf,
    pub config: kube::Config,
    pub timings: Timings,
    /// kube-controller-manager, kube-scheduler and kwok, once [`Self::start_controllers`]
    /// has run.
    pub controllers: Option<Controllers>,
    apiserver: Mutex<Supervised>,
    /// kube-apiserver's program and flags, to start it again ([`Self::restart_apiserver`]).
    apiserver_cmd: (PathBuf, Vec<String>),
    /// How often kube-apiserver was started.
    apiserver_starts: std::sync::atomic::AtomicU32,
    etcd: Mutex<Supervised>,
    etcd_url: String,
    tmp: Option<tempfile::TempDir>,
    janitor: Option<Janitor>,
}

/// Why a start failed; a port clash is retried.
struct StartError {
    message: String,
    port_clash: bool,
}

impl From<String> for StartError {
    fn from(message: String) -> Self {
        StartError {
            message,
            port_clash: false,
        }
    }
}

/// One plugin of an admission configuration: its name, its configuration's kind
/// (`apiserver.config.k8s.io/v1`) and fields (one `key: value` each).
pub type AdmissionPlugin<'a> = (&'a str, &'a str, Vec<(&'a str, String)>);

/// An admission configuration (`--admission-control-config-file`) of `plugins` written as
/// `path`. Returns the path.
pub fn admission_configuration(
    path: &std::path::Path,
    plugins: &[AdmissionPlugin<'_>],
) -> std::path::PathBuf {
    let mut text =
        "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n"
            .to_owned();
    for (name, kind, fields) in plugins {
        text.push_str(&format!(
            "- name: {name}\n  configuration:\n    apiVersion: apiserver.config.k8s.io/v1\n    kind: {kind}\n"
        ));
        for (key, value) in fields {
            text.push_str(&format!("    {key}: {value:?}\n"));
        }
    }
    std::fs::write(path, text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    path.to_owned()
}

impl ControlPlane {
    /// Starts etcd and kube-apiserver and waits for `/readyz` (bounded by
    /// `$E2E_READY_TIMEOUT` seconds, default 90). Retries twice on a port clash.
    pub async fn start() -> Result<ControlPlane, String> {
        Self::start_with(&[]).await
    }

    /// [`ControlPlane::start_with`] `apiserver_args`, then the Instrumentation CRD installed
    /// (`manifests/crd.yaml`): a control plane of a test's own. Panics on a failure.
    pub async fn with_crd(apiserver_args: &[&str]) -> ControlPlane {
        let cp = Self::start_with(apiserver_args)
            .await
            .unwrap_or_else(|e| panic!("control plane: {e}"));
        super::api::install_crds(
            &cp.client(),
            &super::tools::root().join("manifests/crd.yaml"),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        cp
    }

    /// [`ControlPlane::start`] with further kube-apiserver flags (for example
    /// `--emulated-version=1.35`, `--feature-gates=ImageVolume=false`).
    pub async fn start_with(apiserver_args: &[&str]) -> Result<ControlPlane, String> {
        install_crypto_provider();
        let t0 = Instant::now();
        let bin = binaries()?;
        let found = t0.elapsed();
        let mut attempt = 0;
        loop {
            attempt += 1;
            match Self::start_once(&bin, apiserver_args).await {
                Ok(mut cp) => {
                    cp.timings.binaries = found;
                    return Ok(cp);
                }
                Err(e) if e.port_clash && attempt < 3 => {
                    eprintln!("[e2e] control plane: port clash, retrying ({})", e.message);
                }
                Err(e) => return Err(e.message),
            }
        }
    }

    async fn start_once(bin: &Path, extra: &[&str]) -> Result<ControlPlane, StartError> {
        let keep = std::env::var_os("E2E_KEEP").is_some_and(|v| v == "1");
        let tmp = tempfile::Builder::new()
            .prefix("otel-injector-e2e.")
            .tempdir()
            .map_err(|e| format!("temp dir: {e}"))?;
        let dir = tmp.path().to_owned();
        let (tmp, janitor) = if keep {
            eprintln!("[e2e] keeping {}", tmp.keep().display());
            (None, None)
        } else {
            let j = Janitor::watch(&dir).map_err(|e| format!("janitor: {e}"))?;
            (Some(tmp), Some(j))
        };

        // Serving certificate of the apiserver, from our own CA: the kubeconfig can trust
        // it before the apiserver has written anything.
        let hosts: Vec<String> = [
            "127.0.0.1",
            "localhost",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
        ]
        .map(String::from)
        .to_vec();
        let certs = otel_injector::certs::generate("otel-injector e2e apiserver CA", &hosts)
            .map_err(|e| e.to_string())?;
        let cert_dir = dir.join("certs");
        certs.write_to(&cert_dir).map_err(|e| e.to_string())?;

        // Service-account signing key pair: ECDSA P-256 (ES256), which the apiserver accepts.
        let sa = rcgen::KeyPair::generate().map_err(|e| e.to_string())?;
        write(&dir.join("sa.key"), &sa.serialize_pem())?;
        write(&dir.join("sa.pub"), &sa.public_key_pem())?;
        let token = random_hex().map_err(|e| e.to_string())?;
        write(
            &dir.join("tokens.csv"),
            &format!("{token},admin,admin,system:masters\n"),
        )?;

        let (etcd_port, peer_port, api_port) = (free_port(), free_port(), free_port());
        let etcd_url = format!("http://127.0.0.1:{etcd_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        let url = format!("https://127.0.0.1:{api_port}");
        let started = Instant::now();
        let etcd = Supervised::spawn(
            "etcd",
            &bin.join("etcd"),
            [
                "--name".into(),
                "default".into(),
                "--data-dir".into(),
                dir.join("etcd").display().to_string(),
                "--listen-client-urls".into(),
                etcd_url.clone(),
                "--advertise-client-urls".into(),
                etcd_url.clone(),
                "--listen-peer-urls".into(),
                peer_url.clone(),
                "--initial-advertise-peer-urls".into(),
                peer_url.clone(),
                "--initial-cluster".into(),
                format!("default={peer_url}"),
                "--unsafe-no-fsync".into(),
                "--log-level".into(),
                "warn".into(),
            ],
            &dir.join("etcd.log"),
            |_| {},
        )
        .map_err(|e| format!("spawn etcd: {e}"))?;
        let p = |name: &str| dir.join(name).display().to_string();
        let apiserver_args: Vec<String> = [
            "--etcd-servers".into(),
            etcd_url.clone(),
            "--cert-dir".into(),
            p("apiserver-certs"),
            "--tls-cert-file".into(),
            cert_dir.join("tls.crt").display().to_string(),
            "--tls-private-key-file".into(),
            cert_dir.join("tls.key").display().to_string(),
            "--secure-port".into(),
            api_port.to_string(),
            "--bind-address".into(),
            "127.0.0.1".into(),
            "--advertise-address".into(),
            "127.0.0.1".into(),
            "--endpoint-reconciler-type".into(),
            "none".into(),
            "--service-cluster-ip-range".into(),
            "10.0.0.0/24".into(),
            "--service-account-issuer".into(),
            "https://kubernetes.default.svc.cluster.local".into(),
            "--service-account-key-file".into(),
            p("sa.pub"),
            "--service-account-signing-key-file".into(),
            p("sa.key"),
            "--token-auth-file".into(),
            p("tokens.csv"),
            "--authorization-mode".into(),
            "RBAC".into(),
            "--disable-admission-plugins".into(),
            "ServiceAccount".into(),
            "--allow-privileged=true".into(),
        ]
        .into_iter()
        .chain(extra.iter().map(|a| a.to_string()))
        .collect();
        let apiserver = Supervised::spawn(
            "kube-apiserver",
            &bin.join("kube-apiserver"),
            &apiserver_args,
            &dir.join("kube-apiserver.log"),
            |_| {},
        )
        .map_err(|e| format!("spawn kube-apiserver: {e}"))?;

        let kubeconfig = dir.join("kubeconfig");
        write(
            &kubeconfig,
            &format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: e2e\n  cluster:\n    \
                 server: {url}\n    certificate-authority: {ca}\nusers:\n- name: admin\n  \
                 user:\n    token: {token}\ncontexts:\n- name: e2e\n  context:\n    \
                 cluster: e2e\n    user: admin\ncurrent-context: e2e\n",
                ca = cert_dir.join("ca.crt").display()
            ),
        )?;
        let config = kube_config(&kubeconfig).await?;

        let mut cp = ControlPlane {
            dir,
            url,
            token,
            ca_pem: certs.ca_cert,
            kubeconfig,
            config,
            timings: Timings::default(),
            controllers: None,
            apiserver: Mutex::new(apiserver),
            apiserver_cmd: (bin.join("kube-apiserver"), apiserver_args),
            apiserver_starts: std::sync::atomic::AtomicU32::new(1),
            etcd: Mutex::new(etcd),
            etcd_url: etcd_url.clone(),
            tmp,
            janitor,
        };
        cp.wait_ready(started).await?;
        cp.timings.ready = started.elapsed();
        Ok(cp)
    }

    async fn wait_ready(&self, started: Instant) -> Result<(), StartError> {
        let limit = Duration::from_secs(
            std::env::var("E2E_READY_TIMEOUT")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(90),
        );
        let client = self.client();
        loop {
            if let Err(e) = self.check_alive() {
                let clash = e.contains("address already in use");
                return Err(StartError {
                    message: e,
                    port_clash: clash,
                });
            }
            let probe = tokio::time::timeout(
                Duration::from_secs(3),
                super::api::get_text(&client, "/readyz"),
            )
            .await;
            if let Ok(Ok((200, _))) = probe {
                return Ok(());
            }
            if started.elapsed() > limit {
                let verbose = match tokio::time::timeout(
                    Duration::from_secs(3),
                    super::api::get_text(&client, "/readyz?verbose"),
                )
                .await
                {
                    Ok(Ok((code, body))) => format!("HTTP {code}\n{body}"),
                    Ok(Err(e)) => e,
                    Err(_) => "no answer".into(),
                };
                return Err(format!(
                    "kube-apiserver not ready after {limit:?}; /readyz?verbose: {verbose}\n{}",
                    self.logs()
                )
                .into());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Starts kube-controller-manager, kube-scheduler and kwok with its node (see
    /// `controllers.rs`); they stop before the apiserver.
    pub async fn start_controllers(&mut self) -> Result<(), String> {
        self.start_cluster(Cluster::NoGarbageCollector).await
    }

    /// Starts these controllers (see [`Cluster`]).
    pub async fn start_cluster(&mut self, cluster: Cluster) -> Result<(), String> {
        let c = Controllers::start(&self.kubeconfig, &self.dir, &self.client(), cluster).await?;
        self.controllers = Some(c);
        Ok(())
    }

    /// Errors (with the logs' tails) if etcd, kube-apiserver or a controller has exited.
    pub fn check_alive(&self) -> Result<(), String> {
        if let Some(c) = &self.controllers {
            c.check_alive()?;
        }
        for (name, p) in [("etcd", &self.etcd), ("kube-apiserver", &self.apiserver)] {
            let mut p = p.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(st) = p.exited() {
                drop(p);
                return Err(format!("{name} exited ({st})\n{}", self.logs()));
            }
        }
        Ok(())
    }

    /// The last lines of both logs.
    pub fn logs(&self) -> String {
        let mut s = String::new();
        for p in [&self.etcd, &self.apiserver] {
            let p = p.lock().unwrap_or_else(|e| e.into_inner());
            s.push_str(&format!(
                "----- {} ({}) -----\n{}\n",
                p.name,
                p.log.display(),
                p.log_tail(40)
            ));
        }
        s
    }

    /// Pids of etcd and kube-apiserver.
    pub fn pids(&self) -> (Option<u32>, Option<u32>) {
        let pid = |p: &Mutex<Supervised>| p.lock().unwrap_or_else(|e| e.into_inner()).pid();
        (pid(&self.etcd), pid(&self.apiserver))
    }

    /// A new client. Make one per tokio runtime: its connections belong to the runtime
    /// that opened them.
    pub fn client(&self) -> Client {
        Client::try_from(self.config.clone()).expect("kube client from the e2e kubeconfig")
    }

    /// Kills kube-apiserver (SIGKILL), leaving etcd running: the API server is away.
    pub fn kill_apiserver(&self) {
        self.apiserver
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .stop();
    }

    /// Starts kube-apiserver again with the same flags (same port, same etcd) and waits for
    /// its `/readyz`; returns how long that took. Its log goes to `kube-apiserver-N.log`.
    pub async fn restart_apiserver(&self) -> Result<Duration, String> {
        use std::sync::atomic::Ordering;
        let n = self.apiserver_starts.fetch_add(1, Ordering::AcqRel) + 1;
        let (program, args) = &self.apiserver_cmd;
        let started = Instant::now();
        let p = Supervised::spawn(
            "kube-apiserver",
            program,
            args,
            &self.dir.join(format!("kube-apiserver-{n}.log")),
            |_| {},
        )
        .map_err(|e| format!("spawn kube-apiserver: {e}"))?;
        *self.apiserver.lock().unwrap_or_else(|e| e.into_inner()) = p;
        self.wait_ready(started).await.map_err(|e| e.message)?;
        Ok(started.elapsed())
    }

    /// Compacts etcd's history up to its current revision (through etcd's JSON gateway), so
    /// that a watch resuming from an older resource version gets 410 Gone and lists again.
    /// Returns the revision.
    pub async fn compact_etcd(&self) -> Result<i64, String> {
        let addr: std::net::SocketAddr = self
            .etcd_url
            .trim_start_matches("http://")
            .parse()
            .map_err(|e| format!("etcd address: {e}"))?;
        let range = etcd_post(addr, "/v3/kv/range", r#"{"key":"AA=="}"#).await?;
        let revision: i64 = range["header"]["revision"]
            .as_str()
            .and_then(|r| r.parse().ok())
            .ok_or_else(|| format!("no revision in {range}"))?;
        let body = format!(r#"{{"revision":"{revision}","physical":true}}"#);
        etcd_post(addr, "/v3/kv/compaction", &body).await?;
        Ok(revision)
    }

    /// Stops both servers and removes the temp dir (also done on drop).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.controllers.take() {
            c.stop();
        }
        for p in [&self.apiserver, &self.etcd] {
            p.lock().unwrap_or_else(|e| e.into_inner()).stop();
        }
        self.tmp.take();
        self.janitor.take();
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", self.logs());
        }
        self.stop();
    }
}

/// POSTs JSON to etcd's gateway: the answer's JSON.
async fn etcd_post(
    addr: std::net::SocketAddr,
    path: &str,
    body: &str,
) -> Result<serde_json::Value, String> {
    let (status, text) = super::webhook::http_request(addr, "POST", path, Some(body)).await?;
    if status != 200 {
        return Err(format!("etcd {path}: HTTP {status}: {text}"));
    }
    serde_json::from_str(&text).map_err(|e| format!("etcd {path}: {e}: {text}"))
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
}
