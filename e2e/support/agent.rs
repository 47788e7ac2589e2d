//! A node agent for the pods of some images, where kwok only walks pods through their
//! statuses: it runs (with the pod runner, `runner.rs`) a pod that is bound to a node and
//! whose every container image it has, one pod at a time per namespace (the pods of one
//! Deployment listen on the same host ports here), stops it when the pod is deleted, then
//! runs the next, and
//! routes each Service that selects the running pod through the egress proxy
//! (`egress.rs`: `clusterIP:port` → `127.0.0.1:<container port>`).
//!
//! What the ServiceAccount admission plugin (off in the e2e control plane) and the kubelet
//! would add, it adds to its own copy of the pod: the ServiceAccount's token (a TokenRequest
//! of the pod's `serviceAccountName`), the API server's CA and the namespace at
//! `/var/run/secrets/kubernetes.io/serviceaccount` (from a Secret `kube-api-access-<pod>` it
//! writes, the runner's secret volume), and `KUBERNETES_SERVICE_HOST`/`_PORT`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::Method;
use kube::Client;
use serde_json::{Value, json};

use super::api;
use super::egress::Egress;
use super::runner::{self, Images, RunningPod};

/// Where the ServiceAccount's files go in a container.
const SA_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// What the agent does now, for the test to wait on and to print.
#[derive(Default)]
struct State {
    /// The pod it runs in each namespace: namespace → name.
    running: BTreeMap<String, String>,
    /// Its processes, by namespace (here so that dropping the agent stops them at once).
    pods: BTreeMap<String, RunningPod>,
    /// The last error of a start or a route.
    error: Option<String>,
}

/// The running agent; dropping it stops the pod it runs.
pub struct Agent {
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
}

impl Agent {
    /// Runs the pods of these namespaces whose images are all in `images`; `api_server` is
    /// the API server's URL and `ca_pem` its CA, as the pods' in-cluster configuration sees
    /// them.
    pub fn start(
        client: Client,
        namespaces: &[&str],
        images: Images,
        egress: Arc<Egress>,
        (api_server, ca_pem): (&str, &str),
        dir: PathBuf,
    ) -> Agent {
        let state = Arc::new(Mutex::new(State::default()));
        let node = Node {
            client,
            namespaces: namespaces.iter().map(|n| n.to_string()).collect(),
            images,
            egress,
            api_server: api_server.to_owned(),
            ca_pem: ca_pem.to_owned(),
            dir,
            state: state.clone(),
        };
        Agent {
            state,
            task: tokio::spawn(node.run()),
        }
    }

    /// The pod it runs in `namespace`.
    pub fn running(&self, namespace: &str) -> Option<String> {
        self.state.lock().unwrap().running.get(namespace).cloned()
    }

    /// The last error it met, if any.
    pub fn error(&self) -> Option<String> {
        self.state.lock().unwrap().error.clone()
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.task.abort();
        // Stopped now (each waits for its processes), before the host's ports are reused.
        let pods = std::mem::take(&mut self.state.lock().unwrap_or_else(|e| e.into_inner()).pods);
        drop(pods);
    }
}

struct Node {
    client: Client,
    namespaces: Vec<String>,
    images: Images,
    egress: Arc<Egress>,
    api_server: String,
    ca_pem: String,
    dir: PathBuf,
    state: Arc<Mutex<State>>,
}

/// A pod it runs (its processes are in [`State::pods`]) and the Service addresses routed to
/// it.
struct Current {
    uid: String,
    routes: Vec<String>,
}

