//! The CEL variables of the policies and the injection keys as the engine reads them
//! (`pod::select`): a label wins over an annotation of the same key on each object, then the
//! namespace-vs-pod rule of `select::effective`, then `Request::parse`'s trimming.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::cel::{string, strings};
use crate::agents::Language;
use crate::keys::{CONTAINER_NAMES, DOTNET_RUNTIME, PYTHON_PLATFORM, ROLLED_BACK_ANNOTATION};

/// A policy's `variables`, in order (a variable may use the ones before it).
#[derive(Default)]
pub struct Vars(Vec<(String, String)>);

impl Vars {
    /// Adds a variable unless one of that name exists (shared ones are added once).
    pub fn add(&mut self, name: &str, expression: impl Into<String>) {
        if !self.0.iter().any(|(n, _)| n == name) {
            self.0.push((name.to_owned(), expression.into()));
        }
    }

    /// The variables that `spec` (a policy's, without them) reads, directly or through other
    /// variables, in order. The API server builds an entry for every declared variable on
    /// each evaluation, the match conditions' of every policy a pod passes included, and
    /// compiles each when the policy is written: a variable that nothing reads costs both.
    pub fn used_by(&self, spec: &Value) -> Value {
        let text = spec.to_string();
        let mut wanted: BTreeSet<&str> = BTreeSet::new();
        let mut queue: Vec<&str> = vec![&text];
        while let Some(text) = queue.pop() {
            for name in references(text) {
                if let Some((n, expression)) = self.0.iter().find(|(n, _)| n == name)
                    && wanted.insert(n)
                {
                    queue.push(expression);
                }
            }
        }
        Value::Array(
            self.0
                .iter()
                .filter(|(name, _)| wanted.contains(name.as_str()))
                .map(|(name, expression)| json!({"name": name, "expression": expression}))
                .collect(),
        )
    }
}

/// The names `text` reads as `variables.<name>`.
pub(super) fn references(text: &str) -> impl Iterator<Item = &str> {
    text.match_indices("variables.")
        .filter_map(move |(at, prefix)| {
            let rest = &text[at + prefix.len()..];
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            (end > 0).then(|| &rest[..end])
        })
}

/// The language's place in the registry, which numbers its variables.
pub(super) fn index(lang: Language) -> usize {
    Language::ALL
        .iter()
        .position(|l| *l == lang)
        .expect("a registered language")
}

/// `key` on an object whose labels and annotations are the variables `lab` and `ann`.
fn lookup(lab: &str, ann: &str, key: &str) -> String {
    lookup_of(lab, ann, &string(key))
}

/// [`lookup`] of the key the CEL string expression `k` holds.
fn lookup_of(lab: &str, ann: &str, k: &str) -> String {
    format!(
        "({k} in variables.{lab} ? variables.{lab}[{k}] : variables.{ann}[?{k}].orValue(\"\")).trim()"
    )
}

/// The effective value of a key whose trimmed values on the pod and on its namespace are the
/// CEL string expressions `p` and `n` (`select::effective`).
fn effective_of(p: &str, n: &str) -> String {
    format!(
        "{n} == \"\" ? {p} : ({p} == \"\" ? {n} : ({p}.lowerAscii() != \"true\" ? {p} : ({n}.lowerAscii() == \"false\" ? {p} : {n})))"
    )
}

/// Adds `{var}` = the effective, trimmed value of `key` (`select::effective`).
fn effective(v: &mut Vars, var: &str, key: &str) {
    v.add(&format!("{var}Pod"), lookup("lab", "ann", key));
    v.add(&format!("{var}Ns"), lookup("nsLab", "nsAnn", key));
    let (p, n) = (format!("variables.{var}Pod"), format!("variables.{var}Ns"));
    v.add(var, effective_of(&p, &n));
}

/// Every language's request key read in one comprehension: a CEL list of `[language, the
/// pod's trimmed value, the namespace's]`, in the registry's order.
fn request_values() -> String {
    let pairs: Vec<String> = Language::ALL
        .iter()
        .map(|l| {
            format!(
                "[{}, {}]",
                string(l.as_str()),
                string(l.inject_annotation())
            )
        })
        .collect();
    format!(
        "[{}].map(p, [p[0], {}, {}])",
        pairs.join(", "),
        lookup_of("lab", "ann", "p[1]"),
        lookup_of("nsLab", "nsAnn", "p[1]")
    )
}

