//! A control plane where installs run as in a cluster: its replicas' pods run for real (the
//! node agent, `support/agent.rs`), the API server reaches Services through its egress
//! selector and a proxy (`support/egress.rs`, as through konnectivity), cert-manager's
//! controller and CA injector run, every pod may go on kwok's node, and the garbage collector
//! runs. Commands run as a user pastes them ([`RealCluster::sh`]). Used by the README's
//! install (`literal.rs`) and the switch from the Operator (`switch.rs`).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::Method;
use serde_json::{Value, json};

use crate::support::agent::Agent;
use crate::support::api;
use crate::support::certmanager::{self, CertManager};
use crate::support::chart::{self, helm_bin};
use crate::support::controllers::{Cluster, NODE};
use crate::support::controlplane::ControlPlane;
use crate::support::egress::Egress;
use crate::support::runner::{Image, Images};
use crate::support::tools::root;
use crate::support::webhook::http_get;

/// Where the README installs cert-manager from.
pub(super) const CERT_MANAGER_URL: &str =
    "https://github.com/cert-manager/cert-manager/releases/latest/download/cert-manager.yaml";

/// The `sh` blocks of a markdown file's section `heading` (a `## ` line), in order, without
/// the indentation of a block inside a list item.
pub(super) fn sh_blocks(file: &str, heading: &str) -> Vec<String> {
    let text = std::fs::read_to_string(root().join(file)).unwrap();
    let section = text
        .split(&format!("\n{heading}\n"))
        .nth(1)
        .unwrap_or_else(|| panic!("{file} has no section {heading}"))
        .split("\n## ")
        .next()
        .unwrap();
    let mut blocks = Vec::new();
    let mut open: Option<(usize, String)> = None;
    for line in section.lines() {
        let indent = line.len() - line.trim_start().len();
        match &mut open {
            None if line.trim() == "```sh" => open = Some((indent, String::new())),
            Some(_) if line.trim() == "```" => blocks.push(open.take().unwrap().1),
            Some((strip, block)) => {
                block.push_str(line.get(*strip..).unwrap_or(line.trim_start()));
                block.push('\n');
            }
            None => {}
        }
    }
    blocks
}

/// The block that contains `marker`.
pub(super) fn block<'a>(blocks: &'a [String], marker: &str) -> &'a str {
    let found: Vec<&String> = blocks.iter().filter(|b| b.contains(marker)).collect();
    assert_eq!(found.len(), 1, "one block with {marker:?}");
    found[0]
}

