//! Instrumentation YAML files: `---`-separated documents read into [`Instrumentation`]s, with
//! errors that name the document and line to fix.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;
use serde_json::Value;

use super::convert::{Version, to_v1alpha1};
use super::error::CrdError;
use super::spec::{Instrumentation, InstrumentationSpec, KIND};
use super::status::InstrumentationStatus;
use super::v1beta1;

/// Namespace given to Instrumentations read from files without `metadata.namespace`.
pub const DEFAULT_NAMESPACE: &str = "default";

/// One YAML document as read from a file; `apiVersion` and `kind` are checked beforehand.
#[derive(Deserialize)]
struct Document {
    #[serde(default)]
    metadata: ObjectMeta,
    #[serde(default)]
    spec: Option<InstrumentationSpec>,
    #[serde(default)]
    status: Option<InstrumentationStatus>,
}

/// Parses one or more `---`-separated YAML documents, each an `opentelemetry.io/v1alpha1` or
/// `v1beta1` Instrumentation (a v1beta1 one is converted to the stored version, as the API
/// server would store it, and its v1beta1 fields read). Empty documents are skipped. Each object needs `metadata.name`; a missing
/// or empty `metadata.namespace` becomes [`DEFAULT_NAMESPACE`] (`"default"`). A missing or
/// null `spec` means an empty spec. Unknown fields are ignored, as the apiserver prunes them.
pub fn parse_instrumentations(yaml: &str) -> Result<Vec<Instrumentation>, CrdError> {
    // First pass: untyped, to check what each document is before reading it as one.
    let untyped: Vec<serde_saphyr::Spanned<Value>> =
        serde_saphyr::from_multiple(yaml).map_err(|err| CrdError::Yaml(Box::new(err)))?;
    let mut starts = Vec::with_capacity(untyped.len());
    let mut versions = Vec::with_capacity(untyped.len());
    for (position, document) in untyped.iter().enumerate() {
        let (index, line) = (position + 1, document.referenced.line());
        let Some(object) = document.value.as_object() else {
            return Err(CrdError::NotAnObject { index, line });
        };
        let field = |name: &str| {
            object
                .get(name)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let (api_version, kind) = (field("apiVersion"), field("kind"));
        let version = Version::of(&api_version).filter(|_| kind == KIND);
        let Some(version) = version else {
            return Err(CrdError::WrongKind {
                index,
                line,
                api_version,
                kind,
            });
        };
        starts.push(line);
        versions.push(version);
    }

    // Second pass: typed, so that errors point at the offending line and column.
    let documents: Vec<Document> = serde_saphyr::from_multiple(yaml).map_err(|source| {
        let index = source.location().map_or(0, |at| {
            starts.iter().filter(|&&start| start <= at.line()).count()
        });
        CrdError::Invalid {
            index,
            source: Box::new(source),
        }
    })?;

    documents
        .into_iter()
        .zip(starts)
        .enumerate()
        .map(|(position, (document, line))| {
            let index = position + 1;
            let document = match versions[position] {
                Version::V1alpha1 => document,
                Version::V1beta1 => stored(&untyped[position].value).map_err(|message| {
                    CrdError::InvalidV1beta1 {
                        index,
                        line,
                        message,
                    }
                })?,
            };
            let mut metadata = document.metadata;
            if metadata.name.as_deref().is_none_or(str::is_empty) {
                return Err(CrdError::MissingName { index, line });
            }
            if metadata.namespace.as_deref().is_none_or(str::is_empty) {
                metadata.namespace = Some(DEFAULT_NAMESPACE.to_owned());
            }
            let mut inst = Instrumentation {
                metadata,
                spec: document.spec.unwrap_or_default(),
                status: document.status,
            };
            inst.read_carried()
                .map_err(|message| CrdError::InvalidV1beta1 {
                    index,
                    line,
                    message,
                })?;
            Ok(inst)
        })
        .collect()
}

/// A v1beta1 document checked against its schema's types and converted to the stored
/// version; the error says what is wrong.
fn stored(document: &Value) -> Result<Document, String> {
    if let Some(spec) = document.get("spec").filter(|s| !s.is_null()) {
        v1beta1::InstrumentationSpecV1beta1::deserialize(spec).map_err(|e| format!("spec: {e}"))?;
    }
    let mut document = document.clone();
    if let Some(object) = document.as_object_mut() {
        object.retain(|_, v| !v.is_null());
    }
    let alpha = to_v1alpha1(&document).map_err(|e| e.to_string())?;
    Document::deserialize(alpha).map_err(|e| e.to_string())
}
