//! Unit tests of `inject`: every kind, option and output form.

use k8s_openapi::api::core::v1::Pod;
use rstest::rstest;
use serde_json::json;

use super::*;
use crate::engine::{EngineConfig, Snapshot};
use crate::offline::manifests;

const JAVA: &str = include_str!("../../../tests/data/instrumentations/java.yaml");

fn context(extra: &str, flags: &[(&str, &str, &str)]) -> (Context, Vec<Source>) {
    let sources = vec![manifests::parse("m.yaml", extra).unwrap()];
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("java.yaml");
    std::fs::write(&path, JAVA).unwrap();
    let flags: Vec<_> = flags
        .iter()
        .map(|(a, b, c)| ((*a).to_owned(), (*b).to_owned(), (*c).to_owned()))
        .collect();
    let ctx = Context::build(
        &sources,
        &[path],
        &flags,
        None,
        EngineConfig::default(),
        "shop".into(),
    )
    .unwrap();
    (ctx, sources)
}

fn run(text: &str, options: Options) -> Injected {
    let (ctx, sources) = context(text, &[]);
    inject(&ctx, sources, options).unwrap()
}

fn yaml(text: &str) -> Injected {
    run(text, Options::default())
}

fn parse_out(text: &str) -> Vec<Value> {
    let s = manifests::parse("out.yaml", text).unwrap();
    s.documents.into_iter().filter_map(|d| d.value).collect()
}

fn env(container: &Value, name: &str) -> Option<String> {
    container["env"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)
        .map(|e| e["value"].as_str().unwrap_or("").to_owned())
}

const TEMPLATE: &str = r#"{"metadata": {"annotations": {"instrumentation.opentelemetry.io/inject-java": "true"}},
    "spec": {"containers": [{"name": "app", "image": "cart:1.0"}]}}"#;

fn manifest(api_version: &str, kind: &str) -> Value {
    let template: Value = serde_json::from_str(TEMPLATE).unwrap();
    let meta = json!({"name": "web", "namespace": "shop"});
    match kind {
        "Pod" => {
            let mut pod = template;
            pod["apiVersion"] = json!(api_version);
            pod["kind"] = json!(kind);
            pod["metadata"]["name"] = json!("web");
            pod
        }
        "CronJob" => json!({"apiVersion": api_version, "kind": kind, "metadata": meta,
            "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": template}}}}),
        _ => json!({"apiVersion": api_version, "kind": kind, "metadata": meta,
            "spec": {"template": template}}),
    }
}

#[rstest]
#[case("v1", "Pod", "", "web", None)]
#[case("apps/v1", "Deployment", "/spec/template", "web", Some("k8s.deployment.name=web"))]
#[case("apps/v1", "ReplicaSet", "/spec/template", "web", Some("k8s.replicaset.name=web"))]
#[case("apps/v1", "StatefulSet", "/spec/template", "web", Some("k8s.statefulset.name=web"))]
#[case("apps/v1", "DaemonSet", "/spec/template", "web", Some("k8s.daemonset.name=web"))]
#[case("batch/v1", "Job", "/spec/template", "web", Some("k8s.job.name=web"))]
#[case(
    "batch/v1",
    "CronJob",
    "/spec/jobTemplate/spec/template",
    "web",
    Some("k8s.cronjob.name=web")
)]
#[case("v1", "ReplicationController", "/spec/template", "app", None)]
fn every_kind_gets_its_template_injected(
    #[case] api_version: &str,
    #[case] kind: &str,
    #[case] template: &str,
    #[case] service: &str,
    #[case] owner_attribute: Option<&str>,
) {
    let text = serde_json::to_string(&manifest(api_version, kind)).unwrap();
    let out = run(&text, Options::default());
    assert_eq!((out.mutated, out.skipped, out.objects), (1, 0, 1));
    assert_eq!(out.warnings, Vec::<String>::new());
    let docs = parse_out(&out.output);
    let t = docs[0].pointer(template).unwrap();
    assert_eq!(
        t["metadata"]["annotations"]["otel-injector/injected"],
        "java"
    );
    let c = &t["spec"]["containers"][0];
    assert_eq!(env(c, "OTEL_SERVICE_NAME").as_deref(), Some(service));
    let attrs = env(c, "OTEL_RESOURCE_ATTRIBUTES").unwrap();
    let mut expected = vec![
        "k8s.container.name=app",
        "k8s.namespace.name=shop",
        "k8s.node.name=$(OTEL_RESOURCE_ATTRIBUTES_NODE_NAME)",
        "k8s.pod.name=$(OTEL_RESOURCE_ATTRIBUTES_POD_NAME)",
        "service.instance.id=shop.$(OTEL_RESOURCE_ATTRIBUTES_POD_NAME).app",
        "service.namespace=shop",
        "service.version=1.0",
    ];
    expected.extend(owner_attribute);
    expected.sort_unstable();
    assert_eq!(attrs, expected.join(","));
    // Nothing of the synthetic pod leaks into the template.
    assert_eq!(t["metadata"].get("ownerReferences"), None);
    assert_eq!(t["metadata"].get("namespace"), None);
    assert_eq!(
        t["metadata"]["labels"],
        json!({"otel-injector/injected": "true"}),
        "only the webhook's own label"
    );
    let status = t["metadata"]["annotations"]["otel-injector/status"]
        .as_str()
        .unwrap();
    assert!(
        status.starts_with("java=injected shop/java-inst "),
        "{status}"
    );
    assert_eq!(
        t["spec"]["initContainers"][0]["name"],
        "opentelemetry-auto-instrumentation-java"
    );
}

