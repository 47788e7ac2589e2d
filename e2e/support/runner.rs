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

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use base64::Engine as _;
use kube::Client;
use serde_json::Value;

use super::api;
use super::kubelet::{self, Sources};
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

/// The bwrap arguments for one container, and its environment.
fn sandbox(
    pod: &Value,
    c: &Value,
    images: &Images,
    volumes: &BTreeMap<String, Volume>,
    allocatable: &Value,
    sources: &Sources,
) -> Result<(Vec<String>, Env), String> {
    let cname = c["name"].as_str().unwrap_or("");
    let reference = c["image"].as_str().unwrap_or("");
    let image = images
        .0
        .get(reference)
        .ok_or_else(|| format!("container {cname}: no local image for {reference}"))?;
    let pod_name = pod["metadata"]["name"].as_str().unwrap_or("");
    let mut a: Vec<String> = [
        "--unshare-pid",
        "--unshare-uts",
        "--die-with-parent",
        "--tmpfs",
        "/",
        "--ro-bind",
        "/usr",
        "/usr",
        "--symlink",
        "usr/bin",
        "/bin",
        "--symlink",
        "usr/lib",
        "/lib",
        "--symlink",
        "usr/lib64",
        "/lib64",
        "--symlink",
        "usr/sbin",
        "/sbin",
        "--ro-bind",
        "/etc",
        "/etc",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--tmpfs",
        "/tmp",
        "--hostname",
    ]
    .map(String::from)
    .to_vec();
    a.push(pod_name.to_owned());
    let mut entries: Vec<_> = std::fs::read_dir(&image.root)
        .map_err(|e| format!("{}: {e}", image.root.display()))?
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.'))
        .collect();
    entries.sort();
    for e in entries {
        a.extend([
            "--ro-bind".into(),
            image.root.join(&e).display().to_string(),
            format!("/{e}"),
        ]);
    }
    for m in c["volumeMounts"].as_array().into_iter().flatten() {
        let vname = m["name"].as_str().unwrap_or("");
        let v = volumes
            .get(vname)
            .ok_or_else(|| format!("container {cname}: no volume {vname}"))?;
        let mut src = v.dir.clone();
        if let Some(sub) = m["subPath"].as_str().filter(|s| !s.is_empty()) {
            src = src.join(sub);
            if !src.exists() {
                if v.image {
                    // Nothing can be created in an image: the kubelet fails the container.
                    return Err(format!(
                        "container {cname}: subPath {sub} not found in the image of volume \
                         {vname} ({})",
                        v.dir.display()
                    ));
                }
                std::fs::create_dir_all(&src).map_err(|e| format!("subPath {sub}: {e}"))?;
            }
        }
        let read_only = v.read_only || m["readOnly"] == true;
        let path = m["mountPath"]
            .as_str()
            .ok_or_else(|| format!("mount without mountPath: {m}"))?;
        a.extend([
            if read_only { "--ro-bind" } else { "--bind" }.into(),
            src.display().to_string(),
            path.to_owned(),
        ]);
    }
    let env = kubelet::container_env(pod, c, allocatable, sources)
        .map_err(|e| format!("container {cname}: {e}"))?;
    let mut full: Vec<(String, String)> = image.env.clone();
    full.push(("HOSTNAME".into(), pod_name.to_owned()));
    for (k, v) in &env {
        match full.iter_mut().find(|(n, _)| n == k) {
            Some(e) => e.1 = v.clone(),
            None => full.push((k.clone(), v.clone())),
        }
    }
    a.push("--clearenv".into());
    for (k, v) in &full {
        a.extend(["--setenv".into(), k.clone(), v.clone()]);
    }
    let workdir = c["workingDir"].as_str().unwrap_or(&image.workdir);
    a.extend(["--chdir".into(), workdir.to_owned(), "--".into()]);
    let argv = kubelet::command_line(c, &image.entrypoint, &image.cmd, &env);
    if argv.is_empty() {
        return Err(format!("container {cname}: no command"));
    }
    a.extend(argv);
    Ok((a, env))
}

struct Volume {
    dir: PathBuf,
    read_only: bool,
    /// An image volume: `dir` is the image's root (shared, never written).
    image: bool,
}

