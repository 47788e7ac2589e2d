//! Policy mode through the real API server: `otel-injector policy` renders the
//! Instrumentations as MutatingAdmissionPolicies, the API server injects by itself.
//!
//! - The differential test: a corpus of pods is created with the policies alone (no webhook
//!   for the namespace), then with the webhook alone (`--agent-delivery=image-volume`), then
//!   with both; every pod a policy injects is stored byte for byte as the webhook stores it,
//!   the others are stored untouched by the policies and injected by the webhook beside them.
//! - Mode `policy` with no webhook: what no policy covers gets `otel-injector/status` and a
//!   warning at `kubectl` time; a deleted Instrumentation stops injecting; reinvocation
//!   changes nothing.
//! - The acceptance test: a control plane of its own with the real controllers and no
//!   webhook configuration, no otel-injector process: a Deployment's pod gets the Java agent
//!   from the API server and the real agent's span reaches the real Collector.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use axum::http::Method;
use kube::Client;
use serde_json::{Value, json};

use crate::harness::{
    self, Env, INJECTED, Options, SCOPE_LABEL, STATUS, cluster, env_value, is_injected,
};
use crate::support::api;

/// The label that scopes this file's policy bindings to its namespaces.
pub const POLICY_SCOPE: &str = "e2e.otel-injector.io/policy";

/// Runs `otel-injector policy` on `inputs` with `args`; returns the objects and the coverage
/// it printed.
pub fn render(dir: &Path, inputs: &[Value], args: &[&str]) -> (Vec<Value>, String) {
    let file = dir.join(format!("policy-input-{}.yaml", std::process::id()));
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
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "otel-injector policy: {stderr}");
    let list: Value = serde_json::from_slice(&out.stdout).expect("a JSON List");
    (
        list["items"].as_array().cloned().unwrap_or_default(),
        stderr,
    )
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

/// Dry-runs `pod` in `ns` until `ready` holds for the stored answer (policies and bindings
/// take effect when the API server's informers see them).
pub async fn until(
    client: &Client,
    ns: &str,
    pod: &Value,
    what: &str,
    ready: impl Fn(&Value) -> bool,
) {
    let t0 = Instant::now();
    loop {
        let r = api::create_pod(client, ns, pod, true)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.status, 201, "dry run in {ns}: {}", r.body);
        if ready(&r.body) {
            return;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "{what} not seen in {ns} within 30 s: {}",
            r.body["metadata"]
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn inst(ns: &str, name: &str, spec: Value) -> Value {
    json!({"apiVersion": "opentelemetry.io/v1alpha1", "kind": "Instrumentation",
           "metadata": {"name": name, "namespace": ns}, "spec": spec})
}

fn container(name: &str, image: &str, env: Value) -> Value {
    let mut c = json!({"name": name, "image": image});
    if env.as_array().is_some_and(|e| !e.is_empty()) {
        c["env"] = env;
    }
    c
}

/// A pod `name` with these annotations, labels and containers.
fn pod(name: &str, annotations: Value, labels: Value, containers: Value) -> Value {
    let mut p = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                       "spec": {"containers": containers}});
    // An empty map is not stored: leave it out, so the pod sent is the pod stored.
    for (field, map) in [("annotations", annotations), ("labels", labels)] {
        if map.as_object().is_some_and(|m| !m.is_empty()) {
            p["metadata"][field] = map;
        }
    }
    p
}

fn owned(mut p: Value, kind: &str, owner: &str, hash: Option<&str>) -> Value {
    p["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": kind,
        "name": owner, "uid": "6a1e0b1c-0000-4000-8000-000000000001", "controller": true}]);
    if let Some(h) = hash {
        if p["metadata"]["labels"].is_null() {
            p["metadata"]["labels"] = json!({});
        }
        p["metadata"]["labels"]["pod-template-hash"] = json!(h);
    }
    p
}

const JAVA: &str = "instrumentation.opentelemetry.io/inject-java";
const NODEJS: &str = "instrumentation.opentelemetry.io/inject-nodejs";
const PYTHON: &str = "instrumentation.opentelemetry.io/inject-python";
const DOTNET: &str = "instrumentation.opentelemetry.io/inject-dotnet";
const SDK: &str = "instrumentation.opentelemetry.io/inject-sdk";
const GO: &str = "instrumentation.opentelemetry.io/inject-go";
const NAMES: &str = "instrumentation.opentelemetry.io/container-names";

