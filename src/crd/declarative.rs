//! `spec.declarativeConfig` of a v1beta1 Instrumentation: the SDK configuration file, typed
//! after the OpenTelemetry configuration schema 1.x (`file_format` "1.0" and later) for the
//! parts the webhook supports: resource, propagator, the tracer, meter and logger providers
//! with their processors, readers, OTLP exporters, samplers and limits. Objects the schema
//! still moves (`*/development` properties, exporters other than OTLP and console, views,
//! pull readers) are kept as written (`x-kubernetes-preserve-unknown-fields`), so that a
//! newer agent's properties pass through; the SDK validates them at start-up.

use serde_json::Value;

pub use super::object::Preserved;
use super::object::schema_objects;

/// Pattern of `file_format`: the 1.x schema (the pre-1.0 shapes differ).
pub const FILE_FORMAT_PATTERN: &str = "^1[.][0-9]+$";

schema_objects! {
    file:
    /// The SDK configuration file.
    pub open struct DeclarativeConfig {
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
        pub resource: Option<SdkResource>,
        /// Context propagators.
        pub propagator: Option<SdkPropagator>,
        /// Traces.
        pub tracer_provider: Option<TracerProvider>,
        /// Metrics.
        pub meter_provider: Option<MeterProvider>,
        /// Logs.
        pub logger_provider: Option<LoggerProvider>,
    }

    /// Attribute limits.
    pub struct AttributeLimits {
        #[schemars(range(min = 0))]
        pub attribute_value_length_limit: Option<i64>,
        #[schemars(range(min = 0))]
        pub attribute_count_limit: Option<i64>,
    }

    /// The resource of every signal.
    pub open struct SdkResource {
        /// Attributes, in order; the webhook adds its own after these (names already here are
        /// not added again).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub attributes: Vec<Attribute>,
        /// Attributes as `key=value,...`, as in OTEL_RESOURCE_ATTRIBUTES.
        pub attributes_list: Option<String>,
        /// Schema URL of the resource.
        pub schema_url: Option<String>,
    }

    /// One attribute: a name, a value and its type.
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
    pub struct SdkPropagator {
        /// Propagators by name, each an object of its settings, e.g. `- tracecontext: {}`.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        #[schemars(extend("items" = { "type": "object", "x-kubernetes-preserve-unknown-fields": true }))]
        pub composite: Vec<Preserved>,
        /// Propagators as a comma-separated list, as in OTEL_PROPAGATORS.
        pub composite_list: Option<String>,
    }

    /// Traces: processors, limits, sampler.
    pub open struct TracerProvider {
        /// Span processors, each with its exporter.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub processors: Vec<Processor>,
        /// Span limits.
        pub limits: Option<SpanLimits>,
        /// The sampler.
        pub sampler: Option<SdkSampler>,
    }

    /// A span or log record processor: `batch` or `simple`, each with an exporter.
    pub open struct Processor {
        pub batch: Option<BatchProcessor>,
        pub simple: Option<SimpleProcessor>,
    }

    /// The batching processor.
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
        pub exporter: SdkExporter,
    }

    /// The processor that exports each item as it ends.
    pub struct SimpleProcessor {
        pub exporter: SdkExporter,
    }

    /// An exporter: `otlp_http`, `otlp_grpc` or `console` (others kept as written).
    pub open struct SdkExporter {
        pub otlp_http: Option<Otlp>,
        pub otlp_grpc: Option<Otlp>,
        /// Prints to standard output.
        #[schemars(extend("type" = "object", "x-kubernetes-preserve-unknown-fields" = true))]
        pub console: Option<Preserved>,
    }

    /// An OTLP exporter (HTTP or gRPC).
    pub open struct Otlp {
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
    }

    /// One header of an exporter.
    pub struct Header {
        pub name: String,
        pub value: String,
    }

    /// Span limits.
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
    #[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
    pub struct SdkSampler {
        pub parent_based: Option<Box<ParentBased>>,
        #[serde(flatten)]
        pub leaf: LeafSampler,
    }

    /// The samplers that delegate to none.
    pub open struct LeafSampler {
        #[schemars(extend("type" = "object", "x-kubernetes-preserve-unknown-fields" = true))]
        pub always_on: Option<Preserved>,
        #[schemars(extend("type" = "object", "x-kubernetes-preserve-unknown-fields" = true))]
        pub always_off: Option<Preserved>,
        pub trace_id_ratio_based: Option<TraceIdRatioBased>,
    }

    /// Samples a ratio of traces by trace id.
    pub struct TraceIdRatioBased {
        #[schemars(range(min = 0.0, max = 1.0))]
        pub ratio: Option<f64>,
    }

    /// Follows the parent's decision; the root and each parent case delegate to a sampler.
    pub struct ParentBased {
        pub root: Option<LeafSampler>,
        pub remote_parent_sampled: Option<LeafSampler>,
        pub remote_parent_not_sampled: Option<LeafSampler>,
        pub local_parent_sampled: Option<LeafSampler>,
        pub local_parent_not_sampled: Option<LeafSampler>,
    }

    /// Metrics: readers (views and the rest kept as written).
    pub open struct MeterProvider {
        /// Metric readers.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub readers: Vec<Reader>,
    }

    /// A metric reader: `periodic` with an exporter (`pull` and others kept as written).
    pub open struct Reader {
        pub periodic: Option<PeriodicReader>,
    }

    /// Exports metrics at an interval.
    pub struct PeriodicReader {
        /// Milliseconds between exports.
        #[schemars(range(min = 0))]
        pub interval: Option<i64>,
        /// Milliseconds an export may take.
        #[schemars(range(min = 0))]
        pub timeout: Option<i64>,
        pub exporter: SdkExporter,
    }

    /// Logs: processors and limits.
    pub open struct LoggerProvider {
        /// Log record processors, each with its exporter.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub processors: Vec<Processor>,
        /// Log record limits.
        pub limits: Option<AttributeLimits>,
    }

}
