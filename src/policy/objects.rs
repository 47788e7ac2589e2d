//! The API objects of the policies: their names and metadata, where a binding applies, and
//! each Instrumentation's injection policies with their bindings.

use std::sync::Arc;

use serde_json::{Value, json};

use super::template::Template;
use super::{Coverage, Form, PolicyOptions, inject, selected, vars};
use crate::crd::{Instrumentation, SpecHash};
use crate::engine::NamespaceInfo;
use crate::keys::{
    INJECTED_LABEL, INSTRUMENTATION_ANNOTATION, LANGUAGES_ANNOTATION, MANAGED_BY,
    NOT_COVERED_ANNOTATION, OPT_OUT, OPT_OUT_LABEL, POLICY_LABEL, SPEC_HASH_ANNOTATION,
};

/// The name of the objects of the Instrumentation `ns/name` (at most 253 characters).
pub(super) fn object_name(options: &PolicyOptions, ns: &str, name: &str) -> String {
    let full = options.name(&format!("{ns}.{name}"));
    if full.len() <= 253 {
        return full;
    }
    let digest = ring::digest::digest(&ring::digest::SHA256, format!("{ns}/{name}").as_bytes());
    let hex: String = digest.as_ref()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    options.name(&format!("{}.{hex}", &ns[..ns.len().min(180)]))
}

/// The objects of the manifest form split by the directory the API server reads them from:
/// the mutating policies and bindings, and the validating ones (each plugin has its own
/// `staticManifestsDir` and refuses the other's kinds).
pub fn by_plugin(objects: Vec<Value>) -> (Vec<Value>, Vec<Value>) {
    objects.into_iter().partition(|o| {
        o["kind"]
            .as_str()
            .is_some_and(|k| k.starts_with("Mutating"))
    })
}

pub(super) fn metadata(name: &str) -> Value {
    json!({
        "name": name,
        "labels": {MANAGED_BY: "otel-injector", POLICY_LABEL: "true"},
    })
}

/// Pods of CREATE in any namespace, as the webhook's rules.
pub(super) fn pod_creates() -> Value {
    json!({"resourceRules": [{
        "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"],
    }]})
}

/// The opt-outs of the shipped webhook configuration, as a binding's `matchResources`.
pub(super) fn opted_in(options: &PolicyOptions, namespace: Option<&str>) -> Value {
    let not_disabled = json!({"key": OPT_OUT_LABEL, "operator": "NotIn", "values": [OPT_OUT]});
    let mut ns = vec![not_disabled.clone()];
    for (k, v) in &options.namespace_labels {
        ns.push(json!({"key": k, "operator": "In", "values": [v]}));
    }
    match namespace {
        Some(n) => {
            ns.push(json!({"key": "kubernetes.io/metadata.name", "operator": "In", "values": [n]}))
        }
        None => ns.push(json!({
            "key": "kubernetes.io/metadata.name", "operator": "NotIn",
            "values": crate::keys::EXCLUDED_BY_NAME,
        })),
    }
    json!({
        "namespaceSelector": {"matchExpressions": ns},
        "objectSelector": {"matchExpressions": [not_disabled]},
    })
}

/// `matches` without the pods labeled injected ([`INJECTED_LABEL`] `true`). A pod a policy
/// injected carries the label, and the API server then runs the admission chain again
/// (reinvocation): an injection policy never mutates then (`reinvocationPolicy: Never`), but
/// each bound policy would still evaluate its match conditions, converting the pod for CEL.
/// A label selector leaves the pod out before any CEL. The label comes with the injected
/// marker the `not-injected-before` condition checks, so this leaves out what that condition
/// would; only a pod labeled by hand without the marker differs (docs/policy.md).
fn not_injected(mut matches: Value) -> Value {
    let expressions = &mut matches["objectSelector"]["matchExpressions"];
    if let Some(list) = expressions.as_array_mut() {
        list.push(json!({"key": INJECTED_LABEL, "operator": "NotIn", "values": ["true"]}));
    }
    matches
}

/// Where an injection policy is bound, and which pods reach its mutations.
pub(super) struct Admitted {
    pub reach: inject::Reach,
    /// Which pods reach its policies, where the renderer reads the namespaces
    /// ([`PolicyOptions::namespaces_read`]) and no selector of it asks; `None`: every pod.
    pub keyed: Option<Keyed>,
}

/// The pods with a key of their own, and those of the namespaces whose keys ask.
pub(super) struct Keyed {
    /// The namespaces whose own keys ask, among those the policies are bound in.
    pub asking: Vec<(String, Arc<NamespaceInfo>)>,
    /// A policy per language (no other Instrumentation of the namespace is named as one of
    /// them would be, `<name>.<language>`), each reached by the pods with that language's key
    /// and those of the namespaces whose keys ask for it.
    pub per_language: bool,
}

/// A template and its number in the Instrumentation's list.
type Numbered<'t> = (usize, &'t Template);

