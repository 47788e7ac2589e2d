//! Tests of `patch`.

use super::*;
use crate::pod::env::literal;
use k8s_openapi::api::core::v1::{Container, Pod};
use serde_json::{Value, json};

#[test]
fn pointers_are_written_as_serde_json_writes_them() {
    let every_ascii: String = (0u8..=0x7f).map(char::from).collect();
    let cases: [&[&str]; 5] = [
        &["spec", "containers", "0", "env", "-"],
        &["metadata", "annotations", "otel-injector/status"],
        &[
            "metadata",
            "labels",
            "a~b",
            "q\"uote",
            "back\\slash",
            "tab\t",
            "é",
        ],
        &[every_ascii.as_str()],
        &[],
    ];
    for tokens in cases {
        let mut p = JsonPatch::default();
        p.pointer("path", tokens);
        let escaped: String = tokens
            .iter()
            .map(|t| format!("/{}", t.replace('~', "~0").replace('/', "~1")))
            .collect();
        let expected = format!(",\"path\":{}", serde_json::to_string(&escaped).unwrap());
        assert_eq!(String::from_utf8(p.buf).unwrap(), expected, "{tokens:?}");
    }
}

#[test]
fn variables_are_written_as_k8s_openapi_writes_them() {
    let vars = [
        literal("A", "1"),
        literal("Q\"UOTE", "a \"b\" \\ \n é"),
        EnvVar {
            name: "NO_VALUE".into(),
            ..Default::default()
        },
        crate::pod::env::field_ref("POD", "metadata.name"),
    ];
    for var in &vars {
        let (mut direct, mut typed) = (JsonPatch::default(), JsonPatch::default());
        direct.add_env(&["spec", "containers", "0", "env", "-"], var);
        typed.add(&["spec", "containers", "0", "env", "-"], var);
        assert_eq!(
            String::from_utf8(direct.buf).unwrap(),
            String::from_utf8(typed.buf).unwrap()
        );
    }
}

/// The patch as typed operations, after checking that its text is exactly what
/// serde_json makes of them (key order included).
fn build(plan: &PodPlan<'_>) -> Vec<PatchOperation> {
    let written = both(plan.pod, Some(plan), None).unwrap();
    let text = text(plan.pod, Some(plan), None).unwrap();
    assert_eq!(written.as_ref().map(|b| &b.text), text.as_ref());
    let Some(Both { text, operations }) = written else {
        return Vec::new();
    };
    assert!(!operations.is_empty());
    assert_eq!(
        String::from_utf8(text).unwrap(),
        serde_json::to_string(&operations).unwrap()
    );
    operations
}

fn pod(v: Value) -> Pod {
    serde_json::from_value(v).unwrap()
}

fn apply(pod_json: &Value, ops: Vec<PatchOperation>) -> Value {
    let mut doc = pod_json.clone();
    json_patch::patch(&mut doc, &json_patch::Patch(ops)).unwrap();
    doc
}

fn init(name: &str) -> Container {
    Container {
        name: name.into(),
        ..Default::default()
    }
}

#[test]
fn keys_are_escaped_and_parents_created() {
    let j = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a"}]}});
    let p = pod(j.clone());
    let mut plan = PodPlan::new(&p);
    plan.new_annotations
        .insert("example.com/x~y".into(), "1".into());
    plan.container(Slot::App(0))
        .unwrap()
        .env
        .append_if_absent(literal("K", "V"));
    let out = apply(&j, build(&plan));
    assert_eq!(out["metadata"]["annotations"]["example.com/x~y"], "1");
    assert_eq!(
        out["spec"]["containers"][0]["env"],
        json!([{"name": "K", "value": "V"}])
    );

    let j = json!({"metadata": {"annotations": {"a": "b"}}, "spec": {"containers": []}});
    let p = pod(j.clone());
    let mut plan = PodPlan::new(&p);
    plan.new_annotations.insert("x/y~z".into(), "1".into());
    let ops = build(&plan);
    assert_eq!(
        serde_json::to_value(&ops).unwrap(),
        json!([{"op": "add", "path": "/metadata/annotations/x~1y~0z", "value": "1"}])
    );
}