/// The maps, each language's request, and `want`: the one language asked for (`""` when none
/// or several are).
///
/// `requested` reads every language's key in one comprehension rather than through the
/// languages' own request variables: a policy then declares the request variables of the
/// languages it names alone, and the API server builds an entry for each declared variable
/// on every evaluation (docs/performance.md). It is read only when another language's key
/// is set ([`wants`]).
pub fn injection_keys(v: &mut Vars) {
    v.add("ann", "object.metadata.?annotations.orValue({})");
    v.add("lab", "object.metadata.?labels.orValue({})");
    v.add("nsAnn", "namespaceObject.metadata.?annotations.orValue({})");
    v.add("nsLab", "namespaceObject.metadata.?labels.orValue({})");
    for &lang in Language::ALL {
        effective(v, &format!("req{}", index(lang)), lang.inject_annotation());
    }
    v.add(
        "requested",
        format!(
            "{}.filter(q, {}).map(q, q[0])",
            request_values(),
            asking(&format!("({})", effective_of("q[1]", "q[2]")))
        ),
    );
    v.add(
        "want",
        "variables.requested.size() == 1 ? variables.requested[0] : \"\"",
    );
}

/// Adds and returns `wants{i}`: whether `lang` is the one language asked for, as
/// `variables.want == lang` says, read first the short way: when no other language's key is
/// on the pod or its namespace (what nearly every pod is), `lang`'s own request decides
/// alone, and the other languages' requests are never evaluated.
pub fn wants(v: &mut Vars, lang: Language) -> String {
    let var = format!("wants{}", index(lang));
    let others = strings(
        Language::ALL
            .iter()
            .filter(|l| **l != lang)
            .map(|l| l.inject_annotation()),
    );
    v.add(
        &var,
        format!(
            "{others}.all(k, !(k in variables.ann) && !(k in variables.lab) && !(k in variables.nsAnn) && !(k in variables.nsLab)) ? ({}) : variables.want == {}",
            asking(&request(lang)),
            string(lang.as_str())
        ),
    );
    format!("variables.{var}")
}

/// Whether the effective request `req` asks: set, and not `"false"` (`Request::parse`).
fn asking(req: &str) -> String {
    format!("{req} != \"\" && {req}.lowerAscii() != \"false\"")
}

/// The effective request of `lang` (a variable of [`injection_keys`]).
pub fn request(lang: Language) -> String {
    format!("variables.req{}", index(lang))
}

/// Whether the pod or its namespace sets any language's request key to a non-empty value
/// (an effective request is empty only when both are): one comprehension, as `requested`.
pub fn any_request() -> String {
    format!(
        "{}.exists(q, q[1] != \"\" || q[2] != \"\")",
        request_values()
    )
}

/// A container list variable split as `select::split_names` splits it.
fn split(var: &str) -> String {
    format!(
        "(variables.{var} == \"\" ? [\"\"].filter(s, false) : variables.{var}.split(\",\").map(s, s.trim()))"
    )
}

/// Adds the container list of `lang` (the common list, then the language's own, as
/// `select::split_names` splits them) and returns its variable.
pub fn container_names(v: &mut Vars, lang: Language) -> String {
    effective(v, "cn", CONTAINER_NAMES);
    let own = format!("cn{}", index(lang));
    effective(v, &own, lang.container_names_annotation());
    let var = format!("names{}", index(lang));
    v.add(&var, format!("{} + {}", split("cn"), split(&own)));
    format!("variables.{var}")
}