/// The Instrumentations of the corpus: `solo` alone in its namespace (so `"true"` names
/// it), three in the other.
fn instrumentations(solo: &str, shop: &str) -> Vec<Value> {
    vec![
        inst(
            solo,
            "only",
            json!({
                "exporter": {"endpoint": "http://collector:4318"},
                "propagators": ["tracecontext", "baggage"],
            }),
        ),
        inst(
            shop,
            "java",
            json!({
                "exporter": {"endpoint": "http://collector:4318"},
                "propagators": ["tracecontext", "baggage", "b3"],
                "sampler": {"type": "parentbased_traceidratio", "argument": "0.25"},
                "resource": {"resourceAttributes": {"deployment.environment.name": "e2e", "k8s.namespace.name": "overridden"}},
                "env": [{"name": "OTEL_METRICS_EXPORTER", "value": "none"}],
                "java": {"env": [{"name": "OTEL_INSTRUMENTATION_JDBC_ENABLED", "value": "false"}],
                         "extensions": [{"image": "e2e.local/java-extension:1", "dir": "/extensions"}]},
            }),
        ),
        inst(
            shop,
            "langs",
            json!({
                "exporter": {"endpoint": "http://collector:4317"},
                "resource": {"addK8sUIDAttributes": true},
                "defaults": {"useLabelsForResourceAttributes": true},
                "nodejs": {"env": [{"name": "OTEL_NODE_RESOURCE_DETECTORS", "value": "env"}]},
                "python": {"env": [{"name": "OTEL_PYTHON_LOG_LEVEL", "value": "debug"}]},
            }),
        ),
        inst(
            shop,
            "tls",
            json!({
                "exporter": {"endpoint": "https://collector:4318", "tls": {"secretName": "certs", "ca": "ca.crt"}},
            }),
        ),
    ]
}

