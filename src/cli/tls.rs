//! Flags of the served certificate: files, or the built-in certificate mode.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::duration;
use crate::certs::{ServingCert, builtin};

#[derive(Debug, Args)]
#[command(next_help_heading = "Certificates")]
pub struct TlsArgs {
    /// PEM serving certificate (chain). Reloaded when it changes on disk.
    #[arg(long, env = "OTEL_INJECTOR_TLS_CERT_FILE", default_value = "/tls/tls.crt")]
    pub tls_cert_file: PathBuf,

    /// PEM private key of the serving certificate. Reloaded when it changes on disk.
    #[arg(long, env = "OTEL_INJECTOR_TLS_KEY_FILE", default_value = "/tls/tls.key")]
    pub tls_key_file: PathBuf,

    /// How often the certificate files are checked for changes.
    #[arg(long, env = "OTEL_INJECTOR_TLS_RELOAD_INTERVAL", default_value = "10s", value_parser = duration)]
    pub tls_reload_interval: Duration,

    /// Built-in certificate mode: keep the CA and serving certificate in this
    /// `kubernetes.io/tls` Secret (`NAMESPACE/NAME`; made if missing, renewed when a third
    /// of its validity is left) and its CA in the `caBundle` of `--webhook-configuration`.
    /// `--tls-cert-file`/`--tls-key-file` are then not read. Needs get/create/update on the
    /// Secret and get/patch on the webhook configuration (manifests/components/built-in).
    #[arg(long, env = "OTEL_INJECTOR_CERTIFICATE_SECRET", value_parser = builtin::parse_secret_ref)]
    pub certificate_secret: Option<(String, String)>,

    /// Built-in certificate mode: the MutatingWebhookConfiguration whose entries get the
    /// CA as `caBundle`. Empty: none (policy mode: no webhook is registered, the listener
    /// serves the CRD's conversion).
    #[arg(long, env = "OTEL_INJECTOR_WEBHOOK_CONFIGURATION", default_value = "otel-injector")]
    pub webhook_configuration: String,

    /// Built-in certificate mode: the CustomResourceDefinition whose conversion webhook
    /// (`/convert`) gets the CA as `caBundle`, when its conversion strategy is Webhook
    /// (needs get/patch on it by name; manifests/components/built-in). Empty: none.
    #[arg(
        long,
        env = "OTEL_INJECTOR_CONVERSION_CRD",
        default_value = "instrumentations.opentelemetry.io"
    )]
    pub conversion_crd: String,

    /// Built-in certificate mode: DNS name or IP address of the serving certificate.
    /// Repeatable (comma-separated in the env var).
    #[arg(
        long = "certificate-host",
        env = "OTEL_INJECTOR_CERTIFICATE_HOSTS",
        value_delimiter = ',',
        default_values_t = ["otel-injector.otel-injector.svc".to_owned()]
    )]
    pub certificate_hosts: Vec<String>,
}

impl TlsArgs {
    /// The served certificate, checked (files) or made (built-in mode) before anything
    /// binds.
    pub fn build(&self) -> anyhow::Result<ServingCert> {
        match &self.certificate_secret {
            None => Ok(ServingCert::from_files(
                &self.tls_cert_file,
                &self.tls_key_file,
                self.tls_reload_interval,
            )?),
            Some((namespace, name)) => ServingCert::builtin(builtin::Config {
                namespace: namespace.clone(),
                name: name.clone(),
                webhook_configuration: Some(self.webhook_configuration.clone())
                    .filter(|c| !c.is_empty()),
                conversion_crd: Some(self.conversion_crd.clone()).filter(|c| !c.is_empty()),
                hosts: self.certificate_hosts.clone(),
            }),
        }
    }
}
