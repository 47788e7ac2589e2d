//! The outcome recorded on the pod (`otel-injector/status` annotation, `otel-injector/injected`
//! label), through `admission::review` as the webhook answers: exact patches for each kind of
//! outcome, with and without the pod's own annotations and labels, and the property that the
//! patch, applied strictly, leaves an annotation that parses back to the report's status and
//! a label that says whether anything was injected.

use base64::Engine as _;
use otel_injector::admission::{self, Summary};
use otel_injector::cluster::StaticCatalog;
use otel_injector::crd::SpecHash;
use otel_injector::engine::outcome::{Outcome, PodStatus};
use otel_injector::engine::{Catalog, EngineConfig, SkipReason};
use otel_injector::keys::{INJECT_JAVA, INJECT_PYTHON, INJECTED_LABEL, STATUS_ANNOTATION};
use serde_json::{Value, json};

const JAVA: &str = include_str!("../data/instrumentations/java.yaml");
const PYTHON: &str = include_str!("../data/instrumentations/python.yaml");

fn catalog(yamls: &[&str]) -> StaticCatalog {
    StaticCatalog::from_yaml(&yamls.join("\n---\n")).unwrap()
}

/// The digest of `ns/name`'s spec, computed from the object itself (not the index's copy).
fn hash(catalog: &StaticCatalog, ns: &str, name: &str) -> SpecHash {
    let index = catalog.instrumentations();
    let inst = index.get(ns, name).unwrap().as_ref().unwrap();
    SpecHash::of(&inst.spec)
}

fn review_body(pod: &Value) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "u1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "namespace": "shop", "operation": "CREATE", "object": pod}
    }))
    .unwrap()
}

/// Reviews `pod` as the webhook does; returns the patch (as JSON), the pod with it applied
/// strictly, and the summary. Checks the property on every call.
fn review(catalog: &StaticCatalog, config: &EngineConfig, pod: &Value) -> (Value, Value, Summary) {
    let (body, summary) = admission::review(&review_body(pod), catalog, config).unwrap();
    let v: Value = serde_json::from_slice(&body).unwrap();
    let patch = match v["response"]["patch"].as_str() {
        Some(b64) => serde_json::from_slice(
            &base64::engine::general_purpose::STANDARD
                .decode(b64)
                .unwrap(),
        )
        .unwrap(),
        None => json!([]),
    };
    assert_eq!(summary.patched, v["response"].get("patch").is_some());
    let mut out = pod.clone();
    let ops: json_patch::Patch = serde_json::from_value(patch.clone()).unwrap();
    json_patch::patch(&mut out, &ops)
        .unwrap_or_else(|e| panic!("the patch does not apply strictly: {e}\n{patch}"));
    check_property(&out, &summary);
    (patch, out, summary)
}

/// The recorded annotation parses back to the report's status, and the label matches it.
fn check_property(pod: &Value, summary: &Summary) {
    let annotation = pod["metadata"]["annotations"][STATUS_ANNOTATION].as_str();
    let label = pod["metadata"]["labels"][INJECTED_LABEL].as_str();
    match summary.report.status() {
        // The one case where a pod that asked is not recorded: not even that fits the bound.
        Some(status) if annotation.is_none() => assert!(
            status.entries.iter().any(|e| e.language.is_none()
                && e.outcome
                    == (Outcome::Skipped {
                        reason: SkipReason::PodTooLarge,
                        instrumentation: None
                    })),
            "{status}"
        ),
        Some(status) => {
            let text = annotation.expect("a pod that asked carries the status");
            assert_eq!(text.parse::<PodStatus>().unwrap(), status, "{text}");
            let expected = if status.injected() { "true" } else { "false" };
            assert_eq!(label, Some(expected));
            assert_eq!(status.injected(), !summary.report.injected.is_empty());
        }
        None => assert!(
            !summary.patched,
            "no status, no patch: {:?}",
            summary.report
        ),
    }
}

fn pod(annotations: Option<Value>, labels: Option<Value>, containers: Value) -> Value {
    let mut meta = json!({"name": "p", "namespace": "shop"});
    if let Some(a) = annotations {
        meta["annotations"] = a;
    }
    if let Some(l) = labels {
        meta["labels"] = l;
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta,
        "spec": {"containers": containers}})
}

fn app() -> Value {
    json!([{"name": "app", "image": "app:1"}])
}