impl Node {
    async fn run(self) {
        let mut current: BTreeMap<String, Option<Current>> = BTreeMap::new();
        loop {
            for ns in &self.namespaces {
                let now = current.entry(ns.clone()).or_default();
                if let Err(e) = self.step(ns, now).await {
                    self.state.lock().unwrap().error = Some(e);
                }
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }

    async fn get(&self, path: &str) -> Result<Value, String> {
        let r = api::send(&self.client, Method::GET, path, None).await?;
        if r.status != 200 {
            return Err(format!("GET {path}: HTTP {}: {}", r.status, r.body));
        }
        Ok(r.body)
    }

    /// One look at the pods of `ns`: stop the one run if it is gone, else start one; route.
    async fn step(&self, ns: &str, current: &mut Option<Current>) -> Result<(), String> {
        let pods = self.get(&format!("/api/v1/namespaces/{ns}/pods")).await?;
        let pods = pods["items"].as_array().cloned().unwrap_or_default();
        let live = |p: &&Value| {
            p["metadata"]["deletionTimestamp"].is_null() && p["spec"]["nodeName"].is_string()
        };
        if let Some(c) = current
            && !pods
                .iter()
                .filter(live)
                .any(|p| p["metadata"]["uid"] == c.uid.as_str())
        {
            for r in &c.routes {
                self.egress.route(r, None);
            }
            *current = None;
            let mut state = self.state.lock().unwrap();
            state.running.remove(ns);
            let stopped = state.pods.remove(ns);
            drop(state);
            drop(stopped);
        }
        if current.is_none() {
            let ours = pods.iter().filter(live).find(|p| {
                containers(p).all(|c| {
                    c["image"]
                        .as_str()
                        .is_some_and(|i| self.images.0.contains_key(i))
                })
            });
            let Some(pod) = ours else {
                return Ok(());
            };
            let name = pod["metadata"]["name"].as_str().unwrap_or_default();
            let running = runner::run(
                &self.client,
                &self.with_service_account(ns, pod).await?,
                &self.images,
                &self.dir,
            )
            .await?;
            *current = Some(Current {
                uid: pod["metadata"]["uid"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                routes: Vec::new(),
            });
            let mut state = self.state.lock().unwrap();
            state.running.insert(ns.to_owned(), name.to_owned());
            state.pods.insert(ns.to_owned(), running);
            eprintln!("[e2e] node agent: runs pod {ns}/{name}");
        }
        let Some(c) = current else { return Ok(()) };
        let pod = pods
            .iter()
            .find(|p| p["metadata"]["uid"] == c.uid.as_str())
            .cloned()
            .unwrap_or_default();
        let services = self
            .get(&format!("/api/v1/namespaces/{ns}/services"))
            .await?;
        for svc in services["items"].as_array().into_iter().flatten() {
            for (from, to) in routes(svc, &pod) {
                if !c.routes.contains(&from) {
                    c.routes.push(from.clone());
                }
                self.egress.route(&from, Some(to));
            }
        }
        Ok(())
    }

    /// The pod as the ServiceAccount admission plugin and the kubelet would give it: its
    /// token, the CA and the namespace mounted where client libraries read them, and the
    /// API server's address in the environment.
    async fn with_service_account(&self, ns: &str, pod: &Value) -> Result<Value, String> {
        let name = pod["metadata"]["name"].as_str().unwrap_or_default();
        let sa = pod["spec"]["serviceAccountName"]
            .as_str()
            .unwrap_or("default");
        let request = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600}});
        let path = format!("/api/v1/namespaces/{ns}/serviceaccounts/{sa}/token");
        let r = api::send(&self.client, Method::POST, &path, Some(&request)).await?;
        let token = r.body["status"]["token"]
            .as_str()
            .ok_or_else(|| format!("POST {path}: HTTP {}: {}", r.status, r.body))?;
        let secret = format!("kube-api-access-{name}");
        let body = json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": secret, "namespace": ns},
            "stringData": {"token": token, "ca.crt": self.ca_pem, "namespace": ns}});
        let r = api::send(
            &self.client,
            Method::POST,
            &format!("/api/v1/namespaces/{ns}/secrets"),
            Some(&body),
        )
        .await?;
        if r.status != 201 && r.status != 409 {
            return Err(format!(
                "create Secret {secret}: HTTP {}: {}",
                r.status, r.body
            ));
        }
        let url: url_parts::Url = self.api_server.parse()?;
        let mut pod = pod.clone();
        let volumes = &mut pod["spec"]["volumes"];
        if volumes.is_null() {
            *volumes = json!([]);
        }
        volumes
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "kube-api-access", "secret": {"secretName": secret}}));
        for c in pod["spec"]["containers"]
            .as_array_mut()
            .into_iter()
            .flatten()
        {
            let mounts = &mut c["volumeMounts"];
            if mounts.is_null() {
                *mounts = json!([]);
            }
            mounts
                .as_array_mut()
                .unwrap()
                .push(json!({"name": "kube-api-access", "mountPath": SA_DIR, "readOnly": true}));
            let env = &mut c["env"];
            if env.is_null() {
                *env = json!([]);
            }
            let env = env.as_array_mut().unwrap();
            env.push(json!({"name": "KUBERNETES_SERVICE_HOST", "value": url.host}));
            env.push(json!({"name": "KUBERNETES_SERVICE_PORT", "value": url.port}));
        }
        Ok(pod)
    }
}

fn containers(pod: &Value) -> impl Iterator<Item = &Value> {
    ["initContainers", "containers"]
        .into_iter()
        .flat_map(|k| pod["spec"][k].as_array().into_iter().flatten())
}

/// The routes of Service `svc` to `pod` if its selector selects the pod: each port's
/// `clusterIP:port` → `127.0.0.1:<targetPort>` (a name resolved in the pod's ports).
fn routes(svc: &Value, pod: &Value) -> Vec<(String, SocketAddr)> {
    let selector = svc["spec"]["selector"].as_object();
    let labels = &pod["metadata"]["labels"];
    let selects = selector.is_some_and(|s| !s.is_empty() && s.iter().all(|(k, v)| labels[k] == *v));
    let Some(ip) = svc["spec"]["clusterIP"].as_str().filter(|_| selects) else {
        return Vec::new();
    };
    let by_name: BTreeMap<&str, u64> = containers(pod)
        .flat_map(|c| c["ports"].as_array().into_iter().flatten())
        .filter_map(|p| Some((p["name"].as_str()?, p["containerPort"].as_u64()?)))
        .collect();
    svc["spec"]["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| {
            let port = p["port"].as_u64()?;
            let target = match &p["targetPort"] {
                Value::Number(n) => n.as_u64()?,
                Value::String(name) => *by_name.get(name.as_str())?,
                _ => port,
            };
            let to = SocketAddr::from(([127, 0, 0, 1], u16::try_from(target).ok()?));
            Some((format!("{ip}:{port}"), to))
        })
        .collect()
}

/// The host and port of an `https://host:port` URL.
mod url_parts {
    pub struct Url {
        pub host: String,
        pub port: String,
    }

    impl std::str::FromStr for Url {
        type Err = String;

        fn from_str(s: &str) -> Result<Url, String> {
            let rest = s
                .strip_prefix("https://")
                .ok_or_else(|| format!("not an https URL: {s}"))?;
            let (host, port) = rest
                .trim_end_matches('/')
                .rsplit_once(':')
                .ok_or_else(|| format!("no port in {s}"))?;
            Ok(Url {
                host: host.to_owned(),
                port: port.to_owned(),
            })
        }
    }
}
