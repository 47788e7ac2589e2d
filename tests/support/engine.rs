//! Helpers shared by the engine tests: run the engine on a pod and apply its patch, the common
//! assertions, the parts of the expected pod that every language writes the same way, and
//! edits of the test Instrumentations. The languages themselves are in `langs.rs`.

mod langs;

use std::ops::Deref;

use json_patch::PatchOperation;
use k8s_openapi::api::core::v1::Pod;
use otel_injector::admission::mutate;
use otel_injector::agents::Language;
use otel_injector::cluster::StaticCatalog;
use otel_injector::engine::outcome::PodStatus;
use otel_injector::engine::{EngineConfig, Report, SkipReason, Snapshot};
use otel_injector::keys::{INJECTED_ANNOTATION, INJECTED_LABEL, STATUS_ANNOTATION};
use otel_injector::pod::valid;
use serde_json::{Value, json};

pub use langs::*;

/// What the engine answered for one pod: the patch the webhook would send less the outcome
/// it records (the injection alone), the outcome, and the report (whose fields the tests
/// read directly).
#[derive(Debug)]
pub struct Decision {
    pub patch: Vec<PatchOperation>,
    /// The `otel-injector/status` annotation written, if any (checked against the report).
    pub status: Option<String>,
    pub report: Report,
}

impl Deref for Decision {
    type Target = Report;
    fn deref(&self) -> &Report {
        &self.report
    }
}

/// A catalog of the Instrumentations in `yaml`.
pub fn catalog(yaml: &str) -> StaticCatalog {
    StaticCatalog::from_yaml(yaml).unwrap()
}

/// Decides for `pod` created in namespace `shop` and returns the patched pod.
pub fn run_with(catalog: &StaticCatalog, config: &EngineConfig, pod: &Value) -> (Value, Decision) {
    let typed: Pod = serde_json::from_value(pod.clone()).unwrap();
    let (patch, report) = mutate(&Snapshot::take(catalog, "shop", config), &typed);
    let mut out = pod.clone();
    // The strict RFC 6902 applier: every patch the suite produces must apply as it is, and
    // leave a valid pod (when the pod was valid to begin with).
    json_patch::patch(&mut out, &json_patch::Patch(patch.clone()))
        .unwrap_or_else(|e| panic!("the patch does not apply strictly: {e}"));
    if valid::check(&typed).is_ok() {
        let patched: Pod = serde_json::from_value(out.clone()).unwrap();
        valid::check(&patched).unwrap_or_else(|e| panic!("the patched pod is invalid: {e}"));
    }
    let status = take_outcome(&mut out, pod, &report);
    let patch = injection_ops(patch);
    (
        out,
        Decision {
            patch,
            status,
            report,
        },
    )
}

/// Checks the outcome the patch recorded on `out` (exactly what `report` says; nothing when
/// the pod asked for nothing or was injected already), then takes it out, so that the
/// language tests compare the injection alone (tests/engine/outcome.rs checks the outcome's exact
/// operations). Returns the annotation's text.
fn take_outcome(out: &mut Value, before: &Value, report: &Report) -> Option<String> {
    let expected = report.status();
    let meta = out["metadata"].as_object_mut()?;
    let text = meta
        .get_mut("annotations")
        .and_then(Value::as_object_mut)
        .and_then(|a| a.remove(STATUS_ANNOTATION));
    let label = meta
        .get_mut("labels")
        .and_then(Value::as_object_mut)
        .and_then(|l| l.remove(INJECTED_LABEL));
    let had = |map: &str| before["metadata"].get(map).is_some();
    for map in ["annotations", "labels"] {
        if !had(map)
            && meta
                .get(map)
                .is_some_and(|m| m.as_object().is_some_and(|m| m.is_empty()))
        {
            meta.remove(map);
        }
    }
    match &expected {
        Some(status) => {
            let text = text
                .as_ref()
                .and_then(Value::as_str)
                .expect("the status is recorded");
            assert_eq!(&text.parse::<PodStatus>().unwrap(), status, "{text}");
            let injected = if status.injected() { "true" } else { "false" };
            assert_eq!(label, Some(json!(injected)));
        }
        None => {
            let before_text = before["metadata"]["annotations"].get(STATUS_ANNOTATION);
            assert_eq!(text.as_ref(), before_text, "no status written");
        }
    }
    expected.map(|s| s.to_string())
}

