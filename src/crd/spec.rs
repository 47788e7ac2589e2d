//! The Instrumentation resource itself (kube derive) and the v1alpha1 spec sections every
//! language shares: exporter, resource attributes, defaults (`shared` holds the propagators,
//! the sampler and the exporter's TLS, which v1beta1 holds too; `status` the status).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{EnvVar, SecurityContext};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::carried::V1beta1Fields;
use super::declarative::DeclarativeConfig;
use super::kind::instrumentation_kind;
use super::languages::{
    ApacheHttpdSpec, DotNetSpec, GoSpec, JavaSpec, NginxSpec, NodeJsSpec, PythonSpec,
};
use super::object::schema_objects;
use super::shared::{ExporterTls, Propagator, Sampler};
use super::status::InstrumentationStatus;
use crate::keys::V1BETA1_FIELDS;

/// `apiVersion` of every Instrumentation object.
pub const API_VERSION: &str = "opentelemetry.io/v1alpha1";
/// `kind` of every Instrumentation object.
pub const KIND: &str = "Instrumentation";

instrumentation_kind! {
    version = "v1alpha1",
    columns = [
        r#"{"name": "Endpoint", "type": "string", "jsonPath": ".spec.exporter.endpoint"}"#,
        r#"{"name": "Sampler", "type": "string", "jsonPath": ".spec.sampler.type"}"#,
        r#"{"name": "Sampler Arg", "type": "string", "jsonPath": ".spec.sampler.argument"}"#,
    ],
    /// Desired state of OpenTelemetry SDK configuration and auto-instrumentation.
    #[serde(rename_all = "camelCase")]
    pub struct InstrumentationSpec {
        /// OTLP exporter configuration.
        pub exporter: Option<Exporter>,
        /// Context propagators, set in OTEL_PROPAGATORS.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub propagators: Vec<Propagator>,
        /// Sampler configuration, set in OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG.
        pub sampler: Option<Sampler>,
        /// Resource attribute configuration.
        pub resource: Option<ResourceSpec>,
        /// Env vars for all languages. Precedence: container env > language env > this env >
        /// values derived from this spec.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub env: Vec<EnvVar>,
        /// Default behaviour of the instrumentation.
        pub defaults: Option<Defaults>,
        /// Image pull policy of the injected init containers.
        pub image_pull_policy: Option<String>,
        /// Security context of the injected init containers.
        pub init_container_security_context: Option<Box<SecurityContext>>,
        /// Java auto-instrumentation.
        pub java: Option<Box<JavaSpec>>,
        /// Node.js auto-instrumentation.
        pub nodejs: Option<Box<NodeJsSpec>>,
        /// Python auto-instrumentation.
        pub python: Option<Box<PythonSpec>>,
        /// .NET auto-instrumentation.
        pub dotnet: Option<Box<DotNetSpec>>,
        /// Go auto-instrumentation (eBPF sidecar). Needs OTEL_GO_AUTO_TARGET_EXE, from env or the
        /// instrumentation.opentelemetry.io/otel-go-auto-target-exe pod annotation.
        pub go: Option<Box<GoSpec>>,
        /// Apache HTTPD auto-instrumentation.
        pub apache_httpd: Option<Box<ApacheHttpdSpec>>,
        /// Nginx auto-instrumentation.
        pub nginx: Option<Box<NginxSpec>>,
        /// What the object carries of v1beta1 (read by `Instrumentation::read_carried` from its
        /// annotation): not a field of the v1alpha1 schema.
        #[serde(skip)]
        #[schemars(skip)]
        pub v1beta1: Option<Box<V1beta1Fields>>,
    }
}

schema_objects! {
    /// OTLP exporter configuration.
    pub struct Exporter {
        /// Address of the collector's OTLP endpoint. An https:// endpoint needs `tls`.
        pub endpoint: Option<String>,
        /// TLS certificates; used only with an https:// endpoint.
        pub tls: Option<ExporterTls>,
    }

    /// Resource attribute configuration.
    pub struct ResourceSpec {
        /// Attributes added to the resource, e.g. environment: dev.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        pub resource_attributes: BTreeMap<String, String>,
        /// Whether to add k8s UID attributes (e.g. k8s.deployment.uid).
        #[serde(rename = "addK8sUIDAttributes")]
        pub add_k8s_uid_attributes: Option<bool>,
    }

    /// Defaults of the instrumentation.
    pub struct Defaults {
        /// Derive service.name (labels app.kubernetes.io/instance, then app.kubernetes.io/name)
        /// and service.version (label app.kubernetes.io/version) from the pod's labels.
        pub use_labels_for_resource_attributes: Option<bool>,
    }
}

impl Instrumentation {
    /// `namespace/name`, as skips, statuses and events name it.
    pub fn qualified(&self) -> String {
        let meta = &self.metadata;
        format!(
            "{}/{}",
            meta.namespace.as_deref().unwrap_or_default(),
            meta.name.as_deref().unwrap_or_default()
        )
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

impl InstrumentationSpec {
    /// Whether the k8s.* resource attributes are added (v1beta1's `k8sMetadata.enabled`).
    pub fn k8s_metadata(&self) -> bool {
        self.v1beta1.as_ref().is_none_or(|b| b.k8s_metadata)
    }

    /// Whether the service.* attributes are derived (v1beta1's `serviceMetadata.enabled`);
    /// the pod's `resource.opentelemetry.io/service.*` annotations apply either way.
    pub fn service_metadata(&self) -> bool {
        self.v1beta1.as_ref().is_none_or(|b| b.service_metadata)
    }

    /// The declarative configuration, when the SDK is configured by a file.
    pub fn declarative_config(&self) -> Option<&DeclarativeConfig> {
        self.v1beta1.as_ref()?.declarative_config.as_deref()
    }
}

impl Instrumentation {
    /// Reads the v1beta1 fields the object carries into `spec.v1beta1` (none: a v1alpha1
    /// object). Called wherever an object enters the engine.
    pub fn read_carried(&mut self) -> Result<(), String> {
        let text = self
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(V1BETA1_FIELDS));
        self.spec.v1beta1 = match text {
            Some(text) => Some(Box::new(V1beta1Fields::parse(text)?)),
            None => None,
        };
        Ok(())
    }

    /// Whether a language without an image gets the default image.
    pub fn default_images(&self) -> bool {
        self.spec.v1beta1.as_ref().is_none_or(|b| b.default_images)
    }
}
