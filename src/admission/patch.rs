//! Turns a [`PodPlan`] into targeted JSON-patch operations: appends with `/-`, inserts at an
//! index, parents created when missing, keys escaped. Objects the user wrote are never
//! re-serialized, so fields unknown to this build's API types survive the patch.

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, MoveOperation, PatchOperation};
use serde::Serialize;
use serde_json::Value;

use crate::pod::plan::{ContainerPlan, InitPosition, PodPlan, Slot};

fn ptr(tokens: &[&str]) -> PointerBuf {
    PointerBuf::from_tokens(tokens.iter().copied())
}

fn to_value<T: Serialize>(v: &T) -> Value {
    // The k8s-openapi types serialize infallibly to a Value.
    serde_json::to_value(v).unwrap_or(Value::Null)
}

fn add(path: PointerBuf, value: Value) -> PatchOperation {
    PatchOperation::Add(AddOperation { path, value })
}

/// Appends `items` to the array at `base`, creating the array when the pod has none.
fn append_all<T: Serialize>(
    ops: &mut Vec<PatchOperation>,
    base: &[&str],
    exists: bool,
    items: &[T],
) {
    if items.is_empty() {
        return;
    }
    if !exists {
        ops.push(add(
            ptr(base),
            Value::Array(items.iter().map(to_value).collect()),
        ));
        return;
    }
    let mut path = base.to_vec();
    path.push("-");
    for item in items {
        ops.push(add(ptr(&path), to_value(item)));
    }
}

fn container_ops(ops: &mut Vec<PatchOperation>, list: &str, index: usize, c: &ContainerPlan<'_>) {
    let idx = index.to_string();
    let base = ["spec", list, idx.as_str()];
    let env = &c.env;
    let env_path = |rest: &[&str]| {
        let mut p = base.to_vec();
        p.push("env");
        p.extend_from_slice(rest);
        ptr(&p)
    };
    if env.original().is_empty() && c.container.env.is_none() {
        // No env list yet: one add with the whole list (prepends and appends both land here).
        let all = env.to_vec();
        if !all.is_empty() {
            ops.push(add(env_path(&[]), to_value(&all)));
        }
    } else {
        // Edits address original indices, so they go first; prepends shift everything, so
        // they go last.
        // `add`, not `replace`: the API server omits empty values, so the entry may have
        // no `value` member, and RFC 6902 `replace` requires one.
        for (i, value) in env.replaced() {
            let i = i.to_string();
            ops.push(add(
                env_path(&[i.as_str(), "value"]),
                Value::String(value.clone()),
            ));
        }
        for e in env.appended() {
            ops.push(add(env_path(&["-"]), to_value(e)));
        }
        if let Some(i) = env.moved_to_end() {
            let i = i.to_string();
            ops.push(PatchOperation::Move(MoveOperation {
                from: env_path(&[i.as_str()]),
                path: env_path(&["-"]),
            }));
        }
        for e in env.prepended().iter().rev() {
            ops.push(add(env_path(&["0"]), to_value(e)));
        }
    }
    let mut mounts = base.to_vec();
    mounts.push("volumeMounts");
    let mut removed = c.removed_mounts.clone();
    removed.sort_unstable_by(|a, b| b.cmp(a));
    for i in removed {
        let i = i.to_string();
        let mut p = mounts.clone();
        p.push(i.as_str());
        ops.push(PatchOperation::Remove(json_patch::RemoveOperation {
            path: ptr(&p),
        }));
    }
    append_all(
        ops,
        &mounts,
        c.container.volume_mounts.is_some(),
        &c.new_mounts,
    );
}

/// The JSON patch that turns the plan's pod into the planned pod. Empty when nothing changes.
pub fn build(plan: &PodPlan<'_>) -> Vec<PatchOperation> {
    let mut ops = Vec::new();
    if !plan.is_changed() {
        return ops;
    }
    let spec = plan.pod.spec.as_ref();

    // Container edits use original indices: emit them before any insertion.
    for (slot, c) in plan.containers() {
        match slot {
            Slot::Init(i) => container_ops(&mut ops, "initContainers", i, c),
            Slot::App(i) => container_ops(&mut ops, "containers", i, c),
        }
    }

    let inits = spec.and_then(|s| s.init_containers.as_ref());
    if inits.is_none() {
        let all: Vec<_> = plan.new_init_containers.iter().map(|(_, c)| c).collect();
        append_all(&mut ops, &["spec", "initContainers"], false, &all);
    } else {
        let at_end: Vec<_> = plan
            .new_init_containers
            .iter()
            .filter(|(p, _)| *p == InitPosition::End)
            .map(|(_, c)| c)
            .collect();
        append_all(&mut ops, &["spec", "initContainers"], true, &at_end);
        // Inserts from the highest anchor down, so lower anchors keep their indices.
        let mut anchored: Vec<(usize, usize)> = plan
            .new_init_containers
            .iter()
            .enumerate()
            .filter_map(|(n, (p, _))| match p {
                InitPosition::Before(i) => Some((*i, n)),
                InitPosition::End => None,
            })
            .collect();
        anchored.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        let mut k = 0;
        while k < anchored.len() {
            let anchor = anchored[k].0;
            let mut offset = 0;
            while k < anchored.len() && anchored[k].0 == anchor {
                let at = (anchor + offset).to_string();
                let c = &plan.new_init_containers[anchored[k].1].1;
                ops.push(add(
                    ptr(&["spec", "initContainers", at.as_str()]),
                    to_value(c),
                ));
                offset += 1;
                k += 1;
            }
        }
    }

    append_all(
        &mut ops,
        &["spec", "containers"],
        true,
        &plan.new_containers,
    );
    append_all(
        &mut ops,
        &["spec", "volumes"],
        spec.is_some_and(|s| s.volumes.is_some()),
        &plan.new_volumes,
    );
    if plan.share_process_namespace && spec.and_then(|s| s.share_process_namespace) != Some(true) {
        ops.push(add(
            ptr(&["spec", "shareProcessNamespace"]),
            Value::Bool(true),
        ));
    }

    if !plan.new_annotations.is_empty() {
        if plan.pod.metadata.annotations.is_none() {
            ops.push(add(
                ptr(&["metadata", "annotations"]),
                to_value(&plan.new_annotations),
            ));
        } else {
            for (k, v) in &plan.new_annotations {
                ops.push(add(
                    ptr(&["metadata", "annotations", k.as_str()]),
                    Value::String(v.clone()),
                ));
            }
        }
    }
    ops
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pod::env::literal;
    use k8s_openapi::api::core::v1::{Container, Pod};
    use serde_json::json;

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
        c.env
            .set_literal("JAVA_TOOL_OPTIONS", "-Xmx1g -javaagent:x".into());
        c.env.append_if_absent(literal("C", "3"));
        c.env
            .set_literal("OTEL_RESOURCE_ATTRIBUTES", "k=v,a=b".into());
        c.env.move_to_end("OTEL_RESOURCE_ATTRIBUTES");
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
    fn unchanged_plan_gives_no_ops() {
        let p = pod(json!({"spec": {"containers": [{"name": "a"}]}}));
        let mut plan = PodPlan::new(&p);
        plan.container(Slot::App(0));
        assert!(build(&plan).is_empty());
    }
}