/// The operations on `/metadata`, in order.
fn metadata_ops(patch: &Value) -> Vec<Value> {
    patch
        .as_array()
        .unwrap()
        .iter()
        .filter(|op| op["path"].as_str().unwrap().starts_with("/metadata"))
        .cloned()
        .collect()
}

#[test]
fn an_injected_pod_records_the_instrumentation_and_its_spec_hash() {
    let c = catalog(&[JAVA]);
    let h = hash(&c, "shop", "java-inst");
    let status = format!("java=injected shop/java-inst {h}");
    // The pod has annotations and no labels.
    let (patch, out, s) = review(
        &c,
        &EngineConfig::default(),
        &pod(Some(json!({INJECT_JAVA: "true"})), None, app()),
    );
    assert_eq!(s.report.injected.len(), 1);
    assert_eq!(
        metadata_ops(&patch),
        [
            json!({"op": "add", "path": "/metadata/annotations/otel-injector~1injected", "value": "java"}),
            json!({"op": "add", "path": "/metadata/annotations/otel-injector~1status", "value": status}),
            json!({"op": "add", "path": "/metadata/labels", "value": {"otel-injector/injected": "true"}}),
        ]
    );
    assert_eq!(out["metadata"]["labels"], json!({INJECTED_LABEL: "true"}));
    // Both present: one add per key, the user's keys kept.
    let (patch, out, _) = review(
        &c,
        &EngineConfig::default(),
        &pod(
            Some(json!({INJECT_JAVA: "true"})),
            Some(json!({"app": "shop"})),
            app(),
        ),
    );
    assert_eq!(
        metadata_ops(&patch)[2],
        json!({"op": "add", "path": "/metadata/labels/otel-injector~1injected", "value": "true"})
    );
    assert_eq!(
        out["metadata"]["labels"],
        json!({"app": "shop", INJECTED_LABEL: "true"})
    );
    // Reinvocation: an injected pod is never changed again.
    let (patch, _, s) = review(&c, &EngineConfig::default(), &out);
    assert_eq!(patch, json!([]));
    assert!(s.report.already_injected);
}

#[test]
fn a_pod_without_annotations_gets_the_whole_map_in_one_operation() {
    // The namespace asks; the pod has no annotations (nor labels) of its own.
    let c = catalog(&[JAVA]).with_namespace("shop", &[(INJECT_JAVA, "java-inst")]);
    let h = hash(&c, "shop", "java-inst");
    let (patch, _, _) = review(&c, &EngineConfig::default(), &pod(None, None, app()));
    assert_eq!(
        metadata_ops(&patch),
        [
            json!({"op": "add", "path": "/metadata/annotations", "value": {
                "otel-injector/injected": "java",
                "otel-injector/status": format!("java=injected shop/java-inst {h}")}}),
            json!({"op": "add", "path": "/metadata/labels", "value": {"otel-injector/injected": "true"}}),
        ]
    );
    // Skipped: the map holds only the status.
    let c = catalog(&[]).with_namespace("shop", &[(INJECT_JAVA, "missing")]);
    let (patch, _, _) = review(&c, &EngineConfig::default(), &pod(None, None, app()));
    assert_eq!(
        patch,
        json!([
            {"op": "add", "path": "/metadata/annotations", "value": {
                "otel-injector/status": "java=skipped instrumentation_not_found shop/missing"}},
            {"op": "add", "path": "/metadata/labels", "value": {"otel-injector/injected": "false"}}
        ])
    );
}

#[test]
fn a_partly_injected_pod_records_each_language() {
    let c = catalog(&[JAVA, PYTHON]);
    let h = hash(&c, "shop", "java-inst");
    let p = pod(
        Some(json!({
            INJECT_JAVA: "true",
            INJECT_PYTHON: "py-missing",
            "instrumentation.opentelemetry.io/java-container-names": "app",
            "instrumentation.opentelemetry.io/python-container-names": "app",
        })),
        None,
        app(),
    );
    let (_, out, s) = review(&c, &EngineConfig::default(), &p);
    // `true` finds two Instrumentations in `shop` (java-inst, py-inst): name them.
    assert_eq!(
        out["metadata"]["annotations"][STATUS_ANNOTATION],
        "java=skipped multiple_instrumentations shop/*; python=skipped instrumentation_not_found shop/py-missing"
    );
    assert!(s.report.injected.is_empty());
    let mut p = p;
    p["metadata"]["annotations"][INJECT_JAVA] = json!("java-inst");
    let (_, out, _) = review(&c, &EngineConfig::default(), &p);
    assert_eq!(
        out["metadata"]["annotations"][STATUS_ANNOTATION],
        format!(
            "java=injected shop/java-inst {h}; python=skipped instrumentation_not_found shop/py-missing"
        )
    );
    assert_eq!(out["metadata"]["labels"][INJECTED_LABEL], "true");
}

