//! The `opentelemetry.io/v1beta1` Instrumentation, served next to v1alpha1 and stored as
//! v1alpha1 (`convert` maps one to the other exactly). The field layout is the one the
//! OpenTelemetry Operator merged for v1beta1 (`envConfig`, one `resource` block, per-language
//! `resources`, no default image), plus `declarativeConfig` (the SDK configuration file,
//! typed in `declarative`), which upstream has not typed.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    EnvVar, PersistentVolumeClaimTemplate, ResourceRequirements, SecurityContext,
};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::declarative::DeclarativeConfig;
use super::kind::instrumentation_kind;
use super::languages::Extension;
use super::object::schema_objects;
use super::shared::{ExporterTls, Propagator, Sampler};
use super::status::InstrumentationStatus;
use super::validation::{CONFIG_PATH_MAX_LENGTH, CONFIG_PATH_PATTERN};

/// `apiVersion` of a v1beta1 Instrumentation.
pub const API_VERSION_V1BETA1: &str = "opentelemetry.io/v1beta1";

/// CEL: `declarativeConfig` and `envConfig` configure the SDK in two exclusive ways.
pub const RULE_CONFIG_EXCLUSIVE: &str = "!(has(self.envConfig) && has(self.declarativeConfig))";
/// Message of [`RULE_CONFIG_EXCLUSIVE`].
pub const MSG_CONFIG_EXCLUSIVE: &str = "envConfig and declarativeConfig cannot both be set: \
     the SDK reads either environment variables or a configuration file";

instrumentation_kind! {
    version = "v1beta1",
    columns = [
        r#"{"name": "Endpoint", "type": "string", "jsonPath": ".spec.envConfig.exporter.endpoint"}"#,
        r#"{"name": "Protocol", "type": "string", "jsonPath": ".spec.envConfig.exporter.protocol"}"#,
        r#"{"name": "Sampler", "type": "string", "jsonPath": ".spec.envConfig.sampler.type"}"#,
        r#"{"name": "Sampler Arg", "type": "string", "jsonPath": ".spec.envConfig.sampler.argument"}"#,
    ],
    /// Desired state of OpenTelemetry SDK configuration and auto-instrumentation (v1beta1).
    #[serde(rename_all = "camelCase")]
    #[schemars(extend("x-kubernetes-validations" = [
        { "rule": RULE_CONFIG_EXCLUSIVE, "message": MSG_CONFIG_EXCLUSIVE },
    ]))]
    pub struct InstrumentationSpecV1beta1 {
        /// SDK configuration by environment variables (the v1alpha1 model). Exclusive with
        /// declarativeConfig.
        pub env_config: Option<EnvConfig>,
        /// SDK configuration by a declarative configuration file (schema 1.x), rendered per pod
        /// with the Kubernetes and service attributes and read by the SDK from OTEL_CONFIG_FILE.
        /// Exclusive with envConfig.
        pub declarative_config: Option<Box<DeclarativeConfig>>,
        /// Resource attributes and how the webhook derives the Kubernetes and service ones.
        pub resource: Option<ResourceV1beta1>,
        /// Env vars for all languages. Precedence: container env > language env > this env >
        /// envConfig.env > values derived from this spec.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub env: Vec<EnvVar>,
        /// Java auto-instrumentation (javaagent).
        pub java: Option<Box<JavaV1beta1>>,
        /// Node.js auto-instrumentation.
        pub nodejs: Option<Box<LanguageV1beta1>>,
        /// Python auto-instrumentation.
        pub python: Option<Box<LanguageV1beta1>>,
        /// .NET auto-instrumentation.
        pub dotnet: Option<Box<LanguageV1beta1>>,
        /// Go auto-instrumentation (eBPF sidecar).
        pub go: Option<Box<GoV1beta1>>,
        /// Apache HTTPD auto-instrumentation.
        pub apache_httpd: Option<Box<ApacheHttpdV1beta1>>,
        /// Nginx auto-instrumentation.
        pub nginx: Option<Box<NginxV1beta1>>,
        /// Image pull policy of the injected init containers.
        pub image_pull_policy: Option<String>,
        /// Security context of the injected init containers.
        pub init_container_security_context: Option<Box<SecurityContext>>,
    }
}

