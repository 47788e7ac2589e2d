//! [`CrdError`], the one error type of this module: an Instrumentation file that cannot be read,
//! or the CRD failing to render. Its messages say what to fix.

use super::spec::{API_VERSION, KIND};
use super::v1beta1::API_VERSION_V1BETA1;

/// Errors from reading Instrumentation files and rendering the CRD.
///
/// Documents are numbered from 1 in file order, not counting empty documents; `line` is the
/// 1-based line where the document's content starts.
#[derive(Debug, thiserror::Error)]
pub enum CrdError {
    /// The text is not valid YAML.
    #[error("cannot parse the Instrumentation YAML, fix its syntax: {0}")]
    Yaml(#[source] Box<serde_saphyr::Error>),
    /// A document is not a mapping.
    #[error(
        "document {index} (line {line}) is not a mapping; each document must be an \
         Instrumentation object"
    )]
    NotAnObject { index: usize, line: u64 },
    /// A document is some other kind of object.
    #[error(
        "document {index} (line {line}) has apiVersion {api_version:?} and kind {kind:?}; \
         set apiVersion: {API_VERSION} (or {API_VERSION_V1BETA1}) and kind: {KIND}, or remove \
         the document"
    )]
    WrongKind {
        index: usize,
        line: u64,
        api_version: String,
        kind: String,
    },
    /// A document does not match the Instrumentation schema; the source error shows where.
    #[error("{} is not a valid Instrumentation, fix the field shown: {source}", document_label(*.index))]
    Invalid {
        /// The document holding the error, or 0 when the parser gave no position.
        index: usize,
        #[source]
        source: Box<serde_saphyr::Error>,
    },
    /// A v1beta1 document does not match its schema, or carries a field that cannot be read.
    #[error("document {index} (line {line}) is not a valid v1beta1 Instrumentation: {message}")]
    InvalidV1beta1 {
        index: usize,
        line: u64,
        message: String,
    },
    /// A document has no `metadata.name`.
    #[error(
        "document {index} (line {line}) has no metadata.name; give every Instrumentation a name"
    )]
    MissingName { index: usize, line: u64 },
    /// The CRD could not be serialized (not expected to happen).
    #[error("cannot render the Instrumentation CRD as YAML: {0}")]
    Render(#[source] Box<serde_saphyr::SerializeError>),
}

fn document_label(index: usize) -> String {
    match index {
        0 => "a document".to_owned(),
        n => format!("document {n}"),
    }
}