#[test]
fn a_skipped_pod_gets_only_the_annotation_and_the_label() {
    let config = EngineConfig::default();
    // (catalog, the pod's inject-java value, the status recorded)
    let table = [
        (
            catalog(&[JAVA]),
            "nope",
            "java=skipped instrumentation_not_found shop/nope",
        ),
        (
            catalog(&[JAVA]),
            "other/java-inst",
            "java=skipped instrumentation_not_found other/java-inst",
        ),
        (
            catalog(&[]),
            "true",
            "java=skipped no_instrumentation shop/*",
        ),
        (
            catalog(&[JAVA, PYTHON]),
            "true",
            "java=skipped multiple_instrumentations shop/*",
        ),
        // A name no object can have is not recorded: the annotation must read back.
        (
            catalog(&[JAVA]),
            "Shop/not a name",
            "java=skipped instrumentation_not_found",
        ),
        (
            catalog(&[JAVA]).not_ready(),
            "true",
            "pod=skipped cache_not_ready",
        ),
    ];
    for (c, value, status) in table {
        let p = pod(
            Some(json!({INJECT_JAVA: value, "team": "a"})),
            Some(json!({"app": "shop"})),
            app(),
        );
        let (patch, out, s) = review(&c, &config, &p);
        assert_eq!(
            patch,
            json!([
                {"op": "add", "path": "/metadata/annotations/otel-injector~1status", "value": status},
                {"op": "add", "path": "/metadata/labels/otel-injector~1injected", "value": "false"}
            ]),
            "{value}"
        );
        assert_eq!(s.report.warnings.len(), 1, "{value}: {:?}", s.report);
        // Reviewed again (reinvocation, or the same pod re-submitted): nothing to write.
        let (patch, again, _) = review(&c, &config, &out);
        assert_eq!(patch, json!([]), "{value}");
        assert_eq!(again, out);
    }
}

#[test]
fn a_pod_that_asks_for_nothing_is_untouched() {
    let c = catalog(&[JAVA]);
    for p in [
        pod(None, None, app()),
        pod(
            Some(json!({"team": "a"})),
            Some(json!({"app": "shop"})),
            app(),
        ),
        pod(Some(json!({INJECT_JAVA: "false"})), None, app()),
    ] {
        let (patch, out, s) = review(&c, &EngineConfig::default(), &p);
        assert_eq!(patch, json!([]));
        assert_eq!(out, p);
        assert!(!s.report.requested);
        assert_eq!(s.report.status(), None);
    }
}

#[test]
fn a_pod_dropped_for_its_size_still_gets_its_status_when_that_fits() {
    let c = catalog(&[JAVA]);
    let p = pod(Some(json!({INJECT_JAVA: "true"})), None, app());
    let bytes = p.to_string().len();
    // Over the early estimate's bound: skipped before any work.
    // Within the estimate (one target costs 512 bytes) but not the real patch: dropped after.
    for max in [bytes + 300, bytes + 600] {
        let config = EngineConfig {
            max_pod_bytes: max,
            ..EngineConfig::default()
        };
        let (patch, _, s) = review(&c, &config, &p);
        assert!(s.report.injected.is_empty());
        assert_eq!(
            patch,
            json!([
                {"op": "add", "path": "/metadata/annotations/otel-injector~1status",
                    "value": "pod=skipped pod_too_large"},
                {"op": "add", "path": "/metadata/labels",
                    "value": {"otel-injector/injected": "false"}}
            ]),
            "{max}"
        );
    }
    // Not even the status fits: nothing is written, the warning says why.
    let config = EngineConfig {
        max_pod_bytes: bytes + 10,
        ..EngineConfig::default()
    };
    let (patch, _, s) = review(&c, &config, &p);
    assert_eq!(patch, json!([]));
    assert_eq!(s.report.warnings.len(), 1);
}

