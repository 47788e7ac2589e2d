//! The `Instrumentation` custom resource (`opentelemetry.io/v1alpha1`), wire-compatible with the
//! OpenTelemetry Operator: Rust types, the generated CRD with its CEL rules, and YAML file parsing.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::core::v1::{
    EnvVar, PersistentVolumeClaimSpec, PersistentVolumeClaimTemplate, ResourceRequirements,
    SecurityContext, VolumeResourceRequirements,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSON, JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{CustomResource, CustomResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `apiVersion` of every Instrumentation object.
pub const API_VERSION: &str = "opentelemetry.io/v1alpha1";
/// `kind` of every Instrumentation object.
pub const KIND: &str = "Instrumentation";
/// Namespace given to Instrumentations read from files without `metadata.namespace`.
pub const DEFAULT_NAMESPACE: &str = "default";

/// Upper bound on `spec.sampler.argument`; keeps the CEL rules' cost bounded.
pub const SAMPLER_ARGUMENT_MAX_LENGTH: u32 = 1024;

// CEL rules. Regexes avoid backslashes so they need no escaping inside CEL string literals.
// A decimal number, as Go's strconv.ParseFloat accepts it (minus hex, inf and nan).
macro_rules! float_re {
    () => {
        "[+-]?([0-9]+([.][0-9]*)?|[.][0-9]+)([eE][+-]?[0-9]+)?"
    };
}

/// CEL: ratio samplers need an argument that is a number in [0, 1] (an empty argument is allowed).
pub const RULE_RATIO_ARGUMENT: &str = concat!(
    "!has(self.type) || !(self.type in ['traceidratio', 'parentbased_traceidratio'])",
    " || !has(self.argument) || self.argument == ''",
    " || (self.argument.matches('^",
    float_re!(),
    "$') && double(self.argument) >= 0.0 && double(self.argument) <= 1.0)"
);
/// Message of [`RULE_RATIO_ARGUMENT`].
pub const MSG_RATIO_ARGUMENT: &str =
    "sampler.argument must be a number between 0 and 1 for traceidratio samplers";

/// CEL: jaeger_remote arguments are `key=value` pairs separated by commas. `endpoint` must not
/// be empty, `pollingIntervalMs` must be an integer, `initialSamplingRate` a number in [0, 1].
/// Other keys are accepted, as the Operator accepts them.
pub const RULE_JAEGER_REMOTE_ARGUMENT: &str = concat!(
    "!has(self.type) || !(self.type in ['jaeger_remote', 'parentbased_jaeger_remote'])",
    " || !has(self.argument) || self.argument == ''",
    " || self.argument.split(',').all(p, p.matches('^[^=]*=[^=]*$') && (",
    "p.startsWith('endpoint=') ? size(p) > 9",
    " : p.startsWith('pollingIntervalMs=') ? p.matches('^pollingIntervalMs=[+-]?[0-9]+$')",
    " : p.startsWith('initialSamplingRate=') ? (p.matches('^initialSamplingRate=",
    float_re!(),
    "$') && double(p.substring(20)) >= 0.0 && double(p.substring(20)) <= 1.0)",
    " : true))"
);
/// Message of [`RULE_JAEGER_REMOTE_ARGUMENT`].
pub const MSG_JAEGER_REMOTE_ARGUMENT: &str = "sampler.argument for jaeger_remote samplers must be \
     comma-separated key=value pairs: endpoint must not be empty, pollingIntervalMs must be an \
     integer and initialSamplingRate a number between 0 and 1";

/// CEL: `volumeClaimTemplate` and `volumeLimitSize` are mutually exclusive. A template without
/// any content (`{metadata: {}, spec: {resources: {}}}`, which the Operator writes into every
/// language section it defaults) counts as unset, like the Operator's `IsZero` check.
pub const RULE_VOLUME_EXCLUSIVE: &str = concat!(
    "!has(self.volumeLimitSize) || !has(self.volumeClaimTemplate) || !(",
    "(has(self.volumeClaimTemplate.metadata) && (has(self.volumeClaimTemplate.metadata.name)",
    " || has(self.volumeClaimTemplate.metadata.namespace) || has(self.volumeClaimTemplate.metadata.labels)",
    " || has(self.volumeClaimTemplate.metadata.annotations) || has(self.volumeClaimTemplate.metadata.finalizers)))",
    " || has(self.volumeClaimTemplate.spec.accessModes) || has(self.volumeClaimTemplate.spec.dataSource)",
    " || has(self.volumeClaimTemplate.spec.dataSourceRef) || has(self.volumeClaimTemplate.spec.selector)",
    " || has(self.volumeClaimTemplate.spec.storageClassName)",
    " || has(self.volumeClaimTemplate.spec.volumeAttributesClassName)",
    " || has(self.volumeClaimTemplate.spec.volumeMode) || has(self.volumeClaimTemplate.spec.volumeName)",
    " || (has(self.volumeClaimTemplate.spec.resources) && (has(self.volumeClaimTemplate.spec.resources.limits)",
    " || has(self.volumeClaimTemplate.spec.resources.requests))))"
);
/// Message of [`RULE_VOLUME_EXCLUSIVE`].
pub const MSG_VOLUME_EXCLUSIVE: &str = "volumeClaimTemplate and volumeLimitSize cannot both be set; \
     remove volumeLimitSize (deprecated) or volumeClaimTemplate";

/// Pattern of `apacheHttpd.configPath` and `nginx.configFile` (as in the Operator).
pub const CONFIG_PATH_PATTERN: &str = "^[A-Za-z0-9._/-]*$";
/// Maximum length of `apacheHttpd.configPath` and `nginx.configFile` (as in the Operator).
pub const CONFIG_PATH_MAX_LENGTH: u32 = 256;

/// Desired state of OpenTelemetry SDK configuration and auto-instrumentation.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "opentelemetry.io",
    version = "v1alpha1",
    kind = "Instrumentation",
    namespaced,
    shortname = "otelinst",
    shortname = "otelinsts",
    status = "InstrumentationStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "Instrumentation is the spec for OpenTelemetry instrumentation.",
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name": "Endpoint", "type": "string", "jsonPath": ".spec.exporter.endpoint"}"#,
    printcolumn = r#"{"name": "Sampler", "type": "string", "jsonPath": ".spec.sampler.type"}"#,
    printcolumn = r#"{"name": "Sampler Arg", "type": "string", "jsonPath": ".spec.sampler.argument"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct InstrumentationSpec {
    /// OTLP exporter configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exporter: Option<Exporter>,
    /// Context propagators, set in OTEL_PROPAGATORS.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub propagators: Vec<Propagator>,
    /// Sampler configuration, set in OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampler: Option<Sampler>,
    /// Resource attribute configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<ResourceSpec>,
    /// Env vars for all languages. Precedence: container env > language env > this env >
    /// values derived from this spec.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,
    /// Default behaviour of the instrumentation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub defaults: Option<Defaults>,
    /// Image pull policy of the injected init containers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_policy: Option<String>,
    /// Security context of the injected init containers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init_container_security_context: Option<SecurityContext>,
    /// Java auto-instrumentation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub java: Option<Java>,
    /// Node.js auto-instrumentation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodejs: Option<NodeJs>,
    /// Python auto-instrumentation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python: Option<Python>,
    /// .NET auto-instrumentation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dotnet: Option<DotNet>,
    /// Go auto-instrumentation (eBPF sidecar). Needs OTEL_GO_AUTO_TARGET_EXE, from env or the
    /// instrumentation.opentelemetry.io/otel-go-auto-target-exe pod annotation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub go: Option<Go>,
    /// Apache HTTPD auto-instrumentation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub apache_httpd: Option<ApacheHttpd>,
    /// Nginx auto-instrumentation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nginx: Option<Nginx>,
}

