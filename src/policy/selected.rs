//! Selectors (`otel-injector/selector`, [`Selector`]) in the policies: which language a
//! selector asks for in a pod, written in CEL as the engine decides it
//! (`Instrumentations::selected_for` under `engine::plan::requests::selected`): only when
//! the pod and its namespace set no `inject-*` key at all; per language, the first selector
//! that selects the pod's namespace and labels, those of the pod's own namespace first, then
//! by `namespace/name`. A pod that selectors ask several languages of is the webhook's, as a
//! pod that asks for several by key.
//!
//! Each selector's Instrumentation's policy reads every selector (precedence and the count
//! of languages depend on the others), so a policy holds one boolean per selector.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::cel::{string, strings};
use super::vars::{self, Vars};
use crate::agents::Language;
use crate::engine::{
    EngineConfig, Instrumentations, NAMESPACE_NAME_LABEL, Selector, shared_with_others,
};

const POD_LABELS: &str = "object.metadata.?labels.orValue({})";
const NAMESPACE_LABELS: &str = "namespaceObject.metadata.?labels.orValue({})";
const NAMESPACE: &str = "namespaceObject.metadata.name";

/// One selector as the policies read it.
pub struct Rule {
    /// `namespace/name` of its Instrumentation.
    pub key: String,
    pub namespace: String,
    pub selector: Selector,
    /// Whether the webhook lets pods of other namespaces use its Instrumentation
    /// (`--cross-namespace-references`); else it skips them with `cross_namespace_denied`.
    pub shared: bool,
}

/// Every readable selector of a catalog, by key.
#[derive(Default)]
pub struct Rules(Vec<Rule>);

