//! The resource attributes and the service name of a target container as the policy computes
//! them in CEL, each key from its sources in the engine's order of precedence.

use crate::agents::sdk_env::{
    NODE_NAME_REFERENCE, OTEL_RESOURCE_ATTRIBUTES, POD_NAME_REFERENCE, POD_UID_REFERENCE,
};
use crate::crd::{Instrumentation, InstrumentationSpec};
use crate::keys::{
    APP_INSTANCE, APP_NAME, APP_VERSION, RESOURCE_ANNOTATION_PREFIX, SERVICE_NAME_ANNOTATION,
};
use crate::policy::cel::{string, strings};

/// `resource.opentelemetry.io/<attr>` of the pod, `""` when absent.
pub(super) fn attr_annotation(attr: &str) -> String {
    let key = string(&format!("{RESOURCE_ANNOTATION_PREFIX}{attr}"));
    format!("variables.ann[?{key}].orValue(\"\")")
}

/// `a` unless it is empty, else `b`. A string literal decides here: `"x"` is `a`, `""` is
/// `b`, so no constant test reaches the API server.
pub(super) fn or_else(a: &str, b: &str) -> String {
    let literal =
        a.len() >= 2 && a.starts_with('"') && a.ends_with('"') && !a[1..].contains("\" +");
    match (literal, a) {
        (true, "\"\"") => b.to_owned(),
        (true, _) => a.to_owned(),
        (false, _) => format!("({a} != \"\" ? {a} : {b})"),
    }
}

/// The service name the pod gives (`PodInfo::service_name` short of the container's name),
/// `""` when it gives none: the policy's variable `service`.
pub(super) fn pod_service_name(spec: &InstrumentationSpec) -> String {
    let mut chain = vec![attr_annotation("service.name")];
    if spec.use_labels_for_resource_attributes() {
        for key in [APP_INSTANCE, APP_NAME] {
            chain.push(format!("variables.lab[?{}].orValue(\"\")", string(key)));
        }
    }
    for owner in ["dep", "rs", "ss", "ds", "cron", "job", "podName"] {
        chain.push(format!("variables.{owner}"));
    }
    let last = chain.pop().expect("a fallback");
    chain.iter().rev().fold(last, |acc, e| or_else(e, &acc))
}

/// The service name of container `c` (a CEL expression; `C` for the current target).
pub(super) fn service_name(c: &str) -> String {
    or_else("variables.service", &format!("{c}.name"))
}

/// The version part of target `C`'s image (`pod::info::image_version`), `""` for none: the
/// tag of the last path segment before the first `@`, then `@` and the digest after it.
pub(super) fn image_version(c: &str) -> String {
    let img = format!("{c}.?image.orValue(\"\")");
    let colon_tag = format!("{img}.split(\"@\")[0].find(\"[^/]*$\").find(\":[^:]*$\")");
    let tag = format!("({colon_tag} == \"\" ? \"\" : {colon_tag}.substring(1))");
    let digest = format!("{img}.substring({img}.indexOf(\"@\") + 1)");
    format!(
        "({img}.indexOf(\"@\") >= 0 ? ({tag} != \"\" ? {tag} + \"@\" + {digest} : {digest}) : {tag})"
    )
}

/// The pod's `resource.opentelemetry.io/*` annotations that set keys `known` does not, as
/// `[key, value]` pairs (a pod-level variable: the same for every target).
pub(super) fn annotation_pairs(known: &[String]) -> String {
    let names = strings(known.iter().map(String::as_str));
    let prefix = string(RESOURCE_ANNOTATION_PREFIX);
    let n = RESOURCE_ANNOTATION_PREFIX.len();
    format!(
        "variables.ann.filter(k, k.startsWith({prefix}) && size(k) > {n} && !(k.substring({n}) in {names}) && k != {service_name} && variables.ann[k] != \"\").map(k, [k.substring({n}), string(variables.ann[k])])",
        service_name = string(SERVICE_NAME_ANNOTATION),
    )
}

/// The pod-level variable `attrs`: per container `c` of the pod, what the engine adds to its
/// `OTEL_RESOURCE_ATTRIBUTES` (`agents::sdk_env::resource_attributes`): every source's value
/// in order of precedence, but the keys its own literal value sets (`sdk_env::existing_keys`:
/// the trimmed part before the first `=` of each comma-separated entry that has one), sorted
/// by key, as `key=value,...`. One expression for every container and template, read by
/// index ([`resource_attributes`], [`merged_resource_attributes`]).
pub(super) fn attributes_variable(inst: &Instrumentation) -> String {
    let pairs: Vec<String> = candidates(inst, "c")
        .iter()
        .map(|(k, candidates)| {
            let value = candidates
                .iter()
                .skip(1)
                .fold(candidates[0].clone(), |acc, e| or_else(e, &acc));
            format!("[{}, string({value})]", string(k))
        })
        .collect();
    let own = format!(
        "c.?env.orValue([]).filter(e, e.name == {} && !has(e.valueFrom)).map(e, e.?value.orValue(\"\")).join(\",\")",
        string(OTEL_RESOURCE_ATTRIBUTES)
    );
    let existing = format!(
        "{own}.split(\",\").filter(kv, kv.trim().contains(\"=\")).map(kv, kv.trim().substring(0, kv.trim().indexOf(\"=\")).trim())"
    );
    // `[x].map(own, …)[0]`: the keys of the container's own value read once, not per pair.
    format!(
        "object.spec.containers.map(c, [{existing}].map(own, ([{}] + variables.annPairs).filter(p, p[1] != \"\" && !(p[0] in own)).sortBy(p, p[0]).map(p, p[0] + \"=\" + p[1]).join(\",\"))[0])",
        pairs.join(", ")
    )
}

