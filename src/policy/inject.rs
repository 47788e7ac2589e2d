//! The MutatingAdmissionPolicy of one Instrumentation: for each covered language, its
//! [`Template`] replayed in CEL on the pods that ask for it, with the pod-dependent parts
//! (targets, the container's own variables, the service name, the resource attributes)
//! computed as the engine computes them (`pod::select`, `pod::info`, `agents::sdk_env`).
//! Where the pod is something the template does not cover, the mutation is empty: the pod
//! is left to the webhook (mode `both`) or marked skipped ([`super::skip`]).

mod attributes;
mod container;
mod init;

use attributes::{annotation_pairs, attributes_variable, candidates, pod_service_name};
use container::{container_covered, container_patches};
use init::{clone_covered, init_patches};
use serde_json::{Value, json};

use crate::agents::Language;
use crate::crd::SpecHash;
use crate::engine::outcome::SelectorMark;
use crate::engine::{NamingRule, NamingValue};
use crate::keys::{
    INJECT_PREFIX, INJECTED_ANNOTATION, MIRROR_ANNOTATION, POD_TEMPLATE_HASH,
    SELECTED_BY_ANNOTATION,
};

use super::cel::{self, string, strings};
use super::template::{self, Template};
use super::vars::{self, Vars};

/// The CEL of one target container (inside `targets.map(i, ...)`).
const C: &str = "object.spec.containers[i]";

/// The pod-level variables every injection policy shares: the injection keys, the languages
/// asked for, the owners.
pub fn pod_variables(v: &mut Vars) {
    vars::injection_keys(v);
    vars::rolled_back(v);
    let refs = "variables.refs";
    v.add("refs", "object.metadata.?ownerReferences.orValue([])");
    v.add(
        "hash",
        format!(
            "variables.lab[?{}].orValue(\"\")",
            string(POD_TEMPLATE_HASH)
        ),
    );
    let last = |list: &str, field: &str| {
        format!("({list}.size() == 0 ? \"\" : {list}[{list}.size() - 1].{field})")
    };
    for (var, kind) in [
        ("rsRefs", "replicaset"),
        ("ssRefs", "statefulset"),
        ("dsRefs", "daemonset"),
        ("jobRefs", "job"),
    ] {
        v.add(
            var,
            format!("{refs}.filter(r, r.kind.lowerAscii() == {})", string(kind)),
        );
    }
    for (name, list) in [
        ("rs", "variables.rsRefs"),
        ("ss", "variables.ssRefs"),
        ("ds", "variables.dsRefs"),
        ("job", "variables.jobRefs"),
    ] {
        v.add(name, last(list, "name"));
        v.add(&format!("{name}Uid"), last(list, "uid"));
    }
    // The last of the references that set the deployment (a ReplicaSet named
    // <deployment>-<pod-template-hash>, or a Deployment) and the cron job (a Job named
    // <cronjob>-<at least 8 digits>, or a CronJob), as `Owners::of` reads them.
    v.add(
        "depRefs",
        format!(
            "{refs}.filter(r, r.kind.lowerAscii() == \"deployment\" || (r.kind.lowerAscii() == \"replicaset\" && variables.hash != \"\"))"
        ),
    );
    let d = "variables.depRefs[variables.depRefs.size() - 1]";
    v.add(
        "dep",
        format!(
            "variables.depRefs.size() == 0 ? \"\" : {d}.kind.lowerAscii() == \"deployment\" ? {d}.name : ({d}.name.endsWith(\"-\" + variables.hash) && size({d}.name) > size(variables.hash) + 1 ? {d}.name.substring(0, size({d}.name) - size(variables.hash) - 1) : \"\")"
        ),
    );
    v.add(
        "cronRefs",
        format!("{refs}.filter(r, r.kind.lowerAscii() in [\"job\", \"cronjob\"])"),
    );
    let j = "variables.cronRefs[variables.cronRefs.size() - 1]";
    v.add(
        "cron",
        format!(
            "variables.cronRefs.size() == 0 ? \"\" : {j}.kind.lowerAscii() == \"cronjob\" ? {j}.name : ({j}.name.lastIndexOf(\"-\") > 0 && {j}.name.substring({j}.name.lastIndexOf(\"-\") + 1).matches(\"^[0-9]{{8,}}$\") ? {j}.name.substring(0, {j}.name.lastIndexOf(\"-\")) : \"\")"
        ),
    );
    v.add("podName", "object.metadata.?name.orValue(\"\")".to_owned());
    // Each container's own variable names, read once for all targets.
    v.add(
        "envNames",
        "object.spec.containers.map(c, c.?env.orValue([]).map(e, e.name))",
    );
}

