//! Policies from the API server's start (issue 36, item 6), on a 1.37 control plane of its
//! own with no otel-injector process: `otel-injector policy --static-manifests DIR` writes the
//! manifest form into the directories its admission configuration names
//! (`staticManifestsDir` of the MutatingAdmissionPolicy and ValidatingAdmissionPolicy
//! plugins, `ManifestBasedAdmissionControlConfig`, beta and on in 1.37).
//!
//! - Before any policy object, Instrumentation or even the CRD exists in the API, the first
//!   pod that asks is injected, and one the policies do not cover is marked and warned about.
//! - The pod is stored byte for byte as the API-object form (`kubectl apply` of `otel-injector
//!   policy`, its Instrumentation in the API) stores the same pod in another namespace.
//! - Rendering the files again with a changed spec reaches new pods without a restart (the
//!   API server reads the directory again within a minute).

use std::path::Path;
use std::time::{Duration, Instant};

use axum::http::Method;
use serde_json::{Value, json};

use crate::support::api;
use crate::support::controlplane::{ControlPlane, admission_configuration};
use otel_injector::keys::{
    CONTAINER_NAMES, INJECT_JAVA, INJECT_NGINX, INJECTED_ANNOTATION, STATUS_ANNOTATION,
};

use super::build::{container, inst, pod};
use super::{comparable, create_all, render};

/// The namespace the files bind in (by its label), and the one the API objects serve.
const FILES_NS: &str = "e2e-static-files";
const API_NS: &str = "e2e-static-api";
const STATIC_SCOPE: (&str, &str) = ("e2e.otel-injector.io/static-policies", "yes");

fn java(ns: &str, endpoint: &str) -> Value {
    inst(
        ns,
        "java",
        json!({"exporter": {"endpoint": endpoint},
               "sampler": {"type": "parentbased_traceidratio", "argument": "0.25"}}),
    )
}

/// Runs `otel-injector policy --static-manifests dir/static` on `java` in mode policy, bound
/// by the scope label; returns what it printed on stderr.
fn render_files(dir: &Path, java: &Value) -> String {
    let input = dir.join("instrumentations.yaml");
    std::fs::write(&input, serde_saphyr::to_string(java).expect("YAML")).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_e2e-otel-injector"))
        .args([
            "policy",
            "--agent-delivery=image-volume",
            "--mode",
            "policy",
        ])
        .arg("--namespace-label")
        .arg(format!("{}={}", STATIC_SCOPE.0, STATIC_SCOPE.1))
        .arg("--static-manifests")
        .arg(dir.join("static"))
        .arg("-f")
        .arg(&input)
        .output()
        .expect("run otel-injector policy");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    assert!(out.stdout.is_empty(), "the objects go to the files only");
    stderr
}

fn app(name: &str, request: (&str, &str)) -> Value {
    pod(
        name,
        json!({request.0: request.1}),
        json!({"app": name}),
        json!([container("app", "registry.example/app:1", json!([]))]),
    )
}

async fn create(client: &kube::Client, ns: &str, p: &Value, dry_run: bool) -> api::Response {
    let r = api::create_pod(client, ns, p, dry_run)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 201, "{ns}: {}", r.body);
    r
}

fn endpoint_of(stored: &Value) -> Option<String> {
    stored["spec"]["containers"][0]["env"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == "OTEL_EXPORTER_OTLP_ENDPOINT")
        .and_then(|e| e["value"].as_str())
        .map(str::to_owned)
}