/// The operations less those that record the outcome.
fn injection_ops(ops: Vec<PatchOperation>) -> Vec<PatchOperation> {
    let status = format!(
        "/metadata/annotations/{}",
        STATUS_ANNOTATION.replace('/', "~1")
    );
    let label = format!("/metadata/labels/{}", INJECTED_LABEL.replace('/', "~1"));
    ops.into_iter()
        .filter_map(|op| {
            let mut v = serde_json::to_value(&op).unwrap();
            let path = v["path"].as_str().unwrap_or_default().to_owned();
            if path == status || path == label || path == "/metadata/labels" {
                return None;
            }
            if path == "/metadata/annotations" {
                let map = v["value"].as_object_mut().unwrap();
                map.remove(STATUS_ANNOTATION);
                if map.is_empty() {
                    return None;
                }
            }
            Some(serde_json::from_value(v).unwrap())
        })
        .collect()
}

pub fn run(catalog: &StaticCatalog, pod: &Value) -> (Value, Decision) {
    run_with(catalog, &EngineConfig::default(), pod)
}

/// Runs the engine again on its own output, as a reinvocation does: nothing may change.
pub fn assert_idempotent(catalog: &StaticCatalog, injected: &Value) {
    let (again, d) = run(catalog, injected);
    assert!(d.patch.is_empty(), "second pass patched: {:?}", d.patch);
    assert_eq!(&again, injected);
}

/// Injects `pod` (the annotation then lists `injected`) and calls the engine again on the
/// result after `edit`, as the API server does when another webhook changes the pod after us
/// (or, with an `edit` that does nothing, on reinvocation alone): the pod is recognised as
/// injected and gets no second patch and no warning. Returns the pod of the second call.
pub fn assert_reinvocation_patches_nothing(
    catalog: &StaticCatalog,
    pod: &Value,
    injected: &str,
    edit: impl FnOnce(&mut Value),
) -> Value {
    let (once, d) = run(catalog, pod);
    assert!(!d.patch.is_empty());
    assert_eq!(
        once["metadata"]["annotations"][INJECTED_ANNOTATION],
        injected
    );
    let mut changed = once;
    edit(&mut changed);
    let (twice, d) = run(catalog, &changed);
    assert!(d.patch.is_empty(), "{:?}", d.patch);
    assert!(d.already_injected);
    assert!(d.warnings.is_empty());
    assert_eq!(twice, changed);
    twice
}

/// What another webhook does to the pod after us in the reinvocation cases.
pub fn relabel(pod: &mut Value) {
    pod["metadata"]["labels"] = json!({"mutated-by": "someone-else"});
}

/// Reinvocation alone: nobody changed the pod after us.
pub fn unchanged(_: &mut Value) {}

/// Nothing was injected (the patch records only the outcome); the one skip is for `reason`
/// and the one warning is `warning`.
pub fn assert_skipped(d: &Decision, reason: SkipReason, warning: &str) {
    assert!(d.patch.is_empty());
    let status = d.status.as_deref().unwrap();
    assert!(
        status.contains(&format!("=skipped {} ", reason.as_str()))
            || status.ends_with(&format!("=skipped {}", reason.as_str())),
        "{status}"
    );
    assert_eq!(
        d.skipped.iter().map(|s| s.reason).collect::<Vec<_>>(),
        [reason]
    );
    assert_eq!(d.warnings, [warning]);
}

/// `language` was asked for but instrumented nothing, with `warning` as the only warning.
pub fn assert_not_injected(d: &Decision, language: Language, warning: &str) {
    assert!(d.patch.is_empty());
    assert!(d.injected.is_empty());
    assert_eq!(
        d.skipped
            .iter()
            .map(|s| (s.language, s.reason))
            .collect::<Vec<_>>(),
        [(Some(language), SkipReason::NothingInstrumented)]
    );
    assert_eq!(d.warnings, [warning]);
}