/// `(has(field) ? [] : [the empty field added]) + adds`: a list or map the adds go into,
/// created first when the object has none.
fn create_then(field: &str, path: &str, empty: &str, adds: &[String]) -> String {
    let adds = match adds {
        [] => "[]".to_owned(),
        _ => adds.join(" + "),
    };
    format!(
        "(has({field}) ? [] : [JSONPatch{{op: \"add\", path: {path}, value: {empty}}}]) + {adds}"
    )
}

/// Adds `entries` to the map at `/metadata/<field>`, creating it when absent.
fn metadata_patches(field: &str, entries: &std::collections::BTreeMap<String, String>) -> String {
    let adds: Vec<String> = entries
        .iter()
        .map(|(k, v)| {
            format!(
                "[JSONPatch{{op: \"add\", path: {}, value: {}}}]",
                string(&format!("/metadata/{field}/{}", cel::pointer_segment(k))),
                string(v)
            )
        })
        .collect();
    if adds.is_empty() {
        return "[]".into();
    }
    create_then(
        &format!("object.metadata.{field}"),
        &string(&format!("/metadata/{field}")),
        "{}",
        &adds,
    )
}

/// Which requests name the policy's Instrumentation besides its name in its own namespace.
#[derive(Clone, Copy, Debug)]
pub struct Reach {
    /// `"true"` in its namespace: it is the namespace's only Instrumentation.
    pub only_in_namespace: bool,
    /// `ns/name` from any namespace (`super::shared`).
    pub shared: bool,
    /// The binding spans every namespace: shared, or its selector has a `namespaceSelector`.
    pub everywhere: bool,
}

/// The selector path of one language of the policy's Instrumentation.
pub struct BySelector {
    /// The condition that its selector asks for the language alone ([`super::selected`]).
    pub asks: String,
    /// The containers its selector lists.
    pub containers: Vec<String>,
}

/// The patches of one template and when they apply.
pub struct Branch {
    /// A CEL condition.
    pub when: String,
    /// A CEL list of `JSONPatch`.
    pub patches: String,
}

/// One mutation of the branches of a language's agent variants, whose conditions exclude
/// each other: the first that holds, else nothing. (The API server spends about 0.4 ms on
/// each mutation of every pod the policy sees, even one that patches nothing.)
pub fn mutation_of<'b>(branches: impl DoubleEndedIterator<Item = &'b Branch>) -> Value {
    let expression = branches.rev().fold("[]".to_owned(), |rest, b| {
        format!("{} ? {} : {rest}", b.when, b.patches)
    });
    json!({"patchType": "JSONPatch", "jsonPatch": {"expression": expression}})
}

