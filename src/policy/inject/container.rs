//! One target container's part of a template in CEL (inside `targets.map(i, ...)`): whether
//! the template covers it, and its patches: its own mounts the web server's clone takes
//! removed, the template's mounts added, the variables put before its own and appended, the
//! ones the agent extends, and its own `OTEL_RESOURCE_ATTRIBUTES` merged and moved last.

use serde_json::Value;

use super::attributes::{
    attr_annotation, merged_resource_attributes, resource_attributes, service_name,
};
use super::{C, create_then, init};
use crate::agents::sdk_env::{OTEL_RESOURCE_ATTRIBUTES, OTEL_RESOURCE_ATTRIBUTES_NODE_NAME};
use crate::policy::cel::{self, string, strings};
use crate::policy::template::{self, Kind, Template};

const ENV: &str = "Object.spec.containers.env";

/// An env entry of the template as a CEL literal.
fn entry(e: &Value) -> String {
    cel::object(e, ENV, template::CONTAINER, &format!("{C}.name"))
        .expect("the engine writes env entries CEL can express")
}

/// Entries of an env list, each `(condition, entry)` in CEL.
type Entries = Vec<(String, String)>;

/// The variables target `C` gets, each `(condition, entry)`: the ones put before its own and
/// the ones appended, in order.
fn added_env(t: &Template) -> (Entries, Entries) {
    let names = "variables.envNames[i]";
    let prepended = t
        .prepended
        .iter()
        .map(|e| {
            let name = string(e["name"].as_str().unwrap_or(""));
            (format!("!({name} in {names})"), entry(e))
        })
        .collect();
    let spec = &t.instrumentation.spec;
    let appended = t
        .appended
        .iter()
        .map(|a| {
            let name = a.entry["name"].as_str().unwrap_or("");
            let kept_out = strings(a.kept_out_by.iter().map(String::as_str));
            let mut when = format!("!{kept_out}.exists(n, n in {names})");
            if name == OTEL_RESOURCE_ATTRIBUTES_NODE_NAME {
                // Only while the node is unknown: a pod that names it gets the name itself.
                when.push_str(" && object.spec.?nodeName.orValue(\"\") == \"\"");
            }
            let value = match a.kind {
                Kind::Fixed => return (when, entry(&a.entry)),
                Kind::ServiceName => {
                    if !spec.service_metadata() {
                        when = format!("{when} && {} != \"\"", attr_annotation("service.name"));
                    }
                    service_name(C)
                }
                Kind::ResourceAttributes => resource_attributes(),
            };
            (
                when,
                format!("{ENV}{{name: {}, value: string({value})}}", string(name)),
            )
        })
        .collect();
    (prepended, appended)
}

/// The env patches of target `C` (`path` its env's JSON pointer): a new list when it has
/// none; else the extensions in place, the prepended at the front (last first), the
/// appended at the end, and the container's own `OTEL_RESOURCE_ATTRIBUTES` merged and moved
/// after them. (The container's own entries cannot be written back from CEL: the API server
/// does not convert them to JSON; they are patched in place or moved.)
fn env_patches(t: &Template, path: &str) -> String {
    let (prepended, appended) = added_env(t);
    let own = format!("{C}.?env.orValue([])");
    let marker = template::CONTAINER;
    let name_expr = format!("{C}.name");
    let mut ops: Vec<String> = t
        .extensions
        .iter()
        .map(|x| {
            let own_value = format!("{own}[j].?value.orValue(\"\")");
            let value = format!(
                "({own_value} == \"\" ? {} : {} + {own_value} + {})",
                cel::with_name(&x.empty, marker, &name_expr),
                cel::with_name(&x.prefix, marker, &name_expr),
                cel::with_name(&x.suffix, marker, &name_expr)
            );
            format!(
                "lists.range({own}.size()).filter(j, {own}[j].name == {} && !has({own}[j].valueFrom)).map(j, JSONPatch{{op: \"add\", path: {path} + \"/\" + string(j) + \"/value\", value: {value}}})",
                string(&x.name)
            )
        })
        .collect();
    // The container's own OTEL_RESOURCE_ATTRIBUTES (`literal`: unless set with valueFrom),
    // each patched with `then` (`j` its index in the container's list as sent).
    let own_attributes = |literal: bool, then: String| {
        let literal = if literal {
            format!(" && !has({own}[j].valueFrom)")
        } else {
            String::new()
        };
        format!(
            "lists.range({own}.size()).filter(j, {own}[j].name == {}{literal}).map(j, {then})",
            string(OTEL_RESOURCE_ATTRIBUTES)
        )
    };
    if t.merges_resource_attributes {
        // A literal gets the attributes of the keys it does not set.
        let value = format!("{own}[j].?value.orValue(\"\")");
        let merged = merged_resource_attributes(&value);
        ops.push(own_attributes(
            true,
            format!(
                "JSONPatch{{op: \"add\", path: {path} + \"/\" + string(j) + \"/value\", value: {merged}}}"
            ),
        ));
    }
    let add = |at: &str, (when, e): &(String, String)| {
        format!("({when} ? [JSONPatch{{op: \"add\", path: {path} + \"{at}\", value: {e}}}] : [])")
    };
    ops.extend(prepended.iter().rev().map(|p| add("/0", p)));
    ops.extend(appended.iter().map(|a| add("/-", a)));
    if t.merges_resource_attributes {
        // Then moved after everything injected, from where it is once the prepended are in.
        let added_before: Vec<&str> = prepended.iter().map(|(when, _)| when.as_str()).collect();
        let shift = format!("[{}].filter(b, b).size()", added_before.join(", "));
        ops.push(own_attributes(
            false,
            format!(
                "JSONPatch{{op: \"move\", from: {path} + \"/\" + string(j + {shift}), path: {path} + \"/-\"}}"
            ),
        ));
    }
    create_then(&format!("{C}.env"), path, "[]", &ops)
}

