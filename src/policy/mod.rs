//! Policy mode: injection by the API server itself. Each Instrumentation becomes one
//! `MutatingAdmissionPolicy` (`admissionregistration.k8s.io/v1`, Kubernetes ≥ 1.36) and its
//! binding (live policies: one per language, [`objects`]), which replay in CEL what the
//! webhook does in image-volume delivery for the
//! languages a template can express (Java, Node.js, Python, .NET, SDK): the volumes, mounts
//! and environment read off the engine itself ([`template`]), the pod-dependent parts
//! written in CEL ([`inject`]). A pod the policy does not cover is left to the webhook
//! (mode `both`) or, in mode `policy`, marked skipped with a `kubectl` warning ([`skip`]).
//!
//! The binding's `paramRef` names the Instrumentation, so a deleted one stops injecting at
//! once; what the policy writes was rendered from its spec, so a changed spec needs the
//! policies rendered again: by `otel-injector policy`, or live by the Lease holder
//! (`serve --apply-policies`, [`live`]), which also deletes a deleted one's objects (its
//! bindings need no `paramRef`: [`Form::Live`]). Pods injected by a stale policy carry the old spec
//! hash, which the status controller counts as outdated.

mod cel;
mod inject;
pub mod live;
mod objects;
mod pod;
mod selected;
mod skip;
mod template;
mod vars;

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::agents::Language;
use crate::agents::exporter_tls::ExporterTlsFiles;
use crate::crd::{Instrumentation, SpecHash};
use crate::engine::{
    Catalog, CrossNamespace, EngineConfig, NAMESPACE_NAME_LABEL, NamespaceInfo, NamingRule,
    SkipReason, unusable,
};
use crate::keys::CROSS_NAMESPACE_ANNOTATION;

pub use objects::by_plugin;
use objects::{Admitted, Keyed, metadata, opted_in, pod_creates};
pub use pod::{AskedFor, Path, Paths};
pub use template::{Template, TemplateCache, probe_config};

/// The languages a policy can inject (their agent copied by an init container or mounted as
/// an image volume, the web servers' configuration cloned from the app; no sidecar, no
/// per-pod configuration file).
pub const LANGUAGES: [Language; 7] = [
    Language::Java,
    Language::NodeJs,
    Language::Python,
    Language::DotNet,
    Language::ApacheHttpd,
    Language::Nginx,
    Language::Sdk,
];

/// Which admission path injects.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// The policies alone (no webhook): pods they do not cover are marked skipped and warned.
    #[default]
    Policy,
    /// The policies first, the webhook for every pod they leave.
    Both,
}

/// Where the API server reads the objects from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Form {
    /// API objects (`kubectl apply`): each binding's `paramRef` names its Instrumentation,
    /// so a deleted Instrumentation stops injecting at once.
    #[default]
    Api,
    /// API objects that the Lease holder keeps current (live policies, `serve
    /// --apply-policies`): no params, because the writer deletes a deleted Instrumentation's
    /// objects in its next pass, and every policy a pod passes costs the API server less
    /// without a param to look up (docs/performance.md, "Live policies without params").
    Live,
    /// The API server's manifest files (`staticManifestsDir` of its admission configuration,
    /// Kubernetes ≥ 1.37): loaded at its start, before any object exists; names end in
    /// [`STATIC_SUFFIX`], and no params (the API server refuses `paramKind` there), so what
    /// a file holds injects until the file changes.
    Static,
}

/// The suffix the API server requires of (and reserves for) manifest-file objects.
pub const STATIC_SUFFIX: &str = ".static.k8s.io";

/// How the objects are rendered.
#[derive(Clone, Debug)]
pub struct PolicyOptions {
    pub mode: Mode,
    pub form: Form,
    /// The first part of every object's name (`<prefix>.<namespace>.<name>`,
    /// `<prefix>.not-injected`, `<prefix>.warn-not-injected`).
    pub prefix: String,
    /// Labels a namespace must have for any binding to apply there (a staged rollout).
    pub namespace_labels: Vec<(String, String)>,
    /// The webhook checks that the exporter TLS Secret and ConfigMap exist
    /// (`--verify-exporter-tls`): a policy, which cannot look them up, leaves such
    /// Instrumentations to it.
    pub verify_exporter_tls: bool,
    /// The catalog holds every namespace, kept current, and a change of one renders again
    /// (live policies): an Instrumentation without a selector gets a policy per language,
    /// which only the pods with that language's key and those of the namespaces whose keys
    /// ask for it reach, and mode `policy`'s status policy takes only the pods with a key and
    /// those of the namespaces that ask ([`inject::match_conditions`]).
    pub namespaces_read: bool,
}

impl Default for PolicyOptions {
    fn default() -> Self {
        PolicyOptions {
            mode: Mode::Policy,
            form: Form::Api,
            prefix: "otel-injector".into(),
            namespace_labels: Vec::new(),
            verify_exporter_tls: false,
            namespaces_read: false,
        }
    }
}