schema_objects! {
    /// The SDK configured by environment variables.
    pub struct EnvConfig {
        /// OTLP exporter configuration.
        pub exporter: Option<ExporterV1beta1>,
        /// Context propagators, set in OTEL_PROPAGATORS.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub propagators: Vec<Propagator>,
        /// Sampler configuration, set in OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG.
        pub sampler: Option<Sampler>,
        /// Env vars of the SDK configuration; spec.env and the language env take precedence.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub env: Vec<EnvVar>,
    }

    /// OTLP exporter configuration.
    pub struct ExporterV1beta1 {
        /// Address of the collector's OTLP endpoint. An https:// endpoint needs `tls`.
        pub endpoint: Option<String>,
        /// OTLP protocol, set in OTEL_EXPORTER_OTLP_PROTOCOL.
        pub protocol: Option<Protocol>,
        /// TLS certificates; used only with an https:// endpoint.
        pub tls: Option<ExporterTls>,
    }
}

/// The OTLP transport, as named in OTEL_EXPORTER_OTLP_PROTOCOL.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum Protocol {
    #[serde(rename = "grpc")]
    Grpc,
    #[serde(rename = "http/protobuf")]
    HttpProtobuf,
    #[serde(rename = "http/json")]
    HttpJson,
}

impl Protocol {
    /// The value of OTEL_EXPORTER_OTLP_PROTOCOL.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Grpc => "grpc",
            Protocol::HttpProtobuf => "http/protobuf",
            Protocol::HttpJson => "http/json",
        }
    }
}

schema_objects! {
    /// Resource attributes, and which ones the webhook derives.
    pub struct ResourceV1beta1 {
        /// Attributes added to the resource (lowest precedence), e.g. deployment.environment.name.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        pub attributes: BTreeMap<String, String>,
        /// The k8s.* attributes (namespace, pod, node, container, owners).
        pub k8s_metadata: Option<K8sMetadata>,
        /// The service.* attributes derived from the pod (name, version, instance id).
        pub service_metadata: Option<ServiceMetadata>,
    }

    /// Whether and how the k8s.* attributes are added.
    pub struct K8sMetadata {
        /// false: no k8s.* attributes are added (default true).
        pub enabled: Option<bool>,
        /// Also add the pod's and its owners' UIDs (k8s.pod.uid, k8s.replicaset.uid, ...).
        #[serde(rename = "includeUIDs")]
        pub include_uids: Option<bool>,
    }

    /// Whether the service.* attributes are derived.
    pub struct ServiceMetadata {
        /// false: no derived service.* attributes; true: derived, the app.kubernetes.io labels
        /// included (v1alpha1's useLabelsForResourceAttributes); unset: derived from the
        /// annotations, the owner and the pod.
        pub enabled: Option<bool>,
    }

    /// What every language section holds (Node.js, Python and .NET hold only this).
    pub struct LanguageV1beta1 {
        /// Image with the agent. There is no default image in v1beta1: a language requested
        /// without one is skipped (image_required).
        #[schemars(length(min = 1))]
        pub image: Option<String>,
        /// Ephemeral volume for the agent files; if unset an emptyDir is used.
        pub volume_claim_template: Option<Box<PersistentVolumeClaimTemplate>>,
        /// Language-specific env vars; they take precedence over spec.env.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub env: Vec<EnvVar>,
        /// Compute resources of the injected container.
        pub resources: Option<ResourceRequirements>,
    }

    /// Java: the common part and extensions.
    pub struct JavaV1beta1 {
        #[serde(flatten)]
        pub common: LanguageV1beta1,
        /// Extension JARs, all copied into one directory.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub extensions: Vec<Extension>,
    }

    /// Go: the common part and the sidecar's security context.
    pub struct GoV1beta1 {
        #[serde(flatten)]
        pub common: LanguageV1beta1,
        /// Security context of the sidecar (it needs privileges to use eBPF).
        pub security_context: Option<Box<SecurityContext>>,
    }

    /// Apache HTTPD: the common part, version and configuration directory.
    pub struct ApacheHttpdV1beta1 {
        #[serde(flatten)]
        pub common: LanguageV1beta1,
        /// Apache HTTPD version: 2.4 (default) or 2.2.
        pub version: Option<String>,
        /// Directory of the Apache configuration (default /usr/local/apache2/conf).
        #[schemars(length(max = CONFIG_PATH_MAX_LENGTH), pattern(CONFIG_PATH_PATTERN))]
        pub config_path: Option<String>,
    }

    /// Nginx: the common part and the configuration file.
    pub struct NginxV1beta1 {
        #[serde(flatten)]
        pub common: LanguageV1beta1,
        /// Nginx configuration file (default /etc/nginx/nginx.conf).
        #[schemars(length(max = CONFIG_PATH_MAX_LENGTH), pattern(CONFIG_PATH_PATTERN))]
        pub config_file: Option<String>,
    }

}