impl Rules {
    pub fn of(all: &Instrumentations, config: &EngineConfig) -> Rules {
        let rules = all
            .selectors()
            .filter_map(|(key, selector)| {
                let (namespace, name) = key.split_once('/')?;
                let shared = match all.get(namespace, name) {
                    Some(Ok(inst)) => shared_with_others(config, inst),
                    _ => false,
                };
                Some(Rule {
                    key: key.to_owned(),
                    namespace: namespace.to_owned(),
                    selector: selector.clone(),
                    shared,
                })
            })
            .collect();
        Rules(rules)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The rule of `key` (the rules are in key order, as the index keeps them).
    pub fn get(&self, key: &str) -> Option<&Rule> {
        let i = self.0.binary_search_by(|r| r.key.as_str().cmp(key)).ok()?;
        Some(&self.0[i])
    }

    pub fn iter(&self) -> impl Iterator<Item = &Rule> {
        self.0.iter()
    }

    /// The languages some selector asks for, in the registry's order.
    pub fn languages(&self) -> Vec<Language> {
        Language::ALL
            .iter()
            .copied()
            .filter(|l| self.0.iter().any(|r| r.selector.languages.contains(l)))
            .collect()
    }

    /// Adds `keyed` (the pod or its namespace sets an `inject-*` key), one boolean per
    /// selector, per language the selectors that ask for it in order (`picked<i>`), and
    /// `selectedLanguages`. Needs [`vars::injection_keys`] first.
    pub fn add_variables(&self, v: &mut Vars) {
        v.add("keyed", vars::any_request());
        for (j, rule) in self.0.iter().enumerate() {
            v.add(&format!("sel{j}"), selects(rule));
        }
        let home = format!("{NAMESPACE} + \"/\"");
        let mut languages = Vec::new();
        for lang in self.languages() {
            let i = vars::index(lang);
            let asking: Vec<String> = self
                .0
                .iter()
                .enumerate()
                .filter(|(_, r)| r.selector.languages.contains(&lang))
                .map(|(j, r)| format!("(variables.sel{j} ? [{}] : [])", string(&r.key)))
                .collect();
            v.add(&format!("selecting{i}"), asking.join(" + "));
            v.add(
                &format!("picked{i}"),
                format!(
                    "variables.selecting{i}.filter(k, k.startsWith({home})) + variables.selecting{i}.filter(k, !k.startsWith({home}))"
                ),
            );
            languages.push(format!(
                "(variables.picked{i}.size() > 0 ? [{}] : [])",
                string(lang.as_str())
            ));
        }
        v.add("selectedLanguages", languages.join(" + "));
    }

    /// The selectors asking for `lang` in the pod, first the one that wins (a variable of
    /// [`Self::add_variables`]); `None` when no selector asks for it.
    pub fn picked(&self, lang: Language) -> Option<String> {
        self.languages()
            .contains(&lang)
            .then(|| format!("variables.picked{}", vars::index(lang)))
    }

    /// The condition that the selector of `key` asks for `lang` alone in the pod, and a
    /// policy may serve it there: the webhook lets the pod's namespace use it.
    pub fn asks(&self, key: &str, lang: Language) -> Option<String> {
        let rule = self.get(key)?;
        let picked = self.picked(lang)?;
        if !rule.selector.languages.contains(&lang) {
            return None;
        }
        let mut asks = format!(
            "!variables.keyed && variables.selectedLanguages == [{}] && {picked}[0] == {}",
            string(lang.as_str()),
            string(key)
        );
        if !rule.shared {
            asks.push_str(&format!(" && {NAMESPACE} == {}", string(&rule.namespace)));
        }
        Some(asks)
    }

    /// The containers each selector lists, as a CEL map (`namespace/name` → names).
    pub fn containers(&self) -> String {
        let entries: Vec<String> = self
            .0
            .iter()
            .filter(|r| !r.selector.containers.is_empty())
            .map(|r| {
                format!(
                    "{}: {}",
                    string(&r.key),
                    strings(r.selector.containers.iter().map(String::as_str))
                )
            })
            .collect();
        format!("{{{}}}", entries.join(", "))
    }

    /// The keys of the selectors whose Instrumentation other namespaces may not use.
    pub fn unshared(&self) -> String {
        strings(self.0.iter().filter(|r| !r.shared).map(|r| r.key.as_str()))
    }
}

/// Whether `rule` selects the pod: its namespace side (its own namespace without a
/// `namespaceSelector`), then its pod side.
pub fn selects(rule: &Rule) -> String {
    let s = &rule.selector;
    let namespace = match &s.namespace_selector {
        None => format!("{NAMESPACE} == {}", string(&rule.namespace)),
        Some(n) => label_selector(n, |k| {
            if k == NAMESPACE_NAME_LABEL {
                ("true".into(), NAMESPACE.into())
            } else {
                let k = string(k);
                (
                    format!("{k} in {NAMESPACE_LABELS}"),
                    format!("{NAMESPACE_LABELS}[{k}]"),
                )
            }
        }),
    };
    let pod = match &s.pod_selector {
        None => "true".into(),
        Some(p) => label_selector(p, |k| {
            let k = string(k);
            (format!("{k} in {POD_LABELS}"), format!("{POD_LABELS}[{k}]"))
        }),
    };
    format!("({namespace} && {pod})")
}

/// A (checked) label selector in CEL, `get` giving for a key whether the object has the
/// label and its value: `matchLabels` and `matchExpressions` ANDed, `{}` true.
fn label_selector(s: &LabelSelector, get: impl Fn(&str) -> (String, String)) -> String {
    let mut terms = Vec::new();
    for (k, v) in s.match_labels.iter().flatten() {
        let (has, value) = get(k);
        terms.push(format!("({has} && {value} == {})", string(v)));
    }
    for r in s.match_expressions.iter().flatten() {
        let (has, value) = get(&r.key);
        let values = strings(r.values.iter().flatten().map(String::as_str));
        let listed = format!("({has} && {value} in {values})");
        terms.push(match r.operator.as_str() {
            "In" => listed,
            "NotIn" => format!("!{listed}"),
            "Exists" => has,
            "DoesNotExist" => format!("!({has})"),
            // `Selector::parse` refuses any other.
            _ => "false".into(),
        });
    }
    match terms.is_empty() {
        true => "true".into(),
        false => format!("({})", terms.join(" && ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(text: &str) -> Rule {
        Rule {
            key: "platform/java".into(),
            namespace: "platform".into(),
            selector: Selector::parse(text).unwrap(),
            shared: true,
        }
    }

    #[test]
    fn a_selector_reads_as_the_engine_reads_it() {
        assert_eq!(
            selects(&rule("languages: [java]")),
            "(namespaceObject.metadata.name == \"platform\" && true)"
        );
        let r = rule(
            "languages: [java]\n\
             namespaceSelector: {matchLabels: {env: prod}, matchExpressions: [{key: kubernetes.io/metadata.name, operator: NotIn, values: [dev]}]}\n\
             podSelector: {matchExpressions: [{key: tier, operator: In, values: [a, b]}, {key: legacy, operator: DoesNotExist}, {key: team, operator: Exists}]}",
        );
        let ns = NAMESPACE_LABELS;
        let pod = POD_LABELS;
        assert_eq!(
            selects(&r),
            format!(
                "(((\"env\" in {ns} && {ns}[\"env\"] == \"prod\") && !(true && namespaceObject.metadata.name in [\"dev\"])) && \
                 ((\"tier\" in {pod} && {pod}[\"tier\"] in [\"a\", \"b\"]) && !(\"legacy\" in {pod}) && \"team\" in {pod}))"
            )
        );
        assert_eq!(
            selects(&rule("languages: [java]\nnamespaceSelector: {}")),
            "(true && true)"
        );
    }
}