/// `OTEL_RESOURCE_ATTRIBUTES` of target `C`, for a container that sets none itself.
pub(super) fn resource_attributes() -> String {
    "variables.attrs[i]".into()
}

/// A container's own literal `OTEL_RESOURCE_ATTRIBUTES` value `own` (a CEL string) with the
/// attributes of the keys it does not set appended, after a comma unless it is empty or ends
/// with one; `own` itself when there are none.
pub(super) fn merged_resource_attributes(own: &str) -> String {
    let added = resource_attributes();
    format!(
        "({added} == \"\" ? {own} : {own} + ({own} == \"\" || {own}.endsWith(\",\") ? \"\" : \",\") + {added})"
    )
}

/// The keys the policy computes itself, each with its sources' CEL, lowest precedence first.
pub(super) fn candidates(inst: &Instrumentation, c: &str) -> Vec<(String, Vec<String>)> {
    let spec = &inst.spec;
    // The pod's namespace: the Instrumentation's, or another for a shared one.
    let ns = "namespaceObject.metadata.name";
    // Candidates per key, lowest precedence first.
    let mut known: Vec<(String, Vec<String>)> = Vec::new();
    fn add(known: &mut Vec<(String, Vec<String>)>, k: &str, e: String) {
        match known.iter_mut().find(|(key, _)| key == k) {
            Some((_, candidates)) => candidates.push(e),
            None => known.push((k.to_owned(), vec![e])),
        }
    }
    let mut put = |k: &str, e: String| add(&mut known, k, e);
    for (k, v) in spec.resource.iter().flat_map(|r| &r.resource_attributes) {
        put(k, string(v));
    }
    let uids = spec.add_k8s_uid_attributes();
    if spec.k8s_metadata() {
        put("k8s.namespace.name", ns.to_owned());
        put("k8s.container.name", format!("{c}.name"));
        put("k8s.pod.name", string(POD_NAME_REFERENCE));
        if uids {
            put("k8s.pod.uid", string(POD_UID_REFERENCE));
        }
        // The node's name when the pod names it already, as the engine writes it.
        put(
            "k8s.node.name",
            or_else(
                "object.spec.?nodeName.orValue(\"\")",
                &string(NODE_NAME_REFERENCE),
            ),
        );
        put("k8s.deployment.name", "variables.dep".into());
        for (kind, var) in [
            ("replicaset", "rs"),
            ("statefulset", "ss"),
            ("daemonset", "ds"),
            ("job", "job"),
        ] {
            put(&format!("k8s.{kind}.name"), format!("variables.{var}"));
            if uids {
                put(&format!("k8s.{kind}.uid"), format!("variables.{var}Uid"));
            }
        }
        put("k8s.cronjob.name", "variables.cron".into());
    }
    let service = spec.service_metadata();
    if service {
        let instance = format!("{ns} + \".{POD_NAME_REFERENCE}.\" + {c}.name");
        put("service.instance.id", instance);
        let mut version = image_version(c);
        if spec.use_labels_for_resource_attributes() {
            let label = format!("variables.lab[?{}].orValue(\"\")", string(APP_VERSION));
            version = or_else(&label, &version);
        }
        put("service.version", version);
    }
    // The pod's annotations come next, for every key but service.name (so the annotations of
    // service.instance.id and service.version win over what is derived, as in the engine).
    for (k, candidates) in known.iter_mut() {
        if k != "service.name" {
            candidates.push(attr_annotation(k));
        }
    }
    if service {
        add(
            &mut known,
            "service.namespace",
            or_else(&attr_annotation("service.namespace"), ns),
        );
    }
    known
}

#[cfg(test)]
mod tests {
    use super::or_else;

    #[test]
    fn a_literal_decides_before_the_api_server_does() {
        assert_eq!(or_else(r#""shop""#, "b"), r#""shop""#);
        assert_eq!(or_else(r#""""#, "variables.dep"), "variables.dep");
        assert_eq!(
            or_else("variables.dep", r#""x""#),
            r#"(variables.dep != "" ? variables.dep : "x")"#
        );
        // A concatenation is not a literal, even when it starts and ends with a quote.
        let joined = r#""a" + c.name + "b""#;
        assert_eq!(
            or_else(joined, "z"),
            format!(r#"({joined} != "" ? {joined} : z)"#)
        );
    }
}
