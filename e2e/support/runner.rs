//! The pod runner: runs a pod as the apiserver stored it on this machine, the way a kubelet
//! would for the parts that matter to injection. Test support only.
//!
//! - Each container is a local process under bubblewrap (`bwrap`, Debian's `bubblewrap`):
//!   a tmpfs root with the host's `/usr` (and the `/bin`, `/lib`, `/lib64`, `/sbin` links)
//!   and `/etc` bound read-only, fresh `/dev`, `/proc` and `/tmp`, its own pid and UTS
//!   namespaces (hostname = pod name), the host's network (every server listens on
//!   127.0.0.1).
//! - A container's image is a directory (see [`Images`], built by `scripts/e2e-images.sh`):
//!   each top-level entry of it is bound read-only at `/<entry>`.
//! - Volumes: `emptyDir` = a fresh directory per pod; `secret` and `configMap` = a directory
//!   with the object's keys as files (or its `items`), read from the apiserver; `downwardAPI`
//!   = its items written from the stored pod (annotations, labels, name, namespace, uid). Each
//!   `volumeMount` is bound at its `mountPath`, read-only when asked (secrets and ConfigMaps
//!   always), `subPath` (created when missing, as the kubelet does for an emptyDir) supported.
//!   `image` (KEP-4639, the agent delivery `image-volume`): `image.reference` names one of
//!   [`Images`] and the volume *is* that image's root directory, bound read-only whatever the
//!   mount says (image volumes are read-only); a `subPath` must exist in the image, as the
//!   kubelet requires. Nothing is created or copied for it: the pod's directory does not
//!   grow. `pullPolicy` does not matter (every image is local); `noexec`, which some runtimes
//!   set on image volumes, is not modelled.
//! - Init containers run one after the other, each to completion (exit 0 required), then the
//!   app containers start, each under the watchdog of `process.rs`.
//! - Environment and command line: the kubelet's rules (`kubelet.rs`), over the image's env
//!   (PATH) and `HOSTNAME`.
//!
//! Not done: probes, restarts, resource limits, security contexts (everything runs as root),
//! service-link variables, other volume types (an error names them).
//!
//! [`RunningPod::started`] is when `run` began (before any volume was made) and
//! [`RunningPod::volumes_dir`] holds every volume the runner made: the measurements of
//! `tests/delivery_cost.rs` (start to first served request, bytes written) use both.

mod sandbox;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use kube::Client;
use sandbox::{sandbox, sources, volumes};
use serde_json::Value;

use super::api;
use super::process::Supervised;
use super::tools::root;

/// A container's environment, in definition order.
pub type Env = Vec<(String, String)>;

const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// An image: a root directory and what its config would say.
#[derive(Clone, Debug)]
pub struct Image {
    pub root: PathBuf,
    pub entrypoint: Vec<String>,
    pub cmd: Vec<String>,
    pub env: Vec<(String, String)>,
    pub workdir: String,
}

/// Image references → images.
#[derive(Clone, Debug, Default)]
pub struct Images(pub BTreeMap<String, Image>);

/// The references the tests use for the images of `scripts/e2e-images.sh`.
pub const JAVA_AGENT: &str = "e2e.local/autoinstrumentation-java:2.20.1";
/// The Java agent that reads a declarative configuration file (OTEL_CONFIG_FILE).
pub const JAVA_AGENT_DECLARATIVE: &str = "e2e.local/autoinstrumentation-java:2.33.1";
pub const NODEJS_AGENT: &str = "e2e.local/autoinstrumentation-nodejs:0.81.2";
pub const PYTHON_AGENT: &str = "e2e.local/autoinstrumentation-python:0.66b1";
pub const JAVA_APP: &str = "e2e.local/java-app:1.0.0";
pub const NODEJS_APP: &str = "e2e.local/nodejs-app:1.0.0";
pub const PYTHON_APP: &str = "e2e.local/python-app:1.0.0";
pub const PYTHON_SDK_APP: &str = "e2e.local/python-sdk-app:1.0.0";