/// A pod `p` with `inject` set to `"true"` and `annotations`, and `spec`.
pub fn annotated_pod(inject: &str, annotations: Value, spec: Value) -> Value {
    let mut a = json!({inject: "true"});
    for (k, v) in annotations.as_object().unwrap() {
        a[k] = v.clone();
    }
    json!({"metadata": {"name": "p", "annotations": a}, "spec": spec})
}

/// [`annotated_pod`] with one container `app` whose env is `env`.
pub fn app_pod(inject: &str, annotations: Value, env: Value) -> Value {
    annotated_pod(
        inject,
        annotations,
        json!({"containers": [{"name": "app", "image": "app", "env": env}]}),
    )
}

pub fn fref(name: &str, path: &str) -> Value {
    json!({"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}})
}

pub fn lit(name: &str, value: &str) -> Value {
    json!({"name": name, "value": value})
}

/// An env list made of `parts`, in order.
pub fn env(parts: Vec<Vec<Value>>) -> Value {
    Value::Array(parts.into_iter().flatten().collect())
}

/// The variables put before a target's own env.
pub fn head() -> Vec<Value> {
    vec![
        fref("OTEL_NODE_IP", "status.hostIP"),
        fref("OTEL_POD_IP", "status.podIP"),
    ]
}

/// The SDK settings of a test Instrumentation in `shop`.
pub struct Sdk {
    pub endpoint: &'static str,
    pub propagators: &'static str,
    pub sampler: &'static str,
    pub sampler_arg: Option<&'static str>,
}

/// An OTLP/HTTP exporter, `[tracecontext, baggage]` and `parentbased_traceidratio` at 0.25.
pub const HTTP_SDK: Sdk = Sdk {
    endpoint: "http://otel-collector.observability:4318",
    propagators: "tracecontext,baggage",
    sampler: "parentbased_traceidratio",
    sampler_arg: Some("0.25"),
};

/// [`HTTP_SDK`] with an OTLP/gRPC exporter.
pub const GRPC_SDK: Sdk = Sdk {
    endpoint: "http://otel-collector.observability:4317",
    ..HTTP_SDK
};

impl Sdk {
    /// The SDK block that follows the language variables, for `container` of a pod whose
    /// service name is `service` and whose image has tag `version`.
    pub fn tail(&self, service: &str, container: &str, version: Option<&str>) -> Vec<Value> {
        let mut tail = vec![
            lit("OTEL_SERVICE_NAME", service),
            lit("OTEL_EXPORTER_OTLP_ENDPOINT", self.endpoint),
            fref("OTEL_RESOURCE_ATTRIBUTES_POD_NAME", "metadata.name"),
            fref("OTEL_RESOURCE_ATTRIBUTES_NODE_NAME", "spec.nodeName"),
            lit("OTEL_PROPAGATORS", self.propagators),
            lit("OTEL_TRACES_SAMPLER", self.sampler),
        ];
        if let Some(arg) = self.sampler_arg {
            tail.push(lit("OTEL_TRACES_SAMPLER_ARG", arg));
        }
        tail.push(lit(
            "OTEL_RESOURCE_ATTRIBUTES",
            &resource_attributes(container, version),
        ));
        tail
    }
}

/// The OTEL_RESOURCE_ATTRIBUTES the webhook writes for `container` in `shop` whose image has
/// tag `version`, when the container set none.
pub fn resource_attributes(container: &str, version: Option<&str>) -> String {
    let mut attrs = format!(
        "k8s.container.name={container},k8s.namespace.name=shop,\
         k8s.node.name=$(OTEL_RESOURCE_ATTRIBUTES_NODE_NAME),\
         k8s.pod.name=$(OTEL_RESOURCE_ATTRIBUTES_POD_NAME),\
         service.instance.id=shop.$(OTEL_RESOURCE_ATTRIBUTES_POD_NAME).{container},\
         service.namespace=shop"
    );
    if let Some(v) = version {
        attrs.push_str(&format!(",service.version={v}"));
    }
    attrs
}

/// The init container that copies `language`'s agent from `image` with `command`.
pub fn agent_init(
    language: &str,
    image: &str,
    command: Value,
    memory_request: &str,
    security: Option<Value>,
) -> Value {
    let volume = format!("opentelemetry-auto-instrumentation-{language}");
    let mut c = json!({
        "name": volume,
        "image": image,
        "command": command,
        "resources": {"limits": {"cpu": "500m", "memory": "256Mi"},
                      "requests": {"cpu": "50m", "memory": memory_request}},
        "volumeMounts": [{"name": volume, "mountPath": format!("/otel-auto-instrumentation-{language}")}]
    });
    if let Some(s) = security {
        c["securityContext"] = s;
    }
    c
}

/// The volume `language`'s agent is copied into.
pub fn agent_volume(language: &str) -> Value {
    json!({"name": format!("opentelemetry-auto-instrumentation-{language}"),
           "emptyDir": {"sizeLimit": "200Mi"}})
}

/// The mount of [`agent_volume`] at `path` in a target.
pub fn agent_mount_at(language: &str, path: &str) -> Value {
    json!({"name": format!("opentelemetry-auto-instrumentation-{language}"), "mountPath": path})
}

/// The mount of [`agent_volume`] in a target, where the init container has it too.
pub fn agent_mount(language: &str) -> Value {
    agent_mount_at(language, &format!("/otel-auto-instrumentation-{language}"))
}

/// The mounts a web server (`apache` or `nginx`) target gets: the agent, and the edited copy
/// of its configuration over `conf_dir`.
pub fn web_server_mounts(server: &str, conf_dir: &str) -> Vec<Value> {
    vec![
        json!({"name": format!("otel-{server}-agent"), "mountPath": "/opt/opentelemetry-webserver/agent"}),
        json!({"name": format!("otel-{server}-conf-dir"), "mountPath": conf_dir}),
    ]
}

/// Sets `key` of `object` to `value` when there is one.
pub fn set_some(object: &mut Value, key: &str, value: Option<Value>) {
    if let Some(v) = value {
        object[key] = v;
    }
}

/// An engine config with `language` disabled.
pub fn disabled(language: Language) -> EngineConfig {
    let mut config = EngineConfig::default();
    config.enabled.remove(language);
    config
}

/// The names of a list of containers (or env entries).
pub fn names(list: &Value) -> Vec<String> {
    list.as_array()
        .map(|a| {
            a.iter()
                .map(|c| c["name"].as_str().unwrap_or("").to_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// The value of one variable in a container's env.
pub fn env_value<'v>(container: &'v Value, name: &str) -> Option<&'v Value> {
    container["env"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)
        .map(|e| e.get("value").unwrap_or(&Value::Null))
}

/// `shop` (an Instrumentation of tests/data/instrumentations/) with `yaml` added to its spec,
/// before spec.env.
pub fn with_spec(shop: &str, yaml: &str) -> String {
    let at = shop.find("\n  env:\n").expect("spec.env") + 1;
    format!("{}{}{}", &shop[..at], indent(yaml, 2), &shop[at..])
}

/// `shop` with the list entries in `yaml` added at the end of spec.env.
pub fn with_spec_env(shop: &str, yaml: &str) -> String {
    // spec.env is followed by the language section, the next line indented by two.
    let env = shop.find("\n  env:\n").expect("spec.env") + "\n  env:\n".len();
    let at = env
        + shop[env..]
            .match_indices('\n')
            .map(|(i, _)| i + 1)
            .find(|&i| shop[env + i..].starts_with("  ") && !shop[env + i + 2..].starts_with(' '))
            .expect("a language section after spec.env");
    format!("{}{}{}", &shop[..at], indent(yaml, 4), &shop[at..])
}

/// `shop` with `yaml` added to the language section, which ends every one of them.
pub fn with_section(shop: &str, yaml: &str) -> String {
    format!("{shop}{}", indent(yaml, 4))
}

/// `shop` with the list entries in `yaml` added at the end of the language section's env
/// (the last list of every one of them).
pub fn with_lang_env(shop: &str, yaml: &str) -> String {
    format!("{shop}{}", indent(yaml, 6))
}

fn indent(yaml: &str, by: usize) -> String {
    yaml.lines().map(|l| format!("{:by$}{l}\n", "")).collect()
}