#[test]
fn a_pod_refused_before_decoding_gets_its_status_from_its_metadata() {
    let c = catalog(&[JAVA]);
    let containers: Vec<Value> = (0..6000)
        .map(|i| json!({"name": format!("c{i}")}))
        .collect();
    for (annotations, labels, first) in [
        (
            json!({INJECT_JAVA: "true"}),
            None,
            json!({"op": "add", "path": "/metadata/labels",
                "value": {"otel-injector/injected": "false"}}),
        ),
        (
            json!({INJECT_JAVA: "true"}),
            Some(json!({"a": "b"})),
            json!({"op": "add", "path": "/metadata/labels/otel-injector~1injected",
                "value": "false"}),
        ),
    ] {
        let p = pod(Some(annotations), labels, Value::Array(containers.clone()));
        let (patch, _, s) = review(&c, &EngineConfig::default(), &p);
        assert!(
            s.report.warnings[0].contains("too many containers"),
            "{:?}",
            s.report.warnings
        );
        assert_eq!(
            patch,
            json!([
                {"op": "add", "path": "/metadata/annotations/otel-injector~1status",
                    "value": "pod=skipped pod_too_large"},
                first
            ])
        );
    }
}

/// Every combination of values for three languages, each with its container: whatever the
/// outcome, the patch applies and the annotation reads back as the report says.
#[test]
fn every_combination_of_requests_reads_back() {
    let c = catalog(&[JAVA, PYTHON]);
    let values = [
        None,
        Some("true"),
        Some("false"),
        Some("java-inst"),
        Some("py-inst"),
        Some("shop/java-inst"),
        Some("other/x"),
        Some("missing"),
        Some(" Bad Name "),
    ];
    let mut injected = 0;
    for java in values {
        for python in values {
            for nodejs in values {
                let mut a = serde_json::Map::new();
                for (lang, v) in [("java", java), ("python", python), ("nodejs", nodejs)] {
                    if let Some(v) = v {
                        a.insert(
                            format!("instrumentation.opentelemetry.io/inject-{lang}"),
                            json!(v),
                        );
                        a.insert(
                            format!("instrumentation.opentelemetry.io/{lang}-container-names"),
                            json!(lang),
                        );
                    }
                }
                let containers = json!([{"name": "java"}, {"name": "python"}, {"name": "nodejs"}]);
                let (_, _, s) = review(
                    &c,
                    &EngineConfig::default(),
                    &pod(Some(Value::Object(a)), None, containers),
                );
                injected += usize::from(!s.report.injected.is_empty());
            }
        }
    }
    assert!(injected > 100, "{injected}");
}

#[test]
fn a_language_rolled_back_with_the_current_spec_is_skipped_and_a_new_spec_tried_again() {
    let c = catalog(&[JAVA, PYTHON]);
    let java = hash(&c, "shop", "java-inst");
    let marked = |marker: &str| {
        pod(
            Some(json!({INJECT_JAVA: "java-inst", "otel-injector/rolled-back": marker})),
            None,
            app(),
        )
    };
    let (patch, _, s) = review(
        &c,
        &EngineConfig::default(),
        &marked(&format!("java={java}")),
    );
    assert!(s.report.injected.is_empty());
    assert_eq!(
        metadata_ops(&patch)[0],
        json!({"op": "add", "path": "/metadata/annotations/otel-injector~1status",
               "value": "java=skipped rolled_back shop/java-inst"})
    );
    assert_eq!(s.report.skipped[0].reason, SkipReason::RolledBack);
    assert_eq!(
        s.report.warnings,
        [format!(
            "inject-java: rolled back, failed with shop/java-inst spec {java}; remove \
             otel-injector/rolled-back to retry"
        )]
    );
    // Another spec (the Instrumentation changed since), another language, or a malformed
    // entry: injected.
    for marker in [
        "java=00000000".to_owned(),
        format!("python={java}"),
        format!("java {java}"),
    ] {
        let (_, _, s) = review(&c, &EngineConfig::default(), &marked(&marker));
        assert_eq!(s.report.injected.len(), 1, "{marker}");
    }
    // Among several entries, spaces around them.
    let (_, _, s) = review(
        &c,
        &EngineConfig::default(),
        &marked(&format!("python=01020304 , java={java}")),
    );
    assert!(s.report.injected.is_empty());
}