#[test]
fn a_deployment_gets_what_the_webhook_gives_its_pods() {
    // The pod the Deployment controller creates, as the webhook receives it.
    let real: Pod = serde_json::from_value(json!({
        "metadata": {"generateName": "web-7d4b9c8f6d-", "namespace": "shop",
            "labels": {"pod-template-hash": "7d4b9c8f6d"},
            "annotations": {"instrumentation.opentelemetry.io/inject-java": "true"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "name": "web-7d4b9c8f6d", "uid": "", "controller": true}]},
        "spec": {"containers": [{"name": "app", "image": "cart:1.0"}]}
    }))
    .unwrap();
    let (ctx, _) = context("kind: X\n", &[]);
    let config = EngineConfig::default();
    let snapshot = Snapshot::take(&ctx.catalog, "shop", &config);
    let (ops, _) = crate::admission::mutate(&snapshot, &real);
    let mut webhook = serde_json::to_value(&real).unwrap();
    json_patch::patch(&mut webhook, &ops).unwrap();
    let attrs = webhook["spec"]["containers"][0]["env"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|e| e["name"] == "OTEL_RESOURCE_ATTRIBUTES")
        .unwrap();
    // The one attribute that names the pod's own ReplicaSet, unknown to a template.
    let v = attrs["value"]
        .as_str()
        .unwrap()
        .replace("k8s.replicaset.name=web-7d4b9c8f6d,", "");
    attrs["value"] = json!(v);

    let text = serde_json::to_string(&manifest("apps/v1", "Deployment")).unwrap();
    let out = parse_out(&yaml(&text).output);
    assert_eq!(out[0]["spec"]["template"]["spec"], webhook["spec"]);
    assert_eq!(
        out[0]["spec"]["template"]["metadata"]["annotations"],
        webhook["metadata"]["annotations"]
    );
}

const MIXED: &str = "# top comment\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c  # kept\ndata: {b: \"2\", a: \"1\"}\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  template:\n    metadata:\n      annotations:\n        instrumentation.opentelemetry.io/inject-java: \"true\"\n    spec:\n      containers:\n      - name: app\n---\n# a Service\napiVersion: v1\nkind: Service\nmetadata: {name: s}\n";

#[test]
fn untouched_documents_are_written_back_byte_for_byte_in_order() {
    let out = yaml(MIXED);
    let chunks: Vec<&str> = out.output.split("---\n").collect();
    assert_eq!(chunks.len(), 3);
    assert_eq!(
        chunks[0],
        "# top comment\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c  # kept\ndata: {b: \"2\", a: \"1\"}\n"
    );
    assert!(
        chunks[1].starts_with("apiVersion: apps/v1\nkind: Deployment\n"),
        "{}",
        chunks[1]
    );
    assert_eq!(
        chunks[2],
        "# a Service\napiVersion: v1\nkind: Service\nmetadata: {name: s}\n"
    );
    assert_eq!((out.objects, out.mutated), (3, 1));
}

