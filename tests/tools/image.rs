//! The daemonless image (`scripts/image.sh`), read as a registry and a container runtime
//! would read it: the OCI layout, the manifest, the config (user, entrypoint, labels), the
//! size, the SBOM, and the binary taken out of the layer, run alone in a sandbox whose root
//! is that layer (no libc, no /etc), answering `--version` and one admission review.
//!
//! `#[ignore]`d: they read `target/image/<arch>/`, which `just image-test` builds first
//! (`scripts/image.sh`, a release build) and then runs them with `--ignored`.

mod alone;

#[path = "../../build/info.rs"]
#[allow(dead_code)] // the commit check is not used here
mod info;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

/// The size budget of the image as a registry stores it (manifest, config, layer), in bytes.
const MAX_COMPRESSED: u64 = 15_000_000;

fn arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => panic!("no image for {other}"),
    }
}

fn image_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target/image")
        .join(arch());
    assert!(
        dir.join("oci/index.json").is_file(),
        "{} has no image: run `scripts/just image-test` (or scripts/image.sh first)",
        dir.display()
    );
    dir
}

fn sha256_hex(bytes: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, bytes)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A blob of the layout, checked against its digest.
fn blob(digest: &str) -> Vec<u8> {
    let hex = digest.strip_prefix("sha256:").expect(digest);
    let path = image_dir().join("oci/blobs/sha256").join(hex);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(
        sha256_hex(&bytes),
        hex,
        "{} is not its digest",
        path.display()
    );
    bytes
}

fn json_of(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).expect("JSON")
}

/// The one image of the layout: its manifest's bytes and JSON.
fn manifest() -> (Vec<u8>, Value) {
    let dir = image_dir();
    assert_eq!(
        json_of(&std::fs::read(dir.join("oci/oci-layout")).unwrap()),
        json!({"imageLayoutVersion": "1.0.0"})
    );
    let index = json_of(&std::fs::read(dir.join("oci/index.json")).unwrap());
    assert_eq!(index["schemaVersion"], 2, "{index}");
    let manifests = index["manifests"].as_array().expect("manifests");
    assert_eq!(manifests.len(), 1, "{index}");
    let desc = &manifests[0];
    assert_eq!(
        desc["mediaType"], "application/vnd.oci.image.manifest.v1+json",
        "{index}"
    );
    let bytes = blob(desc["digest"].as_str().unwrap());
    assert_eq!(desc["size"], bytes.len(), "{index}");
    let m = json_of(&bytes);
    (bytes, m)
}

