//! The `Instrumentation` custom resource, wire-compatible with the OpenTelemetry Operator:
//! `opentelemetry.io/v1alpha1` (stored) and `v1beta1` (served, converted): Rust types, the
//! generated CRD with its CEL rules, the conversion, and YAML file parsing.
//!
//! `kind` derives both versions' resource with what they share (group, names, status,
//! columns); `spec` holds the v1alpha1 resource and its own sections, `shared` the sections
//! both versions hold alike, `status` the status, `carried` the v1beta1 fields a stored object
//! carries, `hash` the digest
//! of a spec, `languages` the per-language sections (built by `section`'s macro), `object` how every schema object is declared, `v1beta1` and `declarative` the v1beta1 resource
//! and its SDK configuration file, `convert` the exact conversion between the two,
//! `validation` the CEL rules and schema limits, `generate` the CRD manifest, `parse`
//! Instrumentation files. Everything is re-exported here, so callers
//! write `crd::X` whatever file `X` lives in.

pub mod base;
mod carried;
pub mod convert;
pub mod declarative;
mod error;
mod generate;
mod hash;
mod kind;
mod languages;
mod object;
mod parse;
pub mod review;
mod section;
mod shared;
mod spec;
mod status;
pub mod v1beta1;
mod validation;

pub use carried::V1beta1Fields;
pub use declarative::DeclarativeConfig;
pub use error::CrdError;
pub use generate::{
    CONVERSION_PATH, CONVERSION_SERVICE, Served, crd, crd_serving, crd_yaml, crd_yaml_for,
};
pub use hash::SpecHash;
pub use languages::{
    ApacheHttpdSpec, DotNetSpec, Extension, GoSpec, JavaSpec, NginxSpec, NodeJsSpec, PythonSpec,
};
pub use parse::{DEFAULT_NAMESPACE, parse_instrumentations};
pub use section::{LanguageSpec, NoSection, claim_template_is_empty};
pub use shared::{ExporterTls, Propagator, Sampler, SamplerType};
pub use spec::{
    API_VERSION, Defaults, Exporter, Instrumentation, InstrumentationSpec, KIND, ResourceSpec,
};
pub use status::{
    InstrumentationStatus, RolledBackWorkload, RolloutStatus, SkippedReason, WorkloadStatus,
};
pub use validation::{
    CONFIG_PATH_MAX_LENGTH, CONFIG_PATH_PATTERN, MSG_JAEGER_REMOTE_ARGUMENT, MSG_RATIO_ARGUMENT,
    MSG_VOLUME_EXCLUSIVE, QUANTITY_PATTERN, RULE_JAEGER_REMOTE_ARGUMENT, RULE_RATIO_ARGUMENT,
    RULE_VOLUME_EXCLUSIVE, SAMPLER_ARGUMENT_MAX_LENGTH,
};