/// Whether target `C` is one the template covers.
pub(super) fn container_covered(t: &Template) -> String {
    let own = format!("{C}.?env.orValue([])");
    let names = "variables.envNames[i]";
    let literal = strings(t.refuse_literal.iter().map(String::as_str));
    let value_from = strings(t.refuse_value_from.iter().map(String::as_str));
    let volumes = strings(t.volumes.iter().filter_map(|v| v["name"].as_str()));
    let paths: Vec<String> = t
        .mounts
        .iter()
        .filter_map(|m| m["mountPath"].as_str())
        .filter(|p| !t.hides(p))
        .map(|p| cel::with_name(p, template::CONTAINER, &format!("{C}.name")))
        .collect();
    format!(
        "{names}.distinct().size() == {names}.size() && !{own}.exists(e, (e.name in {literal} && !has(e.valueFrom)) || (e.name in {value_from} && has(e.valueFrom))) && !{C}.?volumeMounts.orValue([]).exists(m, m.name in {volumes} || m.mountPath in [{}])",
        paths.join(", ")
    )
}

/// The patches of target `C`: its own mounts at or below the template's hidden directories
/// removed (the web server's clone keeps them, copied before this), the template's mounts
/// added, then its env.
pub(super) fn container_patches(t: &Template) -> String {
    let mounts: Vec<String> = t
        .mounts
        .iter()
        .map(|m| {
            cel::object(
                m,
                "Object.spec.containers.volumeMounts",
                template::CONTAINER,
                &format!("{C}.name"),
            )
            .expect("the engine writes mounts CEL can express")
        })
        .collect();
    let path = |field: &str| format!("\"/spec/containers/\" + string(i) + \"/{field}\"");
    let mounts_path = path("volumeMounts");
    let add_each: Vec<String> = mounts
        .iter()
        .map(|m| format!("[JSONPatch{{op: \"add\", path: {mounts_path} + \"/-\", value: {m}}}]"))
        .collect();
    let unmounted = match &t.hidden_below[..] {
        [] => "[]".to_owned(),
        dirs => {
            // Removed by index, the last first, so that each index holds until it is used. (A
            // `replace` with the filtered list left such pods uninjected on the 1.37 API
            // server when any mount remained: the corpus case `nginx-conf-mount`.)
            let mounts = format!("{C}.?volumeMounts.orValue([])");
            let hidden = init::within(&format!("{mounts}[j]"), dirs);
            format!(
                "lists.range({mounts}.size()).map(k, {mounts}.size() - 1 - k).filter(j, {hidden}).map(j, JSONPatch{{op: \"remove\", path: {mounts_path} + \"/\" + string(j)}})"
            )
        }
    };
    format!(
        "{unmounted} + {} + {}",
        create_then(&format!("{C}.volumeMounts"), &mounts_path, "[]", &add_each),
        env_patches(t, &path("env"))
    )
}