/// Status of an Instrumentation.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InstrumentationStatus {
    /// Language images that could not be upgraded automatically, mapped to the reason.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub upgrade_blocked_versions: BTreeMap<String, String>,
}

/// OTLP exporter configuration.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Exporter {
    /// Address of the collector's OTLP endpoint. An https:// endpoint needs `tls`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// TLS certificates; used only with an https:// endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<ExporterTls>,
}

/// TLS configuration of the exporter. The file fields are keys in the Secret/ConfigMap, or
/// absolute paths already present in the workload.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExporterTls {
    /// Secret (in the workload's namespace) with the client certificate and key, maybe the CA.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_name: Option<String>,
    /// ConfigMap with the CA certificate; if unset the CA comes from the Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_name: Option<String>,
    /// CA certificate key (e.g. ca.crt) or absolute path.
    #[serde(default, rename = "ca_file", skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<String>,
    /// Client certificate key (e.g. tls.crt) or absolute path.
    #[serde(default, rename = "cert_file", skip_serializing_if = "Option::is_none")]
    pub cert_file: Option<String>,
    /// Client private key key (e.g. tls.key) or absolute path.
    #[serde(default, rename = "key_file", skip_serializing_if = "Option::is_none")]
    pub key_file: Option<String>,
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

impl fmt::Display for Propagator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Sampling configuration.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
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
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<SamplerType>,
    /// Sampler argument, set in OTEL_TRACES_SAMPLER_ARG. For the ratio samplers a number in
    /// [0, 1], e.g. 0.25; for jaeger_remote comma-separated key=value pairs (endpoint,
    /// pollingIntervalMs, initialSamplingRate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = SAMPLER_ARGUMENT_MAX_LENGTH))]
    pub argument: Option<String>,
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