fn git(args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(env!("CARGO_MANIFEST_DIR"))
        .args(args)
        .output()
        .expect("git");
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// What the script labels the image with: the checked-out commit and its time.
fn expected_labels() -> BTreeMap<String, String> {
    let created = info::rfc3339(git(&["log", "-1", "--format=%ct", "HEAD"]).parse().unwrap());
    [
        ("title", "otel-injector".to_owned()),
        (
            "description",
            "OpenTelemetry auto-instrumentation admission webhook for Kubernetes".to_owned(),
        ),
        (
            "source",
            "https://github.com/otel-injector/otel-injector".to_owned(),
        ),
        ("version", env!("CARGO_PKG_VERSION").to_owned()),
        ("revision", git(&["rev-parse", "HEAD"])),
        ("created", created),
        ("licenses", "Apache-2.0".to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (format!("org.opencontainers.image.{k}"), v))
    .collect()
}

fn string_map(v: &Value) -> BTreeMap<String, String> {
    serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("{v}: {e}"))
}

/// The layer, decompressed (gzip(1): the layer's media type says gzip).
fn layer_tar(m: &Value) -> Vec<u8> {
    let layers = m["layers"].as_array().expect("layers");
    assert_eq!(layers.len(), 1, "{m}");
    assert_eq!(
        layers[0]["mediaType"],
        "application/vnd.oci.image.layer.v1.tar+gzip"
    );
    let gz = blob(layers[0]["digest"].as_str().unwrap());
    assert_eq!(layers[0]["size"], gz.len());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("layer.tar.gz");
    std::fs::write(&path, &gz).unwrap();
    let out = Command::new("gzip").arg("-dc").arg(&path).output().unwrap();
    assert!(out.status.success(), "gzip -dc: {out:?}");
    out.stdout
}

/// One entry of a tar archive (ustar/GNU header fields that matter here).
#[derive(Debug, PartialEq)]
struct Entry {
    name: String,
    kind: u8,
    mode: u64,
    uid: u64,
    gid: u64,
    mtime: u64,
    data: Vec<u8>,
}

fn octal(field: &[u8]) -> u64 {
    let s = std::str::from_utf8(field).unwrap();
    let s = s.trim_matches(|c: char| c == '\0' || c == ' ');
    u64::from_str_radix(s, 8).unwrap_or_else(|e| panic!("octal {s:?}: {e}"))
}

fn tar_entries(tar: &[u8]) -> Vec<Entry> {
    let mut entries = Vec::new();
    let mut at = 0;
    while at + 512 <= tar.len() && tar[at..at + 512].iter().any(|&b| b != 0) {
        let h = &tar[at..at + 512];
        let name_len = h[..100].iter().position(|&b| b == 0).unwrap_or(100);
        let size = usize::try_from(octal(&h[124..136])).unwrap();
        let start = at + 512;
        entries.push(Entry {
            name: String::from_utf8(h[..name_len].to_vec()).unwrap(),
            kind: h[156],
            mode: octal(&h[100..108]),
            uid: octal(&h[108..116]),
            gid: octal(&h[116..124]),
            mtime: octal(&h[136..148]),
            data: tar[start..start + size].to_vec(),
        });
        at = start + size.div_ceil(512) * 512;
    }
    entries
}

#[test]
#[ignore = "reads target/image/; run by `just image-test` after scripts/image.sh"]
fn config_says_non_root_entrypoint_serve_and_the_labels() {
    let (_, m) = manifest();
    assert_eq!(m["schemaVersion"], 2);
    assert_eq!(m["mediaType"], "application/vnd.oci.image.manifest.v1+json");
    assert_eq!(
        m["config"]["mediaType"],
        "application/vnd.oci.image.config.v1+json"
    );
    let labels = expected_labels();
    assert_eq!(
        string_map(&m["annotations"]),
        labels,
        "manifest annotations"
    );

    let config_bytes = blob(m["config"]["digest"].as_str().unwrap());
    assert_eq!(m["config"]["size"], config_bytes.len());
    let config = json_of(&config_bytes);
    assert_eq!(config["architecture"], arch());
    assert_eq!(config["os"], "linux");
    let c = &config["config"];
    assert_eq!(c["User"], "65532:65532");
    assert_eq!(c["Entrypoint"], json!(["/otel-injector"]));
    assert_eq!(c["Cmd"], json!(["serve"]));
    assert_eq!(c["ExposedPorts"], json!({"8080/tcp": {}, "9443/tcp": {}}));
    assert_eq!(string_map(&c["Labels"]), labels, "config labels");
    let mut keys: Vec<&str> = c.as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        ["Cmd", "Entrypoint", "ExposedPorts", "Labels", "User"]
    );

    // The config names the uncompressed layer.
    let tar = layer_tar(&m);
    assert_eq!(config["rootfs"]["type"], "layers");
    assert_eq!(
        config["rootfs"]["diff_ids"],
        json!([format!("sha256:{}", sha256_hex(&tar))])
    );
}

#[test]
#[ignore = "reads target/image/; run by `just image-test` after scripts/image.sh"]
fn the_layer_holds_only_the_root_owned_binary() {
    let (_, m) = manifest();
    let entries = tar_entries(&layer_tar(&m));
    let epoch: u64 = git(&["log", "-1", "--format=%ct", "HEAD"]).parse().unwrap();
    assert_eq!(entries.len(), 1, "{:?}", entries.iter().map(|e| &e.name));
    let e = &entries[0];
    assert_eq!(
        (e.name.as_str(), e.kind, e.mode, e.uid, e.gid, e.mtime),
        ("otel-injector", b'0', 0o755, 0, 0, epoch)
    );
    let built = std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join(format!(
        "target/{}-unknown-linux-gnu/image/otel-injector",
        std::env::consts::ARCH
    )))
    .expect("the binary scripts/image.sh built");
    assert!(e.data == built, "the layer's binary is not the build's");
    assert!(
        !has_interpreter(&e.data),
        "the binary asks for a dynamic loader"
    );
}