/// The branch of template `t` (number `n` of the policy): none unless the pod asks
/// for this Instrumentation's language, is covered, and its workload was not rolled back
/// from this language with the spec `hash` (the safety net's marker: the webhook then skips
/// the language with reason `rolled_back`, or in mode `policy` the status policy records it).
pub fn branch(
    v: &mut Vars,
    n: usize,
    t: &Template,
    reach: Reach,
    hash: SpecHash,
    by_selector: Option<&BySelector>,
) -> Branch {
    let inst = &t.instrumentation;
    let ns = inst.metadata.namespace.as_deref().unwrap_or("");
    let name = inst.metadata.name.as_deref().unwrap_or("");
    let lang = t.language;
    let request = vars::request(lang);
    // The values that name it, as the engine resolves them ([`NamingRule`]): at home, and,
    // bound in every namespace, elsewhere.
    let rule = NamingRule {
        namespace: ns,
        name,
        only_in_namespace: reach.only_in_namespace,
        shared: reach.shared,
    };
    let home = naming_values(&request, &rule.values(true));
    let named = if reach.everywhere {
        let away = naming_values(&request, &rule.values(false));
        format!(
            "(namespaceObject.metadata.name == {} ? {home} : {away})",
            string(ns)
        )
    } else {
        home
    };
    let mut asks = format!("{} && {named}", vars::wants(v, lang));
    if let Some(s) = by_selector {
        asks = format!("(({asks}) || ({}))", s.asks);
    }
    asks.push_str(&format!(
        " && !{}",
        vars::names_rolled_back(lang, &string(&hash.to_string()))
    ));
    asks.push_str(&format!(
        " && {}",
        vars::variant_condition(v, lang, t.variant)
    ));
    v.add("service", pod_service_name(&inst.spec));
    // The same for every template of the Instrumentation: added once.
    v.add(
        "annPairs",
        annotation_pairs(
            &candidates(inst, C)
                .into_iter()
                .map(|(k, _)| k)
                .collect::<Vec<_>>(),
        ),
    );
    v.add("attrs", attributes_variable(inst));
    let mut names = vars::container_names(v, lang);
    if let Some(s) = by_selector {
        let listed = strings(s.containers.iter().map(String::as_str));
        let selected = vars::selector_names(v, lang, &format!("selectedNames{n}"), &listed);
        v.add(
            &format!("names{n}Used"),
            format!("variables.keyed ? {names} : {selected}"),
        );
        names = format!("variables.names{n}Used");
    }
    v.add(
        &format!("targets{n}"),
        format!(
            "{names}.size() == 0 ? [0] : {names}.map(n, lists.range(object.spec.containers.size()).filter(i, object.spec.containers[i].name == n)[0])"
        ),
    );
    if reach.everywhere && t.init.clone_of_target.is_some() {
        // The web servers write the pod's namespace into their configuration, which the
        // template holds as its own.
        asks.push_str(&format!(
            " && namespaceObject.metadata.name == {}",
            string(ns)
        ));
    }
    let volumes = strings(t.volumes.iter().filter_map(|v| v["name"].as_str()));
    let init_patches = init_patches(v, t, n);
    v.add(
        &format!("covered{n}"),
        format!(
            "{asks} && object.spec.containers.size() > 0 && object.metadata.?uid.orValue(\"\") == \"\" && {names}.distinct().size() == {names}.size() && {names}.all(n, n != \"\" && object.spec.containers.exists(c, c.name == n)) && !object.spec.?volumes.orValue([]).exists(v, v.name in {volumes}) && variables.targets{n}.all(i, {}) && {}",
            container_covered(t),
            clone_covered(t, n),
        ),
    );
    let vols: Vec<String> = t
        .volumes
        .iter()
        .map(|vol| {
            cel::object(vol, "Object.spec.volumes", template::CONTAINER, "\"\"")
                .expect("the engine writes volumes CEL can express")
        })
        .collect();
    let adds: Vec<String> = vols
        .iter()
        .map(|v| format!("[JSONPatch{{op: \"add\", path: \"/spec/volumes/-\", value: {v}}}]"))
        .collect();
    let volume_patches = create_then("object.spec.volumes", "\"/spec/volumes\"", "[]", &adds);
    // A selector's pod says so, as the webhook's (the map exists once the outcome is in).
    let selected_by = match by_selector {
        Some(_) => format!(
            " + (variables.keyed ? [] : [JSONPatch{{op: \"add\", path: {}, value: {}}}])",
            string(&format!(
                "/metadata/annotations/{}",
                cel::pointer_segment(SELECTED_BY_ANNOTATION)
            )),
            string(&{
                let mut by = SelectorMark::default();
                by.push(lang, &format!("{ns}/{name}"));
                by.to_string()
            })
        ),
        None => String::new(),
    };
    let patches = format!(
        "({volume_patches} + {} + variables.targets{n}.map(i, {}).flatten() + {}{selected_by} + {})",
        init_patches,
        container_patches(t),
        metadata_patches("annotations", &t.annotations),
        metadata_patches("labels", &t.labels),
    );
    Branch {
        when: format!("variables.covered{n}"),
        patches,
    }
}