impl fmt::Display for SamplerType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Resource attribute configuration.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceSpec {
    /// Attributes added to the resource, e.g. environment: dev.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resource_attributes: BTreeMap<String, String>,
    /// Whether to add k8s UID attributes (e.g. k8s.deployment.uid).
    #[serde(
        default,
        rename = "addK8sUIDAttributes",
        skip_serializing_if = "Option::is_none"
    )]
    pub add_k8s_uid_attributes: Option<bool>,
}

/// Defaults of the instrumentation.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Defaults {
    /// Derive service.name (labels app.kubernetes.io/instance, then app.kubernetes.io/name)
    /// and service.version (label app.kubernetes.io/version) from the pod's labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub use_labels_for_resource_attributes: Option<bool>,
}

/// Java auto-instrumentation (javaagent).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    { "rule": RULE_VOLUME_EXCLUSIVE, "message": MSG_VOLUME_EXCLUSIVE },
]))]
pub struct Java {
    /// Image with the javaagent JAR.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Java-specific env vars; they take precedence over spec.env.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,
    /// Compute resources of the init container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Ephemeral volume for the agent files; if unset an emptyDir is used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_claim_template: Option<PersistentVolumeClaimTemplate>,
    /// Size limit of the emptyDir (default 200Mi). Deprecated: use volumeClaimTemplate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_limit_size: Option<Quantity>,
    /// Extension JARs, all copied into one directory.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extensions: Vec<Extension>,
}

/// A Java agent extension.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Extension {
    /// Image with the extension JARs.
    pub image: String,
    /// Directory holding the extension JARs in that image.
    pub dir: String,
}

/// Node.js auto-instrumentation.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    { "rule": RULE_VOLUME_EXCLUSIVE, "message": MSG_VOLUME_EXCLUSIVE },
]))]
pub struct NodeJs {
    /// Image with the Node.js SDK and instrumentations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Node.js-specific env vars; they take precedence over spec.env.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,
    /// Compute resources of the init container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_requirements: Option<ResourceRequirements>,
    /// Ephemeral volume for the instrumentation files; if unset an emptyDir is used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_claim_template: Option<PersistentVolumeClaimTemplate>,
    /// Size limit of the emptyDir (default 200Mi). Deprecated: use volumeClaimTemplate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_limit_size: Option<Quantity>,
}

/// Python auto-instrumentation.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    { "rule": RULE_VOLUME_EXCLUSIVE, "message": MSG_VOLUME_EXCLUSIVE },
]))]
pub struct Python {
    /// Image with the Python SDK and instrumentations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Python-specific env vars; they take precedence over spec.env.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,
    /// Compute resources of the init container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_requirements: Option<ResourceRequirements>,
    /// Ephemeral volume for the instrumentation files; if unset an emptyDir is used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_claim_template: Option<PersistentVolumeClaimTemplate>,
    /// Size limit of the emptyDir (default 200Mi). Deprecated: use volumeClaimTemplate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_limit_size: Option<Quantity>,
}

/// .NET auto-instrumentation.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    { "rule": RULE_VOLUME_EXCLUSIVE, "message": MSG_VOLUME_EXCLUSIVE },
]))]
pub struct DotNet {
    /// Image with the .NET SDK and instrumentations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// .NET-specific env vars; they take precedence over spec.env.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,
    /// Compute resources of the init container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_requirements: Option<ResourceRequirements>,
    /// Ephemeral volume for the instrumentation files; if unset an emptyDir is used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_claim_template: Option<PersistentVolumeClaimTemplate>,
    /// Size limit of the emptyDir (default 200Mi). Deprecated: use volumeClaimTemplate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_limit_size: Option<Quantity>,
}

