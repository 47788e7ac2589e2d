//! `spec.declarativeConfig` of a v1beta1 Instrumentation: the SDK configuration file, typed
//! after the OpenTelemetry configuration schema 1.x (`file_format` "1.0" and later) for the
//! parts the webhook supports: resource, propagator, the tracer, meter and logger providers
//! with their processors, readers, OTLP exporters, samplers and limits. Objects the schema
//! still moves (`*/development` properties, exporters other than OTLP and console, views,
//! pull readers) are kept as written (`x-kubernetes-preserve-unknown-fields`), so that a
//! newer agent's properties pass through; the SDK validates them at start-up.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_with::skip_serializing_none;

/// Pattern of `file_format`: the 1.x schema (the pre-1.0 shapes differ).
pub const FILE_FORMAT_PATTERN: &str = "^1[.][0-9]+$";

/// Properties this schema does not type, kept as written.
pub type Preserved = BTreeMap<String, Value>;

/// The SDK configuration file.
#[skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct DeclarativeConfig {
    /// Version of the configuration schema, e.g. "1.0".
    #[schemars(regex(pattern = FILE_FORMAT_PATTERN))]
    pub file_format: String,
    /// Disables the SDK.
    pub disabled: Option<bool>,
    /// SDK log level (e.g. info, debug).
    pub log_level: Option<String>,
    /// Limits of attributes on every signal.
    pub attribute_limits: Option<AttributeLimits>,
    /// The resource. The webhook adds the Kubernetes and service attributes to
    /// `attributes` (the ones written here win).
    pub resource: Option<Resource>,
    /// Context propagators.
    pub propagator: Option<Propagator>,
    /// Traces.
    pub tracer_provider: Option<TracerProvider>,
    /// Metrics.
    pub meter_provider: Option<MeterProvider>,
    /// Logs.
    pub logger_provider: Option<LoggerProvider>,
    /// Properties this schema does not type (e.g. `instrumentation/development`).
    #[serde(flatten)]
    #[schemars(skip)]
    pub other: Preserved,
}

/// Attribute limits.
#[skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct AttributeLimits {
    #[schemars(range(min = 0))]
    pub attribute_value_length_limit: Option<i64>,
    #[schemars(range(min = 0))]
    pub attribute_count_limit: Option<i64>,
}

/// The resource of every signal.
#[skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct Resource {
    /// Attributes, in order; the webhook adds its own after these (names already here are
    /// not added again).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attributes: Vec<Attribute>,
    /// Attributes as `key=value,...`, as in OTEL_RESOURCE_ATTRIBUTES.
    pub attributes_list: Option<String>,
    /// Schema URL of the resource.
    pub schema_url: Option<String>,
    /// Properties this schema does not type (e.g. `detection/development`).
    #[serde(flatten)]
    #[schemars(skip)]
    pub other: Preserved,
}

/// One attribute: a name, a value and its type.
#[skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct Attribute {
    /// Attribute name, e.g. service.namespace.
    #[schemars(length(min = 1))]
    pub name: String,
    /// The value: a string, boolean, number or array of one of them (as `type` says).
    #[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
    pub value: Value,
    /// string (default), bool, int, double, string_array, bool_array, int_array,
    /// double_array.
    #[serde(rename = "type")]
    #[schemars(extend("enum" = [
        "string", "bool", "int", "double",
        "string_array", "bool_array", "int_array", "double_array",
    ]))]
    pub type_: Option<String>,
}

/// Propagators: a composite of named ones.
#[skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct Propagator {
    /// Propagators by name, each an object of its settings, e.g. `- tracecontext: {}`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("items" = { "type": "object", "x-kubernetes-preserve-unknown-fields": true }))]
    pub composite: Vec<Preserved>,
    /// Propagators as a comma-separated list, as in OTEL_PROPAGATORS.
    pub composite_list: Option<String>,
}

/// Traces: processors, limits, sampler.
#[skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct TracerProvider {
    /// Span processors, each with its exporter.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub processors: Vec<Processor>,
    /// Span limits.
    pub limits: Option<SpanLimits>,
    /// The sampler.
    pub sampler: Option<Sampler>,
    /// Properties this schema does not type (e.g. `tracer_configurator/development`).
    #[serde(flatten)]
    #[schemars(skip)]
    pub other: Preserved,
}

/// A span or log record processor: `batch` or `simple`, each with an exporter.
#[skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct Processor {
    pub batch: Option<BatchProcessor>,
    pub simple: Option<SimpleProcessor>,
    /// Other processors, kept as written.
    #[serde(flatten)]
    #[schemars(skip)]
    pub other: Preserved,
}

