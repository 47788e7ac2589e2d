//! The Helm chart `charts/otel-injector` as the e2e tests use it: `helm` built from its Go
//! module (`scripts/e2e-build.sh helm`), `helm template` rendered into documents and into a
//! file (the harness registers webhook configurations from files), and the helm and kubectl
//! commands of the README run against a control plane.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use serde_json::Value;

use super::controlplane::ControlPlane;
use super::tools::{root, tool_dir};

/// The `helm` binary (built on first use, then cached).
pub fn helm_bin() -> Result<PathBuf, String> {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BIN.get_or_init(|| Ok(tool_dir("helm")?.join("helm")))
        .clone()
}

/// What a command printed and whether it succeeded.
#[derive(Debug)]
pub struct Output {
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
}

fn run(mut cmd: Command) -> Result<Output, String> {
    let what = format!("{cmd:?}");
    let out = cmd
        .current_dir(root())
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{what}: {e}"))?;
    Ok(Output {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    })
}

/// `helm ARGS` with its state directories under `state` (and `--kubeconfig` of `cp`, if
/// given).
pub fn helm(cp: Option<&ControlPlane>, state: &Path, args: &[&str]) -> Result<Output, String> {
    let mut cmd = Command::new(helm_bin()?);
    cmd.args(args)
        .env("HELM_CACHE_HOME", state.join("cache"))
        .env("HELM_CONFIG_HOME", state.join("config"))
        .env("HELM_DATA_HOME", state.join("data"))
        .env_remove("KUBECONFIG");
    if let Some(cp) = cp {
        cmd.arg("--kubeconfig").arg(&cp.kubeconfig);
    }
    run(cmd)
}

/// `kubectl ARGS --kubeconfig` of `cp` (the machine image's kubectl).
pub fn kubectl(cp: &ControlPlane, args: &[&str]) -> Result<Output, String> {
    let mut cmd = Command::new("kubectl");
    cmd.args(args)
        .arg("--kubeconfig")
        .arg(&cp.kubeconfig)
        .env_remove("KUBECONFIG");
    run(cmd)
}

/// Documents of a multi-document YAML text (empty ones skipped).
pub fn docs(text: &str) -> Result<Vec<Value>, String> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(text).map_err(|e| e.to_string())?;
    Ok(docs.into_iter().filter(|d| !d.is_null()).collect())
}

/// `helm template otel-injector charts/otel-injector -n otel-injector --set S...` as
/// documents: the names of the kustomize manifests.
pub fn render(sets: &[&str]) -> Result<Vec<Value>, String> {
    let state = tempfile::tempdir().map_err(|e| e.to_string())?;
    let mut args = vec![
        "template",
        "otel-injector",
        "charts/otel-injector",
        "--namespace",
        "otel-injector",
    ];
    for s in sets {
        args.extend(["--set", s]);
    }
    let out = helm(None, state.path(), &args)?;
    if !out.ok {
        return Err(format!("helm template {sets:?}: {}", out.stderr));
    }
    docs(&out.stdout)
}

/// The chart's default rendering (cert-manager, every pod sent), written once per test
/// process into Cargo's temp dir for integration tests (`target/tmp`).
pub fn default_rendering_file() -> Result<PathBuf, String> {
    static FILE: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    FILE.get_or_init(|| {
        let docs = render(&[])?;
        let dir = option_env!("CARGO_TARGET_TMPDIR")
            .map(PathBuf::from)
            .unwrap_or_else(std::env::temp_dir);
        let path = dir.join("otel-injector-chart-default.yaml");
        // Written beside and renamed: another test process may be reading it.
        let part = dir.join(format!(
            "otel-injector-chart-default.{}",
            std::process::id()
        ));
        let text = docs
            .iter()
            .map(|d| serde_json::to_string(d).map_err(|e| e.to_string()))
            .collect::<Result<Vec<_>, _>>()?
            .join("\n---\n");
        std::fs::write(&part, text).map_err(|e| format!("{}: {e}", part.display()))?;
        std::fs::rename(&part, &path).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(path)
    })
    .clone()
}

/// `kubectl kustomize DIR` as documents.
pub fn kustomize(dir: &Path) -> Result<Vec<Value>, String> {
    let mut cmd = Command::new("kubectl");
    cmd.arg("kustomize").arg(dir);
    let out = run(cmd)?;
    if !out.ok {
        return Err(format!(
            "kubectl kustomize {}: {}",
            dir.display(),
            out.stderr
        ));
    }
    docs(&out.stdout)
}

/// `manifests/base` with these `manifests/components/` (a kustomization in a temp dir, as a
/// user combines them), rendered.
pub fn kustomize_components(components: &[&str]) -> Result<Vec<Value>, String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    // Relative: kustomize refuses absolute paths. Both are absolute.
    let up = dir.path().components().count() - 1;
    let mut manifests: PathBuf = std::iter::repeat_n("..", up).collect();
    manifests.push(
        root()
            .join("manifests")
            .strip_prefix("/")
            .map_err(|e| e.to_string())?,
    );
    let mut text = format!(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - {}\n\
         components:\n",
        manifests.join("base").display()
    );
    for c in components {
        text.push_str(&format!(
            "  - {}\n",
            manifests.join("components").join(c).display()
        ));
    }
    std::fs::write(dir.path().join("kustomization.yaml"), text).map_err(|e| e.to_string())?;
    kustomize(dir.path())
}

/// `Kind/name` of a document.
pub fn id(doc: &Value) -> String {
    format!(
        "{}/{}",
        doc["kind"].as_str().unwrap_or_default(),
        doc["metadata"]["name"].as_str().unwrap_or_default()
    )
}
