//! Exporter TLS (`spec.exporter.tls`): the Secret and ConfigMap volumes mounted into every
//! instrumented container and the `OTEL_EXPORTER_OTLP_*` variables that point into them.

use k8s_openapi::api::core::v1::{Volume, VolumeMount};

use crate::crd::InstrumentationSpec;

pub const OTEL_EXPORTER_OTLP_CERTIFICATE: &str = "OTEL_EXPORTER_OTLP_CERTIFICATE";
pub const OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE: &str = "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE";
pub const OTEL_EXPORTER_OTLP_CLIENT_KEY: &str = "OTEL_EXPORTER_OTLP_CLIENT_KEY";

/// Exporter TLS files: where `spec.exporter.tls` puts them and how the SDK finds them.
pub struct ExporterTlsFiles<'s> {
    secret: Option<&'s str>,
    config_map: Option<&'s str>,
    ca: Option<&'s str>,
    cert: Option<&'s str>,
    key: Option<&'s str>,
}

fn non_empty(v: &Option<String>) -> Option<&str> {
    v.as_deref().filter(|v| !v.is_empty())
}

impl<'s> ExporterTlsFiles<'s> {
    pub fn of(spec: &'s InstrumentationSpec) -> Option<Self> {
        let tls = spec.exporter.as_ref()?.tls.as_ref()?;
        Some(ExporterTlsFiles {
            secret: non_empty(&tls.secret_name),
            config_map: non_empty(&tls.config_map_name),
            ca: non_empty(&tls.ca_file),
            cert: non_empty(&tls.cert_file),
            key: non_empty(&tls.key_file),
        })
    }

    pub fn secret(&self) -> Option<&'s str> {
        self.secret
    }

    pub fn config_map(&self) -> Option<&'s str> {
        self.config_map
    }

    fn secret_mount(&self) -> String {
        format!(
            "/otel-auto-instrumentation-secret-{}",
            self.secret.unwrap_or("")
        )
    }

    fn config_map_mount(&self) -> String {
        format!(
            "/otel-auto-instrumentation-configmap-{}",
            self.config_map.unwrap_or("")
        )
    }

    /// The volumes (and where each is mounted) that carry the files.
    pub fn volumes(&self) -> Vec<(Volume, VolumeMount)> {
        use k8s_openapi::api::core::v1::{ConfigMapVolumeSource, SecretVolumeSource};
        let secret = self.secret.map(|secret| {
            let source = SecretVolumeSource {
                secret_name: Some(secret.to_owned()),
                ..Default::default()
            };
            let volume = Volume {
                secret: Some(source),
                ..Default::default()
            };
            (
                volume_name("otel-auto-secret-", secret),
                volume,
                self.secret_mount(),
            )
        });
        let config_map = self.config_map.map(|cm| {
            let volume = Volume {
                config_map: Some(ConfigMapVolumeSource {
                    name: cm.to_owned(),
                    ..Default::default()
                }),
                ..Default::default()
            };
            (
                volume_name("otel-auto-configmap-", cm),
                volume,
                self.config_map_mount(),
            )
        });
        [secret, config_map]
            .into_iter()
            .flatten()
            .map(|(name, volume, mount_path)| {
                let mount = VolumeMount {
                    name: name.clone(),
                    mount_path,
                    read_only: Some(true),
                    ..Default::default()
                };
                (Volume { name, ..volume }, mount)
            })
            .collect()
    }
}

/// `prefix + name` cut to 63 characters (a volume name is a DNS label), without a trailing
/// `-` or `.` left by the cut.
fn volume_name(prefix: &str, name: &str) -> String {
    let mut v = format!("{prefix}{name}");
    v.truncate(63);
    while v.ends_with(['-', '.']) {
        v.pop();
    }
    v
}

/// The TLS variables for `spec.exporter.tls`, in the Operator's order. Absolute paths are
/// used as they are; relative ones are inside the mounted Secret (CA: the ConfigMap when
/// one is named).
pub fn exporter_tls_env(spec: &InstrumentationSpec) -> Vec<(&'static str, String)> {
    let Some(tls) = ExporterTlsFiles::of(spec) else {
        return Vec::new();
    };
    let path = |dir: String, file: &str| {
        if file.starts_with('/') {
            file.to_owned()
        } else {
            format!("{dir}/{file}")
        }
    };
    let mut out = Vec::new();
    if let Some(ca) = tls.ca {
        let dir = if tls.config_map.is_some() {
            tls.config_map_mount()
        } else {
            tls.secret_mount()
        };
        out.push((OTEL_EXPORTER_OTLP_CERTIFICATE, path(dir, ca)));
    }
    if let Some(cert) = tls.cert {
        out.push((
            OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE,
            path(tls.secret_mount(), cert),
        ));
    }
    if let Some(key) = tls.key {
        out.push((OTEL_EXPORTER_OTLP_CLIENT_KEY, path(tls.secret_mount(), key)));
    }
    out
}
