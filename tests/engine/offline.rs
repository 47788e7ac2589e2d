//! `otel-injector inject` as a process: exit codes, stdin, directories, bad input.

use std::io::Write as _;
use std::process::{Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_otel-injector");
const SHOP: &str = "tests/data/offline/shop.yaml";
const JAVA: &str = "tests/data/instrumentations/java.yaml";

fn run(args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(BIN)
        .args(args)
        .env_remove("RUST_BACKTRACE")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn otel-injector");
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin.unwrap_or("").as_bytes()).unwrap();
    drop(input);
    child.wait_with_output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn injects_a_file_and_keeps_untouched_documents() {
    let out = run(
        &["inject", "-f", SHOP, "--instrumentation-file", JAVA],
        None,
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let original = std::fs::read_to_string(SHOP).unwrap();
    // The Namespace and the ConfigMap, comments included, are the input's own bytes.
    let untouched = &original[..original.find("---\napiVersion: apps/v1").unwrap()];
    assert!(stdout.starts_with(untouched), "{stdout}");
    assert!(
        stdout.contains("        otel-injector/injected: java\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains("        - name: OTEL_SERVICE_NAME\n          value: cart\n"),
        "{stdout}"
    );
    assert_eq!(text(&out.stderr), "");

    // Its own output, injected again, is unchanged.
    let again = run(
        &["inject", "-f", "-", "--instrumentation-file", JAVA],
        Some(&stdout),
    );
    assert_eq!(again.status.code(), Some(0));
    assert_eq!(text(&again.stdout), stdout);
}

#[test]
fn reads_stdin_and_writes_json() {
    let pod = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  namespace: shop\n  annotations:\n    instrumentation.opentelemetry.io/inject-java: java-inst\nspec:\n  containers:\n  - name: app\n";
    let out = run(
        &[
            "inject",
            "-f",
            "-",
            "-o",
            "json",
            "--instrumentation-file",
            JAVA,
        ],
        Some(pod),
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["kind"], "Pod");
    assert_eq!(
        v["metadata"]["annotations"]["otel-injector/injected"],
        "java"
    );
}

#[test]
fn reads_a_directory_in_name_order() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("b.json"),
        r#"{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "b"}}"#,
    )
    .unwrap();
    std::fs::write(
        dir.path().join("a.yaml"),
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: a # first\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("notes.txt"), "not a manifest").unwrap();
    let out = run(&["inject", "-f", dir.path().to_str().unwrap()], None);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: a # first\n---\napiVersion: v1\nkind: Service\nmetadata:\n  name: b\n"
    );
}

#[test]
fn bad_input_exits_1_naming_the_file_and_document() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, "apiVersion: v1\nkind: Service\n---\nkind: [\n").unwrap();
    let out = run(&["inject", "-f", bad.to_str().unwrap()], None);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    let want = format!(
        "Error: {}: document 2 (line 3): invalid YAML: ",
        bad.display()
    );
    assert!(stderr.starts_with(&want), "{stderr}");
    assert!(stderr.contains("line 4 column 7"), "{stderr}");
    assert_eq!(text(&out.stdout), "");

    let out = run(&["inject", "-f", "/nonexistent/x.yaml"], None);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).starts_with("Error: cannot read /nonexistent/x.yaml: "));

    let out = run(&["inject", "-f", "-"], Some("- 1\n"));
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        "Error: <stdin>: document 1 (line 1): not a Kubernetes object (expected a mapping with apiVersion and kind)\n"
    );
}

#[test]
fn strict_exits_2_when_a_language_was_skipped() {
    let pod = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  namespace: empty\n  annotations:\n    instrumentation.opentelemetry.io/inject-java: \"true\"\nspec:\n  containers:\n  - name: app\n";
    let warning = "warning: <stdin>: document 1: Pod empty/p: inject-java: no Instrumentation in namespace \"empty\"; not injected\n";
    let out = run(
        &["inject", "-f", "-", "--instrumentation-file", JAVA],
        Some(pod),
    );
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(text(&out.stderr), warning);
    assert_eq!(text(&out.stdout), pod);

    let out = run(
        &[
            "inject",
            "--strict",
            "-f",
            "-",
            "--instrumentation-file",
            JAVA,
        ],
        Some(pod),
    );
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr),
        format!(
            "{warning}Error: 1 object(s) asked for a language that was not injected (--strict)\n"
        )
    );
    assert_eq!(text(&out.stdout), pod);
}