impl Images {
    /// The images of `scripts/e2e-images.sh` (built on first use), under the references
    /// above.
    pub fn e2e() -> Result<Images, String> {
        static IMAGES: OnceLock<Result<Images, String>> = OnceLock::new();
        IMAGES
            .get_or_init(|| {
                let script = root().join("scripts/e2e-images.sh");
                let out = std::process::Command::new(&script)
                    .stdin(Stdio::null())
                    .stderr(Stdio::inherit())
                    .output()
                    .map_err(|e| format!("running {}: {e}", script.display()))?;
                if !out.status.success() {
                    return Err(format!("{} failed ({})", script.display(), out.status));
                }
                let dirs: BTreeMap<String, PathBuf> = String::from_utf8_lossy(&out.stdout)
                    .lines()
                    .filter_map(|l| l.split_once('='))
                    .map(|(k, v)| (k.to_owned(), PathBuf::from(v)))
                    .collect();
                let dir = |name: &str| {
                    dirs.get(name)
                        .cloned()
                        .ok_or_else(|| format!("scripts/e2e-images.sh built no {name}"))
                };
                let s = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
                let image = |name: &str, entrypoint: &[&str]| -> Result<Image, String> {
                    Ok(Image {
                        root: dir(name)?,
                        entrypoint: s(entrypoint),
                        cmd: Vec::new(),
                        env: vec![("PATH".into(), PATH.into())],
                        workdir: "/".into(),
                    })
                };
                Ok(Images(BTreeMap::from([
                    (JAVA_AGENT.into(), image("java-agent", &[])?),
                    (
                        JAVA_AGENT_DECLARATIVE.into(),
                        image("java-agent-declarative", &[])?,
                    ),
                    (NODEJS_AGENT.into(), image("nodejs-agent", &[])?),
                    (PYTHON_AGENT.into(), image("python-agent", &[])?),
                    (
                        JAVA_APP.into(),
                        image("java-app", &["java", "-cp", "/app", "App"])?,
                    ),
                    (
                        NODEJS_APP.into(),
                        image("nodejs-app", &["node", "/app/server.js"])?,
                    ),
                    (
                        PYTHON_APP.into(),
                        image("python-app", &["python3", "/app/app.py"])?,
                    ),
                    (
                        PYTHON_SDK_APP.into(),
                        image("python-sdk-app", &["python3", "/app/app.py"])?,
                    ),
                ])))
            })
            .clone()
    }
}

/// A running pod: its app containers (killed on drop) and its volumes' directory.
pub struct RunningPod {
    pub name: String,
    /// When [`run`] was called: the pod's start, before volumes and init containers.
    pub started: Instant,
    pub containers: BTreeMap<String, Supervised>,
    /// Each container's environment as it was started (init containers too).
    pub envs: BTreeMap<String, Vec<(String, String)>>,
    pub dir: PathBuf,
    _tmp: tempfile::TempDir,
}

impl RunningPod {
    /// A container's output so far.
    pub fn log(&self, container: &str) -> String {
        std::fs::read_to_string(self.dir.join(format!("{container}.log"))).unwrap_or_default()
    }

    /// The directory of the volumes the runner made for the pod (`emptyDir`, `secret`,
    /// `configMap`: one directory each); image volumes are not in it.
    pub fn volumes_dir(&self) -> PathBuf {
        self.dir.join("volumes")
    }

    /// Every container's log tail, for a failure message.
    pub fn logs(&self) -> String {
        self.containers
            .iter()
            .map(|(n, p)| format!("----- {n} -----\n{}\n", p.log_tail(40)))
            .collect()
    }

    /// Errors (with the logs) if an app container has exited.
    pub fn check_alive(&mut self) -> Result<(), String> {
        for (n, p) in &mut self.containers {
            if let Some(st) = p.exited() {
                return Err(format!("container {n} exited ({st}):\n{}", p.log_tail(40)));
            }
        }
        Ok(())
    }
}

impl Drop for RunningPod {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("----- pod {} -----\n{}", self.name, self.logs());
        }
        for p in self.containers.values_mut() {
            p.stop();
        }
    }
}

