//! The rest of a cluster beside etcd and kube-apiserver: the real `kube-controller-manager`
//! and `kube-scheduler` (built from the same `k8s.io/kubernetes` module, by
//! `scripts/e2e-build.sh controlplane`) and kwok (`scripts/e2e-build.sh kwok`), which keeps
//! one simulated node Ready and marks the pods bound to it Running (its stages:
//! `e2e/kwok/kwok.yaml`). Deployments, StatefulSets, DaemonSets, Jobs and CronJobs then make
//! their pods the real way. None of the three serves a port (`--secure-port 0`; kwok has no
//! `--server-address`), and all run under the watchdog of `process.rs`.
//!
//! The node carries the taint [`NODE_TAINT`] (`NoSchedule`): only pods that tolerate it
//! (the workload tests' templates) are scheduled, so the hand-made pods of the other tests
//! stay unbound and are stored exactly as the webhook left them. The garbage collector is
//! off (`--controllers=*,-garbage-collector-controller`): those tests write ownerReferences
//! to owners that do not exist, which it would delete. A control plane of its own may have
//! it ([`Cluster::Whole`]), for what deletes by cascade (`helm uninstall`, `kubectl delete`).

/// Which controllers run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cluster {
    /// All but the garbage collector.
    NoGarbageCollector,
    /// All of them.
    Whole,
}

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kube::Client;
use serde_json::{Value, json};

use super::api;
use super::process::Supervised;
use super::tools::{binaries, root, tool_dir};

/// The simulated node's name.
pub const NODE: &str = "kwok-node-0";
/// The node's taint key (value `true`, effect `NoSchedule`).
pub const NODE_TAINT: &str = "e2e.otel-injector.io/kwok";

/// The toleration a pod template needs to be scheduled on the simulated node.
pub fn toleration() -> Value {
    json!({"key": NODE_TAINT, "operator": "Equal", "value": "true", "effect": "NoSchedule"})
}

/// kube-controller-manager, kube-scheduler and kwok, and the node.
pub struct Controllers {
    procs: Vec<Mutex<Supervised>>,
    /// How long the start took (until the node was Ready and the `default` ServiceAccount
    /// of namespace `default` existed).
    pub ready: Duration,
}

impl Controllers {
    /// Starts the three against the control plane of `kubeconfig` (`client` its client),
    /// with their files in `dir`, creates the node and waits (at most 90 s) until it is
    /// Ready and the controller-manager has made `default/default`.
    pub async fn start(
        kubeconfig: &Path,
        dir: &Path,
        client: &Client,
        cluster: Cluster,
    ) -> Result<Controllers, String> {
        let t0 = Instant::now();
        let bin = binaries()?;
        let kwok = tool_dir("kwok")?;
        for b in [
            bin.join("kube-controller-manager"),
            bin.join("kube-scheduler"),
            kwok.join("kwok"),
        ] {
            if !b.is_file() {
                return Err(format!("{} is missing", b.display()));
            }
        }
        let kubeconfig = kubeconfig.display().to_string();
        let p = |name: &str| dir.join(name).display().to_string();
        let spawn = |name: &str, program: PathBuf, args: Vec<String>| {
            Supervised::spawn(
                name,
                &program,
                args,
                &dir.join(format!("{name}.log")),
                |_| {},
            )
            .map(Mutex::new)
            .map_err(|e| format!("spawn {name}: {e}"))
        };
        let kcm = spawn(
            "kube-controller-manager",
            bin.join("kube-controller-manager"),
            vec![
                format!("--kubeconfig={kubeconfig}"),
                "--secure-port=0".into(),
                "--leader-elect=false".into(),
                match cluster {
                    Cluster::NoGarbageCollector => "--controllers=*,-garbage-collector-controller",
                    Cluster::Whole => "--controllers=*",
                }
                .into(),
                "--use-service-account-credentials=false".into(),
                format!("--service-account-private-key-file={}", p("sa.key")),
                format!("--root-ca-file={}", p("certs/ca.crt")),
                "--concurrent-cron-job-syncs=2".into(),
                "--v=1".into(),
            ],
        )?;
        let scheduler = spawn(
            "kube-scheduler",
            bin.join("kube-scheduler"),
            vec![
                format!("--kubeconfig={kubeconfig}"),
                "--secure-port=0".into(),
                "--leader-elect=false".into(),
                "--v=1".into(),
            ],
        )?;
        let kwok = spawn(
            "kwok",
            kwok.join("kwok"),
            vec![
                format!("--kubeconfig={kubeconfig}"),
                format!("--config={}", root().join("e2e/kwok/kwok.yaml").display()),
            ],
        )?;
        let mut c = Controllers {
            procs: vec![kcm, scheduler, kwok],
            ready: Duration::ZERO,
        };
        create_node(client).await?;
        c.wait_ready(client, t0).await?;
        c.ready = t0.elapsed();
        Ok(c)
    }