fn volumes(
    pod: &Value,
    base: &Path,
    sources: &Sources,
    images: &Images,
) -> Result<BTreeMap<String, Volume>, String> {
    let mut out = BTreeMap::new();
    std::fs::create_dir_all(base).map_err(|e| format!("{}: {e}", base.display()))?;
    for v in pod["spec"]["volumes"].as_array().into_iter().flatten() {
        let name = v["name"].as_str().unwrap_or("");
        if v["image"].is_object() {
            let reference = v["image"]["reference"].as_str().unwrap_or("");
            let image = images
                .0
                .get(reference)
                .ok_or_else(|| format!("volume {name}: no local image for {reference}"))?;
            let dir = image.root.clone();
            out.insert(
                name.to_owned(),
                Volume {
                    dir,
                    read_only: true,
                    image: true,
                },
            );
            continue;
        }
        let dir = base.join(name);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let (data, read_only) = if v["emptyDir"].is_object() {
            (None, false)
        } else if v["downwardAPI"].is_object() {
            downward_api(pod, &v["downwardAPI"], &dir)
                .map_err(|e| format!("volume {name}: {e}"))?;
            (None, true)
        } else if v["secret"].is_object() {
            let s = v["secret"]["secretName"].as_str().unwrap_or("");
            let data = sources.secrets.get(s);
            if data.is_none() && v["secret"]["optional"] != true {
                return Err(format!("volume {name}: Secret {s} not found"));
            }
            (
                Some((data.cloned().unwrap_or_default(), &v["secret"])),
                true,
            )
        } else if v["configMap"].is_object() {
            let s = v["configMap"]["name"].as_str().unwrap_or("");
            let data = sources.config_maps.get(s);
            if data.is_none() && v["configMap"]["optional"] != true {
                return Err(format!("volume {name}: ConfigMap {s} not found"));
            }
            (
                Some((data.cloned().unwrap_or_default(), &v["configMap"])),
                true,
            )
        } else {
            return Err(format!("volume {name}: unsupported source {v}"));
        };
        if let Some((data, source)) = data {
            let items: Vec<(String, String)> = match source["items"].as_array() {
                Some(items) => items
                    .iter()
                    .map(|i| {
                        (
                            i["key"].as_str().unwrap_or("").to_owned(),
                            i["path"].as_str().unwrap_or("").to_owned(),
                        )
                    })
                    .collect(),
                None => data.keys().map(|k| (k.clone(), k.clone())).collect(),
            };
            for (key, path) in items {
                let value = data
                    .get(&key)
                    .ok_or_else(|| format!("volume {name}: no key {key}"))?;
                let file = dir.join(&path);
                if let Some(parent) = file.parent() {
                    std::fs::create_dir_all(parent).map_err(|e| e.to_string())?;
                }
                std::fs::write(&file, value).map_err(|e| format!("{}: {e}", file.display()))?;
            }
        }
        out.insert(
            name.to_owned(),
            Volume {
                dir,
                read_only,
                image: false,
            },
        );
    }
    Ok(out)
}

/// Writes a `downwardAPI` volume's items from the stored pod, as the kubelet does for the
/// fields injection uses: `metadata.annotations['…']`, `metadata.labels['…']`,
/// `metadata.name`, `metadata.namespace`, `metadata.uid`.
fn downward_api(pod: &Value, source: &Value, dir: &Path) -> Result<(), String> {
    let meta = &pod["metadata"];
    for item in source["items"].as_array().into_iter().flatten() {
        let path = item["path"].as_str().unwrap_or("");
        let field = item["fieldRef"]["fieldPath"].as_str().unwrap_or("");
        let keyed = |prefix: &str| {
            field
                .strip_prefix(prefix)
                .and_then(|k| k.strip_prefix("['"))
                .and_then(|k| k.strip_suffix("']"))
        };
        let value = if let Some(key) = keyed("metadata.annotations") {
            meta["annotations"][key].as_str().unwrap_or("").to_owned()
        } else if let Some(key) = keyed("metadata.labels") {
            meta["labels"][key].as_str().unwrap_or("").to_owned()
        } else {
            match field {
                "metadata.name" | "metadata.namespace" | "metadata.uid" => meta
                    [&field["metadata.".len()..]]
                    .as_str()
                    .unwrap_or("")
                    .to_owned(),
                _ => return Err(format!("unsupported downwardAPI item {item}")),
            }
        };
        let file = dir.join(path);
        if let Some(parent) = file.parent() {
            std::fs::create_dir_all(parent).map_err(|e| e.to_string())?;
        }
        std::fs::write(&file, value).map_err(|e| format!("{}: {e}", file.display()))?;
    }
    Ok(())
}

/// Every ConfigMap and Secret of the namespace.
async fn sources(client: &Client, ns: &str) -> Result<Sources, String> {
    let mut s = Sources::default();
    for cm in get(client, &format!("/api/v1/namespaces/{ns}/configmaps")).await?["items"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let data = cm["data"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_owned()))
            .collect();
        s.config_maps.insert(
            cm["metadata"]["name"].as_str().unwrap_or("").to_owned(),
            data,
        );
    }
    for secret in get(client, &format!("/api/v1/namespaces/{ns}/secrets")).await?["items"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let mut data = BTreeMap::new();
        for (k, v) in secret["data"].as_object().into_iter().flatten() {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(v.as_str().unwrap_or(""))
                .map_err(|e| format!("secret key {k}: {e}"))?;
            data.insert(k.clone(), String::from_utf8_lossy(&bytes).into_owned());
        }
        s.secrets.insert(
            secret["metadata"]["name"].as_str().unwrap_or("").to_owned(),
            data,
        );
    }
    Ok(s)
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
