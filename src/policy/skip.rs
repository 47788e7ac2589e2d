//! Mode `policy` (no webhook): pods that ask for a language no policy injected get the
//! `otel-injector/status` reason and the `otel-injector/injected=false` label from one more
//! MutatingAdmissionPolicy, and a warning at `kubectl` time from a
//! ValidatingAdmissionPolicy in `Warn` mode that reads that status.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::cel::{self, string, strings};
use super::selected::Rules;
use super::vars::{self, Vars};
use crate::agents::Language;
use crate::crd::SpecHash;
use crate::engine::SkipReason;
use crate::keys::{INJECTED_LABEL, STATUS_ANNOTATION};

/// What the rendering knows: every namespace's Instrumentations, and for each
/// (Instrumentation, language) no policy serves, the webhook's own reason when it has one.
#[derive(Default)]
pub struct Known {
    /// Namespace → Instrumentation names.
    pub names: BTreeMap<String, Vec<String>>,
    /// `ns/name/language` → the reason a policy cannot serve it.
    pub reasons: BTreeMap<String, SkipReason>,
    /// Languages the webhook's flags disable.
    pub disabled: Vec<Language>,
    /// `ns/name` → the spec hash of each Instrumentation a policy injects from (a workload
    /// rolled back from it is skipped with `rolled_back`).
    pub hashes: BTreeMap<String, SpecHash>,
    /// `ns/name/language` → the variables for which the webhook leaves a container
    /// uninstrumented, as (name, set with `valueFrom`) (`Template::agent_refuses`).
    pub refused: BTreeMap<String, Vec<(String, bool)>>,
}

/// Adds the variables every entry reads: the namespace's Instrumentations and the reasons
/// (each literal once, however many languages read it).
fn known_variables(v: &mut Vars, known: &Known) {
    let names: Vec<String> = known
        .names
        .iter()
        .map(|(k, v)| format!("{}: {}", string(k), strings(v.iter().map(String::as_str))))
        .collect();
    let reasons: Vec<String> = known
        .reasons
        .iter()
        .map(|(k, r)| format!("{}: {}", string(k), string(r.as_str())))
        .collect();
    v.add("ns", "namespaceObject.metadata.name");
    v.add("instrumentations", format!("{{{}}}", names.join(", ")));
    v.add(
        "nsInstrumentations",
        "variables.ns in variables.instrumentations ? variables.instrumentations[variables.ns] : []",
    );
    v.add("reasons", format!("{{{}}}", reasons.join(", ")));
    let hashes: Vec<String> = known
        .hashes
        .iter()
        .map(|(k, h)| format!("{}: {}", string(k), string(&h.to_string())))
        .collect();
    v.add("hashes", format!("{{{}}}", hashes.join(", ")));
    for (var, from) in [("refusedLiteral", false), ("refusedFrom", true)] {
        let refused: Vec<String> = known
            .refused
            .iter()
            .map(|(k, names)| {
                let names = names.iter().filter(|(_, f)| *f == from);
                format!("{}: {}", string(k), strings(names.map(|(n, _)| n.as_str())))
            })
            .collect();
        v.add(var, format!("{{{}}}", refused.join(", ")));
    }
    vars::rolled_back(v);
}

/// The status entry of a skipped `lang` (as `engine::outcome` writes it).
fn entry(v: &mut Vars, known: &Known, lang: Language) -> String {
    let req = vars::request(lang);
    let ns = "variables.ns";
    let insts = "variables.nsInstrumentations";
    // `ns/name` of a named request (the webhook's `wanted`).
    let named = format!("named{}", req.trim_start_matches("variables.req"));
    v.add(
        &named,
        format!("{req}.contains(\"/\") ? {req} : {ns} + \"/\" + {req}"),
    );
    let named = format!("variables.{named}");
    let unsupported = SkipReason::PolicyUnsupported.as_str();
    let (targets, invalid) = vars::targets(v, lang);
    let variant_refused = vars::variant_refused(v, lang);
    let found = |i: &str| found(lang, i, &targets, &invalid, &variant_refused);
    // A language no policy covers gets the same reading of its request as the others, so the
    // entry names the Instrumentation the webhook would use (a `"true"` request: the
    // namespace's only one, or `ns/*`), never `ns/true`.
    let reason = if known.disabled.contains(&lang) {
        // As the webhook: a disabled language's `"true"` names no Instrumentation (`ns/*`).
        format!(
            "\"{} \" + ({req}.lowerAscii() == \"true\" ? {ns} + \"/*\" : {named})",
            SkipReason::LanguageDisabled.as_str()
        )
    } else {
        format!(
            "{req}.lowerAscii() == \"true\" ? ({insts}.size() == 0 ? \"{none} \" + {ns} + \"/*\" : {insts}.size() > 1 ? \"{several} \" + {ns} + \"/*\" : {only_found}) : ({req}.contains(\"/\") && !{req}.startsWith({ns} + \"/\") ? \"{unsupported} \" + {req} : {req}.substring({req}.lastIndexOf(\"/\") + 1) in {insts} ? {named_found} : \"{not_found} \" + {named})",
            none = SkipReason::NoInstrumentation.as_str(),
            several = SkipReason::MultipleInstrumentations.as_str(),
            not_found = SkipReason::InstrumentationNotFound.as_str(),
            only_found = found(&format!("{ns} + \"/\" + {insts}[0]")),
            named_found = found(&named),
        )
    };
    format!(
        "({req} != \"\" && {req}.lowerAscii() != \"false\" ? [{} + \"=skipped \" + ({reason})] : [])",
        string(lang.as_str())
    )
}