impl PolicyOptions {
    /// The name of an object whose name starts with the prefix and goes on with `rest`.
    fn name(&self, rest: &str) -> String {
        format!("{}.{rest}{}", self.prefix, self.suffix())
    }

    fn suffix(&self) -> &'static str {
        match self.form {
            Form::Api | Form::Live => "",
            Form::Static => STATIC_SUFFIX,
        }
    }
}

/// Why a policy leaves an Instrumentation with exporter TLS when the webhook verifies it.
const VERIFIED_TLS: &str = "exporter TLS: the webhook checks its Secret and ConfigMap \
     (--verify-exporter-tls); a policy cannot look them up";

/// What was rendered.
#[derive(Debug, Default)]
pub struct RenderedPolicies {
    /// The objects, in the order to apply them (each policy before its binding).
    pub objects: Vec<Value>,
    /// Per Instrumentation (`ns/name`), the languages injected and those left out, why.
    pub coverage: BTreeMap<String, Coverage>,
}

/// One Instrumentation's languages.
#[derive(Debug, Default)]
pub struct Coverage {
    pub injected: Vec<Language>,
    pub not_covered: Vec<(Language, String)>,
}

/// The objects of `mode` for every readable Instrumentation of `catalog`, with the webhook's
/// flags `config` (default images, enabled languages).
pub fn render(
    catalog: &dyn Catalog,
    config: &EngineConfig,
    options: &PolicyOptions,
) -> RenderedPolicies {
    render_cached(catalog, config, options, &mut TemplateCache::default())
}

/// [`render`] reading the templates through `cache` (kept between renders with the same
/// `config`), then pruned to what this render read.
pub fn render_cached(
    catalog: &dyn Catalog,
    config: &EngineConfig,
    options: &PolicyOptions,
    cache: &mut TemplateCache,
) -> RenderedPolicies {
    let rendered = render_with(catalog, config, options, cache);
    cache.prune();
    rendered
}

fn render_with(
    catalog: &dyn Catalog,
    config: &EngineConfig,
    options: &PolicyOptions,
    cache: &mut TemplateCache,
) -> RenderedPolicies {
    let all = catalog.instrumentations();
    let mut rendered = RenderedPolicies::default();
    let mut known = skip::Known {
        disabled: Language::ALL
            .iter()
            .copied()
            .filter(|l| !config.enabled.contains(*l))
            .collect(),
        ..Default::default()
    };
    let rules = selected::Rules::of(&all, config);
    // The namespaces whose keys ask, when the render follows them (live policies).
    let asking = options
        .namespaces_read
        .then(|| catalog.namespaces_asking())
        .flatten();
    for (ns, name, entry, hash) in all.iter() {
        known
            .names
            .entry(ns.to_owned())
            .or_default()
            .push(name.to_owned());
        // What the webhook skips a request for it by, when it cannot be used.
        let unusable = unusable(&all, config, ns, name).map(|u| u.reason());
        let (Ok(inst), None) = (entry, unusable) else {
            let reason = unusable.unwrap_or(SkipReason::InstrumentationInvalid);
            for &lang in &LANGUAGES {
                let key = format!("{ns}/{name}/{}", lang.as_str());
                known.reasons.insert(key, reason);
            }
            continue;
        };
        let coverage = rendered.coverage.entry(format!("{ns}/{name}")).or_default();
        let mut templates = Vec::new();
        let verified = options.verify_exporter_tls && ExporterTlsFiles::of(&inst.spec).is_some();
        for &lang in &LANGUAGES {
            let key = format!("{ns}/{name}/{}", lang.as_str());
            if verified && config.enabled.contains(lang) {
                known
                    .reasons
                    .insert(key.clone(), SkipReason::PolicyUnsupported);
                coverage.not_covered.push((lang, VERIFIED_TLS.into()));
                continue;
            }
            if !config.enabled.contains(lang) {
                coverage
                    .not_covered
                    .push((lang, "disabled by --enabled-languages".into()));
                continue;
            }
            // Each variant of the agent (Python's musl build, .NET's musl runtime) is a
            // template of its own; the first is what a pod without the variant key gets.
            for (i, variant) in vars::variants(lang).into_iter().enumerate() {
                match cache.read(inst, lang, variant, config).clone() {
                    Ok(t) => {
                        if !t.agent_refuses.is_empty() {
                            known.refused.insert(key.clone(), t.agent_refuses.clone());
                        }
                        if !coverage.injected.contains(&lang) {
                            coverage.injected.push(lang);
                        }
                        templates.push(t);
                    }
                    Err(not) if i == 0 => {
                        // Another variant fails as the default does.
                        known.reasons.insert(key.clone(), not.reason);
                        coverage.not_covered.push((lang, not.why));
                        break;
                    }
                    Err(not) => {
                        let (k, values) = variant.expect("variants after the first");
                        coverage
                            .not_covered
                            .push((lang, format!("{k}={}: {}", values[0], not.why)));
                    }
                }
            }
        }
        if templates.is_empty() {
            continue;
        }
        // Readable entries always carry their hash.
        let hash = hash.unwrap_or_else(|| SpecHash::of(&inst.spec));
        known.hashes.insert(format!("{ns}/{name}"), hash);
        let shared = shared(inst, config);
        // A selector that reads other namespaces' labels, and may serve them.
        let selects_elsewhere = rules
            .get(&format!("{ns}/{name}"))
            .is_some_and(|r| r.shared && r.selector.namespace_selector.is_some());
        let reach = inject::Reach {
            // `"true"` names it when it is its namespace's only one, as the engine counts.
            only_in_namespace: NamingRule::of(&all, ns, name, shared).only_in_namespace,
            shared,
            everywhere: shared || selects_elsewhere,
        };
        // Where the namespaces are read and no selector of it asks: the pods with a key of
        // their own, and those of the namespaces whose keys ask (among those it is bound in).
        let keyed = match &asking {
            Some(asking) if rules.get(&format!("{ns}/{name}")).is_none() => Some(Keyed {
                asking: asking
                    .iter()
                    .filter(|(n, _)| reach.everywhere || n == ns)
                    .cloned()
                    .collect(),
                // A policy's per-language name must not be another Instrumentation's own.
                per_language: !templates
                    .iter()
                    .any(|t| all.get(ns, &format!("{name}.{}", t.language)).is_some()),
            }),
            _ => None,
        };
        // Bound in its own namespace alone, where no binding can match: nothing to write
        // (its templates are still read, so the status policy knows it as before).
        if !reach.everywhere && !bound_in(catalog, options, ns) {
            continue;
        }
        let admitted = Admitted { reach, keyed };
        rendered.objects.extend(objects::injection_policies(
            options, inst, &templates, admitted, hash, coverage, &rules,
        ));
    }
    if options.mode == Mode::Policy {
        let (mutation, v) = skip::status_policy(&known, &rules);
        let name = &options.name("not-injected");
        let mut policy = json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingAdmissionPolicy",
            "metadata": metadata(name),
            "spec": {
                "matchConstraints": pod_creates(),
                "failurePolicy": "Ignore",
                "reinvocationPolicy": "IfNeeded",
                "matchConditions": inject::match_conditions(&status_reaching(asking.as_deref(), &rules)),
                "mutations": [mutation],
            },
        });
        policy["spec"]["variables"] = v.used_by(&policy["spec"]);
        rendered.objects.push(policy);
        rendered.objects.push(json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingAdmissionPolicyBinding",
            "metadata": metadata(name),
            "spec": {"policyName": name, "matchResources": opted_in(options, None)},
        }));
        rendered.objects.extend(skip::warning_policy(
            options,
            "warn-not-injected",
            skip::warning(),
            None,
        ));
        if let Some((validations, v)) = skip::selector_warnings(&rules) {
            rendered.objects.extend(skip::warning_policy(
                options,
                "warn-selectors",
                validations,
                Some(&v),
            ));
        }
    }
    rendered
}