/// Adds the container list of `lang` when a selector asks for it (the engine's
/// `Targets`): the common list, then the language's own key when the pod or its namespace
/// sets it, else `listed` (the selector's `containers`, a CEL list); `var` names it.
pub fn selector_names(v: &mut Vars, lang: Language, var: &str, listed: &str) -> String {
    container_names(v, lang);
    let i = index(lang);
    let key = string(lang.container_names_annotation());
    // `select::effective`: the namespace's value when it has one, else the pod's, if set.
    let own_set =
        format!("variables.cn{i}Ns != \"\" || {key} in variables.lab || {key} in variables.ann");
    v.add(
        var,
        format!(
            "{} + ({own_set} ? {} : {listed})",
            split("cn"),
            split(&format!("cn{i}"))
        ),
    );
    format!("variables.{var}")
}

/// Adds the containers the webhook targets for `lang` (`select::resolve_targets`: the named
/// init and app containers, or the first app container) and returns the variable and the
/// condition that the list cannot be used (the webhook's `invalid_container_names`).
pub fn targets(v: &mut Vars, lang: Language) -> (String, String) {
    let names = container_names(v, lang);
    targets_of(v, &format!("targets{}", index(lang)), &names)
}

/// [`targets`] of the container list `names`, in variable `var`.
pub fn targets_of(v: &mut Vars, var: &str, names: &str) -> (String, String) {
    let inits = "object.spec.?initContainers.orValue([])";
    v.add(
        var,
        format!(
            "{names}.size() == 0 ? (object.spec.containers.size() > 0 ? [object.spec.containers[0]] : []) : {inits}.filter(c, c.name in {names}) + object.spec.containers.filter(c, c.name in {names})"
        ),
    );
    let invalid = format!(
        "{names}.size() > 0 && ({names}.exists(n, n == \"\") || {names}.distinct().size() != {names}.size() || !{names}.all(n, object.spec.containers.exists(c, c.name == n) || {inits}.exists(c, c.name == n)))"
    );
    (format!("variables.{var}"), invalid)
}

/// Adds `rolledBack`: the entries of the pod's rolled-back marker
/// (`otel-injector/rolled-back`, [`crate::engine::outcome::RolledBack`]), none without one.
pub fn rolled_back(v: &mut Vars) {
    v.add(
        "rolledBack",
        format!(
            "variables.ann[?{}].orValue(\"\").split(\",\")",
            string(ROLLED_BACK_ANNOTATION)
        ),
    );
}

/// Whether the marker of [`rolled_back`] names `lang` with the spec hash `hash` (a CEL string
/// expression), read as `RolledBack::parse` reads it: `<language>=<hash>`, spaces around
/// either side, the hash in either case.
pub fn names_rolled_back(lang: Language, hash: &str) -> String {
    format!(
        "variables.rolledBack.exists(e, e.split(\"=\").size() == 2 && e.split(\"=\")[0].trim() == {} && e.split(\"=\")[1].trim().lowerAscii() == {hash})",
        string(lang.as_str())
    )
}

/// Per language, the key its agent reads to choose a variant of itself (Python's platform,
/// .NET's runtime) and the values of each variant, as the agent reads them (untrimmed); the
/// first variant is what a pod without the key gets. A policy injects each variant with the
/// engine's own injection for it (a patch each) and leaves a pod with any other value
/// (one the agent refuses: the webhook's `nothing_instrumented`) alone.
pub const VARIANTS: [(Language, &str, &[&[&str]]); 2] = [
    (
        Language::Python,
        PYTHON_PLATFORM,
        &[&["", "glibc"], &["musl"]],
    ),
    (
        Language::DotNet,
        DOTNET_RUNTIME,
        &[&["", "linux-x64"], &["linux-musl-x64"]],
    ),
];

