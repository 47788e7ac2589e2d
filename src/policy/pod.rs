//! Which admission path injects one pod, for `explain`: the conditions the injection
//! policies check in CEL ([`super::inject::mutation`]), on a pod the webhook injects. The e2e
//! differential test (`e2e/tests/policy/`) compares this answer with what the API server did
//! for every pod of its corpus, so the two cannot drift apart unnoticed.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

use super::LANGUAGES;
use super::template::Template;
use super::template::{CONTAINER, TemplateCache};
use super::vars::{VARIANTS, Variant, variants};
use crate::agents::Language;
use crate::crd::Instrumentation;
use crate::engine::{Catalog, EngineConfig, NamingRule, shared_with_others};
use crate::pod::select::{Annotations, Keys};

/// The path that injects a pod the webhook injects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Path {
    /// The policy rendered from this Instrumentation (`ns/name`) injects it, before any
    /// webhook (which then leaves the pod alone).
    Policy(String),
    /// Only the webhook injects it; why a policy does not.
    Webhook(String),
}

/// The paths of many pods against one catalog: each Instrumentation and language's template
/// is read off the engine once (a read decides several probe pods).
pub struct Paths<'a> {
    catalog: &'a dyn Catalog,
    config: &'a EngineConfig,
    templates: TemplateCache,
}

impl<'a> Paths<'a> {
    pub fn new(catalog: &'a dyn Catalog, config: &'a EngineConfig) -> Self {
        Paths {
            catalog,
            config,
            templates: TemplateCache::default(),
        }
    }

    /// The path of a pod in namespace `ns` that asked for `requested` (language and
    /// effective value, as the engine read them; `by_selector`: selectors asked, each value
    /// the Instrumentation `ns/name`) and that the webhook injects with `injected` (language
    /// and Instrumentation `ns/name`) on containers `targets`.
    pub fn of(
        &mut self,
        ns: &str,
        pod: &Pod,
        asked: AskedFor<'_>,
        injected: &[(Language, &str)],
        targets: &[String],
    ) -> Path {
        let (catalog, config) = (self.catalog, self.config);
        let namespace = catalog.namespace(ns);
        let keys = namespace.as_deref().map_or_else(Keys::default, |n| Keys {
            labels: Some(&n.labels),
            annotations: Some(&n.annotations),
        });
        let annotations = Annotations::new(pod, keys);
        path(catalog, ns, asked, injected, config, |inst, lang| {
            let variant = match variant_of(lang, &annotations) {
                Ok(variant) => variant,
                Err(why) => return Path::Webhook(why),
            };
            match self.templates.read(inst, lang, variant, config) {
                Ok(t)
                    if t.init.clone_of_target.is_some()
                        && inst.metadata.namespace.as_deref() != Some(ns) =>
                {
                    Path::Webhook(
                        "the web server's configuration holds the Instrumentation's namespace: \
                         its policy serves that namespace only"
                            .into(),
                    )
                }
                Ok(t) => match uncovered(t, pod, targets) {
                    Some(why) => Path::Webhook(why),
                    None => Path::Policy(inst.qualified()),
                },
                Err(not) => Path::Webhook(not.why.clone()),
            }
        })
    }
}

/// What a pod asked for, as the engine read it.
#[derive(Clone, Copy)]
pub struct AskedFor<'a> {
    /// Language and effective value of each request.
    pub requested: &'a [(Language, &'a str)],
    /// Selectors asked (`otel-injector/selector`), each value the Instrumentation `ns/name`.
    pub by_selector: bool,
}

impl<'a> AskedFor<'a> {
    /// Requests by key.
    pub fn keys(requested: &'a [(Language, &'a str)]) -> Self {
        AskedFor {
            requested,
            by_selector: false,
        }
    }
}

/// The request's checks, then `covered` for the Instrumentation and language it names.
fn path(
    catalog: &dyn Catalog,
    ns: &str,
    asked: AskedFor<'_>,
    injected: &[(Language, &str)],
    config: &EngineConfig,
    covered: impl FnOnce(&Arc<Instrumentation>, Language) -> Path,
) -> Path {
    let webhook = |why: &str| Path::Webhook(why.to_owned());
    let [(lang, value)] = asked.requested else {
        return webhook("several languages in one pod: the outcome annotation lists them together");
    };
    if !LANGUAGES.contains(lang) {
        return webhook("a sidecar that shares the pod's process namespace: not a template");
    }
    let Some((_, qualified)) = injected.iter().find(|(l, _)| l == lang) else {
        return webhook("the webhook does not inject it either");
    };
    let (inst_ns, name) = qualified.split_once('/').unwrap_or(("", qualified));
    let all = catalog.instrumentations();
    let Some(Ok(inst)) = all.get(inst_ns, name) else {
        return webhook("the Instrumentation cannot be read");
    };
    let names_it = if asked.by_selector {
        // The selector's policy serves every namespace the webhook lets use it.
        inst_ns == ns || shared_with_others(config, inst)
    } else {
        // The values its policy takes: the engine's, other namespaces' as far as the policy
        // serves them.
        NamingRule::of(&all, inst_ns, name, super::shared(inst, config)).names(ns, value)
    };
    if !names_it {
        return webhook(
            "the request names an Instrumentation of another namespace that is not annotated \
             otel-injector/cross-namespace: allowed (its policy is bound in its own)",
        );
    }
    covered(inst, *lang)
}