/// Runs `pod` (as stored: bound to a node, with its status): init containers to
/// completion, then the app containers. The pod's directory goes inside `parent` (e.g. the
/// control plane's dir, whose janitor removes it however the test process ends).
pub async fn run(
    client: &Client,
    pod: &Value,
    images: &Images,
    parent: &Path,
) -> Result<RunningPod, String> {
    let started = Instant::now();
    let name = pod["metadata"]["name"].as_str().unwrap_or("").to_owned();
    let ns = pod["metadata"]["namespace"].as_str().unwrap_or("");
    let node = pod["spec"]["nodeName"]
        .as_str()
        .ok_or_else(|| format!("pod {name} is not bound to a node"))?;
    let node = get(client, &format!("/api/v1/nodes/{node}")).await?;
    let allocatable = node["status"]["allocatable"].clone();
    let sources = sources(client, ns).await?;
    let tmp = tempfile::Builder::new()
        .prefix("pod.")
        .tempdir_in(parent)
        .map_err(|e| format!("temp dir: {e}"))?;
    let dir = tmp.path().to_owned();
    let volumes = volumes(pod, &dir.join("volumes"), &sources, images)?;
    let mut running = RunningPod {
        name: name.clone(),
        started,
        containers: BTreeMap::new(),
        envs: BTreeMap::new(),
        dir: dir.clone(),
        _tmp: tmp,
    };
    for c in pod["spec"]["initContainers"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let cname = c["name"].as_str().unwrap_or("");
        let (argv, env) = sandbox(pod, c, images, &volumes, &allocatable, &sources)?;
        running.envs.insert(cname.to_owned(), env);
        let log = dir.join(format!("{cname}.log"));
        let t0 = Instant::now();
        let status = tokio::time::timeout(
            Duration::from_secs(120),
            tokio::process::Command::new("bwrap")
                .args(&argv)
                .stdin(Stdio::null())
                .stdout(std::fs::File::create(&log).map_err(|e| e.to_string())?)
                .stderr(
                    std::fs::File::create(log.with_extension("err")).map_err(|e| e.to_string())?,
                )
                .kill_on_drop(true)
                .status(),
        )
        .await
        .map_err(|_| format!("init container {cname} did not finish in 120 s"))?
        .map_err(|e| format!("bwrap for {cname}: {e}"))?;
        let output = format!(
            "{}{}",
            std::fs::read_to_string(&log).unwrap_or_default(),
            std::fs::read_to_string(log.with_extension("err")).unwrap_or_default()
        );
        if !status.success() {
            return Err(format!(
                "init container {cname} of {ns}/{name} failed ({status}) after {:?}:\n{output}\n\
                 bwrap {}",
                t0.elapsed(),
                argv.join(" ")
            ));
        }
        eprintln!(
            "[e2e] pod {ns}/{name}: init container {cname} completed in {:?}",
            t0.elapsed()
        );
    }
    for c in pod["spec"]["containers"].as_array().into_iter().flatten() {
        let cname = c["name"].as_str().unwrap_or("");
        let (argv, env) = sandbox(pod, c, images, &volumes, &allocatable, &sources)?;
        running.envs.insert(cname.to_owned(), env);
        let p = Supervised::spawn(
            &format!("{name}-{cname}"),
            Path::new("bwrap"),
            &argv,
            &dir.join(format!("{cname}.log")),
            |_| {},
        )
        .map_err(|e| format!("spawn {cname}: {e}"))?;
        running.containers.insert(cname.to_owned(), p);
    }
    Ok(running)
}

async fn get(client: &Client, path: &str) -> Result<Value, String> {
    let r = api::send(client, axum::http::Method::GET, path, None).await?;
    if r.status != 200 {
        return Err(format!("GET {path}: HTTP {}: {}", r.status, r.body));
    }
    Ok(r.body)
}

/// The bytes `dir`'s content takes on disk (`du -s --block-size=1` of what is inside it,
/// not counting `dir` itself, symbolic links not followed): 0 for an empty directory.
pub fn disk_usage(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt as _;
    let mut total = 0;
    for e in std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap_or_else(|e| panic!("{}: {e}", dir.display())))
    {
        let meta = e
            .path()
            .symlink_metadata()
            .unwrap_or_else(|err| panic!("{}: {err}", e.path().display()));
        total += meta.blocks() * 512;
        if meta.is_dir() {
            total += disk_usage(&e.path());
        }
    }
    total
}
