//! Targeting by selector: an Instrumentation annotated `otel-injector/selector` injects its
//! languages into the pods its selectors match, with no annotation on the pods. The value is
//! YAML (or JSON):
//!
//! ```yaml
//! languages: [java]                  # required
//! namespaceSelector:                 # a LabelSelector; absent: its own namespace only
//!   matchLabels: {env: prod}
//! podSelector:                       # a LabelSelector; absent: every pod
//!   matchExpressions: [{key: tier, operator: In, values: [backend]}]
//! containers: [app]                  # absent: the first container
//! ```
//!
//! Label selectors mean what they mean in Kubernetes (`matchLabels` and `matchExpressions`
//! ANDed; `In`, `NotIn`, `Exists`, `DoesNotExist`; `{}` matches everything), and a
//! namespace carries its `kubernetes.io/metadata.name` label as the API server sets it.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use serde::Deserialize;

use crate::agents::Language;

/// The label the API server puts on every namespace, its name.
pub const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// A selector as written in the annotation.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Written {
    languages: Vec<String>,
    namespace_selector: Option<LabelSelector>,
    pod_selector: Option<LabelSelector>,
    #[serde(default)]
    containers: Vec<String>,
}

/// An Instrumentation's selector, checked.
#[derive(Clone, Debug, PartialEq)]
pub struct Selector {
    pub languages: Vec<Language>,
    /// `None`: the Instrumentation's own namespace only.
    pub namespace_selector: Option<LabelSelector>,
    /// `None`: every pod.
    pub pod_selector: Option<LabelSelector>,
    /// The containers it targets (empty: the first).
    pub containers: Vec<String>,
}

impl Selector {
    /// Reads the annotation's value; the error says what is wrong with it.
    pub fn parse(text: &str) -> Result<Selector, String> {
        let written: Written = serde_saphyr::from_str(text).map_err(|e| {
            let e = e.to_string();
            e.lines().next().unwrap_or("").to_owned()
        })?;
        let languages = written
            .languages
            .iter()
            .map(|l| {
                l.parse::<Language>()
                    .map_err(|_| format!("unknown language {l:?}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if languages.is_empty() {
            return Err("languages is empty".into());
        }
        for s in [&written.namespace_selector, &written.pod_selector]
            .into_iter()
            .flatten()
        {
            check(s)?;
        }
        Ok(Selector {
            languages,
            namespace_selector: written.namespace_selector,
            pod_selector: written.pod_selector,
            containers: written.containers,
        })
    }

    /// Whether it selects a namespace with these labels (its name among them); `home` is
    /// the Instrumentation's namespace, all a selector without `namespaceSelector` sees.
    pub fn selects_namespace(
        &self,
        home: &str,
        namespace: &str,
        labels: &BTreeMap<String, String>,
    ) -> bool {
        match &self.namespace_selector {
            None => home == namespace,
            Some(s) => matches(s, |k| {
                if k == NAMESPACE_NAME_LABEL {
                    Some(namespace)
                } else {
                    labels.get(k).map(String::as_str)
                }
            }),
        }
    }

    /// Whether it selects a pod with these labels.
    pub fn selects_pod(&self, labels: Option<&BTreeMap<String, String>>) -> bool {
        self.pod_selector
            .as_ref()
            .is_none_or(|s| matches(s, |k| labels.and_then(|l| l.get(k)).map(String::as_str)))
    }
}

fn check(s: &LabelSelector) -> Result<(), String> {
    for r in s.match_expressions.iter().flatten() {
        let values = r.values.as_deref().unwrap_or_default();
        match (r.operator.as_str(), values.is_empty()) {
            ("In" | "NotIn", false) | ("Exists" | "DoesNotExist", true) => {}
            ("In" | "NotIn", true) => {
                return Err(format!("{} {:?} needs values", r.operator, r.key));
            }
            ("Exists" | "DoesNotExist", false) => {
                return Err(format!("{} {:?} takes no values", r.operator, r.key));
            }
            (op, _) => return Err(format!("unknown operator {op:?}")),
        }
    }
    Ok(())
}

/// Whether a (checked) label selector matches the labels `get` reads.
fn matches<'a>(s: &LabelSelector, get: impl Fn(&str) -> Option<&'a str>) -> bool {
    let labels_match = s
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| get(k) == Some(v.as_str()));
    labels_match
        && s.match_expressions
            .iter()
            .flatten()
            .all(|r| requirement(r, &get))
}

fn requirement<'a>(r: &LabelSelectorRequirement, get: &impl Fn(&str) -> Option<&'a str>) -> bool {
    let value = get(&r.key);
    let listed = || value.is_some_and(|v| r.values.iter().flatten().any(|x| x == v));
    match r.operator.as_str() {
        "In" => listed(),
        "NotIn" => !listed(),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn selectors_mean_what_they_mean_in_kubernetes() {
        let s = Selector::parse(
            "languages: [java, python]\n\
             namespaceSelector: {matchLabels: {env: prod}}\n\
             podSelector: {matchExpressions: [{key: tier, operator: In, values: [backend, api]}, {key: legacy, operator: DoesNotExist}]}\n\
             containers: [app]\n",
        )
        .unwrap();
        assert_eq!(s.languages, [Language::Java, Language::Python]);
        assert_eq!(s.containers, ["app"]);
        assert!(s.selects_namespace("platform", "shop", &labels(&[("env", "prod")])));
        assert!(!s.selects_namespace("platform", "shop", &labels(&[("env", "dev")])));
        assert!(s.selects_pod(Some(&labels(&[("tier", "api")]))));
        assert!(!s.selects_pod(Some(&labels(&[("tier", "api"), ("legacy", "")]))));
        assert!(!s.selects_pod(None));

        let own = Selector::parse("{\"languages\": [\"sdk\"]}").unwrap();
        assert!(own.selects_namespace("shop", "shop", &labels(&[])));
        assert!(!own.selects_namespace("shop", "other", &labels(&[])));
        assert!(own.selects_pod(None), "no podSelector: every pod");
        let by_name =
            Selector::parse("languages: [java]\nnamespaceSelector: {matchExpressions: [{key: kubernetes.io/metadata.name, operator: NotIn, values: [kube-public]}]}\n").unwrap();
        assert!(by_name.selects_namespace("p", "shop", &labels(&[])));
        assert!(!by_name.selects_namespace("p", "kube-public", &labels(&[])));
        let all = Selector::parse("languages: [java]\nnamespaceSelector: {}\n").unwrap();
        assert!(all.selects_namespace("p", "anything", &labels(&[])));
    }

    #[test]
    fn a_bad_selector_says_why() {
        for (text, why) in [
            ("languages: []", "languages is empty"),
            ("languages: [cobol]", "unknown language \"cobol\""),
            (
                "languages: [java]\npodSelector: {matchExpressions: [{key: a, operator: In}]}",
                "In \"a\" needs values",
            ),
            (
                "languages: [java]\npodSelector: {matchExpressions: [{key: a, operator: Near, values: [b]}]}",
                "unknown operator \"Near\"",
            ),
        ] {
            assert_eq!(Selector::parse(text).unwrap_err(), why, "{text}");
        }
        assert!(
            Selector::parse("languages: [java]\npods: {}").is_err(),
            "unknown field"
        );
    }
}
