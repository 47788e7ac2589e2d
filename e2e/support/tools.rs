//! What every other support module may use, and which uses none of them: the repository
//! root, the tools `scripts/e2e-build.sh` builds, the kube client's crypto provider and its
//! configuration from a kubeconfig file.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};

/// The repository root (the parent of this package's directory, `e2e/`).
pub fn root() -> PathBuf {
    let e2e = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    e2e.parent().unwrap_or(e2e).to_path_buf()
}

/// Installs the process-wide rustls provider the kube client needs (idempotent).
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The directory holding `etcd`, `kube-apiserver`, `kube-controller-manager` and
/// `kube-scheduler`: `$E2E_BIN_DIR`, or what `scripts/e2e-build.sh controlplane` prints.
pub fn binaries() -> Result<PathBuf, String> {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BIN.get_or_init(|| {
        let dir = match std::env::var_os("E2E_BIN_DIR") {
            Some(d) => PathBuf::from(d),
            None => tool_dir("controlplane")?,
        };
        for b in ["etcd", "kube-apiserver"] {
            if !dir.join(b).is_file() {
                return Err(format!("{} has no {b}", dir.display()));
            }
        }
        Ok(dir)
    })
    .clone()
}

/// The directory of a tool built by `scripts/e2e-build.sh TOOL` (`controlplane`, `kwok`,
/// `otelcol`): the script's last stdout line. It builds on first use (progress on stderr).
pub fn tool_dir(tool: &str) -> Result<PathBuf, String> {
    let script = root().join("scripts/e2e-build.sh");
    let out = Command::new(&script)
        .arg(tool)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("running {}: {e}", script.display()))?;
    if !out.status.success() {
        return Err(format!(
            "{} {tool} failed ({})",
            script.display(),
            out.status
        ));
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().rev().find(|l| !l.trim().is_empty());
    Ok(PathBuf::from(
        last.ok_or_else(|| format!("scripts/e2e-build.sh {tool} printed nothing"))?
            .trim(),
    ))
}

/// A kube config from a kubeconfig file, with bounded timeouts.
pub async fn kube_config(path: &Path) -> Result<kube::Config, String> {
    let kc = Kubeconfig::read_from(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .map_err(|e| format!("{}: {e}", path.display()))?;
    config.connect_timeout = Some(Duration::from_secs(10));
    config.read_timeout = Some(Duration::from_secs(60));
    Ok(config)
}
