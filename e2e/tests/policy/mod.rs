//! Policy mode through the real API server: `otel-injector policy` renders the
//! Instrumentations as MutatingAdmissionPolicies, the API server injects by itself.
//!
//! - The differential test (`coverage.rs`), once per delivery (`--agent-delivery`
//!   `image-volume` and `init-container`, the webhook and the policies alike): a corpus of
//!   pods is created with the webhook alone, then with the policies alone, then with both,
//!   then in mode `policy`; every pod a policy injects is stored byte for byte as the webhook
//!   stores it, the others are stored untouched by the policies and injected by the webhook
//!   beside them; `otel-injector explain` names, for each pod, the path that injected it.
//! - Mode `policy` with no webhook (`unserved.rs`): what no policy covers gets
//!   `otel-injector/status` and a warning at `kubectl` time; a deleted Instrumentation stops
//!   injecting; reinvocation changes nothing.
//! - The acceptance test (`alone.rs`): a control plane of its own with the real controllers
//!   and no webhook configuration, no otel-injector process: a Deployment's pod gets the Java
//!   agent from the API server, as an image volume and then copied by an init container, and
//!   the real agent's span reaches the real Collector; then a status controller alone (as the
//!   chart's mode `policy` runs it) counts that pod.

mod alone;
mod budgets;
mod build;
mod coverage;
mod from_start;
mod keys;
mod live;
mod reinvocation;
mod rolled_back;
mod selected;
mod unserved;
mod upgrade;

use std::path::Path;
use std::time::{Duration, Instant};

use axum::http::Method;
use kube::Client;
use serde_json::{Value, json};

use crate::support::api;
use otel_injector::keys::INJECTED_ANNOTATION;

mod corpus;

/// The label that scopes this file's policy bindings to its namespaces.
pub const POLICY_SCOPE: &str = "e2e.otel-injector.io/policy";

/// A path in `dir` for the input of one CLI run, its own: tests run the CLI from several
/// threads of one process at once (with a file per process, one test rendered another's
/// Instrumentations).
fn input_file(dir: &Path, what: &str) -> std::path::PathBuf {
    static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    dir.join(format!("{what}-input-{}-{call}.yaml", std::process::id()))
}

/// Runs `otel-injector policy` on `inputs` with `args`; returns the objects and the coverage
/// it printed.
pub fn render(dir: &Path, inputs: &[Value], args: &[&str]) -> (Vec<Value>, String) {
    let file = input_file(dir, "policy");
    let text: Vec<String> = inputs
        .iter()
        .map(|i| serde_saphyr::to_string(i).expect("YAML"))
        .collect();
    std::fs::write(&file, text.join("\n---\n")).expect("write the input");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_e2e-otel-injector"))
        .arg("policy")
        .arg("-f")
        .arg(&file)
        .args(args)
        .args(["-o", "json"])
        .output()
        .expect("run otel-injector policy");
    let _ = std::fs::remove_file(&file);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "otel-injector policy: {stderr}");
    let list: Value = serde_json::from_slice(&out.stdout).expect("a JSON List");
    (
        list["items"].as_array().cloned().unwrap_or_default(),
        stderr,
    )
}