#[tokio::test]
async fn manifest_policies_inject_from_the_api_servers_start_as_the_api_objects_do() {
    let dir = tempfile::tempdir().unwrap();
    let stderr = render_files(dir.path(), &java(FILES_NS, "http://collector:4318"));
    assert!(
        stderr.contains(&format!("{FILES_NS}/java: policy injects java")),
        "{stderr}"
    );
    let (mutating, validating) = (
        dir.path().join("static/mutating/otel-injector.yaml"),
        dir.path().join("static/validating/otel-injector.yaml"),
    );
    let names: Vec<String> = api::read_yaml_docs(&mutating)
        .unwrap()
        .iter()
        .map(|o| o["metadata"]["name"].as_str().unwrap_or("").to_owned())
        .collect();
    assert_eq!(
        names,
        [
            format!("otel-injector.{FILES_NS}.java.static.k8s.io"),
            format!("otel-injector.{FILES_NS}.java.static.k8s.io"),
            "otel-injector.not-injected.static.k8s.io".to_owned(),
            "otel-injector.not-injected.static.k8s.io".to_owned(),
        ]
    );
    assert_eq!(api::read_yaml_docs(&validating).unwrap().len(), 2);
    let dir_of = |sub: &str| dir.path().join("static").join(sub).display().to_string();
    let admission = admission_configuration(
        &dir.path().join("admission.yaml"),
        &[
            (
                "MutatingAdmissionPolicy",
                "MutatingAdmissionPolicyConfiguration",
                vec![("staticManifestsDir", dir_of("mutating"))],
            ),
            (
                "ValidatingAdmissionPolicy",
                "ValidatingAdmissionPolicyConfiguration",
                vec![("staticManifestsDir", dir_of("validating"))],
            ),
        ],
    );
    let cp = ControlPlane::start_with(&[
        "--admission-control-config-file",
        admission.to_str().unwrap(),
    ])
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let client = cp.client();
    api::create_namespace(&client, FILES_NS, &[STATIC_SCOPE], &[])
        .await
        .unwrap_or_else(|e| panic!("{e}"));

    // 1. Nothing of ours in the API: no policy, no binding, no CRD.
    for kind in [
        "mutatingadmissionpolicies",
        "mutatingadmissionpolicybindings",
    ] {
        let path = format!("/apis/admissionregistration.k8s.io/v1/{kind}");
        let r = api::send(&client, Method::GET, &path, None).await.unwrap();
        assert_eq!(r.body["items"], json!([]), "{kind}");
    }
    let crd =
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/instrumentations.opentelemetry.io";
    let r = api::send(&client, Method::GET, crd, None).await.unwrap();
    assert_eq!(r.status, 404, "{}", r.body);
    let first = app("first", (INJECT_JAVA, "java"));
    let by_file = create(&client, FILES_NS, &first, false).await.body;
    assert_eq!(
        by_file["metadata"]["annotations"][INJECTED_ANNOTATION], "java",
        "{}",
        by_file["metadata"]
    );
    assert_eq!(
        endpoint_of(&by_file).as_deref(),
        Some("http://collector:4318")
    );
    assert!(
        by_file["spec"]["volumes"]
            .as_array()
            .is_some_and(|v| v.iter().any(|v| v.get("image").is_some())),
        "the agent as an image volume: {}",
        by_file["spec"]
    );
    // What no policy covers (nginx for two containers: the module goes to the first only):
    // marked and warned about, by the files too.
    let mut web = app("web", (INJECT_NGINX, "true"));
    web["metadata"]["annotations"][CONTAINER_NAMES] = json!("app,side");
    let containers = web["spec"]["containers"]
        .as_array_mut()
        .expect("containers");
    containers.push(container("side", "registry.example/side:1", json!([])));
    let nginx = create(&client, FILES_NS, &web, false).await;
    let skipped = format!("nginx=skipped policy_unsupported {FILES_NS}/java");
    assert_eq!(
        nginx.body["metadata"]["annotations"][STATUS_ANNOTATION],
        skipped
    );
    assert!(
        nginx
            .warnings
            .iter()
            .any(|w| w.ends_with(&format!("otel-injector policy: not injected: {skipped}"))),
        "{:?}",
        nginx.warnings
    );

    // 2. The same pod through the API-object form, in a namespace the files do not bind.
    api::install_crds(
        &client,
        &crate::support::tools::root().join("manifests/crd.yaml"),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    api::create_namespace(&client, API_NS, &[], &[])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mirror = java(API_NS, "http://collector:4318");
    let r = api::create_instrumentation(&client, API_NS, &mirror)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 201, "{}", r.body);
    let (objects, _) = render(
        dir.path(),
        &[mirror],
        &[
            "--agent-delivery=image-volume",
            "--mode",
            "both",
            "--name-prefix",
            "api",
        ],
    );
    create_all(&client, &objects).await;
    super::until(&client, API_NS, &first, "the API objects' injection", |p| {
        p["metadata"]["annotations"][INJECTED_ANNOTATION] == "java"
    })
    .await;
    let by_object = create(&client, API_NS, &first, false).await.body;
    let as_files: Value = serde_json::from_str(
        &serde_json::to_string(&comparable(&by_object))
            .unwrap()
            .replace(API_NS, FILES_NS),
    )
    .unwrap();
    assert_eq!(comparable(&by_file), as_files);

    // 3. Rendered again with a new endpoint: new pods get it, no restart.
    let edited = Instant::now();
    render_files(dir.path(), &java(FILES_NS, "http://collector-v2:4318"));
    loop {
        let p = create(
            &client,
            FILES_NS,
            &app("later", (INJECT_JAVA, "java")),
            true,
        )
        .await;
        if endpoint_of(&p.body).as_deref() == Some("http://collector-v2:4318") {
            break;
        }
        assert!(
            edited.elapsed() < Duration::from_secs(150),
            "the edited file is not read within 150 s: {:?}",
            endpoint_of(&p.body)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    eprintln!(
        "the edited file reached new pods after {:.1} s",
        edited.elapsed().as_secs_f64()
    );
}
