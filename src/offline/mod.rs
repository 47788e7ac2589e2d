//! The offline commands, `inject` and `explain`: the webhook's decision for the pods that
//! manifests would produce, without a cluster. Manifests are read ([`manifests`]), each pod
//! template becomes the pod its controller would create and goes through the webhook's own
//! [`crate::admission::mutate`] ([`workload`]); [`inject`] writes the result back,
//! [`explain`] tells why.

pub mod explain;
pub mod inject;
pub mod manifests;
pub mod workload;

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;

use serde_json::Value;

use crate::cluster::{POD_SECURITY_ENFORCE, StaticCatalog};
use crate::crd::{Instrumentation, parse_instrumentations};
use crate::engine::EngineConfig;
use manifests::{InputError, Source};

/// Output format of the offline commands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    #[default]
    Yaml,
    Json,
}

/// Everything a decision reads, built once from the flags and the manifests.
pub struct Context {
    pub catalog: StaticCatalog,
    pub config: EngineConfig,
    /// Namespace of objects that name none.
    pub default_namespace: String,
}

/// A namespace's annotations and Pod Security level, from Namespace objects and flags.
#[derive(Debug, Default)]
struct NamespaceSettings {
    annotations: BTreeMap<String, String>,
    pod_security: Option<String>,
}

impl Context {
    /// Instrumentations from `instrumentation_files` and from the manifests themselves;
    /// namespaces from the manifests' Namespace objects, then `namespace_annotations`
    /// (`(namespace, key, value)`, which win).
    pub fn build(
        sources: &[Source],
        instrumentation_files: &[PathBuf],
        namespace_annotations: &[(String, String, String)],
        config: EngineConfig,
        default_namespace: String,
    ) -> Result<Context, InputError> {
        let mut all: Vec<Instrumentation> = Vec::new();
        let mut seen = HashSet::new();
        let mut add = |items: Vec<Instrumentation>, from: &str| -> Result<(), InputError> {
            for inst in items {
                let key = format!(
                    "{}/{}",
                    inst.metadata.namespace.as_deref().unwrap_or(""),
                    inst.metadata.name.as_deref().unwrap_or("")
                );
                if !seen.insert(key.clone()) {
                    return Err(InputError::Duplicate(key, from.to_owned()));
                }
                all.push(inst);
            }
            Ok(())
        };
        for path in instrumentation_files {
            let name = path.display().to_string();
            let text = std::fs::read_to_string(path).map_err(|source| InputError::Read {
                path: name.clone(),
                source,
            })?;
            let items = parse_instrumentations(&text).map_err(|e| InputError::Instrumentation {
                path: name.clone(),
                message: e.to_string(),
            })?;
            add(items, &name)?;
        }
        let mut namespaces: BTreeMap<String, NamespaceSettings> = BTreeMap::new();
        for source in sources {
            for doc in &source.documents {
                let Some(value) = &doc.value else { continue };
                let kind = value.get("kind").and_then(Value::as_str).unwrap_or("");
                let api_version = value
                    .get("apiVersion")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                match (api_version, kind) {
                    ("opentelemetry.io/v1alpha1", "Instrumentation") => {
                        let items = parse_instrumentations(&doc.raw).map_err(|e| {
                            InputError::document(&source.name, doc.index, doc.line, e.to_string())
                        })?;
                        add(items, &source.name)?;
                    }
                    ("v1", "Namespace") => {
                        let meta = value.get("metadata");
                        let Some(name) = meta.and_then(|m| m.get("name")).and_then(Value::as_str)
                        else {
                            continue;
                        };
                        let strings = |field: &str| -> BTreeMap<String, String> {
                            meta.and_then(|m| m.get(field))
                                .and_then(Value::as_object)
                                .into_iter()
                                .flatten()
                                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                                .collect()
                        };
                        let entry = namespaces.entry(name.to_owned()).or_default();
                        entry.annotations.extend(strings("annotations"));
                        if let Some(level) = strings("labels").remove(POD_SECURITY_ENFORCE) {
                            entry.pod_security = Some(level);
                        }
                    }
                    _ => {}
                }
            }
        }
        for (ns, key, value) in namespace_annotations {
            let entry = namespaces.entry(ns.clone()).or_default();
            entry.annotations.insert(key.clone(), value.clone());
        }
        let mut catalog = StaticCatalog::new(all);
        for (ns, settings) in &namespaces {
            let pairs: Vec<(&str, &str)> = settings
                .annotations
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            catalog = catalog.with_namespace(ns, &pairs);
            if let Some(level) = &settings.pod_security {
                catalog = catalog.with_pod_security(ns, level);
            }
        }
        Ok(Context {
            catalog,
            config,
            default_namespace,
        })
    }
}

/// Whether an object is a list (`kind: List`, `DeploymentList`, ...) of `items`.
fn items_mut(object: &mut Value) -> Option<&mut Vec<Value>> {
    let kind = object.get("kind").and_then(Value::as_str)?;
    if !kind.ends_with("List") {
        return None;
    }
    object.get_mut("items")?.as_array_mut()
}

fn items(object: &Value) -> Option<&Vec<Value>> {
    let kind = object.get("kind").and_then(Value::as_str)?;
    if !kind.ends_with("List") {
        return None;
    }
    object.get("items")?.as_array()
}