/// The variant of `lang`'s agent the pod gets (`vars::VARIANTS`, `None` for a language
/// without), or why it gets none a policy injects (the agent refuses the value).
pub(super) fn variant_of(
    lang: Language,
    annotations: &Annotations<'_>,
) -> Result<Option<Variant>, String> {
    let Some((_, key, _)) = VARIANTS.iter().find(|(l, ..)| *l == lang) else {
        return Ok(None);
    };
    let value = annotations.get(key).unwrap_or("");
    variants(lang)
        .into_iter()
        .find(|v| v.is_some_and(|(_, values)| values.contains(&value)))
        .ok_or_else(|| format!("{key} is {value:?}: the agent refuses it, so does the webhook"))
}

/// Why template `t` cannot replay the webhook on `pod`'s `targets`, if it cannot.
fn uncovered(t: &Template, pod: &Pod, targets: &[String]) -> Option<String> {
    let meta = &pod.metadata;
    let spec = pod.spec.as_ref()?;
    if meta.uid.as_deref().is_some_and(|u| !u.is_empty()) {
        return Some(
            "metadata.uid is set: the webhook writes its value, a policy references it".into(),
        );
    }
    let agent_volumes: Vec<&str> = t
        .volumes
        .iter()
        .filter_map(|v| v["name"].as_str())
        .collect();
    if spec
        .volumes
        .iter()
        .flatten()
        .any(|v| agent_volumes.contains(&v.name.as_str()))
    {
        return Some("the pod has a volume of the agent's name already".into());
    }
    if t.init.clone_of_target.is_some() {
        if targets.len() != 1 {
            return Some(
                "several targets of a web server: the first gets the module, the others the SDK"
                    .into(),
            );
        }
        // Mounts the engine moves to the clone are removed by the policy too.
        let below = |path: &str| {
            t.mounts
                .iter()
                .filter_map(|m| m["mountPath"].as_str())
                .map(|p| p.trim_end_matches('/'))
                .filter(|p| !t.hides(p))
                .any(|p| path.starts_with(p))
        };
        let first = spec.containers.iter().find(|c| c.name == targets[0]);
        if first
            .and_then(|c| c.volume_mounts.as_ref())
            .is_some_and(|ms| ms.iter().any(|m| below(&m.mount_path)))
        {
            return Some(format!(
                "container {} mounts something at or below the web server's paths",
                targets[0]
            ));
        }
    }
    for target in targets {
        let Some(c) = spec.containers.iter().find(|c| &c.name == target) else {
            return Some(format!("container {target} is not in the pod"));
        };
        let env = c.env.as_deref().unwrap_or_default();
        let mut names: Vec<&str> = env.iter().map(|e| e.name.as_str()).collect();
        names.sort_unstable();
        if names.windows(2).any(|w| w[0] == w[1]) {
            return Some(format!("container {target} sets a variable twice"));
        }
        for e in env {
            let refused = match e.value_from {
                None => &t.refuse_literal,
                Some(_) => &t.refuse_value_from,
            };
            if refused.contains(&e.name) {
                let how = if e.value_from.is_some() {
                    " with valueFrom"
                } else {
                    ""
                };
                return Some(format!(
                    "container {target} sets {}{how}: a merge the template cannot replay",
                    e.name
                ));
            }
        }
        let paths: Vec<String> = t
            .mounts
            .iter()
            .filter_map(|m| m["mountPath"].as_str())
            .filter(|p| !t.hides(p))
            .map(|p| p.replace(CONTAINER, target))
            .collect();
        if c.volume_mounts
            .iter()
            .flatten()
            .any(|m| agent_volumes.contains(&m.name.as_str()) || paths.contains(&m.mount_path))
        {
            return Some(format!(
                "container {target} mounts something at the agent's volume or path"
            ));
        }
    }
    None
}