/// The lines of `script` that start with `prefix`.
pub(super) fn lines_starting(script: &str, prefix: &str) -> String {
    script
        .lines()
        .filter(|l| l.starts_with(prefix))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// An image of a directory whose `entrypoint` runs.
pub(super) fn image(root: PathBuf, entrypoint: &[&str]) -> Image {
    Image {
        root,
        entrypoint: entrypoint.iter().map(|s| s.to_string()).collect(),
        cmd: Vec::new(),
        env: vec![("PATH".into(), "/usr/bin:/bin".into())],
        workdir: "/".into(),
    }
}

/// The image the chart and the overlays name (one image: asserted).
pub(super) fn product_image() -> String {
    let rendered = chart::render(&[]).unwrap_or_else(|e| panic!("{e}"));
    let overlay = chart::kustomize(&root().join("manifests/overlays/cert-manager"))
        .unwrap_or_else(|e| panic!("{e}"));
    let image_of = |docs: &[Value]| {
        docs.iter().find(|d| d["kind"] == "Deployment").unwrap()["spec"]["template"]["spec"]
            ["containers"][0]["image"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let image = image_of(&rendered);
    assert_eq!(
        image_of(&overlay),
        image,
        "the chart and the overlay name one image"
    );
    image
}

/// One real cluster at a time: their replicas listen on the host's ports 9443 and 8080.
static HOST_PORTS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

pub(super) struct RealCluster {
    pub cp: ControlPlane,
    pub agent: Agent,
    pub cert_manager: CertManager,
    pub files: tempfile::TempDir,
    _egress: Arc<Egress>,
    _ports: tokio::sync::MutexGuard<'static, ()>,
}

impl RealCluster {
    /// Starts it; the agent runs, in `namespaces`, the pods of the product's image (its own
    /// binary) and of `images`.
    pub async fn start(namespaces: &[&str], images: Images) -> RealCluster {
        let ports = HOST_PORTS.lock().await;
        let files = tempfile::tempdir().unwrap();
        let egress = Arc::new(
            Egress::start(&files.path().join("egress.sock"))
                .await
                .unwrap(),
        );
        let config = files.path().join("egress.yaml");
        egress.write_config(&config).unwrap();
        let mut cp =
            ControlPlane::start_with(&["--egress-selector-config-file", config.to_str().unwrap()])
                .await
                .unwrap_or_else(|e| panic!("{e}"));
        cp.start_cluster(Cluster::Whole)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let client = cp.client();
        // Every pod may go on the node (the README's workloads tolerate nothing).
        let r = api::merge_patch(
            &client,
            &format!("/api/v1/nodes/{NODE}"),
            &json!({"spec": {"taints": null}}),
        )
        .await
        .unwrap();
        assert_eq!(r.status, 200, "{}", r.body);
        let image_dir = files.path().join("product-image");
        std::fs::create_dir(&image_dir).unwrap();
        std::fs::copy(
            env!("CARGO_BIN_EXE_e2e-otel-injector"),
            image_dir.join("otel-injector"),
        )
        .unwrap();
        let mut images = images;
        images
            .0
            .insert(product_image(), image(image_dir, &["/otel-injector"]));
        let agent = Agent::start(
            client,
            namespaces,
            images,
            egress.clone(),
            (&cp.url, &cp.ca_pem),
            cp.dir.clone(),
        );
        let cert_manager = CertManager::start(&cp.kubeconfig)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        RealCluster {
            cp,
            agent,
            cert_manager,
            files,
            _egress: egress,
            _ports: ports,
        }
    }

    pub fn client(&self) -> kube::Client {
        self.cp.client()
    }

    /// cert-manager's release manifest, as far as this control plane needs it: its CRDs and
    /// its namespace and Deployments (kwok walks their pods; the real controller and CA
    /// injector run as processes).
    pub fn cert_manager_manifest(&self) -> PathBuf {
        let crds = std::fs::read_to_string(certmanager::dir().unwrap().join("crds.yaml")).unwrap();
        let mut docs = vec![crds];
        docs.push("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: cert-manager\n".into());
        for name in [
            "cert-manager",
            "cert-manager-cainjector",
            "cert-manager-webhook",
        ] {
            docs.push(format!(
                "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\n  namespace: \
                 cert-manager\nspec:\n  selector:\n    matchLabels: {{app: {name}}}\n  template:\n    \
                 metadata:\n      labels: {{app: {name}}}\n    spec:\n      containers:\n      - \
                 name: {name}\n        image: quay.io/jetstack/{name}:v1\n"
            ));
        }
        let path = self.files.path().join("cert-manager.yaml");
        std::fs::write(&path, docs.join("\n---\n")).unwrap();
        path
    }

    /// Runs `script` with bash (`-e -o pipefail`), `kubectl`, `helm` and `otel-injector` on
    /// this control plane, from the repository's root; its standard output. (Awaited: the
    /// proxy and the agent run on this test's runtime meanwhile.)
    pub async fn sh(&self, what: &str, script: &str) -> String {
        let bin = self.files.path().join("bin");
        if !bin.exists() {
            std::fs::create_dir(&bin).unwrap();
            std::os::unix::fs::symlink(
                env!("CARGO_BIN_EXE_e2e-otel-injector"),
                bin.join("otel-injector"),
            )
            .unwrap();
            std::os::unix::fs::symlink(helm_bin().unwrap(), bin.join("helm")).unwrap();
        }
        let path = format!(
            "{}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let state = self.files.path().join("helm");
        let out = tokio::process::Command::new("bash")
            .args(["-e", "-o", "pipefail", "-c", script])
            .current_dir(root())
            .env("KUBECONFIG", &self.cp.kubeconfig)
            .env("PATH", path)
            .env("HELM_CACHE_HOME", state.join("cache"))
            .env("HELM_CONFIG_HOME", state.join("config"))
            .env("HELM_DATA_HOME", state.join("data"))
            .output()
            .await
            .unwrap();
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        );
        assert!(
            out.status.success(),
            "{what}: {}\n--- script ---\n{script}\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}",
            out.status
        );
        eprintln!("[e2e] {what}: done");
        stdout
    }

    pub async fn get(&self, path: &str) -> Option<Value> {
        let r = api::send(&self.client(), Method::GET, path, None)
            .await
            .unwrap();
        (r.status == 200).then_some(r.body)
    }

    /// Waits (bounded) until the agent runs a replica in `otel-injector` that answers
    /// `/readyz`, the webhook configuration and the CRD's conversion carry a `caBundle`
    /// (the CRD's only when `conversion`), and the API server has taken them: a dry-run pod
    /// asking for Java in `default` gets this webhook's outcome annotation (a skip: there is
    /// no Instrumentation there).
    pub async fn until_served(&self, what: &str, conversion: bool) {
        let t0 = Instant::now();
        let probe = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "served", "annotations":
                {"instrumentation.opentelemetry.io/inject-java": "true"}},
            "spec": {"containers": [{"name": "app", "image": "app:1"}]}});
        loop {
            let ready = self.agent.running("otel-injector").is_some()
                && matches!(
                    http_get(([127, 0, 0, 1], 8080).into(), "/readyz").await,
                    Ok((200, _))
                );
            let config = self
                .get("/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/otel-injector")
                .await;
            let crd = self
                .get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/instrumentations.opentelemetry.io")
                .await;
            let bundled = |v: &Option<Value>, pointer: &str| {
                v.as_ref()
                    .and_then(|v| v.pointer(pointer))
                    .and_then(Value::as_str)
                    .is_some_and(|b| !b.is_empty())
            };
            if ready
                && bundled(&config, "/webhooks/0/clientConfig/caBundle")
                && (!conversion || bundled(&crd, "/spec/conversion/webhook/clientConfig/caBundle"))
            {
                let r = api::create_pod(&self.client(), "default", &probe, true)
                    .await
                    .unwrap();
                if r.body["metadata"]["annotations"]["otel-injector/status"].is_string() {
                    return;
                }
            }
            assert!(
                t0.elapsed() < Duration::from_secs(120),
                "{what}: not served within 120 s (replica run: {:?}, ready: {ready}, last \
                 error: {:?})",
                self.agent.running("otel-injector"),
                self.agent.error()
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }

    /// Deletes a namespace and waits until it is gone.
    pub async fn delete_namespace(&self, ns: &str) {
        let path = format!("/api/v1/namespaces/{ns}");
        api::send(&self.client(), Method::DELETE, &path, None)
            .await
            .unwrap();
        let t0 = Instant::now();
        while self.get(&path).await.is_some() {
            assert!(
                t0.elapsed() < Duration::from_secs(120),
                "{ns} not deleted in 120 s"
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
}
