//! Mode `policy` (no webhook): pods that ask for a language no policy injected get the
//! `otel-injector/status` reason and the `otel-injector/injected=false` label from one more
//! MutatingAdmissionPolicy, and a warning at `kubectl` time from a
//! ValidatingAdmissionPolicy in `Warn` mode that reads that status.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::cel::{self, string, strings};
use super::vars::{self, Vars};
use crate::agents::Language;
use crate::engine::SkipReason;
use crate::keys::{INJECTED_LABEL, STATUS_ANNOTATION};

/// What the rendering knows of one namespace: its Instrumentations, and for each
/// (Instrumentation, language) no policy serves, the webhook's own reason when it has one.
#[derive(Default)]
pub struct Known {
    /// Namespace → Instrumentation names.
    pub names: BTreeMap<String, Vec<String>>,
    /// `ns/name/language` → the reason a policy cannot serve it.
    pub reasons: BTreeMap<String, SkipReason>,
    /// Languages the policies inject (the others are always skipped).
    pub languages: Vec<Language>,
    /// Languages the webhook's flags disable.
    pub disabled: Vec<Language>,
}

/// A CEL map literal of string lists.
fn map_of_lists(m: &BTreeMap<String, Vec<String>>) -> String {
    let entries: Vec<String> = m
        .iter()
        .map(|(k, v)| format!("{}: {}", string(k), strings(v.iter().map(String::as_str))))
        .collect();
    format!("{{{}}}", entries.join(", "))
}

/// The status entry of a skipped `lang` (as `engine::outcome` writes it).
fn entry(known: &Known, lang: Language) -> String {
    let req = vars::request(lang);
    let ns = "namespaceObject.metadata.name";
    let names = map_of_lists(&known.names);
    let count = format!("({ns} in {names} ? size({names}[{ns}]) : 0)");
    let only = format!("{ns} + \"/\" + {names}[{ns}][0]");
    let named = format!("({req}.contains(\"/\") ? {req} : {ns} + \"/\" + {req})");
    let reasons: Vec<String> = known
        .reasons
        .iter()
        .filter(|(k, _)| k.ends_with(&format!("/{}", lang.as_str())))
        .map(|(k, r)| {
            let inst = k.rsplit_once('/').map_or("", |(i, _)| i);
            format!("{}: {}", string(inst), string(r.as_str()))
        })
        .collect();
    let reasons = format!("{{{}}}", reasons.join(", "));
    let unsupported = SkipReason::PolicyUnsupported.as_str();
    // The reason of a found Instrumentation `i`: the webhook's when the policy cannot serve
    // the language for it, else the policy's.
    let found = |i: &str| {
        format!(
            "({i} in {reasons} ? {reasons}[{i}] : {}) + \" \" + {i}",
            string(unsupported)
        )
    };
    let reason = if known.disabled.contains(&lang) {
        format!("\"{} \" + {named}", SkipReason::LanguageDisabled.as_str())
    } else if !known.languages.contains(&lang) {
        format!("\"{unsupported} \" + {named}")
    } else {
        let list = format!("({ns} in {names} ? {names}[{ns}] : [])");
        format!(
            "{req}.lowerAscii() == \"true\" ? ({count} == 0 ? \"{none} \" + {ns} + \"/*\" : {count} > 1 ? \"{several} \" + {ns} + \"/*\" : {only_found}) : ({req}.contains(\"/\") && !{req}.startsWith({ns} + \"/\") ? \"{unsupported} \" + {req} : {req}.substring({req}.lastIndexOf(\"/\") + 1) in {list} ? {named_found} : \"{not_found} \" + {named})",
            none = SkipReason::NoInstrumentation.as_str(),
            several = SkipReason::MultipleInstrumentations.as_str(),
            not_found = SkipReason::InstrumentationNotFound.as_str(),
            only_found = found(&only),
            named_found = found(&named),
        )
    };
    format!(
        "({req} != \"\" && {req}.lowerAscii() != \"false\" ? [{} + \"=skipped \" + ({reason})] : [])",
        string(lang.as_str())
    )
}

/// The MutatingAdmissionPolicy that records the skip.
pub fn status_policy(known: &Known) -> (Value, Vars) {
    let mut v = Vars::default();
    vars::injection_keys(&mut v);
    let entries: Vec<String> = Language::ALL.iter().map(|&l| entry(known, l)).collect();
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