/// The reason of a found Instrumentation `i` (a CEL string expression), as the webhook
/// gives it, followed by `i`: `rolled_back` for a workload rolled back from `lang` with its
/// current spec, the webhook's reason when the policy cannot serve the language for it, a
/// container list it cannot use (`invalid`, of the pod's `targets`), every target refused by
/// the agent, else the policy's.
fn found(lang: Language, i: &str, targets: &str, invalid: &str, variant_refused: &str) -> String {
    let key = format!("{i} + \"/{}\"", lang.as_str());
    let rolled_back = vars::names_rolled_back(lang, &format!("variables.hashes[{i}]"));
    let refused = format!(
        "{variant_refused} || {targets}.size() > 0 && {targets}.all(c, c.?env.orValue([]).exists(e, e.name in (has(e.valueFrom) ? variables.refusedFrom : variables.refusedLiteral)[?{key}].orValue([])))"
    );
    format!(
        "({i} in variables.hashes && {rolled_back} ? \"{}\" : {key} in variables.reasons ? variables.reasons[{key}] : {invalid} ? \"{}\" : {refused} ? \"{}\" : \"{}\") + \" \" + {i}",
        SkipReason::RolledBack.as_str(),
        SkipReason::InvalidContainerNames.as_str(),
        SkipReason::NothingInstrumented.as_str(),
        SkipReason::PolicyUnsupported.as_str(),
    )
}

/// The status entry of `lang` when a selector asks for it and no policy injected it: the
/// first selector's Instrumentation, with the webhook's reason (`cross_namespace_denied` for
/// one the pod's namespace may not use), its targets the selector's.
fn selected_entry(v: &mut Vars, known: &Known, rules: &Rules, lang: Language) -> Option<String> {
    let picked = rules.picked(lang)?;
    let i = vars::index(lang);
    v.add(
        &format!("winner{i}"),
        format!("{picked}.size() > 0 ? {picked}[0] : \"\""),
    );
    let w = format!("variables.winner{i}");
    let reason = if known.disabled.contains(&lang) {
        format!("\"{} \" + {w}", SkipReason::LanguageDisabled.as_str())
    } else {
        let listed = format!("variables.selectorContainers[?{w}].orValue([])");
        let names = vars::selector_names(v, lang, &format!("selectedNames{i}"), &listed);
        let (targets, invalid) = vars::targets_of(v, &format!("selectedTargets{i}"), &names);
        let variant_refused = vars::variant_refused(v, lang);
        let denied = format!(
            "!({w} + \"/{}\" in variables.reasons) && !{w}.startsWith(variables.ns + \"/\") && {w} in variables.unshared",
            lang.as_str()
        );
        format!(
            "{denied} ? \"{} \" + {w} : {}",
            SkipReason::CrossNamespaceDenied.as_str(),
            found(lang, &w, &targets, &invalid, &variant_refused)
        )
    };
    Some(format!(
        "(!variables.keyed && {picked}.size() > 0 ? [{} + \"=skipped \" + ({reason})] : [])",
        string(lang.as_str())
    ))
}

