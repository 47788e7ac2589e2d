//! The stored pod against the engine: the engine's result for the same pod and flags, and the
//! walk that compares it with the stored pod, less the API server's defaults.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Pod;
use otel_injector::admission::mutate;
use otel_injector::cluster::StaticCatalog;
use otel_injector::engine::{Report, Snapshot};
use serde_json::Value;

use super::Env;

/// The e2e API server's version (scripts/e2e-build.sh builds Kubernetes v1.37.2).
pub const APISERVER_VERSION: (u32, u32) = (1, 37);

/// What the engine itself makes of `pod` created in `ns`, given the Instrumentations
/// `insts` (as sent to the apiserver) and the test webhook's flags: `decide` on a
/// [`StaticCatalog`] of them, its JSON patch applied to the pod as the test sends it.
pub fn engine_result(env: &Env, ns: &str, insts: &[Value], pod: &Value) -> (Value, Report) {
    // JSON is YAML: one document per Instrumentation.
    let yaml = insts
        .iter()
        .map(Value::to_string)
        .collect::<Vec<_>>()
        .join("\n---\n");
    let catalog = StaticCatalog::from_yaml(&yaml)
        .unwrap_or_else(|e| panic!("Instrumentations for the engine: {e}"))
        .with_namespace(ns, &[]);
    let typed: Pod = serde_json::from_value(pod.clone()).expect("a valid Pod");
    let config = env.engine_config();
    let mut snapshot = Snapshot::take(&catalog, ns, &config);
    // What the webhook reads from the real API server (`auto` modes depend on it).
    snapshot.server_version = Some(APISERVER_VERSION);
    let (patch, report) = mutate(&snapshot, &typed);
    let mut out = pod.clone();
    json_patch::patch(&mut out, &json_patch::Patch(patch))
        .unwrap_or_else(|e| panic!("the engine's patch does not apply: {e}"));
    (out, report)
}