/// Whether an ELF64 little-endian file has a `PT_INTERP` program header (a dynamic loader).
fn has_interpreter(elf: &[u8]) -> bool {
    assert_eq!(&elf[..4], b"\x7fELF", "not ELF");
    assert_eq!((elf[4], elf[5]), (2, 1), "not ELF64 little-endian");
    let u16_at = |at: usize| usize::from(u16::from_le_bytes([elf[at], elf[at + 1]]));
    let phoff = usize::try_from(u64::from_le_bytes(elf[0x20..0x28].try_into().unwrap())).unwrap();
    let (phentsize, phnum) = (u16_at(0x36), u16_at(0x38));
    (0..phnum).any(|i| {
        let at = phoff + i * phentsize;
        u32::from_le_bytes(elf[at..at + 4].try_into().unwrap()) == 3
    })
}

#[test]
#[ignore = "reads target/image/; run by `just image-test` after scripts/image.sh"]
fn compressed_size_is_within_budget() {
    let (manifest_bytes, m) = manifest();
    let config = m["config"]["size"].as_u64().unwrap();
    let layers: u64 = m["layers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["size"].as_u64().unwrap())
        .sum();
    let total = manifest_bytes.len() as u64 + config + layers;
    let binary = tar_entries(&layer_tar(&m))[0].data.len();
    eprintln!(
        "image {}: {total} bytes compressed (manifest {}, config {config}, layer {layers}); binary {binary} bytes",
        arch(),
        manifest_bytes.len()
    );
    assert!(
        total <= MAX_COMPRESSED,
        "{total} bytes compressed, over the {MAX_COMPRESSED} budget"
    );
    let env = std::fs::read_to_string(image_dir().join("image.env")).unwrap();
    assert!(
        env.lines()
            .any(|l| l == format!("SIZE={}", config + layers)),
        "image.env: {env}"
    );
}

#[test]
#[ignore = "reads target/image/; run by `just image-test` after scripts/image.sh"]
fn sbom_lists_the_binarys_crates() {
    let sbom = json_of(&std::fs::read(image_dir().join("sbom.cdx.json")).unwrap());
    assert_eq!(sbom["bomFormat"], "CycloneDX");
    assert_eq!(sbom["specVersion"], "1.5");
    let component = &sbom["metadata"]["component"];
    assert_eq!(component["name"], "otel-injector");
    assert_eq!(component["version"], env!("CARGO_PKG_VERSION"));
    let got: BTreeSet<String> = sbom["components"]
        .as_array()
        .expect("components")
        .iter()
        .map(|c| {
            format!(
                "{}@{}",
                c["name"].as_str().unwrap(),
                c["version"].as_str().unwrap()
            )
        })
        .collect();
    // Every crate the binary links, as cargo itself resolves it for the target, is listed.
    let tree = Command::new("cargo")
        .args(["tree", "--locked", "--edges", "normal", "--prefix", "none"])
        .args(["--format", "{p}", "--target"])
        .arg(format!("{}-unknown-linux-gnu", std::env::consts::ARCH))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(tree.status.success(), "cargo tree: {tree:?}");
    let linked: BTreeSet<String> = String::from_utf8(tree.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let mut words = l.split(' ');
            let name = words.next().unwrap();
            let version = words.next().unwrap().trim_start_matches('v');
            format!("{name}@{version}")
        })
        .filter(|p| !p.starts_with("otel-injector@"))
        .collect();
    let missing: Vec<&String> = linked.difference(&got).collect();
    assert!(
        missing.is_empty(),
        "linked but not in the SBOM: {missing:?}"
    );
    assert!(linked.contains("kube-client@5.0.0"), "{linked:?}");
    // cargo-cyclonedx reads `cargo metadata`, whose graph also holds optional dependencies
    // that are not compiled in: each extra must still be a package of Cargo.lock.
    let lock =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.lock")).unwrap();
    let locked: BTreeSet<String> = lock
        .split("[[package]]")
        .filter_map(|p| {
            let field = |k: &str| {
                p.lines()
                    .find_map(|l| l.strip_prefix(k))
                    .map(|v| v.trim_matches('"').to_owned())
            };
            Some(format!("{}@{}", field("name = ")?, field("version = ")?))
        })
        .collect();
    let unknown: Vec<&String> = got.difference(&locked).collect();
    assert!(
        unknown.is_empty(),
        "in the SBOM but not in Cargo.lock: {unknown:?}"
    );
    eprintln!(
        "SBOM: {} components; {} linked crates, {} optional ones not compiled in",
        got.len(),
        linked.len(),
        got.len() - linked.len()
    );
}