/// Go auto-instrumentation (eBPF sidecar).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    { "rule": RULE_VOLUME_EXCLUSIVE, "message": MSG_VOLUME_EXCLUSIVE },
]))]
pub struct Go {
    /// Image of the Go auto-instrumentation sidecar.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Go-specific env vars; they take precedence over spec.env.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,
    /// Compute resources of the sidecar.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_requirements: Option<ResourceRequirements>,
    /// Ephemeral volume for the instrumentation files; if unset an emptyDir is used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_claim_template: Option<PersistentVolumeClaimTemplate>,
    /// Size limit of the emptyDir (default 200Mi). Deprecated: use volumeClaimTemplate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_limit_size: Option<Quantity>,
    /// Security context of the sidecar (it needs privileges to use eBPF).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_context: Option<SecurityContext>,
}

/// Apache HTTPD auto-instrumentation (otel-webserver-module).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    { "rule": RULE_VOLUME_EXCLUSIVE, "message": MSG_VOLUME_EXCLUSIVE },
]))]
pub struct ApacheHttpd {
    /// Image with the Apache HTTPD module.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Apache-specific env vars; they take precedence over spec.env.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,
    /// Compute resources of the init containers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_requirements: Option<ResourceRequirements>,
    /// Ephemeral volume for the module files; if unset an emptyDir is used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_claim_template: Option<PersistentVolumeClaimTemplate>,
    /// Size limit of the emptyDir (default 200Mi). Deprecated: use volumeClaimTemplate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_limit_size: Option<Quantity>,
    /// Agent attributes written to the module configuration; they override the defaults.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attrs: Vec<EnvVar>,
    /// Apache HTTPD version: 2.4 (default) or 2.2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Directory of the Apache configuration (default /usr/local/apache2/conf).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = CONFIG_PATH_MAX_LENGTH), pattern(CONFIG_PATH_PATTERN))]
    pub config_path: Option<String>,
}

/// Nginx auto-instrumentation (otel-webserver-module).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    { "rule": RULE_VOLUME_EXCLUSIVE, "message": MSG_VOLUME_EXCLUSIVE },
]))]
pub struct Nginx {
    /// Image with the Nginx module.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Nginx-specific env vars; they take precedence over spec.env.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,
    /// Compute resources of the init containers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_requirements: Option<ResourceRequirements>,
    /// Ephemeral volume for the module files; if unset an emptyDir is used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_claim_template: Option<PersistentVolumeClaimTemplate>,
    /// Size limit of the emptyDir (default 200Mi). Deprecated: use volumeClaimTemplate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_limit_size: Option<Quantity>,
    /// Agent attributes written to the module configuration; they override the defaults.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attrs: Vec<EnvVar>,
    /// Nginx configuration file (default /etc/nginx/nginx.conf).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = CONFIG_PATH_MAX_LENGTH), pattern(CONFIG_PATH_PATTERN))]
    pub config_file: Option<String>,
}

/// The settings every per-language section shares, so callers can treat them generically.
pub trait LanguageSpec {
    /// The instrumentation image; `None` when unset or empty (the Operator's "use the default").
    fn image(&self) -> Option<&str>;
    /// Language-specific env vars.
    fn env(&self) -> &[EnvVar];
    /// Compute resources (`resources` for Java, `resourceRequirements` for the others).
    fn resources(&self) -> Option<&ResourceRequirements>;
    /// The volume claim template, or `None` when unset or without content (see
    /// [`claim_template_is_empty`]).
    fn volume_claim_template(&self) -> Option<&PersistentVolumeClaimTemplate>;
    /// The deprecated emptyDir size limit.
    fn volume_limit_size(&self) -> Option<&Quantity>;
}

/// The section of a language that has none of its own (SDK-only): nothing set.
pub struct NoSection;

impl LanguageSpec for NoSection {
    fn image(&self) -> Option<&str> {
        None
    }
    fn env(&self) -> &[EnvVar] {
        &[]
    }
    fn resources(&self) -> Option<&ResourceRequirements> {
        None
    }
    fn volume_claim_template(&self) -> Option<&PersistentVolumeClaimTemplate> {
        None
    }
    fn volume_limit_size(&self) -> Option<&Quantity> {
        None
    }
}