/// Fields the apiserver writes into a stored pod that neither the test nor the webhook
/// wrote, with the value it writes (JSON; `None`: generated, any value). Paths are object
/// keys from the pod's root, `[]` standing for every element of a list. Nothing else may
/// differ between the stored pod and the engine's result.
pub const APISERVER_DEFAULTS: &[(&str, Option<&str>)] = &[
    // Set on every object.
    ("metadata.namespace", None),
    ("metadata.uid", None),
    ("metadata.resourceVersion", None),
    ("metadata.creationTimestamp", None),
    ("metadata.generation", Some("1")),
    ("metadata.managedFields", None),
    ("status", None),
    // Pod defaults (SetDefaults_PodSpec) and the DefaultTolerationSeconds admission plugin.
    ("spec.dnsPolicy", Some(r#""ClusterFirst""#)),
    ("spec.restartPolicy", Some(r#""Always""#)),
    ("spec.schedulerName", Some(r#""default-scheduler""#)),
    ("spec.securityContext", Some("{}")),
    ("spec.terminationGracePeriodSeconds", Some("30")),
    ("spec.enableServiceLinks", Some("true")),
    ("spec.priority", Some("0")),
    ("spec.preemptionPolicy", Some(r#""PreemptLowerPriority""#)),
    ("spec.tolerations", Some(DEFAULT_TOLERATIONS)),
    // Container defaults, for app containers, init containers and the Go sidecar alike.
    (
        "spec.containers[].imagePullPolicy",
        Some(r#""IfNotPresent""#),
    ),
    (
        "spec.containers[].terminationMessagePath",
        Some(r#""/dev/termination-log""#),
    ),
    (
        "spec.containers[].terminationMessagePolicy",
        Some(r#""File""#),
    ),
    ("spec.containers[].resources", Some("{}")),
    (
        "spec.initContainers[].imagePullPolicy",
        Some(r#""IfNotPresent""#),
    ),
    (
        "spec.initContainers[].terminationMessagePath",
        Some(r#""/dev/termination-log""#),
    ),
    (
        "spec.initContainers[].terminationMessagePolicy",
        Some(r#""File""#),
    ),
    (
        "spec.containers[].env[].valueFrom.fieldRef.apiVersion",
        Some(r#""v1""#),
    ),
    (
        "spec.initContainers[].env[].valueFrom.fieldRef.apiVersion",
        Some(r#""v1""#),
    ),
    // Probe and volume source defaults.
    ("spec.containers[].readinessProbe.timeoutSeconds", Some("1")),
    ("spec.containers[].readinessProbe.periodSeconds", Some("10")),
    (
        "spec.containers[].readinessProbe.successThreshold",
        Some("1"),
    ),
    (
        "spec.containers[].readinessProbe.failureThreshold",
        Some("3"),
    ),
    (
        "spec.containers[].readinessProbe.httpGet.scheme",
        Some(r#""HTTP""#),
    ),
    ("spec.volumes[].configMap.defaultMode", Some("420")),
    ("spec.volumes[].hostPath.type", Some(r#""""#)),
    // Image volumes (agent delivery `image-volume`): pulled like a container's image.
    ("spec.volumes[].image.pullPolicy", Some(r#""IfNotPresent""#)),
];

/// What the DefaultTolerationSeconds admission plugin adds to a pod without tolerations.
pub(super) const DEFAULT_TOLERATIONS: &str = r#"[
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
]"#;

/// Asserts that the stored pod is `expected` (the engine's result) field by field: every
/// field of `expected` with the same value, lists with the same length and order, and no
/// other field but those of [`APISERVER_DEFAULTS`] with their value. Returns the defaults
/// that were met (as paths).
pub fn assert_stored_as_expected(stored: &Value, expected: &Value) -> BTreeSet<String> {
    let mut diffs = Vec::new();
    let mut met = BTreeSet::new();
    compare("", "", stored, expected, &mut diffs, &mut met);
    assert!(
        diffs.is_empty(),
        "the stored pod differs from the engine's result:\n  {}\nstored: {stored}\nexpected: {expected}",
        diffs.join("\n  ")
    );
    met
}

pub(super) fn compare(
    pattern: &str,
    at: &str,
    stored: &Value,
    expected: &Value,
    diffs: &mut Vec<String>,
    met: &mut BTreeSet<String>,
) {
    let join = |base: &str, key: &str| {
        if base.is_empty() {
            key.to_owned()
        } else {
            format!("{base}.{key}")
        }
    };
    match (stored, expected) {
        (Value::Object(s), Value::Object(e)) => {
            for (k, ev) in e {
                match s.get(k) {
                    Some(sv) => compare(&join(pattern, k), &join(at, k), sv, ev, diffs, met),
                    None => diffs.push(format!("{}: missing (expected {ev})", join(at, k))),
                }
            }
            for (k, sv) in s.iter().filter(|(k, _)| !e.contains_key(*k)) {
                let p = join(pattern, k);
                match APISERVER_DEFAULTS.iter().find(|(d, _)| *d == p) {
                    Some((_, None)) => {
                        met.insert(p);
                    }
                    Some((_, Some(v))) if serde_json::from_str::<Value>(v).unwrap() == *sv => {
                        met.insert(p);
                    }
                    Some((_, Some(v))) => diffs.push(format!(
                        "{}: {sv}, not the apiserver default {v}",
                        join(at, k)
                    )),
                    None => diffs.push(format!("{}: unexpected {sv}", join(at, k))),
                }
            }
        }
        (Value::Array(s), Value::Array(e)) if s.len() == e.len() => {
            for (i, (sv, ev)) in s.iter().zip(e).enumerate() {
                compare(
                    &format!("{pattern}[]"),
                    &format!("{at}[{i}]"),
                    sv,
                    ev,
                    diffs,
                    met,
                );
            }
        }
        (Value::Array(s), Value::Array(e)) => diffs.push(format!(
            "{at}: {} elements stored, {} expected: {stored} vs {expected}",
            s.len(),
            e.len()
        )),
        _ if stored == expected => {}
        _ => diffs.push(format!("{at}: {stored}, expected {expected}")),
    }
}