/// `otel-injector explain -o json` of `pods` against the cluster (its Instrumentations and
/// namespaces) with the `delivery` flag: per pod, the path it names (`policy`, `webhook`, or
/// `None`: nothing injected).
fn explained_paths(
    dir: &Path,
    kubeconfig: &Path,
    pods: &[(&'static str, String, Value)],
    delivery: &str,
) -> Vec<Option<String>> {
    let file = input_file(dir, "explain");
    let text: Vec<String> = pods
        .iter()
        .map(|(_, ns, p)| {
            let mut p = p.clone();
            p["metadata"]["namespace"] = json!(ns);
            serde_saphyr::to_string(&p).expect("YAML")
        })
        .collect();
    std::fs::write(&file, text.join("\n---\n")).expect("write the input");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_e2e-otel-injector"))
        .args(["explain", "-o", "json", delivery, "-f"])
        .arg(&file)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .output()
        .expect("run otel-injector explain");
    let _ = std::fs::remove_file(&file);
    assert!(
        out.status.success(),
        "otel-injector explain: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let explained: Vec<Value> = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(explained.len(), pods.len(), "one explanation per pod");
    explained
        .iter()
        .map(|e| e["path"]["via"].as_str().map(str::to_owned))
        .collect()
}

/// The REST path of a cluster-scoped admissionregistration object.
fn path_of(obj: &Value) -> String {
    let kind = obj["kind"].as_str().unwrap_or("").to_lowercase();
    let plural = match kind.strip_suffix('y') {
        Some(stem) => format!("{stem}ies"),
        None => format!("{kind}s"),
    };
    format!("/apis/admissionregistration.k8s.io/v1/{plural}")
}

/// Creates each object; none may be refused or warned about (the API server type-checks
/// every expression on create).
pub async fn create_all(client: &Client, objects: &[Value]) {
    for obj in objects {
        let r = api::send(client, Method::POST, &path_of(obj), Some(obj))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            r.status,
            201,
            "create {}: {}",
            obj["metadata"]["name"],
            r.message()
        );
        assert!(
            r.warnings.is_empty(),
            "warnings creating {}: {:?}",
            obj["metadata"]["name"],
            r.warnings
        );
    }
}

/// Deletes the objects of `kind` among `objects`.
pub async fn delete_kind(client: &Client, objects: &[Value], kind: &str) {
    for obj in objects.iter().filter(|o| o["kind"] == kind) {
        let path = format!(
            "{}/{}",
            path_of(obj),
            obj["metadata"]["name"].as_str().unwrap_or("")
        );
        let r = api::send(client, Method::DELETE, &path, None)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(
            r.status == 200 || r.status == 404,
            "delete {path}: {}",
            r.body
        );
    }
}

/// Deletes every object `otel-injector policy` rendered, the bindings first.
pub async fn delete_all(client: &Client, objects: &[Value]) {
    for kind in [
        "MutatingAdmissionPolicyBinding",
        "ValidatingAdmissionPolicyBinding",
        "MutatingAdmissionPolicy",
        "ValidatingAdmissionPolicy",
    ] {
        delete_kind(client, objects, kind).await;
    }
}

/// Creates the namespaces, each with `labels`.
async fn namespaces(client: &Client, names: &[&str], labels: &[(&str, &str)]) {
    for ns in names {
        api::create_namespace(client, ns, labels, &[])
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
}

/// Creates the corpus' namespaces, each with `labels`: `solo`, `shop`, and beside `shop` the
/// one that asks for Java by its annotation ([`corpus::asked_namespace`]).
async fn corpus_namespaces(client: &Client, solo: &str, shop: &str, labels: &[(&str, &str)]) {
    namespaces(client, &[solo, shop], labels).await;
    let asked = corpus::asked_namespace(shop);
    api::create_namespace(
        client,
        &asked,
        labels,
        &[(otel_injector::keys::INJECT_JAVA, "true")],
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
}

/// Creates the Instrumentations; each must be accepted.
async fn create_instrumentations(client: &Client, insts: &[Value]) {
    for i in insts {
        let ns = i["metadata"]["namespace"].as_str().unwrap_or("");
        let r = api::create_instrumentation(client, ns, i)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.status, 201, "{}", r.body);
    }
}

/// Whether the stored pod was injected with Java.
fn injected_java(p: &Value) -> bool {
    p["metadata"]["annotations"][INJECTED_ANNOTATION] == "java"
}

/// Dry-runs `pod` in `ns` until `ready` holds for the stored answer (policies and bindings
/// take effect when the API server's informers see them).
pub async fn until(
    client: &Client,
    ns: &str,
    pod: &Value,
    what: &str,
    ready: impl Fn(&Value) -> bool,
) {
    if let Err(last) = within(client, ns, pod, Duration::from_secs(30), ready).await {
        panic!("{what} not seen in {ns} within 30 s: {}", last["metadata"]);
    }
}

/// Dry-runs `pod` in `ns` until `ready` holds for the stored answer, for at most `limit`;
/// else the last answer.
pub async fn within(
    client: &Client,
    ns: &str,
    pod: &Value,
    limit: Duration,
    ready: impl Fn(&Value) -> bool,
) -> Result<(), Value> {
    let t0 = Instant::now();
    loop {
        let r = api::create_pod(client, ns, pod, true)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.status, 201, "dry run in {ns}: {}", r.body);
        if ready(&r.body) {
            return Ok(());
        }
        if t0.elapsed() >= limit {
            return Err(r.body);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The stored pod without what the API server generates.
fn comparable(stored: &Value) -> Value {
    let mut p = stored.clone();
    let meta = p["metadata"].as_object_mut().expect("metadata");
    for k in [
        "uid",
        "resourceVersion",
        "creationTimestamp",
        "managedFields",
        "generation",
    ] {
        meta.remove(k);
    }
    p.as_object_mut().expect("a pod").remove("status");
    p
}

async fn create_each(client: &Client, pods: &[(&'static str, String, Value)]) -> Vec<Value> {
    let mut out = Vec::new();
    for (case, ns, p) in pods {
        let r = api::create_pod(client, ns, p, false)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.status, 201, "{case}: {}", r.body);
        out.push(comparable(&r.body));
    }
    out
}

async fn delete_each(client: &Client, pods: &[(&'static str, String, Value)]) {
    for (_, ns, p) in pods {
        let name = p["metadata"]["name"].as_str().unwrap_or("");
        let path = format!("/api/v1/namespaces/{ns}/pods/{name}?gracePeriodSeconds=0");
        api::send(client, Method::DELETE, &path, None)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    for (_, ns, p) in pods {
        let name = p["metadata"]["name"].as_str().unwrap_or("");
        let t0 = Instant::now();
        while api::get_pod(client, ns, name)
            .await
            .ok()
            .flatten()
            .is_some()
        {
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "{ns}/{name} not deleted"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// The policies and bindings of `inst` (in namespace `ns`, which asks for nothing) as live
/// policies render them: the namespaces read (`PolicyOptions::namespaces_read`), no params
/// (`Form::Live`), image volumes, mode both, names prefixed `prefix`, bound where
/// [`POLICY_SCOPE`] is `scope`.
fn live_render(inst: &Value, ns: &str, prefix: &str, scope: &str) -> Vec<Value> {
    use otel_injector::policy::{Form, Mode};
    render_as(inst, ns, prefix, scope, Mode::Both, Form::Live)
}

/// [`live_render`] in `mode` and `form` (`Form::Api`: as the writer rendered them before live
/// policies lost their params).
fn render_as(
    inst: &Value,
    ns: &str,
    prefix: &str,
    scope: &str,
    mode: otel_injector::policy::Mode,
    form: otel_injector::policy::Form,
) -> Vec<Value> {
    use otel_injector::cluster::StaticCatalog;
    use otel_injector::engine::{AgentDelivery, EngineConfig};
    use otel_injector::policy::PolicyOptions;
    let typed = serde_json::from_value(inst.clone()).expect("an Instrumentation");
    // The namespace as the API server holds it: labeled for the bindings, which live
    // policies render only where they can match.
    let catalog = StaticCatalog::new([typed])
        .with_namespace(ns, &[])
        .with_namespace_labels(ns, &[(POLICY_SCOPE, scope)]);
    let config = EngineConfig {
        delivery: AgentDelivery::ImageVolume,
        ..EngineConfig::default()
    };
    let options = PolicyOptions {
        mode,
        form,
        prefix: prefix.into(),
        namespace_labels: vec![(POLICY_SCOPE.into(), scope.into())],
        namespaces_read: true,
        ..PolicyOptions::default()
    };
    let objects = otel_injector::policy::render(&catalog, &config, &options).objects;
    // A policy per language, each reached by the pods with that language's key.
    let conditions = objects[0]["spec"]["matchConditions"].to_string();
    assert!(
        conditions.contains("\"asks-for-java-and-not-injected-before\""),
        "{conditions}"
    );
    objects
}