#[test]
fn injecting_an_injected_manifest_changes_nothing() {
    let once = yaml(MIXED).output;
    let twice = yaml(&once);
    assert_eq!(twice.output, once);
    assert_eq!((twice.mutated, twice.skipped), (0, 0));
}

#[test]
fn lists_have_their_items_injected() {
    let list = json!({"apiVersion": "v1", "kind": "List", "items": [
        manifest("apps/v1", "Deployment"), {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}}
    ]});
    let out = run(
        &list.to_string(),
        Options {
            output: OutputFormat::Json,
            diff: false,
        },
    );
    let v: Value = serde_json::from_str(&out.output).unwrap();
    assert_eq!(v["kind"], "List");
    assert_eq!(
        v["items"][0]["spec"]["template"]["metadata"]["annotations"]["otel-injector/injected"],
        "java"
    );
    assert_eq!(
        v["items"][1],
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}})
    );
    assert_eq!((out.objects, out.mutated), (2, 1));
}

#[test]
fn json_output_is_one_object_or_a_list() {
    let one = run(
        &manifest("v1", "Pod").to_string(),
        Options {
            output: OutputFormat::Json,
            diff: false,
        },
    );
    let v: Value = serde_json::from_str(&one.output).unwrap();
    assert_eq!(v["kind"], "Pod");
    let two = run(
        MIXED,
        Options {
            output: OutputFormat::Json,
            diff: false,
        },
    );
    let v: Value = serde_json::from_str(&two.output).unwrap();
    assert_eq!(v["kind"], "List");
    assert_eq!(v["items"].as_array().unwrap().len(), 3);
}

const PYTHON_POD: &str =
    "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  containers:\n  - name: app\n";

#[test]
fn namespace_annotations_come_from_namespace_objects_and_flags() {
    let ns = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: shop\n  annotations:\n    instrumentation.opentelemetry.io/inject-java: \"true\"\n---\n";
    let out = yaml(&format!("{ns}{PYTHON_POD}"));
    assert_eq!(out.mutated, 1);
    let docs = parse_out(&out.output);
    assert_eq!(
        docs[1]["metadata"]["annotations"]["otel-injector/injected"],
        "java"
    );

    // Another namespace's flag does not apply.
    for (namespace, value, mutated) in [("shop", "java-inst", 1), ("other", "true", 0)] {
        let key = "instrumentation.opentelemetry.io/inject-java";
        let (ctx, sources) = context(PYTHON_POD, &[(namespace, key, value)]);
        let out = inject(&ctx, sources, Options::default()).unwrap();
        assert_eq!(out.mutated, mutated, "{namespace}");
        if mutated == 0 {
            assert_eq!(out.output, PYTHON_POD);
        }
    }
}

#[test]
fn skipped_languages_are_counted_with_the_webhooks_warning() {
    let pod = PYTHON_POD.replace("name: p\n", "name: p\n  namespace: empty\n  annotations:\n    instrumentation.opentelemetry.io/inject-python: \"true\"\n");
    let out = yaml(&pod);
    assert_eq!((out.mutated, out.skipped), (0, 1));
    assert_eq!(
        out.warnings,
        [
            "m.yaml: document 1: Pod empty/p: inject-python: no Instrumentation in namespace \"empty\"; not injected"
        ]
    );
    assert_eq!(out.output, pod);
}

#[test]
fn diff_shows_only_what_changes() {
    let out = run(
        MIXED,
        Options {
            output: OutputFormat::Yaml,
            diff: true,
        },
    );
    assert!(
        out.output.starts_with("--- a/m.yaml\n+++ b/m.yaml\n@@ "),
        "{}",
        out.output
    );
    assert!(
        out.output
            .contains("\n+        otel-injector/injected: java\n"),
        "{}",
        out.output
    );
    assert!(!out.output.contains("ConfigMap"), "{}", out.output);
    let none = run(
        "apiVersion: v1\nkind: Service\nmetadata: {name: s}\n",
        Options {
            output: OutputFormat::Yaml,
            diff: true,
        },
    );
    assert_eq!(none.output, "");
}

#[test]
fn a_template_that_is_not_a_pod_is_bad_input() {
    let bad = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  template:\n    spec:\n      containers: 3\n";
    let (ctx, sources) = context(bad, &[]);
    let e = inject(&ctx, sources, Options::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with(
            "m.yaml: document 1 (line 1): Deployment shop/web pod template is not a valid pod: "
        ),
        "{e}"
    );
}