/// The policies and bindings of one Instrumentation: one policy with a mutation per language
/// (its agent's variants are branches of it); or, where the renderer reads the namespaces and
/// no selector of it asks, a policy per language, which only the pods with that language's key
/// and those of the namespaces whose keys ask for it reach, so that a pod runs its own
/// language's mutation alone (the API server runs every mutation of a policy it reaches, about
/// half a millisecond each even when its patch is empty).
pub(super) fn injection_policies(
    options: &PolicyOptions,
    inst: &Arc<Instrumentation>,
    templates: &[Template],
    admitted: Admitted,
    hash: SpecHash,
    coverage: &Coverage,
    rules: &selected::Rules,
) -> Vec<Value> {
    let reach = admitted.reach;
    let ns = inst.metadata.namespace.as_deref().unwrap_or("");
    let name = inst.metadata.name.as_deref().unwrap_or("");
    let key = format!("{ns}/{name}");
    let rule = rules.get(&key);
    // Each template keeps its number whichever policy holds it, which names its variables.
    let numbered: Vec<Numbered<'_>> = templates.iter().enumerate().collect();
    let by_language: Vec<&[Numbered<'_>]> = numbered
        .chunk_by(|a, b| a.1.language == b.1.language)
        .collect();
    let groups: Vec<(inject::Reaching, Vec<&[Numbered<'_>]>)> = match &admitted.keyed {
        Some(keyed) if keyed.per_language => by_language
            .into_iter()
            .map(|g| {
                let lang = g[0].1.language;
                let namespaces = keyed
                    .asking
                    .iter()
                    .filter(|(_, info)| info.asks_for(lang))
                    .map(|(n, _)| n.clone())
                    .collect();
                let reaching = inject::Reaching::Keyed {
                    lang: Some(lang),
                    namespaces,
                };
                (reaching, vec![g])
            })
            .collect(),
        Some(keyed) => {
            let namespaces = keyed.asking.iter().map(|(n, _)| n.clone()).collect();
            let reaching = inject::Reaching::Keyed {
                lang: None,
                namespaces,
            };
            vec![(reaching, by_language)]
        }
        None => vec![(inject::Reaching::Every, by_language)],
    };
    let mut objects = Vec::new();
    for (reaching, languages) in groups {
        let mut v = vars::Vars::default();
        inject::pod_variables(&mut v);
        if rule.is_some() {
            rules.add_variables(&mut v);
        }
        let mutations: Vec<Value> = languages
            .iter()
            .map(|group| {
                let branches: Vec<inject::Branch> = group
                    .iter()
                    .map(|&(n, t)| {
                        let by_selector =
                            rules.asks(&key, t.language).map(|asks| inject::BySelector {
                                asks,
                                containers: rule
                                    .map_or_else(Vec::new, |r| r.selector.containers.clone()),
                            });
                        inject::branch(&mut v, n, t, reach, hash, by_selector.as_ref())
                    })
                    .collect();
                inject::mutation_of(branches.iter())
            })
            .collect();
        let (object, injected) = match &reaching {
            &inject::Reaching::Keyed {
                lang: Some(lang), ..
            } => (
                object_name(options, ns, &format!("{name}.{lang}")),
                vec![lang.as_str()],
            ),
            _ => (
                object_name(options, ns, name),
                coverage.injected.iter().map(|l| l.as_str()).collect(),
            ),
        };
        let meta = policy_metadata(&object, &key, hash, &injected, coverage);
        objects.extend(policy_and_binding(
            options,
            (ns, name),
            meta,
            inject::match_conditions(&reaching),
            v,
            mutations,
            (!reach.everywhere).then_some(ns),
        ));
    }
    objects
}

/// The metadata of a policy and its binding: its name, the Instrumentation `key`, its spec
/// hash, the languages it injects and those the Instrumentation's policies leave out.
fn policy_metadata(
    object: &str,
    key: &str,
    hash: SpecHash,
    injected: &[&str],
    coverage: &Coverage,
) -> Value {
    let mut meta = metadata(object);
    meta["annotations"] = json!({
        INSTRUMENTATION_ANNOTATION: key,
        SPEC_HASH_ANNOTATION: hash.to_string(),
        LANGUAGES_ANNOTATION: injected.join(","),
    });
    let not_covered: Vec<String> = coverage
        .not_covered
        .iter()
        .map(|(l, why)| format!("{l}: {why}"))
        .collect();
    if !not_covered.is_empty() {
        meta["annotations"][NOT_COVERED_ANNOTATION] = json!(not_covered.join("; "));
    }
    meta
}

/// One injection policy of the Instrumentation `ns/name` and its binding (in `bound_in`, or
/// every namespace).
fn policy_and_binding(
    options: &PolicyOptions,
    (ns, name): (&str, &str),
    meta: Value,
    conditions: Value,
    v: vars::Vars,
    mutations: Vec<Value>,
    bound_in: Option<&str>,
) -> [Value; 2] {
    let object = meta["name"].as_str().unwrap_or_default().to_owned();
    let mut policy = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingAdmissionPolicy",
        "metadata": meta.clone(),
        "spec": {
            "matchConstraints": pod_creates(),
            // As the webhook's: an error admits the pod unchanged, never blocks it.
            "failurePolicy": "Ignore",
            "reinvocationPolicy": "Never",
            "matchConditions": conditions,
            "mutations": mutations,
        },
    });
    policy["spec"]["variables"] = v.used_by(&policy["spec"]);
    let mut binding = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingAdmissionPolicyBinding",
        "metadata": meta,
        "spec": {
            "policyName": object,
            "matchResources": not_injected(opted_in(options, bound_in)),
        },
    });
    if options.form == Form::Api {
        // The policy injects while its Instrumentation exists (read by the API server). Live
        // policies go with it instead: their writer deletes them.
        policy["spec"]["paramKind"] =
            json!({"apiVersion": "opentelemetry.io/v1alpha1", "kind": crate::crd::KIND});
        binding["spec"]["paramRef"] =
            json!({"name": name, "namespace": ns, "parameterNotFoundAction": "Allow"});
    }
    [policy, binding]
}
