//! The README's install section run as a user pastes it: its `sh` blocks, read from README.md
//! (not copied here), run by `bash -e` with `kubectl` and `helm` against a control plane of
//! its own, for the four paths: Helm with cert-manager, Helm with built-in certificates
//! (`--set certificates.mode=builtIn`, as the README says), the kustomize overlays
//! `cert-manager` and `built-in`. Each ends with the "first instrumented app" block (an
//! Instrumentation and an annotated Deployment: an injected pod, its outcome annotation,
//! `kubectl get otelinst`) and the README's uninstall.
//!
//! What stands in for a real cluster (e2e/README.md):
//! - The replicas' pods are scheduled by the real scheduler on kwok's node; one of them at a
//!   time is run for real, from the image the install names (`agent.rs`: the product's own
//!   binary as that image, its Secret volume, its ServiceAccount token). kwok marks pods
//!   Ready at once, so the test waits for the running replica's `/readyz` where a readiness
//!   probe would hold the Service back, and for the `caBundle` that the installed
//!   certificate source writes.
//! - The API server reaches Services through its egress selector and a proxy (`egress.rs`), as
//!   through a konnectivity server.
//! - `https://github.com/cert-manager/.../cert-manager.yaml` is replaced by a local file: the
//!   cert-manager CRDs of the built release (the real controller and CA injector run as
//!   processes) and its three Deployments, which only kwok runs.
//! - Between two paths the test deletes the namespaces `my-app` (before the uninstall, while
//!   the CRD's conversion is served) and `otel-injector`: each path starts from a cluster
//!   with no install.

use std::path::Path;
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

const CERT_MANAGER_URL: &str =
    "https://github.com/cert-manager/cert-manager/releases/latest/download/cert-manager.yaml";

/// The `sh` blocks of the README's `## Install` section, in order.
fn install_blocks() -> Vec<String> {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let section = readme
        .split("\n## Install\n")
        .nth(1)
        .expect("a ## Install section")
        .split("\n## ")
        .next()
        .unwrap();
    section
        .split("```sh\n")
        .skip(1)
        .map(|b| b.split("\n```").next().unwrap().to_owned())
        .collect()
}

/// The block that contains `marker`.
fn block<'a>(blocks: &'a [String], marker: &str) -> &'a str {
    let found: Vec<&String> = blocks.iter().filter(|b| b.contains(marker)).collect();
    assert_eq!(found.len(), 1, "one README install block with {marker:?}");
    found[0]
}