#[test]
fn inits_are_inserted_before_their_anchor_and_appended_otherwise() {
    let j = json!({"spec": {"containers": [{"name": "app"}],
        "initContainers": [{"name": "i0"}, {"name": "i1"}, {"name": "i2"}]}});
    let p = pod(j.clone());
    let mut plan = PodPlan::new(&p);
    plan.add_init_container(InitPosition::Before(1), init("a"));
    plan.add_init_container(InitPosition::End, init("z"));
    plan.add_init_container(InitPosition::Before(2), init("b"));
    plan.add_init_container(InitPosition::Before(1), init("a2"));
    let out = apply(&j, build(&plan));
    let names: Vec<_> = out["spec"]["initContainers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["i0", "a", "a2", "i1", "b", "i2", "z"]);
}

#[test]
fn env_edits_land_at_the_right_indices() {
    let j = json!({"spec": {"containers": [{"name": "app", "env": [
        {"name": "A", "value": "1"},
        {"name": "OTEL_RESOURCE_ATTRIBUTES", "value": "k=v"},
        {"name": "JAVA_TOOL_OPTIONS", "value": "-Xmx1g"},
        {"name": "B", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}, "futureField": 1}}
    ]}]}});
    let p = pod(j.clone());
    let mut plan = PodPlan::new(&p);
    let c = plan.container(Slot::App(0)).unwrap();
    c.env.extend(
        "JAVA_TOOL_OPTIONS",
        crate::pod::env::ValueExtension::after(" -javaagent:x".into()),
    );
    c.env.append_if_absent(literal("C", "3"));
    c.env.merge_last("OTEL_RESOURCE_ATTRIBUTES", |v| {
        v.map(|v| format!("{v},a=b"))
    });
    c.env.prepend_if_absent(literal("IP", "x"));
    let out = apply(&j, build(&plan));
    assert_eq!(
        out["spec"]["containers"][0]["env"],
        json!([
            {"name": "IP", "value": "x"},
            {"name": "A", "value": "1"},
            {"name": "JAVA_TOOL_OPTIONS", "value": "-Xmx1g -javaagent:x"},
            {"name": "B", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}, "futureField": 1}},
            {"name": "C", "value": "3"},
            {"name": "OTEL_RESOURCE_ATTRIBUTES", "value": "k=v,a=b"}
        ])
    );
}

#[test]
fn mounts_are_removed_from_the_highest_index_down() {
    let j = json!({"spec": {"containers": [{"name": "app", "volumeMounts": [
        {"name": "a", "mountPath": "/a"}, {"name": "b", "mountPath": "/b"},
        {"name": "c", "mountPath": "/c"}
    ]}]}});
    let p = pod(j.clone());
    let mut plan = PodPlan::new(&p);
    let c = plan.container(Slot::App(0)).unwrap();
    c.removed_mounts = vec![0, 2];
    let ops = build(&plan);
    assert_eq!(
        serde_json::to_value(&ops).unwrap(),
        json!([
            {"op": "remove", "path": "/spec/containers/0/volumeMounts/2"},
            {"op": "remove", "path": "/spec/containers/0/volumeMounts/0"}
        ])
    );
    assert_eq!(
        apply(&j, ops)["spec"]["containers"][0]["volumeMounts"],
        json!([{"name": "b", "mountPath": "/b"}])
    );
}

#[test]
fn unchanged_plan_gives_no_ops() {
    let p = pod(json!({"spec": {"containers": [{"name": "a"}]}}));
    let mut plan = PodPlan::new(&p);
    plan.container(Slot::App(0));
    assert!(build(&plan).is_empty());
}