#[test]
fn diff_prints_a_unified_diff() {
    let out = run(
        &[
            "inject",
            "--diff",
            "-f",
            SHOP,
            "--instrumentation-file",
            JAVA,
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(0));
    let stdout = text(&out.stdout);
    assert!(
        stdout.starts_with(&format!("--- a/{SHOP}\n+++ b/{SHOP}\n@@ -24,")),
        "{stdout}"
    );
    assert!(
        stdout.contains("\n+        otel-injector/injected: java\n"),
        "{stdout}"
    );
}

#[test]
fn explain_prints_text_or_json_and_needs_a_workload() {
    let out = run(
        &["explain", "-f", SHOP, "--instrumentation-file", JAVA],
        None,
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.starts_with(&format!(
            "Deployment shop/cart ({SHOP}, document 3)\n  java: asked by the pod annotation instrumentation.opentelemetry.io/inject-java: \"true\"\n    Instrumentation shop/java-inst: the only Instrumentation in namespace \"shop\" (the annotation says \"true\")\n    targets: app (the first container: no container-names annotation)\n  path: the policy of shop/java-inst, once applied (otel-injector policy); the webhook then leaves the pod alone\n  container opentelemetry-auto-instrumentation-java (added):\n  container app:\n"
        )),
        "{stdout}"
    );
    assert!(
        stdout.contains(
            "    OTEL_SERVICE_NAME = \"cart\"\n      from derived: the Deployment's name\n"
        ),
        "{stdout}"
    );

    let out = run(
        &[
            "explain",
            "-o",
            "json",
            "-f",
            "-",
            "--instrumentation-file",
            JAVA,
        ],
        Some(&std::fs::read_to_string(SHOP).unwrap()),
    );
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v[0]["object"], "Deployment shop/cart");
    assert_eq!(v[0]["requests"][0]["instrumentation"], "shop/java-inst");
    assert_eq!(v[0]["injected"], serde_json::json!(["java"]));

    let out = run(
        &["explain", "-f", "-"],
        Some("apiVersion: v1\nkind: Service\nmetadata: {name: s}\n"),
    );
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        "Error: no Pod or workload (Deployment, ReplicaSet, StatefulSet, DaemonSet, Job, CronJob, ReplicationController) in the input\n"
    );
}

#[test]
fn a_cluster_that_cannot_be_read_is_an_error_naming_it() {
    let out = run(
        &[
            "inject",
            "-f",
            SHOP,
            "--kubeconfig",
            "/nonexistent/kubeconfig",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr
            .starts_with("Error: cannot build a Kubernetes client from /nonexistent/kubeconfig: "),
        "{stderr}"
    );
    assert_eq!(text(&out.stdout), "");

    // A server that refuses connections: the first list fails, nothing is written.
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: \
             http://127.0.0.1:{port}\nusers:\n- name: u\n  user: {{}}\ncontexts:\n- name: c\n  \
             context: {{cluster: c, user: u}}\ncurrent-context: c\n"
        ),
    )
    .unwrap();
    let out = run(
        &[
            "explain",
            "-f",
            SHOP,
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.starts_with("Error: list instrumentations.opentelemetry.io in all namespaces: "),
        "{stderr}"
    );
    assert!(
        stderr.contains("(the offline commands need list on instrumentations.opentelemetry.io and namespaces, as in manifests/base/otel-injector.yaml)"),
        "{stderr}"
    );
    assert_eq!(text(&out.stdout), "");
}