/// The corpus: (case, namespace key `solo` or `shop`, pod). Every case of the engine's
/// semantics a policy must get right, and the edges it must leave to the webhook.
fn corpus() -> Vec<(&'static str, &'static str, Value)> {
    let app = |env: Value| json!([container("app", "shop/checkout:1.4.2", env)]);
    let port = json!([{"name": "PORT", "value": "8080"}]);
    let ann = |pairs: &[(&str, &str)]| -> Value {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), json!(v)))
            .collect::<serde_json::Map<_, _>>()
            .into()
    };
    let simple = |case: &'static str, pairs: &[(&str, &str)]| {
        (
            case,
            "shop",
            pod(case, ann(pairs), json!({}), app(port.clone())),
        )
    };
    vec![
        (
            "java-true-solo",
            "solo",
            pod(
                "java-true-solo",
                ann(&[(JAVA, "true")]),
                json!({}),
                app(port.clone()),
            ),
        ),
        simple("java-named", &[(JAVA, "java")]),
        (
            "java-qualified",
            "shop",
            pod(
                "java-qualified",
                ann(&[(JAVA, "SHOP/java")]),
                json!({}),
                app(json!([])),
            ),
        ),
        (
            "java-deployment",
            "shop",
            owned(
                pod(
                    "java-deployment",
                    ann(&[(JAVA, "java")]),
                    json!({"app": "web"}),
                    app(port.clone()),
                ),
                "ReplicaSet",
                "web-5d8f7c9b4",
                Some("5d8f7c9b4"),
            ),
        ),
        (
            "java-statefulset",
            "shop",
            owned(
                pod(
                    "java-statefulset",
                    ann(&[(JAVA, "java")]),
                    json!({}),
                    app(port.clone()),
                ),
                "StatefulSet",
                "db",
                None,
            ),
        ),
        (
            "java-daemonset",
            "shop",
            owned(
                pod(
                    "java-daemonset",
                    ann(&[(JAVA, "java")]),
                    json!({}),
                    app(json!([])),
                ),
                "DaemonSet",
                "agent",
                None,
            ),
        ),
        (
            "java-cronjob",
            "shop",
            owned(
                pod(
                    "java-cronjob",
                    ann(&[(JAVA, "java")]),
                    json!({}),
                    app(json!([])),
                ),
                "Job",
                "nightly-29100000",
                None,
            ),
        ),
        (
            "java-job",
            "shop",
            owned(
                pod(
                    "java-job",
                    ann(&[(JAVA, "java")]),
                    json!({}),
                    app(json!([])),
                ),
                "Job",
                "once-1",
                None,
            ),
        ),
        (
            "java-user-env",
            "shop",
            pod(
                "java-user-env",
                ann(&[(JAVA, "java")]),
                json!({}),
                app(json!([
                    {"name": "JAVA_TOOL_OPTIONS", "value": "-Xmx256m"},
                    {"name": "OTEL_SERVICE_NAME", "value": "mine"},
                    {"name": "OTEL_TRACES_SAMPLER_ARG", "value": "1"},
                    {"name": "OTEL_NODE_IP", "value": "10.0.0.1"},
                    {"name": "OTEL_EXPORTER_OTLP_ENDPOINT", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}},
                ])),
            ),
        ),
        (
            "java-empty-jto",
            "shop",
            pod(
                "java-empty-jto",
                ann(&[(JAVA, "java")]),
                json!({}),
                app(json!([{"name": "JAVA_TOOL_OPTIONS"}])),
            ),
        ),
        (
            "java-two-containers",
            "shop",
            pod(
                "java-two-containers",
                ann(&[(JAVA, "java"), (NAMES, "b, a")]),
                json!({}),
                json!([
                    container("a", "shop/a@sha256:0123", json!([])),
                    container("b", "shop/b:2.0@sha256:4567", port.clone()),
                    container("c", "shop/c", json!([])),
                ]),
            ),
        ),
        simple(
            "java-resource-annotations",
            &[
                (JAVA, "java"),
                ("resource.opentelemetry.io/service.name", "named"),
                ("resource.opentelemetry.io/service.version", "9"),
                ("resource.opentelemetry.io/team", "pay"),
                ("resource.opentelemetry.io/k8s.pod.name", "fixed"),
                ("resource.opentelemetry.io/service.namespace", "billing"),
                ("resource.opentelemetry.io/empty", ""),
            ],
        ),
        (
            "java-by-label",
            "shop",
            pod(
                "java-by-label",
                json!({}),
                json!({JAVA: "java"}),
                app(port.clone()),
            ),
        ),
        ("java-volumes", "shop", {
            let mut p = pod(
                "java-volumes",
                ann(&[(JAVA, "java")]),
                json!({}),
                app(port.clone()),
            );
            p["spec"]["volumes"] = json!([{"name": "data", "emptyDir": {}}]);
            p["spec"]["containers"][0]["volumeMounts"] =
                json!([{"name": "data", "mountPath": "/data"}]);
            p
        }),
        (
            "nodejs",
            "shop",
            pod(
                "nodejs",
                ann(&[(NODEJS, "langs")]),
                json!({"app.kubernetes.io/name": "shopfront", "app.kubernetes.io/version": "3.1"}),
                app(json!([{"name": "NODE_OPTIONS", "value": "--max-old-space-size=256"}])),
            ),
        ),
        (
            "python",
            "shop",
            pod(
                "python",
                ann(&[(PYTHON, "langs")]),
                json!({"app.kubernetes.io/instance": "py"}),
                app(json!([{"name": "PYTHONPATH", "value": "/app/lib"}])),
            ),
        ),
        simple("dotnet", &[(DOTNET, "langs")]),
        simple("sdk", &[(SDK, "langs")]),
        (
            "not-asked",
            "shop",
            pod("not-asked", json!({}), json!({}), app(port.clone())),
        ),
        simple("asked-false", &[(JAVA, "false")]),
        // Edges the policies leave to the webhook.
        (
            "edge-two-languages",
            "shop",
            pod(
                "edge-two-languages",
                ann(&[
                    (JAVA, "java"),
                    (PYTHON, "langs"),
                    ("instrumentation.opentelemetry.io/java-container-names", "a"),
                    (
                        "instrumentation.opentelemetry.io/python-container-names",
                        "b",
                    ),
                ]),
                json!({}),
                json!([
                    container("a", "shop/a:1", json!([])),
                    container("b", "shop/b:1", json!([]))
                ]),
            ),
        ),
        simple(
            "edge-go",
            &[
                (GO, "langs"),
                (
                    "instrumentation.opentelemetry.io/otel-go-auto-target-exe",
                    "/app",
                ),
            ],
        ),
        simple("edge-true-of-several", &[(JAVA, "true")]),
        simple("edge-cross-namespace", &[(JAVA, "SOLO/only")]),
        simple("edge-exporter-tls", &[(JAVA, "tls")]),
        (
            "edge-user-resource-attributes",
            "shop",
            pod(
                "edge-user-resource-attributes",
                ann(&[(JAVA, "java")]),
                json!({}),
                app(json!([{"name": "OTEL_RESOURCE_ATTRIBUTES", "value": "team=pay"}])),
            ),
        ),
        (
            "edge-jto-value-from",
            "shop",
            pod(
                "edge-jto-value-from",
                ann(&[(JAVA, "java")]),
                json!({}),
                app(
                    json!([{"name": "JAVA_TOOL_OPTIONS", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}]),
                ),
            ),
        ),
        simple("edge-unknown-container", &[(JAVA, "java"), (NAMES, "nope")]),
        simple("edge-not-found", &[(JAVA, "missing")]),
        ("edge-node-name", "shop", {
            let mut p = pod(
                "edge-node-name",
                ann(&[(JAVA, "java")]),
                json!({}),
                app(port.clone()),
            );
            p["spec"]["nodeName"] = json!("somewhere");
            p
        }),
    ]
}

