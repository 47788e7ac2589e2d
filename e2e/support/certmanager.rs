//! cert-manager for real: its controller and CA injector (built by `scripts/e2e-build.sh
//! certmanager` from the `github.com/cert-manager/cert-manager` module, see
//! `e2e/certmanager/main.go`) run as processes against the e2e control plane, its CRDs as its
//! Helm chart ships them, and the cert-manager mode's objects as the product ships them.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use kube::Client;
use serde_json::{Map, Value, json};
use tokio::sync::OnceCell;

use super::api;
use super::process::{Janitor, Supervised};
use super::tools::{root, tool_dir};

/// The annotation by which cert-manager's CA injector fills a webhook configuration's
/// `caBundle` from a Certificate's Secret (`NAMESPACE/CERTIFICATE`).
pub const INJECT_CA_FROM: &str = "cert-manager.io/inject-ca-from";

/// The directory holding `cert-manager` and `crds.yaml`: `$E2E_CERT_MANAGER_DIR`, or what
/// `scripts/e2e-build.sh certmanager` prints (built on first use).
pub fn dir() -> Result<PathBuf, String> {
    static DIR: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = match std::env::var_os("E2E_CERT_MANAGER_DIR") {
            Some(d) => PathBuf::from(d),
            None => tool_dir("certmanager")?,
        };
        for f in ["cert-manager", "crds.yaml"] {
            if !dir.join(f).is_file() {
                return Err(format!("{} has no {f}", dir.display()));
            }
        }
        Ok(dir)
    })
    .clone()
}

/// The `cert-manager=` line of the build's `build-info.txt` (e.g. `v1.21.2`).
pub fn version() -> Result<String, String> {
    let info = dir()?.join("build-info.txt");
    let text = std::fs::read_to_string(&info).map_err(|e| format!("{}: {e}", info.display()))?;
    text.lines()
        .find_map(|l| l.strip_prefix("cert-manager="))
        .map(str::to_owned)
        .ok_or_else(|| format!("{}: no cert-manager= line", info.display()))
}

/// Installs cert-manager's CRDs (its chart's, rendered at build time) once per test
/// process and waits until they are Established.
pub async fn install_crds(client: &Client) -> Result<(), String> {
    static DONE: OnceCell<Result<(), String>> = OnceCell::const_new();
    DONE.get_or_init(|| async { api::install_crds(client, &dir()?.join("crds.yaml")).await })
        .await
        .clone()
}

/// What the cert-manager certificate mode installs besides the default install: its
/// Issuers and Certificates, and the annotations it puts on the MutatingWebhookConfiguration.
/// The one place the tests read that mode from.
pub struct Mode {
    /// The cert-manager.io objects, in the file's order.
    pub objects: Vec<Value>,
    /// The webhook configuration's annotations that belong to this mode
    /// ([`INJECT_CA_FROM`]).
    pub webhook_annotations: Map<String, Value>,
}

/// Reads the cert-manager mode as the overlay `manifests/overlays/cert-manager` renders it
/// (`kubectl kustomize`): the objects of `components/cert-manager` and the inject-ca-from
/// annotation that component adds to the webhook configuration.
pub fn mode() -> Result<Mode, String> {
    // As `kubectl apply -k manifests/overlays/cert-manager` would apply them: the component's
    // Issuers and Certificates, and the annotation it adds to the webhook configuration.
    let docs = super::chart::kustomize(&root().join("manifests/overlays/cert-manager"))?;
    let objects: Vec<Value> = docs
        .iter()
        .filter(|d| {
            d["apiVersion"]
                .as_str()
                .is_some_and(|v| v.starts_with("cert-manager.io/"))
        })
        .cloned()
        .collect();
    let config = docs
        .iter()
        .find(|d| d["kind"] == "MutatingWebhookConfiguration")
        .ok_or("no MutatingWebhookConfiguration in the cert-manager overlay")?;
    let mut webhook_annotations = Map::new();
    if let Some(v) = config["metadata"]["annotations"].get(INJECT_CA_FROM) {
        webhook_annotations.insert(INJECT_CA_FROM.to_owned(), v.clone());
    }
    Ok(Mode {
        objects,
        webhook_annotations,
    })
}

