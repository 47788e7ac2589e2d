//! One annotated pod per language (and one pod with two languages) created through the
//! apiserver. Each stored pod (GET) must be exactly what the engine itself makes of the same
//! pod and Instrumentation (`harness::engine_result`), except for the fields the apiserver
//! defaults (`harness::APISERVER_DEFAULTS`); and a few key values are pinned here as
//! literals, so that a case fails whether the engine or the way through the apiserver
//! breaks. A pod the apiserver rejects after the patch fails `Env::create` (HTTP 201
//! expected); a webhook call that failed open leaves the pod without the marker annotation,
//! which every case asserts.

mod across;
mod go;
mod runtimes;
mod webservers;

use otel_injector::agents::Language;
use otel_injector::keys::{
    DOTNET_RUNTIME, GO_TARGET_EXE, INJECT_DOTNET, INJECT_GO, INJECT_NGINX, INJECT_NODEJS,
    INJECT_PYTHON, INJECT_SDK, INJECTED_ANNOTATION, PYTHON_PLATFORM,
};
use serde_json::{Value, json};

use crate::harness::*;

/// Every language, Go included (it is off by default).
const ALL_LANGUAGES: &str = "java,nodejs,python,dotnet,go,apache-httpd,nginx,sdk";

/// The variables put before a target's own env.
const HEAD: [&str; 2] = ["OTEL_NODE_IP", "OTEL_POD_IP"];
/// The SDK variables after the language's, with a sampler argument.
const TAIL: [&str; 8] = [
    "OTEL_SERVICE_NAME",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_RESOURCE_ATTRIBUTES_POD_NAME",
    "OTEL_RESOURCE_ATTRIBUTES_NODE_NAME",
    "OTEL_PROPAGATORS",
    "OTEL_TRACES_SAMPLER",
    "OTEL_TRACES_SAMPLER_ARG",
    "OTEL_RESOURCE_ATTRIBUTES",
];

/// Exporter, propagators, a ratio sampler and one common variable; `lang` adds its own
/// section (`{"nodejs": {...}}`).
fn spec(endpoint: &str, lang: Value) -> Value {
    let mut s = json!({
        "exporter": {"endpoint": endpoint},
        "propagators": ["tracecontext", "baggage"],
        "sampler": {"type": "parentbased_traceidratio", "argument": "0.25"},
        "env": [{"name": "OTEL_LOGS_EXPORTER", "value": "otlp"}]
    });
    for (k, v) in lang.as_object().into_iter().flatten() {
        s[k] = v.clone();
    }
    s
}

fn one_env(name: &str, value: &str) -> Value {
    json!({"env": [{"name": name, "value": value}]})
}

/// A pod named `name` with these annotations and containers.
fn pod_of(name: &str, annotations: Value, containers: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {"containers": containers}
    })
}

/// `HEAD`, then `middle`, then `TAIL`.
fn env_order<'a>(middle: &[&'a str]) -> Vec<&'a str> {
    HEAD.iter()
        .chain(middle)
        .chain(TAIL.iter())
        .copied()
        .collect()
}

fn names(list: &Value) -> Vec<&str> {
    list.as_array()
        .into_iter()
        .flatten()
        .map(|c| c["name"].as_str().unwrap_or("?"))
        .collect()
}

fn container<'a>(pod: &'a Value, name: &str) -> &'a Value {
    pod["spec"]["containers"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["name"] == name))
        .unwrap_or_else(|| panic!("no container {name}: {pod}"))
}

fn init<'a>(pod: &'a Value, name: &str) -> &'a Value {
    pod["spec"]["initContainers"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["name"] == name))
        .unwrap_or_else(|| panic!("no init container {name}: {pod}"))
}

/// The literal value of `name` in a container's env (present exactly once).
fn var<'a>(c: &'a Value, name: &str) -> &'a str {
    let found: Vec<&Value> = c["env"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["name"] == name)
        .collect();
    assert_eq!(found.len(), 1, "{name} in {}: {c}", c["name"]);
    found[0]["value"]
        .as_str()
        .unwrap_or_else(|| panic!("{name} has no literal value: {}", found[0]))
}

fn has_var(c: &Value, name: &str) -> bool {
    names(&c["env"]).contains(&name)
}

/// A test's webhook (with `options`), registered, and one namespace it serves.
async fn setup(id: &str, options: Options) -> (Env, String) {
    let env = Env::start_with(id, options).await;
    let ns = env.namespace("shop", &[]).await;
    env.await_webhook(&ns).await;
    (env, ns)
}

/// Creates `pod` in `ns` for real once its dry run comes back injected, and returns it as
/// stored, after asserting that it was accepted (HTTP 201), carries the marker of `langs`
/// (not failed open), and is exactly the engine's result but the apiserver defaults.
async fn create_injected(
    env: &Env,
    ns: &str,
    insts: &[Value],
    pod: &Value,
    langs: &[Language],
) -> Value {
    let name = pod["metadata"]["name"].as_str().expect("pod name");
    let (expected, d) = engine_result(env, ns, insts, pod);
    assert_eq!(
        d.injected, langs,
        "the engine's own decision for {name}: warnings {:?}, skipped {:?}",
        d.warnings, d.skipped
    );
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
    // The webhook's Instrumentation cache fills from a watch.
    env.until_dry_run(ns, pod, "injection", |r| is_injected(&r.body))
        .await;

    let before = env.requests().await;
    let created = env.create(ns, pod).await;
    assert!(created.warnings.is_empty(), "{:?}", created.warnings);
    assert_eq!(
        env.requests().await.patched,
        before.patched + 1.0,
        "the webhook patched {name}"
    );
    let stored = env.stored(ns, name).await;
    let marker: Vec<&str> = langs.iter().map(|l| l.as_str()).collect();
    assert_eq!(
        stored["metadata"]["annotations"][INJECTED_ANNOTATION],
        marker.join(","),
        "{name} is stored injected (a failed webhook call would have been ignored): {stored}"
    );
    let met = assert_stored_as_expected(&stored, &expected);
    eprintln!(
        "[e2e] {}: {ns}/{name} stored as the engine injects it; apiserver defaults met: {:?}",
        env.id, met
    );
    stored
}
