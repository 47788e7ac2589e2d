//! The pod's sandbox as a kubelet would make it: its volumes (emptyDir, configMap, secret,
//! downwardAPI, projected), their sources, and the namespaces it runs in.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use kube::Client;
use serde_json::Value;

use super::super::kubelet::{self, Sources};
use super::{Env, Images, get};

/// The bwrap arguments for one container, and its environment.
pub(super) fn sandbox(
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

pub(super) struct Volume {
    dir: PathBuf,
    read_only: bool,
    /// An image volume: `dir` is the image's root (shared, never written).
    image: bool,
}

pub(super) fn volumes(
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
pub(super) fn downward_api(pod: &Value, source: &Value, dir: &Path) -> Result<(), String> {
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
pub(super) async fn sources(client: &Client, ns: &str) -> Result<Sources, String> {
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