impl Mode {
    /// The mode moved to namespace `ns` (tests share one API server): every object's
    /// `metadata.namespace`, and the namespace part of the inject-ca-from annotation. Names,
    /// references and specs are kept.
    pub fn in_namespace(mut self, ns: &str) -> Mode {
        for o in &mut self.objects {
            o["metadata"]["namespace"] = json!(ns);
        }
        if let Some(Value::String(v)) = self.webhook_annotations.get_mut(INJECT_CA_FROM)
            && let Some((_, name)) = v.split_once('/')
        {
            *v = format!("{ns}/{name}");
        }
        self
    }

    /// The object of this kind and name.
    pub fn object(&self, kind: &str, name: &str) -> Option<&Value> {
        self.objects
            .iter()
            .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
    }

    /// The Certificate whose Secret the webhook serves: the one inject-ca-from names.
    pub fn serving_certificate(&self) -> Result<&Value, String> {
        let from = self
            .webhook_annotations
            .get(INJECT_CA_FROM)
            .and_then(Value::as_str)
            .ok_or("the webhook configuration has no inject-ca-from annotation")?;
        let (_, name) = from
            .split_once('/')
            .ok_or_else(|| format!("{INJECT_CA_FROM}: {from}: not NAMESPACE/NAME"))?;
        self.object("Certificate", name)
            .ok_or_else(|| format!("{INJECT_CA_FROM}: no Certificate {name} in the mode"))
    }

    /// The serving Certificate, mutable (a test's variant of it).
    pub fn serving_certificate_mut(&mut self) -> Result<&mut Value, String> {
        let name = self.serving_certificate()?["metadata"]["name"].clone();
        self.objects
            .iter_mut()
            .find(|o| o["kind"] == "Certificate" && o["metadata"]["name"] == name)
            .ok_or_else(|| "serving Certificate vanished".to_owned())
    }
}

/// cert-manager's controller and CA injector, each its own process under a watchdog,
/// authenticated with `kubeconfig`. Dropping it stops both.
pub struct CertManager {
    pub controller: Supervised,
    pub cainjector: Supervised,
    _dir: tempfile::TempDir,
    _janitor: Janitor,
}

impl CertManager {
    /// Starts `cert-manager controller` and `cert-manager cainjector`; fails if either exits
    /// within the first second (bad flags, no API server).
    pub async fn start(kubeconfig: &Path) -> Result<CertManager, String> {
        let bin = dir()?.join("cert-manager");
        let tmp = tempfile::Builder::new()
            .prefix("otel-injector-e2e-cert-manager.")
            .tempdir()
            .map_err(|e| format!("temp dir: {e}"))?;
        let janitor = Janitor::watch(tmp.path()).map_err(|e| format!("janitor: {e}"))?;
        let spawn = |component: &str| {
            let args = [
                component.to_owned(),
                "--kubeconfig".to_owned(),
                kubeconfig.display().to_string(),
                "-v".to_owned(),
                "2".to_owned(),
            ];
            Supervised::spawn(
                &format!("cert-manager-{component}"),
                &bin,
                &args,
                &tmp.path().join(format!("{component}.log")),
                |cmd| {
                    cmd.env_remove("KUBECONFIG");
                },
            )
            .map_err(|e| format!("spawn {} {component}: {e}", bin.display()))
        };
        let mut controller = spawn("controller")?;
        let mut cainjector = spawn("cainjector")?;
        tokio::time::sleep(Duration::from_secs(1)).await;
        for p in [&mut controller, &mut cainjector] {
            if let Some(st) = p.exited() {
                return Err(format!("{} exited ({st}):\n{}", p.name, p.log_text()));
            }
        }
        Ok(CertManager {
            controller,
            cainjector,
            _dir: tmp,
            _janitor: janitor,
        })
    }

    /// Fails if either process has exited.
    pub fn check_alive(&mut self) -> Result<(), String> {
        for p in [&mut self.controller, &mut self.cainjector] {
            if let Some(st) = p.exited() {
                return Err(format!("{} exited ({st}):\n{}", p.name, p.log_tail(60)));
            }
        }
        Ok(())
    }

    /// The last lines of both logs.
    pub fn logs(&self) -> String {
        format!(
            "----- cert-manager controller ({}) -----\n{}\n----- cert-manager cainjector ({}) -----\n{}",
            self.controller.log.display(),
            self.controller.log_tail(80),
            self.cainjector.log.display(),
            self.cainjector.log_tail(40)
        )
    }
}

impl Drop for CertManager {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", self.logs());
        }
        self.controller.stop();
        self.cainjector.stop();
    }
}

