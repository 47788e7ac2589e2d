//! The offline commands, `inject` and `explain`: the webhook's decision for the pods that
//! manifests would produce, without a cluster. Manifests are read ([`manifests`]), each pod
//! template becomes the pod its controller would create and goes through the webhook's own
//! [`crate::admission::mutate`] ([`workload`]); [`inject`] writes the result back,
//! [`explain`] tells why.

pub mod convert;
pub mod explain;
pub mod inject;
pub mod manifests;
pub mod registration;
pub mod workload;

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;

use serde_json::Value;

use crate::cluster::{ClusterView, StaticCatalog};
use crate::crd::convert::Version;
use crate::crd::{Instrumentation, parse_instrumentations};
use crate::engine::{EngineConfig, NamespaceInfo};
use manifests::{InputError, Source};

/// Output format of the offline commands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    #[default]
    Yaml,
    Json,
}

/// Objects as YAML documents (`---` between them) or one JSON `List`.
pub fn write_objects(objects: &[Value], format: OutputFormat) -> String {
    match format {
        OutputFormat::Json => {
            let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": objects});
            let mut text = serde_json::to_string_pretty(&list).unwrap_or_default();
            text.push('\n');
            text
        }
        OutputFormat::Yaml => objects
            .iter()
            .map(|o| serde_saphyr::to_string(o).unwrap_or_default())
            .collect::<Vec<_>>()
            .join("---\n"),
    }
}

/// Everything a decision reads, built once from the flags and the manifests.
pub struct Context {
    pub catalog: StaticCatalog,
    pub config: EngineConfig,
    /// Namespace of objects that name none.
    pub default_namespace: String,
}