    async fn wait_ready(&self, client: &Client, t0: Instant) -> Result<(), String> {
        loop {
            self.check_alive()?;
            let node = get(client, &format!("/api/v1/nodes/{NODE}")).await?;
            let ready = node
                .as_ref()
                .and_then(|n| n["status"]["conditions"].as_array().cloned())
                .unwrap_or_default()
                .iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True");
            let sa = get(client, "/api/v1/namespaces/default/serviceaccounts/default").await?;
            if ready && sa.is_some() {
                return Ok(());
            }
            if t0.elapsed() > Duration::from_secs(90) {
                return Err(format!(
                    "controllers not ready in 90 s (node Ready: {ready}, default \
                     ServiceAccount: {})\n{}",
                    sa.is_some(),
                    self.logs()
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Errors (with the logs' tails) if one of the three has exited.
    pub fn check_alive(&self) -> Result<(), String> {
        for p in &self.procs {
            let mut p = p.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(st) = p.exited() {
                let name = p.name.clone();
                drop(p);
                return Err(format!("{name} exited ({st})\n{}", self.logs()));
            }
        }
        Ok(())
    }

    /// The last lines of the three logs.
    pub fn logs(&self) -> String {
        let mut s = String::new();
        for p in &self.procs {
            let p = p.lock().unwrap_or_else(|e| e.into_inner());
            s.push_str(&format!(
                "----- {} ({}) -----\n{}\n",
                p.name,
                p.log.display(),
                p.log_tail(30)
            ));
        }
        s
    }

    /// Pids of the three.
    pub fn pids(&self) -> Vec<Option<u32>> {
        self.procs
            .iter()
            .map(|p| p.lock().unwrap_or_else(|e| e.into_inner()).pid())
            .collect()
    }

    /// Stops the three (also done on drop).
    pub fn stop(&mut self) {
        for p in &self.procs {
            p.lock().unwrap_or_else(|e| e.into_inner()).stop();
        }
    }

    /// The log file of one of them (`kube-controller-manager`, `kube-scheduler`, `kwok`).
    pub fn log_path(&self, name: &str) -> Option<PathBuf> {
        self.procs
            .iter()
            .map(|p| p.lock().unwrap_or_else(|e| e.into_inner()))
            .find(|p| p.name == name)
            .map(|p| p.log.clone())
    }
}

impl Drop for Controllers {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The simulated node: annotated for kwok, tainted so that only the workload tests' pods go
/// there.
async fn create_node(client: &Client) -> Result<(), String> {
    let node = json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": NODE,
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {"kubernetes.io/hostname": NODE, "kubernetes.io/os": "linux",
                       "kubernetes.io/arch": "amd64", "type": "kwok"}
        },
        "spec": {"taints": [{"key": NODE_TAINT, "value": "true", "effect": "NoSchedule"}]}
    });
    let r = api::send(
        client,
        axum::http::Method::POST,
        "/api/v1/nodes",
        Some(&node),
    )
    .await?;
    match r.status {
        201 | 409 => Ok(()),
        s => Err(format!("create node {NODE}: HTTP {s}: {}", r.body)),
    }
}

async fn get(client: &Client, path: &str) -> Result<Option<Value>, String> {
    let r = api::send(client, axum::http::Method::GET, path, None).await?;
    match r.status {
        200 => Ok(Some(r.body)),
        404 => Ok(None),
        s => Err(format!("GET {path}: HTTP {s}: {}", r.body)),
    }
}

/// Waits (at most `limit`) until `count` pods of `ns` match `selector` and each is bound to
/// the kwok node and Running; returns them sorted by name, or the last list in the error.
pub async fn running_pods(
    client: &Client,
    ns: &str,
    selector: &str,
    count: usize,
    limit: Duration,
) -> Result<Vec<Value>, String> {
    let t0 = Instant::now();
    let path = format!("/api/v1/namespaces/{ns}/pods?labelSelector={selector}");
    loop {
        let r = api::send(client, axum::http::Method::GET, &path, None).await?;
        if r.status != 200 {
            return Err(format!("GET {path}: HTTP {}: {}", r.status, r.body));
        }
        let mut pods = r.body["items"].as_array().cloned().unwrap_or_default();
        let running = pods
            .iter()
            .filter(|p| p["spec"]["nodeName"] == NODE && p["status"]["phase"] == "Running")
            .count();
        if pods.len() == count && running == count {
            pods.sort_by_key(|p| p["metadata"]["name"].as_str().unwrap_or("").to_owned());
            return Ok(pods);
        }
        if t0.elapsed() >= limit {
            return Err(format!(
                "{count} Running pod(s) {selector} in {ns} within {limit:?}; have {}: {}",
                pods.len(),
                Value::from(pods)
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
