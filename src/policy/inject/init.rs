//! The init containers of a template in CEL: appended after the pod's own, with what they
//! take of the first target (`template::InitHoles`) copied in by JSON Patch `copy`
//! operations, since the pod's own fields cannot be written back from CEL; the web servers'
//! service name written into their module configuration as the engine quotes it
//! (`agents::webserver::ConfSyntax::arg`).

use super::attributes::service_name;
use super::create_then;
use crate::agents::Language;
use crate::policy::cel::{self, string, strings};
use crate::policy::template::{IMAGE, SERVICE, Template};
use crate::policy::vars::Vars;

/// Whether mount `m` (a CEL expression) is at or below one of `dirs` (as the engine's
/// `webserver::within` reads a path: trailing `/` aside).
pub(super) fn within(m: &str, dirs: &[String]) -> String {
    format!(
        "{}.exists(d, {m}.mountPath == d || {m}.mountPath.startsWith(d + \"/\"))",
        strings(dirs.iter().map(String::as_str))
    )
}

/// The first target of template `n`.
fn first(n: usize) -> String {
    format!("object.spec.containers[variables.targets{n}[0]]")
}

/// The characters after which a server reads a directive argument as more than one word
/// (`ConfSyntax::special`: whitespace, quotes, backslash; nginx also `;{}#`), as RE2.
fn special(lang: Language) -> String {
    let nginx = if lang == Language::Nginx { ";{}#" } else { "" };
    format!("[\\t-\\r\\x{{85}}\\p{{Z}}\"'\\\\{nginx}]")
}

/// The service name of template `n`'s first target as one directive argument: as it is when
/// the server reads it back as one word, else quoted with `\` and `"` escaped.
fn conf_service(v: &mut Vars, t: &Template, n: usize) -> String {
    let service = format!("variables.service{n}");
    v.add(&format!("service{n}"), service_name(&first(n)));
    let word = format!("{service}.trim()");
    format!(
        "({word} != \"\" && !{word}.matches({}) ? {service} : \"\\\"\" + {service}.replace(\"\\\\\", \"\\\\\\\\\").replace(\"\\\"\", \"\\\\\\\"\") + \"\\\"\")",
        string(&special(t.language))
    )
}

/// Whether the pod is one a template with a clone of its first target covers: one target
/// (the engine gives the module to the first and the SDK env to the others), none of its
/// mounts at or below the agent's other paths (those the engine moves to the clone,
/// `hidden_below`, are removed by [`super::container_patches`]), and a service name without
/// control characters (the engine refuses those: `invalid_value`).
pub(super) fn clone_covered(t: &Template, n: usize) -> String {
    if t.init.clone_of_target.is_none() {
        return "true".into();
    }
    let paths = strings(
        t.mounts
            .iter()
            .filter_map(|m| m["mountPath"].as_str())
            .map(|p| p.trim_end_matches('/'))
            .filter(|p| !t.hides(p)),
    );
    format!(
        "variables.targets{n}.size() == 1 && !{}.?volumeMounts.orValue([]).exists(m, {paths}.exists(p, m.mountPath.startsWith(p))) && !variables.service{n}.matches(\"\\\\p{{Cc}}\")",
        first(n)
    )
}

/// The init containers of template `t` (number `n`) appended after the pod's own, then what
/// they take of the first target.
pub(super) fn init_patches(v: &mut Vars, t: &Template, n: usize) -> String {
    if t.init_containers.is_empty() {
        return "[]".into();
    }
    let first = first(n);
    let service = conf_service(v, t, n);
    let image = format!("{first}.image");
    let marks = [(SERVICE, service.as_str()), (IMAGE, image.as_str())];
    let adds: Vec<String> = t
        .init_containers
        .iter()
        .map(|c| {
            let c = cel::object_with(c, "Object.spec.initContainers", &marks)
                .expect("the engine writes init containers CEL can express");
            format!("[JSONPatch{{op: \"add\", path: \"/spec/initContainers/-\", value: {c}}}]")
        })
        .collect();
    let mut ops = vec![create_then(
        "object.spec.initContainers",
        "\"/spec/initContainers\"",
        "[]",
        &adds,
    )];
    let before = "object.spec.?initContainers.orValue([]).size()";
    let at = |k: usize| format!("\"/spec/initContainers/\" + string({before} + {k})");
    let from = |field: &str| {
        format!("\"/spec/containers/\" + string(variables.targets{n}[0]) + \"/{field}\"")
    };
    let copy = |k: usize, field: &str| {
        format!(
            "JSONPatch{{op: \"copy\", from: {}, path: {} + \"/{field}\"}}",
            from(field),
            at(k)
        )
    };
    if let Some(k) = t.init.clone_of_target {
        let clone = &t.init_containers[k];
        let listed = |field: &str, type_path: &str, unless: &dyn Fn(&str) -> String| {
            clone[field]
                .as_array()
                .into_iter()
                .flatten()
                .map(|e| {
                    let value = cel::object_with(e, type_path, &marks)
                        .expect("the engine writes entries CEL can express");
                    let name = e["name"].as_str().unwrap_or("");
                    format!(
                        "({} ? [] : [JSONPatch{{op: \"add\", path: {} + \"/{field}/-\", value: {value}}}])",
                        unless(name),
                        at(k)
                    )
                })
                .collect::<Vec<_>>()
        };
        // The target's env, then the clone's own entries it does not set.
        let env_names = format!("variables.envNames[variables.targets{n}[0]]");
        let env = listed("env", "Object.spec.initContainers.env", &|name| {
            format!("{} in {env_names}", string(name))
        });
        // The target's mounts, then the clone's.
        let mounts = listed(
            "volumeMounts",
            "Object.spec.initContainers.volumeMounts",
            &|_| "false".to_owned(),
        );
        for (field, after) in [("env", env), ("volumeMounts", mounts)] {
            ops.push(format!(
                "(has({first}.{field}) ? [{}] + {} : [])",
                copy(k, field),
                if after.is_empty() {
                    "[]".to_owned()
                } else {
                    after.join(" + ")
                }
            ));
        }
        for field in ["envFrom", "imagePullPolicy"] {
            ops.push(format!(
                "(has({first}.{field}) ? [{}] : [])",
                copy(k, field)
            ));
        }
    }
    if t.init.security_from_target {
        let copies: Vec<String> = (0..t.init_containers.len())
            .map(|k| copy(k, "securityContext"))
            .collect();
        ops.push(format!(
            "(has({first}.securityContext) ? [{}] : [])",
            copies.join(", ")
        ));
    }
    ops.join(" + ")
}