/// A stand-in API server for the process: plain HTTP on 127.0.0.1, one answer per
/// connection, for the four reads `--cluster` makes (`e2e/tests/offline.rs` runs the real
/// one). `metrics`: the `/metrics` answer (status, body). Returns its kubeconfig's text.
fn api_server(metrics: (u16, &'static str)) -> String {
    use std::io::{BufRead as _, BufReader};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut line = String::new();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            if reader.read_line(&mut line).is_err() {
                continue;
            }
            loop {
                let mut header = String::new();
                if reader.read_line(&mut header).unwrap_or(0) == 0 || header == "\r\n" {
                    break;
                }
            }
            let path = line.split_whitespace().nth(1).unwrap_or("");
            let path = path.split('?').next().unwrap_or("");
            let (status, body) = match path {
                "/apis/opentelemetry.io/v1alpha1/instrumentations" => (
                    200,
                    r#"{"apiVersion":"opentelemetry.io/v1alpha1","kind":"InstrumentationList","metadata":{"resourceVersion":"7"},"items":[{"apiVersion":"opentelemetry.io/v1alpha1","kind":"Instrumentation","metadata":{"name":"java","namespace":"shop"},"spec":{"exporter":{"endpoint":"http://from-cluster:4318"}}}]}"#,
                ),
                "/api/v1/namespaces" => (
                    200,
                    r#"{"apiVersion":"meta.k8s.io/v1","kind":"PartialObjectMetadataList","metadata":{"resourceVersion":"7"},"items":[{"apiVersion":"meta.k8s.io/v1","kind":"PartialObjectMetadata","metadata":{"name":"shop","annotations":{"instrumentation.opentelemetry.io/inject-java":"true"}}}]}"#,
                ),
                "/version" => (
                    200,
                    r#"{"major":"1","minor":"37","gitVersion":"v1.37.2","gitCommit":"","gitTreeState":"clean","buildDate":"","goVersion":"","compiler":"gc","platform":"linux/amd64"}"#,
                ),
                "/metrics" => metrics,
                _ => (
                    404,
                    r#"{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}"#,
                ),
            };
            let kind = if path == "/metrics" && status == 200 {
                "text/plain"
            } else {
                "application/json"
            };
            let _ = write!(
                stream,
                "HTTP/1.1 {status} X\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: \
         http://127.0.0.1:{port}\nusers:\n- name: u\n  user: {{}}\ncontexts:\n- name: c\n  \
         context: {{cluster: c, user: u}}\ncurrent-context: c\n"
    )
}

const FORBIDDEN: &str = r#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"forbidden: User \"u\" cannot get path \"/metrics\"","reason":"Forbidden","code":403}"#;

#[test]
fn the_cluster_gives_instrumentations_namespaces_and_what_auto_decides() {
    // A pod that asks for nothing itself, in a namespace whose annotation (in the cluster)
    // asks for Java, with the cluster's only Instrumentation.
    let pod = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  namespace: shop\nspec:\n  containers:\n  - name: app\n    image: shop/app:1\n";
    let cases = [
        // The gate, read from /metrics, is off: init containers although 1.37.
        (
            (
                200,
                "kubernetes_feature_enabled{name=\"ImageVolume\",stage=\"GA\"} 0\n",
            ),
            false,
        ),
        // /metrics refused: the version (1.37) decides: image volumes.
        ((403, FORBIDDEN), true),
    ];
    for (metrics, image_volume) in cases {
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(&kubeconfig, api_server(metrics)).unwrap();
        let out = run(
            &[
                "inject",
                "-f",
                "-",
                "--kubeconfig",
                kubeconfig.to_str().unwrap(),
                "--agent-delivery",
                "auto",
                "-o",
                "json",
            ],
            Some(pod),
        );
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let note = if image_volume {
            "note: the ImageVolume feature gate cannot be read (the API server refused GET \
             /metrics (HTTP 403): grant get on the non-resource URL /metrics \
             (manifests/components/agent-delivery-auto)); `auto` agent delivery follows the API \
             server version 1.37\n"
        } else {
            ""
        };
        assert_eq!(text(&out.stderr), note);
        let injected: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(
            injected["metadata"]["annotations"]["otel-injector/injected"],
            "java"
        );
        let env = &injected["spec"]["containers"][0]["env"];
        let endpoint = env
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == "OTEL_EXPORTER_OTLP_ENDPOINT")
            .unwrap();
        assert_eq!(endpoint["value"], "http://from-cluster:4318");
        let volume = &injected["spec"]["volumes"][0];
        assert_eq!(volume["name"], "opentelemetry-auto-instrumentation-java");
        assert_eq!(volume.get("image").is_some(), image_volume, "{volume}");
        assert_eq!(
            injected["spec"].get("initContainers").is_some(),
            !image_volume
        );
    }
}

#[test]
fn a_reader_that_stops_reading_ends_nothing_in_error() {
    // `otel-injector crd | grep -q ...`: the reader closes the pipe long before the ~290 KB of
    // YAML are written (more than a pipe holds).
    let mut child = Command::new(BIN)
        .arg("crd")
        .env_remove("RUST_BACKTRACE")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn otel-injector");
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert_eq!(text(&out.stderr), "");
    assert!(out.status.success(), "{:?}", out.status);
}
