//! The policy tests' corpus: the Instrumentations and the pods, every case of the engine's
//! semantics a policy must get right and the edges it must leave to the webhook.

use otel_injector::keys::{
    CONTAINER_NAMES, DOTNET_RUNTIME, INJECT_DOTNET, INJECT_GO, INJECT_JAVA, INJECT_NGINX,
    INJECT_NODEJS, INJECT_PYTHON, INJECT_SDK, PYTHON_PLATFORM,
};
use serde_json::{Value, json};

use super::build::{container, owned, pod};

mod instrumentations;
mod servers;

pub use instrumentations::{asked_namespace, instrumentations};

/// The corpus: (case, namespace key `solo`, `shop` or `asked`, pod). Every case of the engine's
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
                ann(&[(INJECT_JAVA, "true")]),
                json!({}),
                app(port.clone()),
            ),
        ),
        simple("java-named", &[(INJECT_JAVA, "java")]),
        (
            "java-qualified",
            "shop",
            pod(
                "java-qualified",
                ann(&[(INJECT_JAVA, "SHOP/java")]),
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
                    ann(&[(INJECT_JAVA, "java")]),
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
                    ann(&[(INJECT_JAVA, "java")]),
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
                    ann(&[(INJECT_JAVA, "java")]),
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
                    ann(&[(INJECT_JAVA, "java")]),
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
                    ann(&[(INJECT_JAVA, "java")]),
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
                ann(&[(INJECT_JAVA, "java")]),
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
                ann(&[(INJECT_JAVA, "java")]),
                json!({}),
                app(json!([{"name": "JAVA_TOOL_OPTIONS"}])),
            ),
        ),
        (
            "java-two-containers",
            "shop",
            pod(
                "java-two-containers",
                ann(&[(INJECT_JAVA, "java"), (CONTAINER_NAMES, "b, a")]),
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
                (INJECT_JAVA, "java"),
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
                json!({INJECT_JAVA: "java"}),
                app(port.clone()),
            ),
        ),
        ("java-volumes", "shop", {
            let mut p = pod(
                "java-volumes",
                ann(&[(INJECT_JAVA, "java")]),
                json!({}),
                app(port.clone()),
            );
            p["spec"]["volumes"] = json!([{"name": "data", "emptyDir": {}}]);
            p["spec"]["containers"][0]["volumeMounts"] =
                json!([{"name": "data", "mountPath": "/data"}]);
            p
        }),
        // Init containers of its own (the agent's go after them), and a security context on
        // each target: in init-container delivery the first target's is the agent's too.
        ("java-secured", "shop", {
            let mut p = pod(
                "java-secured",
                ann(&[(INJECT_JAVA, "java"), (CONTAINER_NAMES, "b, a")]),
                json!({}),
                json!([
                    container("a", "shop/a:1", json!([])),
                    container("b", "shop/b:1", json!([])),
                ]),
            );
            p["spec"]["initContainers"] = json!([{"name": "migrate", "image": "shop/migrate:1"}]);
            p["spec"]["containers"][0]["securityContext"] = json!({"runAsUser": 2000});
            p["spec"]["containers"][1]["securityContext"] = json!({
                "runAsNonRoot": true,
                "runAsUser": 1000,
                "allowPrivilegeEscalation": false,
                "capabilities": {"drop": ["ALL"]},
            });
            p
        }),
        (
            "nodejs",
            "shop",
            pod(
                "nodejs",
                ann(&[(INJECT_NODEJS, "langs")]),
                json!({"app.kubernetes.io/name": "shopfront", "app.kubernetes.io/version": "3.1"}),
                app(json!([{"name": "NODE_OPTIONS", "value": "--max-old-space-size=256"}])),
            ),
        ),
        (
            "python",
            "shop",
            pod(
                "python",
                ann(&[(INJECT_PYTHON, "langs")]),
                json!({"app.kubernetes.io/instance": "py"}),
                app(json!([{"name": "PYTHONPATH", "value": "/app/lib"}])),
            ),
        ),
        simple("dotnet", &[(INJECT_DOTNET, "langs")]),
        simple("sdk", &[(INJECT_SDK, "langs")]),
        (
            "not-asked",
            "shop",
            pod("not-asked", json!({}), json!({}), app(port.clone())),
        ),
        simple("asked-false", &[(INJECT_JAVA, "false")]),
        // Another language's key that does not ask: the policy reads which languages the pod
        // asks for off every key (not its own alone), on labels as on annotations, and on
        // the namespace under the pod's own.
        (
            "java-other-language-false",
            "shop",
            pod(
                "java-other-language-false",
                ann(&[(INJECT_JAVA, "java")]),
                json!({INJECT_PYTHON: "false"}),
                app(port.clone()),
            ),
        ),
        (
            "namespace-language-false-python-label",
            "asked",
            pod(
                "namespace-language-false-python-label",
                ann(&[(INJECT_JAVA, "false")]),
                json!({INJECT_PYTHON: "true"}),
                app(json!([])),
            ),
        ),
        // Edges the policies leave to the webhook.
        (
            "edge-two-languages",
            "shop",
            pod(
                "edge-two-languages",
                ann(&[
                    (INJECT_JAVA, "java"),
                    (INJECT_PYTHON, "langs"),
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
        // The variant keys: each variant of the agent is covered (musl too).
        simple(
            "python-glibc",
            &[(INJECT_PYTHON, "langs"), (PYTHON_PLATFORM, "glibc")],
        ),
        simple(
            "python-musl",
            &[(INJECT_PYTHON, "langs"), (PYTHON_PLATFORM, "musl")],
        ),
        simple(
            "dotnet-musl",
            &[(INJECT_DOTNET, "langs"), (DOTNET_RUNTIME, "linux-musl-x64")],
        ),
        // `"true"` for a language no policy covers, and for a disabled one.
        (
            "nginx-true-solo",
            "solo",
            pod(
                "nginx-true-solo",
                ann(&[(INJECT_NGINX, "true")]),
                json!({}),
                app(port.clone()),
            ),
        ),
        simple("edge-go-true", &[(INJECT_GO, "true")]),
        simple(
            "edge-go",
            &[
                (INJECT_GO, "langs"),
                (
                    "instrumentation.opentelemetry.io/otel-go-auto-target-exe",
                    "/app",
                ),
            ],
        ),
        simple("edge-true-of-several", &[(INJECT_JAVA, "true")]),
        // Another namespace's Instrumentation that does not say it is shared (`only` does:
        // the generated `key-cross-namespace`).
        (
            "edge-cross-namespace",
            "solo",
            pod(
                "edge-cross-namespace",
                ann(&[(INJECT_JAVA, "SHOP/java")]),
                json!({}),
                app(port.clone()),
            ),
        ),
        simple("exporter-tls", &[(INJECT_JAVA, "tls")]),
        // The container's own resource attributes: kept, the others appended to a literal
        // (not the keys it sets), moved after everything injected; before and after the
        // container's other variables, with the variables put before its own.
        (
            "java-user-resource-attributes",
            "shop",
            pod(
                "java-user-resource-attributes",
                ann(&[(INJECT_JAVA, "java")]),
                json!({}),
                app(json!([{"name": "OTEL_RESOURCE_ATTRIBUTES", "value": "team=pay"}])),
            ),
        ),
        (
            "java-user-resource-attributes-overlap",
            "shop",
            pod(
                "java-user-resource-attributes-overlap",
                ann(&[(INJECT_JAVA, "java")]),
                json!({}),
                app(json!([
                    {"name": "PORT", "value": "8080"},
                    {"name": "OTEL_RESOURCE_ATTRIBUTES", "value": " k8s.pod.name = mine ,service.version=2,"},
                    {"name": "LOG_LEVEL", "value": "info"},
                ])),
            ),
        ),
        (
            "nodejs-user-resource-attributes-value-from",
            "shop",
            pod(
                "nodejs-user-resource-attributes-value-from",
                ann(&[(INJECT_NODEJS, "langs")]),
                json!({}),
                app(json!([
                    {"name": "OTEL_RESOURCE_ATTRIBUTES", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}},
                    {"name": "PORT", "value": "8080"},
                ])),
            ),
        ),
        (
            "edge-jto-value-from",
            "shop",
            pod(
                "edge-jto-value-from",
                ann(&[(INJECT_JAVA, "java")]),
                json!({}),
                app(
                    json!([{"name": "JAVA_TOOL_OPTIONS", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}]),
                ),
            ),
        ),
        simple(
            "edge-unknown-container",
            &[(INJECT_JAVA, "java"), (CONTAINER_NAMES, "nope")],
        ),
        simple("edge-not-found", &[(INJECT_JAVA, "missing")]),
        // Asked for by the namespace's annotation alone.
        ("namespace-annotation", "asked", pod("namespace-annotation", json!({}), json!({}), app(json!([])))),
        ("node-name", "shop", {
            let mut p = pod(
                "node-name",
                ann(&[(INJECT_JAVA, "java")]),
                json!({}),
                app(port.clone()),
            );
            p["spec"]["nodeName"] = json!("somewhere");
            p
        }),
    ]
    .into_iter()
    .chain(servers::cases())
    .chain(super::keys::cases())
    .collect()
}

/// The corpus with the namespaces filled in (`SOLO`, `SHOP` in values stand for them).
pub fn corpus_in(solo: &str, shop: &str) -> Vec<(&'static str, String, Value)> {
    corpus()
        .into_iter()
        .map(|(case, key, p)| {
            let text = p.to_string().replace("SOLO", solo).replace("SHOP", shop);
            let ns = match key {
                "solo" => solo.to_owned(),
                "asked" => asked_namespace(shop),
                _ => shop.to_owned(),
            };
            (case, ns, serde_json::from_str(&text).expect("JSON"))
        })
        .collect()
}