/// One variant of a language's agent: its key and the values that choose it.
pub type Variant = (&'static str, &'static [&'static str]);

/// The variants of `lang` ([`VARIANTS`]); one `None` for a language without.
pub fn variants(lang: Language) -> Vec<Option<Variant>> {
    match VARIANTS.iter().find(|(l, ..)| *l == lang) {
        Some((_, key, groups)) => groups.iter().map(|values| Some((*key, *values))).collect(),
        None => vec![None],
    }
}

/// Adds the effective value of `lang`'s variant key (the pod's or the namespace's, as
/// `select::effective` chooses, untrimmed) and returns its variable; `None` for a language
/// without variants.
fn variant_value(v: &mut Vars, lang: Language) -> Option<String> {
    let (_, key, _) = VARIANTS.iter().find(|(l, ..)| *l == lang)?;
    let k = string(key);
    let raw = |lab: &str, ann: &str| {
        format!(
            "({k} in variables.{lab} ? variables.{lab}[{k}] : variables.{ann}[?{k}].orValue(\"\"))"
        )
    };
    let var = format!("variant{}", index(lang));
    v.add(&format!("{var}Pod"), raw("lab", "ann"));
    v.add(&format!("{var}Ns"), raw("nsLab", "nsAnn"));
    let (p, n) = (format!("variables.{var}Pod"), format!("variables.{var}Ns"));
    v.add(
        &var,
        format!(
            "{n}.trim() == \"\" ? {p} : ({p}.trim() == \"\" ? {n} : ({p}.trim().lowerAscii() != \"true\" ? {p} : ({n}.trim().lowerAscii() == \"false\" ? {p} : {n})))"
        ),
    );
    Some(format!("variables.{var}"))
}

/// The condition that the pod gets `variant` of `lang`'s agent (always, for `None`).
pub fn variant_condition(v: &mut Vars, lang: Language, variant: Option<Variant>) -> String {
    match (variant_value(v, lang), variant) {
        (Some(value), Some((_, values))) => {
            format!("{value} in {}", strings(values.iter().copied()))
        }
        _ => "true".into(),
    }
}

/// The condition that the agent of `lang` refuses the pod's variant value (none of
/// [`VARIANTS`]' values: the webhook instruments no container); `false` for a language
/// without variants.
pub fn variant_refused(v: &mut Vars, lang: Language) -> String {
    let Some((_, _, groups)) = VARIANTS.iter().find(|(l, ..)| *l == lang) else {
        return "false".into();
    };
    let value = variant_value(v, lang).expect("a language with variants");
    let all = groups.iter().flat_map(|g| g.iter().copied());
    format!("!({value} in {})", strings(all))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only what the uses read, directly or through another variable, in declared order; a
    /// name that begins another's (`req0` of `req0Pod`) is its own reference.
    #[test]
    fn a_policy_declares_only_the_variables_it_reads() {
        let mut v = Vars::default();
        v.add("req0Pod", "object.metadata.name");
        v.add("req0", "variables.req0Pod + \"!\"");
        v.add("unread", "variables.req0");
        v.add("other", "1");
        v.add("cn", "variables.other + 1");
        let spec = json!({"matchConditions": [{"expression": "variables.req0 == \"\""}],
            "mutations": [{"expression": "variables.cn > 0 ? [] : []"}]});
        assert_eq!(
            v.used_by(&spec),
            json!([
                {"name": "req0Pod", "expression": "object.metadata.name"},
                {"name": "req0", "expression": "variables.req0Pod + \"!\""},
                {"name": "other", "expression": "1"},
                {"name": "cn", "expression": "variables.other + 1"},
            ])
        );
        assert_eq!(v.used_by(&json!({"validations": "variables."})), json!([]));
    }

    /// A policy that asks whether the pod wants one language declares that language's request
    /// variables alone: the others' keys are read inside `requested`.
    #[test]
    fn one_languages_policy_declares_its_own_request_variables_alone() {
        for &lang in Language::ALL {
            let mut v = Vars::default();
            injection_keys(&mut v);
            let wants = wants(&mut v, lang);
            let declared = v.used_by(&json!({"matchConditions": [{"expression": wants}]}));
            let names: Vec<&str> = declared
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d["name"].as_str().unwrap())
                .collect();
            let i = index(lang);
            let (own, pod, ns, wants) = (
                format!("req{i}"),
                format!("req{i}Pod"),
                format!("req{i}Ns"),
                format!("wants{i}"),
            );
            assert_eq!(
                names,
                [
                    "ann",
                    "lab",
                    "nsAnn",
                    "nsLab",
                    &pod,
                    &ns,
                    &own,
                    "requested",
                    "want",
                    &wants
                ],
                "{lang:?}"
            );
        }
    }
}
