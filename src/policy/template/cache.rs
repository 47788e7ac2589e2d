//! Templates kept between renders. A template depends only on the Instrumentation's spec and
//! annotations, the language, the agent variant and the engine's flags, and reading one runs
//! the engine on a dozen probe pods: the live writer keeps them, so that an edit re-reads the
//! edited Instrumentation's templates alone. `explain` keeps them for the pods of one run.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::{NotCovered, Template, read_variant};
use crate::agents::Language;
use crate::crd::Instrumentation;
use crate::engine::EngineConfig;
use crate::policy::vars::Variant;

type TemplateKey = (String, Language, Option<Variant>);

/// Templates by what they depend on; one cache serves one set of engine flags.
#[derive(Default)]
pub struct TemplateCache {
    entries: HashMap<TemplateKey, Result<Template, NotCovered>>,
    /// What the reads since the last [`TemplateCache::prune`] asked for.
    used: HashSet<TemplateKey>,
}

impl TemplateCache {
    /// The template of `variant` of `lang` for `inst`, read off the engine unless an
    /// Instrumentation with the same name, spec and annotations was read before.
    pub fn read(
        &mut self,
        inst: &Arc<Instrumentation>,
        lang: Language,
        variant: Option<Variant>,
        config: &EngineConfig,
    ) -> &Result<Template, NotCovered> {
        let key = (fingerprint(inst), lang, variant);
        self.used.insert(key.clone());
        self.entries
            .entry(key)
            .or_insert_with(|| read_variant(inst, lang, variant, config))
    }

    /// Forgets the templates no read asked for since the last prune (deleted or edited
    /// Instrumentations), so the cache holds one render's worth.
    pub fn prune(&mut self) {
        let used = std::mem::take(&mut self.used);
        self.entries.retain(|k, _| used.contains(k));
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.len()
    }
}

/// What a template depends on of its Instrumentation: its name, spec and annotations (the
/// delivery, the v1beta1 fields); not its status or resourceVersion.
fn fingerprint(inst: &Instrumentation) -> String {
    let annotations = serde_json::to_string(&inst.metadata.annotations).unwrap_or_default();
    let spec = serde_json::to_string(&inst.spec).unwrap_or_default();
    format!("{}\n{annotations}\n{spec}", inst.qualified())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::parse_instrumentations;

    fn inst(yaml: &str) -> Arc<Instrumentation> {
        Arc::new(parse_instrumentations(yaml).unwrap().remove(0))
    }

    #[test]
    fn a_template_is_read_again_only_when_its_spec_or_annotations_change() {
        let base = "apiVersion: opentelemetry.io/v1alpha1\nkind: Instrumentation\nmetadata: {name: i, namespace: n, resourceVersion: \"1\"}\nspec: {exporter: {endpoint: \"http://a:4318\"}}\n";
        let config = EngineConfig::default();
        let mut cache = TemplateCache::default();
        let endpoint = |cache: &mut TemplateCache, yaml: &str| {
            let t = cache
                .read(&inst(yaml), Language::Java, None, &config)
                .as_ref()
                .unwrap();
            t.appended
                .iter()
                .find(|a| a.entry["name"] == "OTEL_EXPORTER_OTLP_ENDPOINT")
                .map(|a| a.entry["value"].clone())
        };
        assert_eq!(endpoint(&mut cache, base), Some("http://a:4318".into()));
        // A status write moves the resourceVersion: the same template.
        let status = base.replace("resourceVersion: \"1\"", "resourceVersion: \"2\"");
        endpoint(&mut cache, &status);
        assert_eq!(cache.len(), 1);
        // An edit of the spec: read again.
        let edited = base.replace("http://a:4318", "http://b:4318");
        assert_eq!(endpoint(&mut cache, &edited), Some("http://b:4318".into()));
        assert_eq!(cache.len(), 2);
        // A prune keeps what was read since the last one: both, then the edited one only.
        cache.prune();
        assert_eq!(cache.len(), 2);
        endpoint(&mut cache, &edited);
        cache.prune();
        assert_eq!(cache.len(), 1);
    }
}
