//! The image's binary run alone in a sandbox: it prints its version and serves a review.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support;
use crate::support::{
    INSTRUMENTATIONS, IO_TIMEOUT, MUTATE, fixture, free_port, hosts, http_get, post, review_of,
    tls_connect, uid_of, within,
};

use super::info;
use super::{expected_labels, layer_tar, manifest, tar_entries};

/// A sandbox whose root is `rootfs` read-only (the image's files and the empty mount points
/// a container runtime provides), run as 65532:65532, on the host's network.
pub(super) fn sandboxed(rootfs: &Path, config: &Path) -> Command {
    let mut cmd = Command::new("bwrap");
    cmd.args(["--unshare-user", "--uid", "65532", "--gid", "65532"])
        .args([
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--die-with-parent",
        ])
        .arg("--ro-bind")
        .arg(rootfs)
        .arg("/")
        .args(["--proc", "/proc", "--dev", "/dev"])
        .arg("--ro-bind")
        .arg(config)
        .arg("/config")
        .arg("--clearenv")
        .arg("/otel-injector");
    cmd
}

/// The layer unpacked: `/otel-injector` and the mount points (`proc`, `dev`, `config`).
pub(super) fn rootfs() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt as _;
    let (_, m) = manifest();
    let dir = tempfile::tempdir().unwrap();
    for e in tar_entries(&layer_tar(&m)) {
        let path = dir.path().join(&e.name);
        std::fs::write(&path, &e.data).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(e.mode as u32)).unwrap();
    }
    for d in ["proc", "dev", "config"] {
        std::fs::create_dir(dir.path().join(d)).unwrap();
    }
    dir
}

#[test]
#[ignore = "reads target/image/; run by `just image-test` after scripts/image.sh"]
fn the_images_binary_alone_prints_its_version() {
    let root = rootfs();
    let config = tempfile::tempdir().unwrap();
    let out = sandboxed(root.path(), config.path())
        .arg("--version")
        .output()
        .expect("bwrap");
    assert!(out.status.success(), "{out:?}");
    let rustc = Command::new("rustc").arg("--version").output().unwrap();
    let rustc = String::from_utf8(rustc.stdout).unwrap();
    let labels = expected_labels();
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        format!(
            "otel-injector {}\ncommit: {}\nbuilt:  {}\nrustc:  {}\ntarget: {}-unknown-linux-gnu\n",
            env!("CARGO_PKG_VERSION"),
            labels["org.opencontainers.image.revision"],
            labels["org.opencontainers.image.created"],
            rustc.trim().strip_prefix("rustc ").unwrap(),
            std::env::consts::ARCH,
        )
    );
}

#[tokio::test]
#[ignore = "reads target/image/; run by `just image-test` after scripts/image.sh"]
async fn the_images_binary_alone_serves_a_review() {
    let root = rootfs();
    let config = tempfile::tempdir().unwrap();
    let certs = otel_injector::certs::generate("otel-injector image test CA", &hosts()).unwrap();
    certs.write_to(config.path()).unwrap();
    std::fs::write(
        config.path().join("instrumentations.yaml"),
        INSTRUMENTATIONS,
    )
    .unwrap();
    let webhook: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let log = config.path().join("server.log");
    let out = std::fs::File::create(&log).unwrap();
    let mut child = sandboxed(root.path(), config.path())
        .args(["serve", "--tls-cert-file", "/config/tls.crt"])
        .args(["--tls-key-file", "/config/tls.key"])
        .args(["--instrumentation-file", "/config/instrumentations.yaml"])
        .args(["--webhook-addr", &webhook.to_string()])
        .args(["--admin-addr", &admin.to_string()])
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .expect("bwrap");
    let read_log = || std::fs::read_to_string(&log).unwrap_or_default();

    let until = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            panic!("the image's binary exited ({st}):\n{}", read_log());
        }
        if let Ok(Ok(r)) =
            tokio::time::timeout(Duration::from_secs(2), http_get(admin, "/readyz")).await
            && r.status == 200
        {
            break;
        }
        assert!(
            Instant::now() < until,
            "not ready after 30 s:\n{}",
            read_log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let review = fixture("pod-create-inject-java.json");
    let connector = support::connector(&[&certs.ca_cert]);
    let mut conn = within(IO_TIMEOUT, "connect", tls_connect(webhook, &connector))
        .await
        .expect("TLS connection");
    let body = serde_json::to_vec(&review).unwrap();
    let r = within(
        IO_TIMEOUT,
        "review",
        conn.roundtrip(&post(MUTATE, &body, true)),
    )
    .await
    .expect("review answered");
    let answer = review_of(&r);
    assert_eq!(answer.uid, uid_of(&review));
    assert!(answer.allowed);
    assert_eq!(answer.patch_type.as_deref(), Some("JSONPatch"));
    let patch = answer.patch.expect("a patch");
    let injected = patch.as_array().unwrap().iter().any(|op| {
        op["path"] == "/spec/initContainers"
            && op["value"][0]["name"] == "opentelemetry-auto-instrumentation-java"
    });
    assert!(injected, "no Java init container in {patch}");
    assert_eq!(answer.warnings, Vec::<String>::new());

    let metrics = http_get(admin, "/metrics").await.unwrap().text();
    let rustc = Command::new("rustc").arg("--version").output().unwrap();
    let rustc = String::from_utf8(rustc.stdout).unwrap();
    let labels = expected_labels();
    let build_info = format!(
        "otel_injector_build_info{{version=\"{}\",commit=\"{}\",rustc=\"{}\",target=\"{}-unknown-linux-gnu\"}} 1",
        env!("CARGO_PKG_VERSION"),
        labels["org.opencontainers.image.revision"],
        info::rustc_version(&rustc).unwrap(),
        std::env::consts::ARCH,
    );
    assert!(
        metrics.lines().any(|l| l == build_info),
        "no {build_info:?} in\n{metrics}"
    );
    assert!(
        metrics
            .lines()
            .any(|l| l == "otel_injector_admission_requests_total{outcome=\"patched\"} 1"),
        "{metrics}"
    );
    let _ = child.kill();
    let _ = child.wait();
}
