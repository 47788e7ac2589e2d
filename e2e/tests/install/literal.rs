//! The README's install section run as a user pastes it: its `sh` blocks, read from README.md
//! (not copied here), run by `bash -e` with `kubectl` and `helm` against a control plane of
//! its own, for the four paths: Helm with cert-manager, Helm with built-in certificates
//! (`--set certificates.mode=builtIn`, as the README says), the kustomize overlays
//! `cert-manager` and `built-in`. Each ends with the "first instrumented app" block (an
//! Instrumentation and an annotated Deployment: an injected pod, its outcome annotation,
//! `kubectl get otelinst`) and the README's uninstall.
//!
//! What stands in for a real cluster (`real.rs`, e2e/README.md):
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

use std::time::Instant;

use super::real::{CERT_MANAGER_URL, RealCluster, block, lines_starting, sh_blocks};
use crate::support::runner::Images;

#[tokio::test]
async fn the_readme_install_commands_as_written_end_with_an_injected_pod() {
    let blocks = sh_blocks("README.md", "## Install");
    let helm_block = block(&blocks, "helm install");
    let kustomize_block = block(&blocks, "kubectl apply --server-side -k");
    let first_app = block(&blocks, "kubectl create namespace my-app");
    let uninstall = block(&blocks, "helm uninstall");

    let mut cluster = RealCluster::start(&["otel-injector"], Images::default()).await;
    let local = cluster.cert_manager_manifest();
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
    for (what, install, remove) in paths {
        let t0 = Instant::now();
        cluster.sh(&format!("{what}: install"), &install).await;
        cluster.until_served(what, true).await;
        let out = cluster.sh(&format!("{what}: first app"), first_app).await;
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
        let pods = cluster
            .get("/api/v1/namespaces/my-app/pods?labelSelector=app%3Dshop")
            .await
            .unwrap();
        let spec = &pods["items"][0]["spec"];
        assert_eq!(
            spec["initContainers"][0]["name"], "opentelemetry-auto-instrumentation-java",
            "{what}: {spec}"
        );
        // The app's namespace goes while the conversion is served (its Instrumentation is
        // read in v1beta1 on the way out; the README's uninstall section says why).
        cluster.delete_namespace("my-app").await;
        cluster.sh(&format!("{what}: uninstall"), &remove).await;
        cluster.delete_namespace("otel-injector").await;
        cluster
            .cert_manager
            .check_alive()
            .unwrap_or_else(|e| panic!("{e}"));
        eprintln!(
            "[e2e] {what}: installed, injected and removed in {:?}",
            t0.elapsed()
        );
    }
}
