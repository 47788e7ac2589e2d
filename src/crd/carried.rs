//! The engine's one model of an Instrumentation of either version: the stored v1alpha1 spec
//! plus what it carries of v1beta1 ([`V1beta1Fields`], read once from the
//! `otel-injector/v1beta1-fields` annotation the conversion writes, when the object enters a
//! cache or is read from a file).

use k8s_openapi::api::core::v1::EnvVar;
use serde::{Deserialize, Serialize};
use serde_with::skip_serializing_none;

use super::declarative::DeclarativeConfig;
use super::v1beta1::{self, Protocol};
use crate::keys::V1BETA1_FIELDS;

/// What a stored Instrumentation means beyond its v1alpha1 fields.
#[skip_serializing_none]
#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct V1beta1Fields {
    /// Whether a language without an image gets the default image (false: written in
    /// v1beta1, the language is skipped with `image_required`).
    pub default_images: bool,
    /// `envConfig.exporter.protocol`: OTEL_EXPORTER_OTLP_PROTOCOL.
    pub protocol: Option<Protocol>,
    /// `envConfig.env`, below `spec.env` in precedence.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,
    /// `resource.k8sMetadata.enabled` (default true): the k8s.* attributes.
    pub k8s_metadata: bool,
    /// `resource.serviceMetadata.enabled` (default true): the derived service.* attributes.
    pub service_metadata: bool,
    /// `declarativeConfig`: the SDK configuration file.
    pub declarative_config: Option<Box<DeclarativeConfig>>,
}

/// The carrying annotation as the conversion writes it.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Carrier {
    #[serde(default)]
    default_images: bool,
    #[serde(default)]
    spec: v1beta1::InstrumentationSpecV1beta1,
}

impl V1beta1Fields {
    /// The fields `text` (the annotation's value) carries; the error says what is wrong.
    pub fn parse(text: &str) -> Result<V1beta1Fields, String> {
        let carrier: Carrier = serde_json::from_str(text)
            .map_err(|e| format!("annotation {V1BETA1_FIELDS} cannot be read: {e}"))?;
        let spec = carrier.spec;
        let exporter = spec.env_config.as_ref().and_then(|c| c.exporter.as_ref());
        let resource = spec.resource.as_ref();
        Ok(V1beta1Fields {
            default_images: carrier.default_images,
            protocol: exporter.and_then(|e| e.protocol),
            env: spec.env_config.map(|c| c.env).unwrap_or_default(),
            k8s_metadata: resource
                .and_then(|r| r.k8s_metadata.as_ref())
                .and_then(|k| k.enabled)
                .unwrap_or(true),
            service_metadata: resource
                .and_then(|r| r.service_metadata.as_ref())
                .and_then(|s| s.enabled)
                .unwrap_or(true),
            declarative_config: spec.declarative_config,
        })
    }
}