/// A namespace's annotations, injection labels and Pod Security level, from the cluster,
impl Context {
    /// What the decisions read, in layers where a later one wins:
    /// - Instrumentations: the cluster's (when read), then `instrumentation_files` and the
    ///   manifests' own Instrumentation objects, which replace a cluster object of the same
    ///   namespace and name (they are what is about to be applied); the same one twice among
    ///   files and manifests is an error.
    /// - Namespaces, key by key for annotations and labels: the cluster's, then the
    ///   manifests' Namespace objects, then `namespace_annotations` (`(namespace, key,
    ///   value)`).
    /// - The API server's version and `ImageVolume` gate (the `auto` modes): the cluster's;
    ///   without a cluster both are unknown.
    pub fn build(
        sources: &[Source],
        instrumentation_files: &[PathBuf],
        namespace_annotations: &[(String, String, String)],
        cluster: Option<ClusterView>,
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
        let mut namespaces: BTreeMap<String, NamespaceInfo> = BTreeMap::new();
        let mut server = None;
        let mut from_cluster = Vec::new();
        let mut unreadable = Vec::new();
        if let Some(view) = cluster {
            for ns in view.namespaces {
                let entry = namespaces.entry(ns.name).or_default();
                entry.merge(ns.annotations, ns.labels);
            }
            from_cluster = view.instrumentations;
            unreadable = view.unreadable;
            server = Some(view.server);
        }
        for source in sources {
            for doc in &source.documents {
                let Some(value) = &doc.value else { continue };
                let kind = value.get("kind").and_then(Value::as_str).unwrap_or("");
                let api_version = value
                    .get("apiVersion")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                match (api_version, kind) {
                    (version, crate::crd::KIND) if Version::of(version).is_some() => {
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
                        entry.merge(strings("annotations"), strings("labels"));
                    }
                    _ => {}
                }
            }
        }
        for (ns, key, value) in namespace_annotations {
            let entry = namespaces.entry(ns.clone()).or_default();
            entry.annotations.insert(key.clone(), value.clone());
        }
        // The cluster's first: a file's or manifest's object of the same name replaces it.
        let mut catalog = StaticCatalog::new(from_cluster.into_iter().chain(all));
        for (ns, name, error) in &unreadable {
            if !seen.contains(&format!("{ns}/{name}")) {
                catalog = catalog.with_unreadable(ns, name, error);
            }
        }
        for (ns, info) in namespaces {
            catalog = catalog.with_namespace_info(&ns, info);
        }
        if let Some(server) = server {
            catalog = catalog.with_server(server);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::ServerInfo;
    use crate::cluster::list::ListedNamespace;
    use crate::engine::Catalog;
    use crate::keys::{INJECT_JAVA, INJECT_NODEJS, INJECT_PYTHON};

    fn inst(ns: &str, name: &str, endpoint: &str) -> Instrumentation {
        let yaml = format!(
            "apiVersion: opentelemetry.io/v1alpha1\nkind: Instrumentation\n\
             metadata: {{name: {name}, namespace: {ns}}}\nspec: {{exporter: {{endpoint: '{endpoint}'}}}}\n"
        );
        parse_instrumentations(&yaml).unwrap().remove(0)
    }

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn the_cluster_is_the_bottom_layer() {
        let view = ClusterView {
            instrumentations: vec![
                inst("shop", "java-inst", "http://from-cluster:4318"),
                inst("shop", "only-in-cluster", "http://from-cluster:4318"),
            ],
            unreadable: vec![
                ("shop".into(), "broken".into(), "bad sampler".into()),
                ("shop".into(), "fixed".into(), "bad sampler".into()),
            ],
            namespaces: vec![ListedNamespace {
                name: "shop".into(),
                annotations: map(&[
                    (INJECT_JAVA, "java-inst"),
                    (INJECT_PYTHON, "true"),
                    (INJECT_NODEJS, "true"),
                ]),
                labels: map(&[
                    (INJECT_NODEJS, "false"),
                    ("pod-security.kubernetes.io/enforce", "restricted"),
                    ("team", "checkout"),
                ]),
            }],
            server: ServerInfo {
                version: (1, 37),
                image_volume_gate: Some(false),
            },
            gate_error: None,
        };
        let manifests = manifests::parse(
            "m.yaml",
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: shop\n  annotations:\n    \
             instrumentation.opentelemetry.io/inject-python: \"false\"\n---\n\
             apiVersion: opentelemetry.io/v1alpha1\nkind: Instrumentation\n\
             metadata: {name: fixed, namespace: shop}\n",
        )
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("java.yaml");
        std::fs::write(
            &file,
            "apiVersion: opentelemetry.io/v1alpha1\nkind: Instrumentation\n\
             metadata: {name: java-inst, namespace: shop}\n\
             spec: {exporter: {endpoint: 'http://from-file:4318'}}\n",
        )
        .unwrap();
        let ctx = Context::build(
            &[manifests],
            &[file],
            &[("shop".into(), INJECT_JAVA.into(), "only-in-cluster".into())],
            Some(view),
            EngineConfig::default(),
            "default".into(),
        )
        .unwrap();
        let index = ctx.catalog.instrumentations();
        let endpoint = |name: &str| match index.get("shop", name) {
            Some(Ok(i)) => i.spec.exporter.as_ref().and_then(|e| e.endpoint.clone()),
            other => panic!("{name}: {other:?}"),
        };
        // The file replaces the cluster's object; the cluster's other one stays.
        assert_eq!(
            endpoint("java-inst").as_deref(),
            Some("http://from-file:4318")
        );
        assert_eq!(
            endpoint("only-in-cluster").as_deref(),
            Some("http://from-cluster:4318")
        );
        // Unreadable in the cluster: recorded as the webhook does, unless a manifest
        // replaces it.
        assert!(matches!(index.get("shop", "broken"), Some(Err(e)) if e == "bad sampler"));
        assert!(matches!(index.get("shop", "fixed"), Some(Ok(_))));
        assert_eq!(index.len(), 4);

        // Namespace keys: cluster, then the manifest's Namespace, then the flag.
        let ns = ctx.catalog.namespace("shop").unwrap();
        assert_eq!(
            ns.annotations,
            map(&[
                (INJECT_JAVA, "only-in-cluster"),
                (INJECT_PYTHON, "false"),
                (INJECT_NODEJS, "true")
            ])
        );
        // Injection labels (which win over annotations in the engine) and the Pod Security
        // level; other labels are not read.
        assert_eq!(ns.labels, map(&[(INJECT_NODEJS, "false")]));
        assert_eq!(ns.pod_security_enforce.as_deref(), Some("restricted"));
        // What `auto` decides by.
        assert_eq!(ctx.catalog.server_version(), Some((1, 37)));
        assert_eq!(ctx.catalog.image_volume_gate(), Some(false));
    }

    #[test]
    fn without_a_cluster_the_api_server_is_unknown_and_namespace_labels_still_count() {
        let manifests = manifests::parse(
            "m.yaml",
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: shop\n  labels:\n    \
             instrumentation.opentelemetry.io/inject-java: \"true\"\n",
        )
        .unwrap();
        let ctx = Context::build(
            &[manifests],
            &[],
            &[],
            None,
            EngineConfig::default(),
            "default".into(),
        )
        .unwrap();
        assert_eq!(ctx.catalog.server_version(), None);
        assert_eq!(ctx.catalog.image_volume_gate(), None);
        let ns = ctx.catalog.namespace("shop").unwrap();
        assert_eq!(ns.labels, map(&[(INJECT_JAVA, "true")]));
        assert!(ns.annotations.is_empty());
    }
}