/// The MutatingAdmissionPolicy that records the skip, of keys and of selectors (`rules`).
pub fn status_policy(known: &Known, rules: &Rules) -> (Value, Vars) {
    let mut v = Vars::default();
    vars::injection_keys(&mut v);
    known_variables(&mut v, known);
    if !rules.is_empty() {
        rules.add_variables(&mut v);
        v.add("selectorContainers", rules.containers());
        v.add("unshared", rules.unshared());
    }
    let entries: Vec<String> = Language::ALL
        .iter()
        .flat_map(|&l| {
            let keyed = entry(&mut v, known, l);
            [Some(keyed), selected_entry(&mut v, known, rules, l)]
        })
        .flatten()
        .collect();
    v.add("entries", entries.join(" + "));
    // A reference that is not `ns/name` of valid names is left out, as the webhook does, so
    // the status always reads back.
    let name = "[-a-z0-9.]+";
    v.add(
        "status",
        format!(
            "variables.entries.map(e, e.split(\" \").size() == 3 && !e.split(\" \")[2].matches(\"^{name}/({name}|\\\\*)$\") ? e.split(\" \")[0] + \" \" + e.split(\" \")[1] : e).join(\"; \")"
        ),
    );
    let status = cel::pointer_segment(STATUS_ANNOTATION);
    let label = cel::pointer_segment(INJECTED_LABEL);
    let expression = format!(
        "variables.entries.size() == 0 ? [] : (has(object.metadata.annotations) ? [JSONPatch{{op: \"add\", path: \"/metadata/annotations/{status}\", value: variables.status}}] : [JSONPatch{{op: \"add\", path: \"/metadata/annotations\", value: {{{}: variables.status}}}}]) + (has(object.metadata.labels) ? [JSONPatch{{op: \"add\", path: \"/metadata/labels/{label}\", value: \"false\"}}] : [JSONPatch{{op: \"add\", path: \"/metadata/labels\", value: {{{}: \"false\"}}}}])",
        string(STATUS_ANNOTATION),
        string(INJECTED_LABEL),
    );
    let mutation = json!({"patchType": "JSONPatch", "jsonPatch": {"expression": expression}});
    (mutation, v)
}

/// The validation (in `Warn` mode) that tells `kubectl` why a pod was not injected.
pub fn warning() -> Value {
    let key = string(STATUS_ANNOTATION);
    json!([{
        "expression": format!(
            "!has(object.metadata.annotations) || !({key} in object.metadata.annotations) || !object.metadata.annotations[{key}].contains(\"=skipped \")"
        ),
        "messageExpression": format!(
            "\"otel-injector policy: not injected: \" + object.metadata.annotations[{key}]"
        ),
    }])
}

/// The validations (in `Warn` mode) that tell `kubectl` two selectors select a pod for one
/// language, in the webhook's words; `None` when no two selectors share a language.
pub fn selector_warnings(rules: &Rules) -> Option<(Value, Vars)> {
    let shared: Vec<Language> = rules
        .languages()
        .into_iter()
        .filter(|l| {
            rules
                .iter()
                .filter(|r| r.selector.languages.contains(l))
                .count()
                > 1
        })
        .collect();
    if shared.is_empty() {
        return None;
    }
    let mut v = Vars::default();
    vars::injection_keys(&mut v);
    rules.add_variables(&mut v);
    let validations: Vec<Value> = shared
        .into_iter()
        .map(|lang| {
            let p = rules.picked(lang).expect("a language some selector asks for");
            let q = |i: usize| format!("\"\\\"\" + {p}[{i}] + \"\\\"\"");
            json!({
                "expression": format!("variables.keyed || {p}.size() < 2"),
                "messageExpression": format!(
                    "\"inject-{lang}: the selectors of \" + {} + \" and \" + {} + \" both select this pod; using \" + {}",
                    q(0), q(1), q(0)
                ),
            })
        })
        .collect();
    Some((Value::Array(validations), v))
}

/// A ValidatingAdmissionPolicy `<prefix>.<rest>` of pod creates that tells `kubectl` what
/// its `validations` find (in `Warn` mode: nothing is refused), and its binding in every
/// namespace the webhook serves.
pub(super) fn warning_policy(
    options: &super::PolicyOptions,
    rest: &str,
    validations: Value,
    variables: Option<&Vars>,
) -> [Value; 2] {
    let name = &options.name(rest);
    let mut spec = json!({
        "matchConstraints": super::pod_creates(),
        "failurePolicy": "Ignore",
        "validations": validations,
    });
    if let Some(v) = variables {
        spec["variables"] = v.used_by(&spec);
    }
    [
        json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": super::metadata(name),
            "spec": spec,
        }),
        json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": super::metadata(name),
            "spec": {"policyName": name, "validationActions": ["Warn"], "matchResources": super::opted_in(options, None)},
        }),
    ]
}