/// The lines of `script` that start with `prefix`.
fn lines_starting(script: &str, prefix: &str) -> String {
    script
        .lines()
        .filter(|l| l.starts_with(prefix))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// Runs `script` with bash (`-e -o pipefail`), `kubectl` and `helm` on this control plane,
/// from the repository's root; its standard output. (Awaited: the proxy and the agent run on
/// this test's runtime meanwhile.)
async fn sh(cp: &ControlPlane, state: &Path, what: &str, script: &str) -> String {
    let helm_dir = helm_bin().unwrap_or_else(|e| panic!("{e}"));
    let path = format!(
        "{}:{}",
        helm_dir.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = tokio::process::Command::new("bash")
        .args(["-e", "-o", "pipefail", "-c", script])
        .current_dir(root())
        .env("KUBECONFIG", &cp.kubeconfig)
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

/// cert-manager's release manifest, as far as this control plane needs it: its CRDs and its
/// namespace and Deployments (kwok walks their pods; the real controller and CA injector
/// run as processes).
fn cert_manager_manifest(dir: &Path) -> std::path::PathBuf {
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
    let path = dir.join("cert-manager.yaml");
    std::fs::write(&path, docs.join("\n---\n")).unwrap();
    path
}

async fn get(client: &kube::Client, path: &str) -> Option<Value> {
    let r = api::send(client, Method::GET, path, None).await.unwrap();
    (r.status == 200).then_some(r.body)
}

/// Waits (bounded) until the agent runs a replica that answers `/readyz`, and the webhook
/// configuration and the CRD's conversion carry a `caBundle`.
async fn until_served(client: &kube::Client, agent: &Agent, what: &str) {
    let t0 = Instant::now();
    loop {
        let ready = agent.running().is_some()
            && matches!(
                http_get(([127, 0, 0, 1], 8080).into(), "/readyz").await,
                Ok((200, _))
            );
        let config = get(
            client,
            "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/otel-injector",
        )
        .await;
        let crd = get(
            client,
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/instrumentations.opentelemetry.io",
        )
        .await;
        let bundled = |v: &Option<Value>, pointer: &str| {
            v.as_ref()
                .and_then(|v| v.pointer(pointer))
                .and_then(Value::as_str)
                .is_some_and(|b| !b.is_empty())
        };
        if ready
            && bundled(&config, "/webhooks/0/clientConfig/caBundle")
            && bundled(&crd, "/spec/conversion/webhook/clientConfig/caBundle")
        {
            return;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "{what}: not served within 120 s (replica run: {:?}, ready: {ready}, last error: \
             {:?})",
            agent.running(),
            agent.error()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Deletes a namespace and waits until it is gone.
async fn delete_namespace(client: &kube::Client, ns: &str) {
    let path = format!("/api/v1/namespaces/{ns}");
    api::send(client, Method::DELETE, &path, None)
        .await
        .unwrap();
    let t0 = Instant::now();
    while get(client, &path).await.is_some() {
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "{ns} not deleted in 120 s"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

#[tokio::test]
async fn the_readme_install_commands_as_written_end_with_an_injected_pod() {
    let blocks = install_blocks();
    let helm_block = block(&blocks, "helm install");
    let kustomize_block = block(&blocks, "kubectl apply --server-side -k");
    let first_app = block(&blocks, "kubectl create namespace my-app");
    let uninstall = block(&blocks, "helm uninstall");

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

    // The image both install paths name, run as the product's binary.
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
    let image_dir = files.path().join("image");
    std::fs::create_dir(&image_dir).unwrap();
    std::fs::copy(
        env!("CARGO_BIN_EXE_e2e-otel-injector"),
        image_dir.join("otel-injector"),
    )
    .unwrap();
    let images = Images(
        [(
            image,
            Image {
                root: image_dir,
                entrypoint: vec!["/otel-injector".into()],
                cmd: Vec::new(),
                env: vec![("PATH".into(), "/usr/bin:/bin".into())],
                workdir: "/".into(),
            },
        )]
        .into(),
    );
    let agent = Agent::start(
        client.clone(),
        "otel-injector",
        images,
        egress.clone(),
        (&cp.url, &cp.ca_pem),
        cp.dir.clone(),
    );
    let mut cert_manager = CertManager::start(&cp.kubeconfig)
        .await
        .unwrap_or_else(|e| panic!("{e}"));

    let local = cert_manager_manifest(files.path());
    let with_cert_manager = helm_block.replace(CERT_MANAGER_URL, local.to_str().unwrap());
    assert_ne!(
        with_cert_manager, helm_block,
        "the README installs cert-manager from {CERT_MANAGER_URL}"
    );
    let helm_install = lines_starting(helm_block, "helm install");
    let built_in_overlay =
        kustomize_block.replacen("overlays/cert-manager", "overlays/built-in", 1);
    let helm_uninstall = lines_starting(uninstall, "helm uninstall");
    let kustomize_uninstall = lines_starting(uninstall, "kubectl delete");
    let paths = [
        (
            "Helm with cert-manager",
            with_cert_manager,
            helm_uninstall.clone(),
        ),
        (
            "Helm with built-in certificates",
            format!(
                "{} --set certificates.mode=builtIn\n",
                helm_install.trim_end()
            ),
            helm_uninstall,
        ),
        (
            "kustomize overlay cert-manager",
            kustomize_block.to_owned(),
            kustomize_uninstall.clone(),
        ),
        (
            "kustomize overlay built-in",
            built_in_overlay,
            kustomize_uninstall.replacen("overlays/cert-manager", "overlays/built-in", 1),
        ),
    ];
    let state = files.path().join("helm");
    for (what, install, remove) in paths {
        let t0 = Instant::now();
        sh(&cp, &state, &format!("{what}: install"), &install).await;
        until_served(&client, &agent, what).await;
        let out = sh(&cp, &state, &format!("{what}: first app"), first_app).await;
        let outcome = out
            .lines()
            .find(|l| l.starts_with("java="))
            .unwrap_or_else(|| panic!("{what}: no outcome annotation printed:\n{out}"));
        let (head, hash) = outcome.rsplit_once(' ').unwrap();
        assert_eq!(head, "java=injected my-app/default", "{what}: {out}");
        assert!(
            hash.len() == 8 && hash.chars().all(|c| c.is_ascii_hexdigit()),
            "{out}"
        );
        assert!(
            out.lines().any(|l| l.starts_with("default ")),
            "{what}: get otelinst:\n{out}"
        );
        let pods = get(
            &client,
            "/api/v1/namespaces/my-app/pods?labelSelector=app%3Dshop",
        )
        .await
        .unwrap();
        let spec = &pods["items"][0]["spec"];
        assert_eq!(
            spec["initContainers"][0]["name"], "opentelemetry-auto-instrumentation-java",
            "{what}: {spec}"
        );
        // The app's namespace goes while the conversion is served (its Instrumentation is
        // read in v1beta1 on the way out; the README's uninstall section says why).
        delete_namespace(&client, "my-app").await;
        sh(&cp, &state, &format!("{what}: uninstall"), &remove).await;
        delete_namespace(&client, "otel-injector").await;
        cert_manager.check_alive().unwrap_or_else(|e| panic!("{e}"));
        eprintln!(
            "[e2e] {what}: installed, injected and removed in {:?}",
            t0.elapsed()
        );
    }
}