impl InstrumentationSpec {
    /// `spec.defaults.useLabelsForResourceAttributes`.
    pub fn use_labels_for_resource_attributes(&self) -> bool {
        self.defaults
            .as_ref()
            .and_then(|d| d.use_labels_for_resource_attributes)
            .unwrap_or(false)
    }

    /// `spec.resource.addK8sUIDAttributes`.
    pub fn add_k8s_uid_attributes(&self) -> bool {
        self.resource
            .as_ref()
            .and_then(|r| r.add_k8s_uid_attributes)
            .unwrap_or(false)
    }
}

/// Whether a volume claim template carries nothing: no metadata and a spec whose only content
/// is an empty `resources`. The Operator writes such templates into every language section it
/// defaults and treats them as absent; so do [`LanguageSpec::volume_claim_template`] and the
/// CEL rule [`RULE_VOLUME_EXCLUSIVE`].
pub fn claim_template_is_empty(template: &PersistentVolumeClaimTemplate) -> bool {
    let metadata_empty = template
        .metadata
        .as_ref()
        .is_none_or(|m| *m == ObjectMeta::default());
    let resources_empty = template
        .spec
        .resources
        .as_ref()
        .is_none_or(|r| *r == VolumeResourceRequirements::default());
    let rest = PersistentVolumeClaimSpec {
        resources: None,
        ..template.spec.clone()
    };
    metadata_empty && resources_empty && rest == PersistentVolumeClaimSpec::default()
}

macro_rules! impl_language_spec {
    ($ty:ty, $resources:ident) => {
        impl LanguageSpec for $ty {
            fn image(&self) -> Option<&str> {
                self.image.as_deref().filter(|image| !image.is_empty())
            }
            fn env(&self) -> &[EnvVar] {
                &self.env
            }
            fn resources(&self) -> Option<&ResourceRequirements> {
                self.$resources.as_ref()
            }
            fn volume_claim_template(&self) -> Option<&PersistentVolumeClaimTemplate> {
                self.volume_claim_template
                    .as_ref()
                    .filter(|t| !claim_template_is_empty(t))
            }
            fn volume_limit_size(&self) -> Option<&Quantity> {
                self.volume_limit_size.as_ref()
            }
        }
    };
}

impl_language_spec!(Java, resources);
impl_language_spec!(NodeJs, resource_requirements);
impl_language_spec!(Python, resource_requirements);
impl_language_spec!(DotNet, resource_requirements);
impl_language_spec!(Go, resource_requirements);
impl_language_spec!(ApacheHttpd, resource_requirements);
impl_language_spec!(Nginx, resource_requirements);

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
         set apiVersion: {API_VERSION} and kind: {KIND}, or remove the document"
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

/// Parses one or more `---`-separated YAML documents, each an `opentelemetry.io/v1alpha1`
/// Instrumentation. Empty documents are skipped. Each object needs `metadata.name`; a missing
/// or empty `metadata.namespace` becomes [`DEFAULT_NAMESPACE`] (`"default"`). A missing or
/// null `spec` means an empty spec. Unknown fields are ignored, as the apiserver prunes them.
pub fn parse_instrumentations(yaml: &str) -> Result<Vec<Instrumentation>, CrdError> {
    // First pass: untyped, to check what each document is before reading it as one.
    let untyped: Vec<serde_saphyr::Spanned<Value>> =
        serde_saphyr::from_multiple(yaml).map_err(|err| CrdError::Yaml(Box::new(err)))?;
    let mut starts = Vec::with_capacity(untyped.len());
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
        if api_version != API_VERSION || kind != KIND {
            return Err(CrdError::WrongKind {
                index,
                line,
                api_version,
                kind,
            });
        }
        starts.push(line);
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
            let mut metadata = document.metadata;
            if metadata.name.as_deref().is_none_or(str::is_empty) {
                return Err(CrdError::MissingName { index, line });
            }
            if metadata.namespace.as_deref().is_none_or(str::is_empty) {
                metadata.namespace = Some(DEFAULT_NAMESPACE.to_owned());
            }
            Ok(Instrumentation {
                metadata,
                spec: document.spec.unwrap_or_default(),
                status: document.status,
            })
        })
        .collect()
}

/// Properties whose schemas come from Kubernetes types (EnvVar, ResourceRequirements,
/// SecurityContext, PersistentVolumeClaimTemplate). Their nested descriptions are dropped.
const EMBEDDED_K8S_FIELDS: &[&str] = &[
    "env",
    "attrs",
    "resources",
    "resourceRequirements",
    "volumeClaimTemplate",
    "securityContext",
    "initContainerSecurityContext",
];