/// The corpus with the namespaces filled in (`SOLO`, `SHOP` in values stand for them).
fn corpus_in(solo: &str, shop: &str) -> Vec<(&'static str, String, Value)> {
    corpus()
        .into_iter()
        .map(|(case, key, p)| {
            let text = p.to_string().replace("SOLO", solo).replace("SHOP", shop);
            let ns = if key == "solo" { solo } else { shop };
            (
                case,
                ns.to_owned(),
                serde_json::from_str(&text).expect("JSON"),
            )
        })
        .collect()
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

/// Item 2 of the issue: every pod a policy injects is stored exactly as the webhook (image
/// volumes) stores it; every other one is left untouched by the policies and served by the
/// webhook when both run.
#[tokio::test]
async fn policies_store_exactly_the_webhooks_pods_and_leave_the_rest_to_it() {
    let env = Env::start_with(
        "policy-diff",
        Options {
            args: vec!["--agent-delivery=image-volume".into()],
            ..Options::default()
        },
    )
    .await;
    let cp = cluster().await;
    let client = env.client.clone();
    // In the webhook's scope for phase 1 only.
    let solo = "e2e-policy-diff-solo";
    let shop = "e2e-policy-diff-shop";
    for ns in [solo, shop] {
        api::create_namespace(
            &client,
            ns,
            &[(POLICY_SCOPE, "diff"), (SCOPE_LABEL, &env.id)],
            &[],
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    }
    let insts = instrumentations(solo, shop);
    for i in &insts {
        let r =
            api::create_instrumentation(&client, i["metadata"]["namespace"].as_str().unwrap(), i)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.status, 201, "{}", r.body);
    }
    let pods = corpus_in(solo, shop);
    let probe = pods
        .iter()
        .find(|p| p.0 == "java-named")
        .expect("a case")
        .clone();
    let injected = |p: &Value| p["metadata"]["annotations"][INJECTED] == "java";

    // 1. The webhook alone.
    env.await_webhook(shop).await;
    env.until_dry_run(&probe.1, &probe.2, "the webhook's injection", |r| {
        injected(&r.body)
    })
    .await;
    let by_webhook = create_each(&client, &pods).await;
    delete_each(&client, &pods).await;
    let set_scope = |value: Option<String>| {
        let client = client.clone();
        async move {
            for ns in [solo, shop] {
                let patch = json!({"metadata": {"labels": {SCOPE_LABEL: value}}});
                let r = api::merge_patch(&client, &format!("/api/v1/namespaces/{ns}"), &patch)
                    .await
                    .unwrap_or_else(|e| panic!("{e}"));
                assert_eq!(r.status, 200, "{}", r.body);
            }
        }
    };
    set_scope(None).await;
    until(
        &client,
        &probe.1,
        &probe.2,
        "the webhook out of scope",
        |p| !injected(p),
    )
    .await;

    // 2. The policies alone.
    let (objects, coverage) = render(
        &cp.dir,
        &insts,
        &[
            "--mode",
            "both",
            "--name-prefix",
            "e2e-diff",
            &format!("--namespace-label={POLICY_SCOPE}=diff"),
            "--agent-delivery=image-volume",
        ],
    );
    eprintln!("[e2e] policy coverage:\n{coverage}");
    assert!(
        coverage.contains(&format!("{shop}/tls: java not covered: exporter TLS")),
        "{coverage}"
    );
    create_all(&client, &objects).await;
    until(
        &client,
        &probe.1,
        &probe.2,
        "the policy's injection",
        injected,
    )
    .await;
    // Each policy takes effect when the API server's informer has it: one pod per
    // Instrumentation and language must be injected before the corpus runs.
    for case in ["java-true-solo", "nodejs", "python", "dotnet", "sdk"] {
        let (_, ns, p) = pods.iter().find(|p| p.0 == case).expect("a case");
        until(&client, ns, p, case, |p| {
            p["metadata"]["annotations"][INJECTED].is_string()
        })
        .await;
    }
    let requests_before = env.requests().await.total();
    let by_policy = create_each(&client, &pods).await;
    delete_each(&client, &pods).await;
    assert_eq!(
        env.requests().await.total(),
        requests_before,
        "the webhook was called"
    );

    let mut covered = Vec::new();
    let mut left = Vec::new();
    for (((case, _, sent), policy), webhook) in pods.iter().zip(&by_policy).zip(&by_webhook) {
        if policy["metadata"]["annotations"][INJECTED].is_string() {
            assert_eq!(
                policy, webhook,
                "{case}: the policy's pod differs from the webhook's"
            );
            covered.push(*case);
        } else {
            // Untouched: what was sent, plus the API server's defaults.
            harness::assert_stored_as_expected(policy, sent);
            left.push(*case);
        }
    }
    eprintln!(
        "[e2e] covered by the policies ({}): {covered:?}",
        covered.len()
    );
    eprintln!("[e2e] left to the webhook ({}): {left:?}", left.len());
    let edges: Vec<&&str> = covered.iter().filter(|c| c.starts_with("edge-")).collect();
    assert!(
        edges.is_empty(),
        "edges a policy must leave to the webhook: {edges:?}"
    );
    let expected: Vec<&str> = pods
        .iter()
        .map(|p| p.0)
        .filter(|c| !c.starts_with("edge-") && !["not-asked", "asked-false"].contains(c))
        .collect();
    assert_eq!(covered, expected, "the corpus cases a policy serves");

    // 3. Both: the policies inject what they cover and the webhook leaves those pods alone
    // (they carry its marker); it injects the rest.
    set_scope(Some(env.id.clone())).await;
    env.await_webhook(shop).await;
    let by_both = create_each(&client, &pods).await;
    for (((case, _, _), both), webhook) in pods.iter().zip(&by_both).zip(&by_webhook) {
        assert_eq!(both, webhook, "{case}: with both paths");
    }
    delete_each(&client, &pods).await;
    delete_kind(&client, &objects, "MutatingAdmissionPolicyBinding").await;
    delete_kind(&client, &objects, "MutatingAdmissionPolicy").await;
}

/// Item 3 with no webhook: the pods no policy covers get the status reason and a warning at
/// `kubectl` time; a pod injected before (reinvocation) is not changed again; a deleted
/// Instrumentation stops injecting.
#[tokio::test]
async fn alone_the_policies_mark_and_warn_what_they_do_not_cover() {
    let cp = cluster().await;
    let client = cp.client();
    let solo = "e2e-policy-alone-solo";
    let shop = "e2e-policy-alone-shop";
    for ns in [solo, shop] {
        api::create_namespace(&client, ns, &[(POLICY_SCOPE, "alone")], &[])
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let insts = instrumentations(solo, shop);
    for i in &insts {
        let r =
            api::create_instrumentation(&client, i["metadata"]["namespace"].as_str().unwrap(), i)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.status, 201, "{}", r.body);
    }
    let (objects, _) = render(
        &cp.dir,
        &insts,
        &[
            "--name-prefix",
            "e2e-alone",
            &format!("--namespace-label={POLICY_SCOPE}=alone"),
        ],
    );
    let kinds: Vec<&str> = objects
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    assert!(kinds.contains(&"ValidatingAdmissionPolicy"), "{kinds:?}");
    create_all(&client, &objects).await;
    let pods = corpus_in(solo, shop);
    let find = |case: &str| pods.iter().find(|p| p.0 == case).expect("a case").clone();
    let (_, ns, java) = find("java-named");
    until(&client, &ns, &java, "the policy's injection", |p| {
        p["metadata"]["annotations"][INJECTED] == "java"
    })
    .await;
    // Both kinds of policy are live once the warning arrives.
    let (_, ns_go, go) = find("edge-go");
    let t0 = Instant::now();
    loop {
        let r = api::create_pod(&client, &ns_go, &go, true)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        if !r.warnings.is_empty() {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "no warning: {}",
            r.body["metadata"]
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let expected = [
        // Go is disabled by default, as in the webhook.
        (
            "edge-go",
            format!("go=skipped language_disabled {shop}/langs"),
        ),
        (
            "edge-true-of-several",
            format!("java=skipped multiple_instrumentations {shop}/*"),
        ),
        (
            "edge-not-found",
            format!("java=skipped instrumentation_not_found {shop}/missing"),
        ),
        (
            "edge-exporter-tls",
            format!("java=skipped policy_unsupported {shop}/tls"),
        ),
        (
            "edge-cross-namespace",
            format!("java=skipped policy_unsupported {solo}/only"),
        ),
        (
            "edge-user-resource-attributes",
            format!("java=skipped policy_unsupported {shop}/java"),
        ),
        (
            "edge-two-languages",
            format!(
                "java=skipped policy_unsupported {shop}/java; python=skipped policy_unsupported {shop}/langs"
            ),
        ),
    ];
    for (case, status) in expected {
        let (_, ns, p) = find(case);
        let r = api::create_pod(&client, &ns, &p, false)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.status, 201, "{case}: {}", r.body);
        let stored = &r.body;
        assert_eq!(
            stored["metadata"]["annotations"][STATUS],
            status.as_str(),
            "{case}"
        );
        assert_eq!(
            stored["metadata"]["labels"][harness::INJECTED_LABEL],
            "false",
            "{case}"
        );
        assert!(
            stored["metadata"]["annotations"][INJECTED].is_null(),
            "{case}"
        );
        assert_eq!(
            r.warnings,
            [format!(
                "Validation failed for ValidatingAdmissionPolicy 'e2e-alone.warn-not-injected' with binding 'e2e-alone.warn-not-injected': otel-injector policy: not injected: {status}"
            )],
            "{case}"
        );
        // The status reads back as the webhook's grammar.
        let parsed: Result<otel_injector::engine::outcome::PodStatus, _> = status.parse();
        assert!(parsed.is_ok(), "{case}: {parsed:?}");
    }
    // An injected pod: the outcome, no warning.
    let r = api::create_pod(&client, &ns, &java, false)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(r.warnings.is_empty(), "{:?}", r.warnings);
    assert_eq!(
        r.body["metadata"]["labels"][harness::INJECTED_LABEL],
        "true"
    );
    // A pod injected before (what a reinvocation sees) is not changed again.
    let mut again = r.body.clone();
    for k in [
        "uid",
        "resourceVersion",
        "creationTimestamp",
        "managedFields",
        "generation",
    ] {
        again["metadata"].as_object_mut().unwrap().remove(k);
    }
    again["metadata"]["name"] = json!("java-again");
    again.as_object_mut().unwrap().remove("status");
    let r2 = api::create_pod(&client, &ns, &again, false)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        r2.body["spec"], r.body["spec"],
        "a second pass changed the pod"
    );
    assert_eq!(
        env_value(&r2.body, 0, "JAVA_TOOL_OPTIONS"),
        " -javaagent:/otel-auto-instrumentation-java-app/javaagent.jar -Dotel.javaagent.extensions=/otel-auto-instrumentation-java-app-extension-0"
    );

    // The Instrumentation deleted: the binding finds no params, nothing is injected.
    let r = api::send(
        &client,
        Method::DELETE,
        &format!("/apis/opentelemetry.io/v1alpha1/namespaces/{shop}/instrumentations/java"),
        None,
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 200, "{}", r.body);
    let mut later = java.clone();
    later["metadata"]["name"] = json!("java-after-delete");
    until(&client, &ns, &later, "no injection after the delete", |p| {
        p["metadata"]["annotations"][INJECTED].is_null()
    })
    .await;
    delete_kind(&client, &objects, "MutatingAdmissionPolicyBinding").await;
    delete_kind(&client, &objects, "ValidatingAdmissionPolicyBinding").await;
    delete_kind(&client, &objects, "MutatingAdmissionPolicy").await;
    delete_kind(&client, &objects, "ValidatingAdmissionPolicy").await;
}

/// The CRD of v1alpha1 alone (no conversion, so nothing of ours is needed to read it).
fn v1alpha1_crd(dir: &Path) -> PathBuf {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_e2e-otel-injector"))
        .args(["crd", "--v1beta1=false"])
        .output()
        .expect("otel-injector crd");
    assert!(out.status.success());
    let path = dir.join("crd-v1alpha1.yaml");
    std::fs::write(&path, out.stdout).expect("write the CRD");
    path
}

/// The acceptance test: no webhook registered and no otel-injector process, a Deployment's
/// pod asking for Java is injected by the API server, and the real Java agent in it sends a
/// span to the real Collector.
#[tokio::test]
async fn the_api_server_alone_injects_a_deployments_java_agent_that_sends_a_span() {
    use crate::support::controlplane::ControlPlane;
    use crate::support::process::free_port;
    use crate::support::runner;
    use crate::telemetry::{self, INJECT};

    let mut cp = ControlPlane::start()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    cp.start_controllers()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let client = cp.client();
    api::install_crds(&client, &v1alpha1_crd(&cp.dir))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let c = telemetry::collector().await;
    let ns = "shop";
    api::create_namespace(&client, ns, &[], &[])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let inst = inst(ns, "java", telemetry::spec(&c.http_endpoint()));
    let r = api::create_instrumentation(&client, ns, &inst)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 201, "{}", r.body);
    let (objects, coverage) = render(&cp.dir, &[inst], &[]);
    assert!(
        coverage.contains("shop/java: policy injects java, nodejs, python, dotnet, sdk"),
        "{coverage}"
    );
    create_all(&client, &objects).await;
    // Nothing else could have injected it.
    let hooks = api::send(
        &client,
        Method::GET,
        "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
        None,
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(hooks.body["items"], json!([]), "no webhook is registered");

    let port = free_port();
    let mut t = crate::workloads::template("checkout", &[(&format!("{INJECT}java"), "true")]);
    t["spec"]["containers"] = json!([telemetry::app("app", runner::JAVA_APP, port)]);
    let dry = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "dry", "annotations": t["metadata"]["annotations"]}, "spec": t["spec"]});
    until(&client, ns, &dry, "the policy's injection", |p| {
        is_injected(p)
    })
    .await;
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "checkout"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "checkout"}}, "template": t}});
    let r = api::send(
        &client,
        Method::POST,
        &format!("/apis/apps/v1/namespaces/{ns}/deployments"),
        Some(&deployment),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 201, "{}", r.body);
    let t0 = Instant::now();
    let pod = loop {
        let list = api::send(
            &client,
            Method::GET,
            &format!("/api/v1/namespaces/{ns}/pods?labelSelector=app=checkout"),
            None,
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        let running = list.body["items"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["status"]["phase"] == "Running")
            .cloned();
        if let Some(p) = running {
            break p;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "no Running pod: {}",
            list.body
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    // What the API server stored: the agent's image volume, its mount, the agent option, the
    // SDK's variables and the outcome.
    let spec = &pod["spec"];
    assert_eq!(
        spec["volumes"][spec["volumes"].as_array().unwrap().len() - 1],
        json!({"name": "opentelemetry-auto-instrumentation-java", "image": {"reference": runner::JAVA_AGENT, "pullPolicy": "IfNotPresent"}})
    );
    assert_eq!(
        spec["containers"][0]["volumeMounts"]
            .as_array()
            .unwrap()
            .last()
            .unwrap(),
        &json!({"name": "opentelemetry-auto-instrumentation-java", "mountPath": "/otel-auto-instrumentation-java-app", "readOnly": true})
    );
    assert_eq!(
        env_value(&pod, 0, "JAVA_TOOL_OPTIONS"),
        " -javaagent:/otel-auto-instrumentation-java-app/javaagent.jar"
    );
    assert_eq!(env_value(&pod, 0, "OTEL_SERVICE_NAME"), "checkout");
    assert_eq!(
        env_value(&pod, 0, "OTEL_EXPORTER_OTLP_ENDPOINT"),
        c.http_endpoint()
    );
    let status = pod["metadata"]["annotations"][STATUS]
        .as_str()
        .unwrap_or("");
    let hash = objects[0]["metadata"]["annotations"]["otel-injector/spec-hash"]
        .as_str()
        .unwrap();
    assert_eq!(status, format!("java=injected {ns}/java {hash}"));
    assert_eq!(pod["metadata"]["labels"][harness::INJECTED_LABEL], "true");

    let run = runner::run(&client, &pod, &telemetry::images(), &cp.dir)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut r = telemetry::Running {
        ns: ns.to_owned(),
        pod: pod.clone(),
        run,
    };
    let (code, _) = telemetry::request(&mut r, port, "/checkout").await;
    assert_eq!(code, 200);
    let span = telemetry::the_server_span(c, &r, "checkout").await;
    telemetry::assert_resource(&span, &r, "app", "checkout");
    eprintln!(
        "[e2e] span through the policy path: {} {:?}",
        span.name,
        span.resource.get("k8s.deployment.name")
    );
    cp.stop();
}

/// The CEL cost stays well inside the API server's budgets: a pod far larger than any real
/// one (64 containers, all targeted, each with 50 variables of its own, 100 annotations of
/// which 50 are resource attributes) is injected by a policy whose `failurePolicy` is `Fail`,
/// so an expression over the per-expression limit or a policy over the per-call budget
/// would refuse it.
#[tokio::test]
async fn a_huge_pod_is_injected_within_the_cel_budgets() {
    let cp = cluster().await;
    let client = cp.client();
    let ns = "e2e-policy-cost";
    api::create_namespace(&client, ns, &[(POLICY_SCOPE, "cost")], &[])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let i = &instrumentations(ns, ns)[1];
    let r = api::create_instrumentation(&client, ns, i)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 201, "{}", r.body);
    let (mut objects, _) = render(
        &cp.dir,
        std::slice::from_ref(i),
        &[
            "--mode",
            "both",
            "--name-prefix",
            "e2e-cost",
            &format!("--namespace-label={POLICY_SCOPE}=cost"),
        ],
    );
    for o in objects
        .iter_mut()
        .filter(|o| o["kind"] == "MutatingAdmissionPolicy")
    {
        o["spec"]["failurePolicy"] = json!("Fail");
    }
    create_all(&client, &objects).await;
    let env: Vec<Value> = (0..50)
        .map(|k| json!({"name": format!("APP_VAR_{k}"), "value": "x".repeat(40)}))
        .collect();
    let containers: Vec<Value> = (0..64)
        .map(|c| container(&format!("c{c}"), "shop/app:1.0", json!(env)))
        .collect();
    let names: Vec<String> = (0..64).map(|c| format!("c{c}")).collect();
    let mut annotations = serde_json::Map::new();
    annotations.insert(JAVA.into(), json!("java"));
    annotations.insert(NAMES.into(), json!(names.join(",")));
    for k in 0..50 {
        annotations.insert(format!("resource.opentelemetry.io/attr-{k}"), json!("v"));
        annotations.insert(format!("example.com/note-{k}"), json!("n"));
    }
    let huge = pod(
        "huge",
        Value::Object(annotations),
        json!({}),
        Value::Array(containers),
    );
    let small = pod(
        "small",
        json!({JAVA: "java"}),
        json!({}),
        json!([container("app", "shop/app:1.0", json!([]))]),
    );
    until(&client, ns, &small, "the policy's injection", |p| {
        p["metadata"]["annotations"][INJECTED] == "java"
    })
    .await;
    let t0 = Instant::now();
    let r = api::create_pod(&client, ns, &huge, true)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    eprintln!("[e2e] policy on a 64-container pod: {:?}", t0.elapsed());
    assert_eq!(
        r.status,
        201,
        "a policy over its CEL budget refuses the pod: {}",
        r.message()
    );
    assert_eq!(r.body["metadata"]["annotations"][INJECTED], "java");
    let last = &r.body["spec"]["containers"][63];
    let ra = last["env"].as_array().unwrap().last().unwrap();
    assert_eq!(ra["name"], "OTEL_RESOURCE_ATTRIBUTES");
    assert!(ra["value"].as_str().unwrap().contains("attr-49=v"), "{ra}");
    delete_kind(&client, &objects, "MutatingAdmissionPolicyBinding").await;
    delete_kind(&client, &objects, "MutatingAdmissionPolicy").await;
}

/// Measurement (ignored): pod-create latency through the real API server, p50 and p99 of
/// `E2E_POLICY_PODS` (default 300) creates each, in one run: no injection, the webhook
/// (image volumes) and the policy (docs/performance.md).
#[tokio::test]
#[ignore = "measurement: just policy-latency"]
async fn policy_latency() {
    let env = Env::start_with(
        "policy-lat",
        Options {
            args: vec!["--agent-delivery=image-volume".into()],
            ..Options::default()
        },
    )
    .await;
    let cp = cluster().await;
    let client = env.client.clone();
    let count: usize = std::env::var("E2E_POLICY_PODS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let none = "e2e-policy-lat-none";
    let hook = "e2e-policy-lat-webhook";
    let policy = "e2e-policy-lat-policy";
    api::create_namespace(&client, none, &[], &[])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    api::create_namespace(&client, hook, &[(SCOPE_LABEL, &env.id)], &[])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    api::create_namespace(&client, policy, &[(POLICY_SCOPE, "lat")], &[])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut insts = Vec::new();
    for ns in [none, hook, policy] {
        let i = inst(ns, "java", instrumentations(ns, ns)[1]["spec"].clone());
        let r = api::create_instrumentation(&client, ns, &i)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.status, 201, "{}", r.body);
        if ns == policy {
            insts.push(i);
        }
    }
    let (objects, _) = render(
        &cp.dir,
        &insts,
        &[
            "--mode",
            "both",
            "--name-prefix",
            "e2e-lat",
            &format!("--namespace-label={POLICY_SCOPE}=lat"),
        ],
    );
    create_all(&client, &objects).await;
    let asking = |name: &str| {
        pod(
            name,
            json!({JAVA: "java"}),
            json!({"app": "web"}),
            json!([container(
                "app",
                "shop/app:1.0",
                json!([{"name": "PORT", "value": "8080"}])
            )]),
        )
    };
    env.await_webhook(hook).await;
    until(&client, policy, &asking("warm"), "the policy", |p| {
        p["metadata"]["annotations"][INJECTED] == "java"
    })
    .await;
    env.until_dry_run(hook, &asking("warm"), "the webhook", |r| {
        r.body["metadata"]["annotations"][INJECTED] == "java"
    })
    .await;
    let mut results = Vec::new();
    for (what, ns, ask) in [
        ("none", none, false),
        ("webhook", hook, true),
        ("policy", policy, true),
    ] {
        let mut times = Vec::with_capacity(count);
        for k in 0..count {
            let mut p = asking(&format!("p{k}"));
            if !ask {
                p["metadata"]["annotations"] = json!({});
            }
            let t0 = Instant::now();
            let r = api::create_pod(&client, ns, &p, false)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            times.push(t0.elapsed());
            assert_eq!(r.status, 201);
            assert_eq!(
                r.body["metadata"]["annotations"][INJECTED].is_string(),
                ask,
                "{what}"
            );
        }
        times.sort();
        results.push((
            what,
            harness::percentile(&times, 50),
            harness::percentile(&times, 99),
        ));
    }
    for (what, p50, p99) in &results {
        eprintln!("[e2e] pod create, {what}: p50 {p50:.2} ms, p99 {p99:.2} ms ({count} pods)");
    }
    delete_kind(&client, &objects, "MutatingAdmissionPolicyBinding").await;
    delete_kind(&client, &objects, "MutatingAdmissionPolicy").await;
}