/// Whether the bindings can match a pod of namespace `ns`: it carries every
/// `namespace_labels` pair ([`objects::opted_in`] selects those). Only a render that holds
/// every namespace ([`PolicyOptions::namespaces_read`]) can tell; any other may match
/// anywhere. A namespace the cache does not hold matches only where no label is asked for.
pub(crate) fn bound_in(catalog: &dyn Catalog, options: &PolicyOptions, ns: &str) -> bool {
    if !options.namespaces_read || options.namespace_labels.is_empty() {
        return true;
    }
    let Some(info) = catalog.namespace(ns) else {
        return false;
    };
    options
        .namespace_labels
        .iter()
        .all(|(k, v)| match k.as_str() {
            NAMESPACE_NAME_LABEL => v == ns,
            _ => info.all_labels.get(k) == Some(v),
        })
}

/// Which pods reach mode `policy`'s status policy: where the renderer holds every namespace
/// (live policies, `asking`) and no selector can ask, only those with a key of their own and
/// those of a namespace whose keys ask; elsewhere every pod (its mutation decides).
fn status_reaching(
    asking: Option<&[(String, Arc<NamespaceInfo>)]>,
    rules: &selected::Rules,
) -> inject::Reaching {
    match asking {
        Some(asking) if rules.is_empty() => inject::Reaching::Keyed {
            lang: None,
            namespaces: asking.iter().map(|(n, _)| n.clone()).collect(),
        },
        _ => inject::Reaching::Every,
    }
}

/// Whether the policy of `inst` serves references from other namespaces (`ns/name`): when
/// the Instrumentation says it is shared (`otel-injector/cross-namespace: allowed`) and the
/// webhook's flags let other namespaces use it. Its binding then spans every namespace; the
/// others stay bound in their own, so that a policy is evaluated where it can inject.
pub(crate) fn shared(inst: &Instrumentation, config: &EngineConfig) -> bool {
    config.cross_namespace != CrossNamespace::Deny
        && inst
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(CROSS_NAMESPACE_ANNOTATION))
            .is_some_and(|v| v == "allowed")
}

#[cfg(test)]
mod tests;