/// The batching processor.
#[skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct BatchProcessor {
    /// Milliseconds between exports.
    #[schemars(range(min = 0))]
    pub schedule_delay: Option<i64>,
    /// Milliseconds an export may take.
    #[schemars(range(min = 0))]
    pub export_timeout: Option<i64>,
    #[schemars(range(min = 1))]
    pub max_queue_size: Option<i64>,
    #[schemars(range(min = 1))]
    pub max_export_batch_size: Option<i64>,
    pub exporter: Exporter,
}

/// The processor that exports each item as it ends.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct SimpleProcessor {
    pub exporter: Exporter,
}

/// An exporter: `otlp_http`, `otlp_grpc` or `console` (others kept as written).
#[skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct Exporter {
    pub otlp_http: Option<Otlp>,
    pub otlp_grpc: Option<Otlp>,
    /// Prints to standard output.
    #[schemars(extend("type" = "object", "x-kubernetes-preserve-unknown-fields" = true))]
    pub console: Option<Preserved>,
    /// Other exporters (e.g. `otlp_file/development`, zipkin), kept as written.
    #[serde(flatten)]
    #[schemars(skip)]
    pub other: Preserved,
}

/// An OTLP exporter (HTTP or gRPC).
#[skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct Otlp {
    /// e.g. http://collector:4318/v1/traces (HTTP) or http://collector:4317 (gRPC).
    pub endpoint: Option<String>,
    /// Headers sent with every export.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<Header>,
    /// Headers as `name=value,...`.
    pub headers_list: Option<String>,
    /// gzip or none.
    pub compression: Option<String>,
    /// Milliseconds an export may take.
    #[schemars(range(min = 0))]
    pub timeout: Option<i64>,
    /// Properties this schema does not type (tls, encoding, temporality_preference, ...).
    #[serde(flatten)]
    #[schemars(skip)]
    pub other: Preserved,
}

/// One header of an exporter.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct Header {
    pub name: String,
    pub value: String,
}

/// Span limits.
#[skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct SpanLimits {
    #[schemars(range(min = 0))]
    pub attribute_value_length_limit: Option<i64>,
    #[schemars(range(min = 0))]
    pub attribute_count_limit: Option<i64>,
    #[schemars(range(min = 0))]
    pub event_count_limit: Option<i64>,
    #[schemars(range(min = 0))]
    pub link_count_limit: Option<i64>,
    #[schemars(range(min = 0))]
    pub event_attribute_count_limit: Option<i64>,
    #[schemars(range(min = 0))]
    pub link_attribute_count_limit: Option<i64>,
}

/// A sampler: one of its properties set. `parent_based` holds the samplers it delegates to.
#[skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct Sampler {
    pub parent_based: Option<Box<ParentBased>>,
    #[serde(flatten)]
    pub leaf: LeafSampler,
}

/// The samplers that delegate to none.
#[skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct LeafSampler {
    #[schemars(extend("type" = "object", "x-kubernetes-preserve-unknown-fields" = true))]
    pub always_on: Option<Preserved>,
    #[schemars(extend("type" = "object", "x-kubernetes-preserve-unknown-fields" = true))]
    pub always_off: Option<Preserved>,
    pub trace_id_ratio_based: Option<TraceIdRatioBased>,
    /// Other samplers (e.g. `jaeger_remote/development`, `probability/development`).
    #[serde(flatten)]
    #[schemars(skip)]
    pub other: Preserved,
}

/// Samples a ratio of traces by trace id.
#[skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct TraceIdRatioBased {
    #[schemars(range(min = 0.0, max = 1.0))]
    pub ratio: Option<f64>,
}

/// Follows the parent's decision; the root and each parent case delegate to a sampler.
#[skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct ParentBased {
    pub root: Option<LeafSampler>,
    pub remote_parent_sampled: Option<LeafSampler>,
    pub remote_parent_not_sampled: Option<LeafSampler>,
    pub local_parent_sampled: Option<LeafSampler>,
    pub local_parent_not_sampled: Option<LeafSampler>,
}

/// Metrics: readers (views and the rest kept as written).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct MeterProvider {
    /// Metric readers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub readers: Vec<Reader>,
    /// Properties this schema does not type (views, exemplar_filter, ...).
    #[serde(flatten)]
    #[schemars(skip)]
    pub other: Preserved,
}

/// A metric reader: `periodic` with an exporter (`pull` and others kept as written).
#[skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct Reader {
    pub periodic: Option<PeriodicReader>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub other: Preserved,
}

/// Exports metrics at an interval.
#[skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct PeriodicReader {
    /// Milliseconds between exports.
    #[schemars(range(min = 0))]
    pub interval: Option<i64>,
    /// Milliseconds an export may take.
    #[schemars(range(min = 0))]
    pub timeout: Option<i64>,
    pub exporter: Exporter,
}

/// Logs: processors and limits.
#[skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct LoggerProvider {
    /// Log record processors, each with its exporter.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub processors: Vec<Processor>,
    /// Log record limits.
    pub limits: Option<AttributeLimits>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub other: Preserved,
}
