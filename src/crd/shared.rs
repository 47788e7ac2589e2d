//! The spec sections both versions hold as they are: the exporter's TLS, the propagators and
//! the sampler (v1alpha1 at the spec's top, v1beta1 under `envConfig`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::object::schema_objects;
use super::validation::{
    MSG_JAEGER_REMOTE_ARGUMENT, MSG_RATIO_ARGUMENT, RULE_JAEGER_REMOTE_ARGUMENT,
    RULE_RATIO_ARGUMENT, SAMPLER_ARGUMENT_MAX_LENGTH,
};

schema_objects! {
    /// TLS configuration of the exporter. The file fields are keys in the Secret/ConfigMap, or
    /// absolute paths already present in the workload.
    pub struct ExporterTls {
        /// Secret (in the workload's namespace) with the client certificate and key, maybe the CA.
        pub secret_name: Option<String>,
        /// ConfigMap with the CA certificate; if unset the CA comes from the Secret.
        pub config_map_name: Option<String>,
        /// CA certificate key (e.g. ca.crt) or absolute path.
        #[serde(rename = "ca_file")]
        pub ca_file: Option<String>,
        /// Client certificate key (e.g. tls.crt) or absolute path.
        #[serde(rename = "cert_file")]
        pub cert_file: Option<String>,
        /// Client private key key (e.g. tls.key) or absolute path.
        #[serde(rename = "key_file")]
        pub key_file: Option<String>,
    }
}

/// Context propagator, as named in OTEL_PROPAGATORS.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Propagator {
    // W3C Trace Context.
    TraceContext,
    // W3C Baggage.
    Baggage,
    // B3 single header.
    B3,
    // B3 multi header.
    B3Multi,
    // Jaeger (uber-trace-id).
    Jaeger,
    // AWS X-Ray.
    XRay,
    // OpenTracing.
    OtTrace,
    // No propagator.
    None,
}

impl Propagator {
    /// The value used in the CRD and in OTEL_PROPAGATORS.
    pub fn as_str(&self) -> &'static str {
        match self {
            Propagator::TraceContext => "tracecontext",
            Propagator::Baggage => "baggage",
            Propagator::B3 => "b3",
            Propagator::B3Multi => "b3multi",
            Propagator::Jaeger => "jaeger",
            Propagator::XRay => "xray",
            Propagator::OtTrace => "ottrace",
            Propagator::None => "none",
        }
    }
}

schema_objects! {
    /// Sampling configuration.
    #[schemars(extend("x-kubernetes-validations" = [
        {
            "rule": RULE_RATIO_ARGUMENT,
            "message": MSG_RATIO_ARGUMENT,
            "fieldPath": ".argument",
            "reason": "FieldValueInvalid",
        },
        {
            "rule": RULE_JAEGER_REMOTE_ARGUMENT,
            "message": MSG_JAEGER_REMOTE_ARGUMENT,
            "fieldPath": ".argument",
            "reason": "FieldValueInvalid",
        },
    ]))]
    pub struct Sampler {
        /// Sampler type, set in OTEL_TRACES_SAMPLER.
        #[serde(rename = "type")]
        pub type_: Option<SamplerType>,
        /// Sampler argument, set in OTEL_TRACES_SAMPLER_ARG. For the ratio samplers a number in
        /// [0, 1], e.g. 0.25; for jaeger_remote comma-separated key=value pairs (endpoint,
        /// pollingIntervalMs, initialSamplingRate).
        #[schemars(length(max = SAMPLER_ARGUMENT_MAX_LENGTH))]
        pub argument: Option<String>,
    }
}

/// Sampler type, as named in OTEL_TRACES_SAMPLER.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum SamplerType {
    #[serde(rename = "always_on")]
    AlwaysOn,
    #[serde(rename = "always_off")]
    AlwaysOff,
    #[serde(rename = "traceidratio")]
    TraceIdRatio,
    #[serde(rename = "parentbased_always_on")]
    ParentBasedAlwaysOn,
    #[serde(rename = "parentbased_always_off")]
    ParentBasedAlwaysOff,
    #[serde(rename = "parentbased_traceidratio")]
    ParentBasedTraceIdRatio,
    #[serde(rename = "jaeger_remote")]
    JaegerRemote,
    // Known to the Operator's code but missing from its CRD enum; accepted here.
    #[serde(rename = "parentbased_jaeger_remote")]
    ParentBasedJaegerRemote,
    // AWS X-Ray centralized sampling.
    #[serde(rename = "xray")]
    XRay,
}

impl SamplerType {
    /// The value used in the CRD and in OTEL_TRACES_SAMPLER.
    pub fn as_str(&self) -> &'static str {
        match self {
            SamplerType::AlwaysOn => "always_on",
            SamplerType::AlwaysOff => "always_off",
            SamplerType::TraceIdRatio => "traceidratio",
            SamplerType::ParentBasedAlwaysOn => "parentbased_always_on",
            SamplerType::ParentBasedAlwaysOff => "parentbased_always_off",
            SamplerType::ParentBasedTraceIdRatio => "parentbased_traceidratio",
            SamplerType::JaegerRemote => "jaeger_remote",
            SamplerType::ParentBasedJaegerRemote => "parentbased_jaeger_remote",
            SamplerType::XRay => "xray",
        }
    }
}