/// `request` is one of `values`, in CEL (`false` for none).
fn naming_values(request: &str, values: &[NamingValue]) -> String {
    if values.is_empty() {
        return "false".into();
    }
    let each: Vec<String> = values
        .iter()
        .map(|v| match v {
            NamingValue::Exactly(s) => format!("{request} == {}", string(s)),
            NamingValue::True => format!("{request}.lowerAscii() == \"true\""),
        })
        .collect();
    format!("({})", each.join(" || "))
}

/// Which pods reach a policy's mutations, beyond those the webhook leaves alone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reaching {
    /// Every pod: whether it asks is the mutations' to decide.
    Every,
    /// The pods with an `inject-*` key of their own (for `lang`; for any language: `None`),
    /// and every pod of `namespaces`, those whose own keys ask (`request.namespace`, which
    /// match conditions see: they cannot read the namespace's keys).
    Keyed {
        lang: Option<Language>,
        namespaces: Vec<String>,
    },
}

/// The match conditions of a policy: the pod is not one the webhook leaves alone (mirror pods,
/// pods injected before), and it is one of those `reaching` names. Whether it asks is
/// otherwise the mutation's to decide: only the renderer, which reads the namespaces
/// (`PolicyOptions::namespaces_read`), can tell which namespaces ask.
pub fn match_conditions(reaching: &Reaching) -> Value {
    let not_injected = format!(
        "!(has(object.metadata.annotations) && ({} in object.metadata.annotations || {} in object.metadata.annotations)) && !object.spec.?initContainers.orValue([]).exists(c, c.name in {}) && !object.spec.containers.exists(c, c.name == {})",
        string(MIRROR_ANNOTATION),
        string(INJECTED_ANNOTATION),
        strings(crate::engine::OPERATOR_INIT_CONTAINERS),
        string(crate::engine::OPERATOR_SIDECAR),
    );
    let Reaching::Keyed { lang, namespaces } = reaching else {
        return json!([{"name": NOT_INJECTED_BEFORE, "expression": not_injected}]);
    };
    let on = |map: &str, test: &str| {
        format!(
            "(has(object.metadata.{map}) && {})",
            test.replace("MAP", &format!("object.metadata.{map}"))
        )
    };
    let (name, test) = match lang {
        Some(lang) => (
            format!("asks-for-{lang}"),
            format!("{} in MAP", string(lang.inject_annotation())),
        ),
        None => (
            "asks-by-its-own-keys-or-its-namespaces".to_owned(),
            format!("MAP.exists(k, k.startsWith({}))", string(INJECT_PREFIX)),
        ),
    };
    let mut asks = format!("{} || {}", on("annotations", &test), on("labels", &test));
    if !namespaces.is_empty() {
        asks.push_str(&format!(
            " || request.namespace in {}",
            strings(namespaces.iter().map(String::as_str))
        ));
    }
    // One condition, the key first: the API server evaluates every condition of a policy
    // (it does not stop at the first that is false), so as two conditions the pods that do
    // not ask would pay for the pod-wide scan of `not-injected-before` too.
    json!([{
        "name": format!("{name}-and-{NOT_INJECTED_BEFORE}"),
        "expression": format!("({asks}) && ({not_injected})"),
    }])
}

/// The name of the condition that leaves out the pods the webhook leaves alone.
pub const NOT_INJECTED_BEFORE: &str = "not-injected-before";