/// A condition of an object's `status.conditions` as (status, reason, message).
pub fn condition<'a>(obj: &'a Value, type_: &str) -> Option<(&'a str, &'a str, &'a str)> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .map(|c| {
            (
                c["status"].as_str().unwrap_or(""),
                c["reason"].as_str().unwrap_or(""),
                c["message"].as_str().unwrap_or(""),
            )
        })
}

/// A Secret projected into a directory the way the kubelet's Secret volume does it (its
/// atomic writer): the keys' files live in a hidden timestamped directory, `..data` is a
/// symlink to it, and each key is a symlink `KEY -> ..data/KEY`. An update writes a new
/// directory, points `..data_tmp` at it and renames that over `..data` (one atomic step: a
/// reader sees the old set of files or the new one, never a mix), then removes the old
/// directory.
pub struct SecretVolume {
    pub dir: PathBuf,
    generation: u32,
}

impl SecretVolume {
    /// An empty volume at `dir` (created).
    pub fn new(dir: &Path) -> Result<SecretVolume, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        Ok(SecretVolume {
            dir: dir.to_owned(),
            generation: 0,
        })
    }

    /// Projects a Secret's `data` (base64 values, as the API returns them).
    pub fn project(&mut self, secret: &Value) -> Result<(), String> {
        use base64::Engine as _;
        let data = secret["data"]
            .as_object()
            .ok_or_else(|| format!("Secret without data: {secret}"))?;
        let io = |what: &str, e: std::io::Error| format!("{what}: {e}");
        self.generation += 1;
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        let payload = format!("..{stamp}.{}", self.generation);
        let new_dir = self.dir.join(&payload);
        std::fs::create_dir(&new_dir).map_err(|e| io("payload dir", e))?;
        for (key, b64) in data {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(b64.as_str().unwrap_or_default())
                .map_err(|e| format!("Secret key {key}: {e}"))?;
            std::fs::write(new_dir.join(key), bytes).map_err(|e| io(key, e))?;
        }
        let data_link = self.dir.join("..data");
        let old = std::fs::read_link(&data_link).ok();
        let tmp_link = self.dir.join("..data_tmp");
        let _ = std::fs::remove_file(&tmp_link);
        std::os::unix::fs::symlink(&payload, &tmp_link).map_err(|e| io("..data_tmp", e))?;
        std::fs::rename(&tmp_link, &data_link).map_err(|e| io("..data", e))?;
        for key in data.keys() {
            let link = self.dir.join(key);
            if std::fs::symlink_metadata(&link).is_err() {
                std::os::unix::fs::symlink(Path::new("..data").join(key), &link)
                    .map_err(|e| io(key, e))?;
            }
        }
        if let Some(old) = old {
            std::fs::remove_dir_all(self.dir.join(old)).map_err(|e| io("old payload", e))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(crt: &str, key: &str) -> Value {
        use base64::Engine as _;
        let b = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        json!({"data": {"tls.crt": b(crt), "tls.key": b(key)}})
    }

    #[test]
    fn a_projected_secret_is_swapped_through_the_data_symlink() {
        let tmp = tempfile::tempdir().unwrap();
        let mut vol = SecretVolume::new(tmp.path()).unwrap();
        vol.project(&secret("crt-1", "key-1")).unwrap();
        let read = |k: &str| std::fs::read_to_string(tmp.path().join(k)).unwrap();
        assert_eq!(
            (read("tls.crt"), read("tls.key")),
            ("crt-1".into(), "key-1".into())
        );
        assert_eq!(
            std::fs::read_link(tmp.path().join("tls.crt")).unwrap(),
            Path::new("..data/tls.crt")
        );
        let first = std::fs::read_link(tmp.path().join("..data")).unwrap();
        vol.project(&secret("crt-2", "key-2")).unwrap();
        assert_eq!(
            (read("tls.crt"), read("tls.key")),
            ("crt-2".into(), "key-2".into())
        );
        let second = std::fs::read_link(tmp.path().join("..data")).unwrap();
        assert_ne!(first, second);
        let mut entries: Vec<String> = std::fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        entries.sort();
        let payload = second.to_string_lossy().into_owned();
        // The payload's name ("..<digits>…") sorts before "..data".
        assert_eq!(
            entries,
            [
                payload,
                "..data".to_owned(),
                "tls.crt".into(),
                "tls.key".into()
            ]
        );
    }
}