/// Kubernetes' resource.Quantity syntax, as the Operator's CRD (controller-gen) declares it.
pub const QUANTITY_PATTERN: &str = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";

/// The Instrumentation CRD: [`Instrumentation::crd()`] adjusted to behave like the Operator's:
/// - no `nullable: true` (nor `null` enum values), so the apiserver drops `null` fields instead
///   of storing them, and CEL `has()` never sees a null;
/// - quantities (`volumeLimitSize`, resource limits and requests) carry [`QUANTITY_PATTERN`];
/// - `spec` is optional and defaults to `{}`;
/// - descriptions inside embedded Kubernetes types are dropped (our own field descriptions are
///   kept), which keeps the manifest small enough for client-side `kubectl apply`.
pub fn crd() -> CustomResourceDefinition {
    let mut crd = Instrumentation::crd();
    for version in &mut crd.spec.versions {
        let Some(root) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        else {
            continue;
        };
        walk(root, &mut |schema| {
            schema.nullable = None;
            if let Some(values) = &mut schema.enum_ {
                values.retain(|v| !v.0.is_null());
            }
            // Every int-or-string in this schema is a k8s Quantity.
            if schema.x_kubernetes_int_or_string == Some(true) && schema.pattern.is_none() {
                schema.pattern = Some(QUANTITY_PATTERN.to_owned());
            }
        });
        if let Some(required) = &mut root.required {
            required.retain(|name| name != "spec");
            if required.is_empty() {
                root.required = None;
            }
        }
        if let Some(spec) = root.properties.as_mut().and_then(|p| p.get_mut("spec")) {
            spec.default = Some(JSON(Value::Object(serde_json::Map::new())));
            trim_embedded_docs(spec);
        }
    }
    crd
}

/// Mutable references to the direct subschemas of `schema`.
fn subschemas(schema: &mut JSONSchemaProps) -> Vec<&mut JSONSchemaProps> {
    let mut out: Vec<&mut JSONSchemaProps> = Vec::new();
    out.extend(schema.properties.iter_mut().flat_map(|p| p.values_mut()));
    match &mut schema.items {
        Some(JSONSchemaPropsOrArray::Schema(child)) => out.push(child),
        Some(JSONSchemaPropsOrArray::Schemas(children)) => out.extend(children.iter_mut()),
        None => {}
    }
    if let Some(JSONSchemaPropsOrBool::Schema(child)) = &mut schema.additional_properties {
        out.push(child);
    }
    out.extend(schema.all_of.iter_mut().flatten());
    out.extend(schema.any_of.iter_mut().flatten());
    out.extend(schema.one_of.iter_mut().flatten());
    if let Some(child) = &mut schema.not {
        out.push(child);
    }
    out
}

/// Applies `f` to `schema` and every schema nested in it.
fn walk(schema: &mut JSONSchemaProps, f: &mut impl FnMut(&mut JSONSchemaProps)) {
    f(schema);
    for child in subschemas(schema) {
        walk(child, f);
    }
}

fn trim_embedded_docs(schema: &mut JSONSchemaProps) {
    for (name, property) in schema.properties.iter_mut().flatten() {
        if EMBEDDED_K8S_FIELDS.contains(&name.as_str()) {
            for child in subschemas(property) {
                walk(child, &mut |s| s.description = None);
            }
        } else {
            trim_embedded_docs(property);
        }
    }
}

const CRD_HEADER: &str = "# Instrumentation CRD (opentelemetry.io/v1alpha1).\n\
# Generated by `otel-injector crd`; do not edit by hand.\n";

/// The CRD from [`crd()`] as YAML, preceded by a comment header (no `---`).
pub fn try_crd_yaml() -> Result<String, CrdError> {
    let body = serde_saphyr::to_string(&crd()).map_err(|err| CrdError::Render(Box::new(err)))?;
    Ok(format!("{CRD_HEADER}{body}"))
}

/// [`try_crd_yaml`], falling back to JSON (which is valid YAML) if YAML rendering ever fails.
pub fn crd_yaml() -> String {
    try_crd_yaml().unwrap_or_else(|err| {
        let json = serde_json::to_string_pretty(&crd())
            .unwrap_or_else(|json_err| format!("# {err}; as JSON: {json_err}"));
        format!("{CRD_HEADER}{json}\n")
    })
}
