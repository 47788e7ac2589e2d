//! Command line: every flag also reads an environment variable (`OTEL_INJECTOR_*`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::agents::{Language, LanguageSet};

#[derive(Debug, Parser)]
#[command(
    name = "otel-injector",
    version,
    about = "OpenTelemetry auto-instrumentation admission webhook for Kubernetes",
    long_about = "OpenTelemetry auto-instrumentation admission webhook for Kubernetes.\n\n\
        Reads opentelemetry.io/v1alpha1 Instrumentation resources and the \
        instrumentation.opentelemetry.io/inject-* pod and namespace annotations (the same API \
        as the OpenTelemetry Operator) and answers pod CREATE admission reviews with a JSON \
        patch that adds the agent's init containers, volumes and OTEL_* environment."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the webhook (HTTPS) and the admin endpoints (/metrics, /livez, /readyz).
    Serve(Box<ServeArgs>),
    /// Print the Instrumentation CustomResourceDefinition (YAML) generated from the Rust types.
    Crd,
    /// Write a development CA and a serving certificate (ca.crt, ca.key, tls.crt, tls.key).
    DevCerts(DevCertsArgs),
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    #[default]
    Plain,
    Json,
}

/// Parses durations such as `10s`, `500ms`, `1m30s`.
fn duration(v: &str) -> Result<Duration, String> {
    crate::server::parse_timeout(v)
        .ok_or_else(|| format!("invalid duration {v:?} (use e.g. 10s, 500ms, 1m)"))
}

fn secret_ref(v: &str) -> Result<(String, String), String> {
    crate::certs::builtin::parse_secret_ref(v)
}

fn languages(v: &str) -> Result<LanguageSet, String> {
    v.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<Language>().map_err(|e| e.to_string()))
        .collect()
}

fn agent_image(v: &str) -> Result<(Language, String), String> {
    let (lang, image) = v
        .split_once('=')
        .ok_or_else(|| format!("expected LANGUAGE=IMAGE, got {v:?}"))?;
    let lang = lang.parse::<Language>().map_err(|e| e.to_string())?;
    if image.trim().is_empty() {
        return Err(format!("empty image for {lang}"));
    }
    Ok((lang, image.trim().to_owned()))
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address of the HTTPS webhook listener (POST /mutate-v1-pod).
    #[arg(
        long,
        env = "OTEL_INJECTOR_WEBHOOK_ADDR",
        default_value = "0.0.0.0:9443"
    )]
    pub webhook_addr: SocketAddr,

    /// Address of the plain-HTTP admin listener (/metrics, /livez, /readyz).
    #[arg(long, env = "OTEL_INJECTOR_ADMIN_ADDR", default_value = "0.0.0.0:8080")]
    pub admin_addr: SocketAddr,

    /// PEM serving certificate (chain). Reloaded when it changes on disk.
    #[arg(
        long,
        env = "OTEL_INJECTOR_TLS_CERT_FILE",
        default_value = "/tls/tls.crt"
    )]
    pub tls_cert_file: PathBuf,

    /// PEM private key of the serving certificate. Reloaded when it changes on disk.
    #[arg(
        long,
        env = "OTEL_INJECTOR_TLS_KEY_FILE",
        default_value = "/tls/tls.key"
    )]
    pub tls_key_file: PathBuf,

    /// How often the certificate files are checked for changes.
    #[arg(long, env = "OTEL_INJECTOR_TLS_RELOAD_INTERVAL", default_value = "10s", value_parser = duration)]
    pub tls_reload_interval: Duration,

    /// Built-in certificate mode: keep the CA and serving certificate in this
    /// `kubernetes.io/tls` Secret (`NAMESPACE/NAME`; made if missing, renewed when a third
    /// of its validity is left) and its CA in the `caBundle` of `--webhook-configuration`.
    /// `--tls-cert-file`/`--tls-key-file` are then not read. Needs get/create/update on the
    /// Secret and get/patch on the webhook configuration (manifests/self-signed.yaml).
    #[arg(long, env = "OTEL_INJECTOR_CERTIFICATE_SECRET", value_parser = secret_ref)]
    pub certificate_secret: Option<(String, String)>,

    /// Built-in certificate mode: the MutatingWebhookConfiguration whose entries get the
    /// CA as `caBundle`.
    #[arg(
        long,
        env = "OTEL_INJECTOR_WEBHOOK_CONFIGURATION",
        default_value = "otel-injector"
    )]
    pub webhook_configuration: String,

    /// Built-in certificate mode: DNS name or IP address of the serving certificate.
    /// Repeatable (comma-separated in the env var).
    #[arg(
        long = "certificate-host",
        env = "OTEL_INJECTOR_CERTIFICATE_HOSTS",
        value_delimiter = ',',
        default_values_t = ["otel-injector.otel-injector.svc".to_owned()]
    )]
    pub certificate_hosts: Vec<String>,

    /// Read Instrumentations from this YAML file (one or more documents) instead of watching
    /// the cluster. Repeatable (comma-separated in the env var). With it the webhook makes
    /// no Kubernetes API call at all, so namespace-level inject annotations do not apply.
    #[arg(
        long,
        env = "OTEL_INJECTOR_INSTRUMENTATION_FILE",
        value_delimiter = ','
    )]
    pub instrumentation_file: Vec<PathBuf>,

    /// Kubeconfig to use; by default the in-cluster config or $KUBECONFIG / ~/.kube/config.
    #[arg(long, env = "OTEL_INJECTOR_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,

    /// Languages this webhook injects (comma-separated). A pod asking for another one is
    /// admitted without it, with a warning. Go is off by default: its agent is a privileged
    /// sidecar.
    #[arg(
        long,
        env = "OTEL_INJECTOR_ENABLED_LANGUAGES",
        default_value = "java,nodejs,python,dotnet,apache-httpd,nginx,sdk",
        value_parser = languages
    )]
    pub enabled_languages: LanguageSet,

    /// Default agent image for a language, as LANGUAGE=IMAGE; used when the Instrumentation
    /// names none. Repeatable (comma-separated in the env var).
    #[arg(long = "agent-image", env = "OTEL_INJECTOR_AGENT_IMAGES", value_delimiter = ',', value_parser = agent_image)]
    pub agent_images: Vec<(Language, String)>,

    /// Largest pod, as JSON bytes after injection, the webhook will produce. A pod the
    /// patch would grow past it (for example thousands of tiny containers all targeted) is
    /// admitted unchanged with a warning (reason pod_too_large). The default is etcd's
    /// default request limit; the API server could not store a larger pod anyway.
    #[arg(long, env = "OTEL_INJECTOR_MAX_POD_BYTES", default_value_t = crate::engine::DEFAULT_MAX_POD_BYTES)]
    pub max_pod_bytes: usize,

    /// Watch Secret and ConfigMap names (metadata only) so that an Instrumentation whose
    /// `spec.exporter.tls` names one missing from the pod's namespace is reported, and that
    /// language not injected (the pod could not start). `false` drops the watches (and the
    /// need for list/watch on Secrets and ConfigMaps); such pods are then injected unchecked.
    #[arg(
        long,
        env = "OTEL_INJECTOR_VERIFY_EXPORTER_TLS",
        default_value_t = true,
        action = clap::ArgAction::Set
    )]
    pub verify_exporter_tls: bool,

    /// Keep the label `otel-injector/inject=true` on namespaces whose annotations ask for
    /// injection, so the webhook configuration can select them (webhook `matchConditions`
    /// cannot see namespace annotations). Needs patch on namespaces.
    #[arg(
        long,
        env = "OTEL_INJECTOR_LABEL_NAMESPACES",
        default_value_t = true,
        action = clap::ArgAction::Set
    )]
    pub label_namespaces: bool,

    /// Log format.
    #[arg(long, env = "OTEL_INJECTOR_LOG_FORMAT", value_enum, default_value_t = LogFormat::Plain)]
    pub log_format: LogFormat,

    /// Log filter (tracing EnvFilter syntax, e.g. `info` or `otel_injector=debug`).
    #[arg(long, env = "OTEL_INJECTOR_LOG_LEVEL", default_value = "info")]
    pub log_level: String,

    /// On SIGTERM, keep serving this long with /readyz failing, so endpoints drop the
    /// replica before it stops accepting connections.
    #[arg(long, env = "OTEL_INJECTOR_SHUTDOWN_DELAY", default_value = "5s", value_parser = duration)]
    pub shutdown_delay: Duration,

    /// After that, the longest time given to in-flight requests before the process exits.
    #[arg(long, env = "OTEL_INJECTOR_SHUTDOWN_TIMEOUT", default_value = "20s", value_parser = duration)]
    pub shutdown_timeout: Duration,

    /// A TLS handshake must complete within this.
    #[arg(long, env = "OTEL_INJECTOR_HANDSHAKE_TIMEOUT", default_value = "10s", value_parser = duration)]
    pub handshake_timeout: Duration,

    /// A keep-alive connection idle this long is closed, and so is one whose request
    /// headers have not all arrived within it. Keep it above the API server's 90 s idle
    /// timeout, so the API server (not this server) closes idle connections.
    #[arg(long, env = "OTEL_INJECTOR_IDLE_TIMEOUT", default_value = "120s", value_parser = duration)]
    pub idle_timeout: Duration,

    /// Most webhook connections open at once; further ones wait to be accepted.
    #[arg(long, env = "OTEL_INJECTOR_MAX_CONNECTIONS", default_value_t = 1024)]
    pub max_connections: usize,
}

#[derive(Debug, Args)]
pub struct DevCertsArgs {
    /// Directory to write ca.crt, ca.key, tls.crt and tls.key into.
    #[arg(long, env = "OTEL_INJECTOR_CERTS_DIR", default_value = "certs/dev")]
    pub out_dir: PathBuf,

    /// DNS name or IP address of the serving certificate. Repeatable.
    #[arg(
        long = "host",
        env = "OTEL_INJECTOR_CERT_HOSTS",
        value_delimiter = ',',
        default_values_t = ["localhost".to_owned(), "127.0.0.1".to_owned(), "otel-injector.otel-injector.svc".to_owned()]
    )]
    pub hosts: Vec<String>,

    /// Common name of the development CA.
    #[arg(
        long,
        env = "OTEL_INJECTOR_CA_NAME",
        default_value = "otel-injector development CA"
    )]
    pub ca_name: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_consistent_and_every_serve_flag_has_an_env_var() {
        Cli::command().debug_assert();
        let cmd = Cli::command();
        for sub in ["serve", "dev-certs"] {
            let sc = cmd.find_subcommand(sub).unwrap();
            for arg in sc.get_arguments() {
                if arg.get_id() == "help" {
                    continue;
                }
                assert!(
                    arg.get_env().is_some(),
                    "{sub} --{} has no env var",
                    arg.get_id()
                );
            }
        }
    }

    #[test]
    fn parses_languages_and_images() {
        let cli = Cli::try_parse_from([
            "otel-injector",
            "serve",
            "--enabled-languages",
            "java, go",
            "--agent-image",
            "java=registry.local/java:1",
        ])
        .unwrap();
        let Command::Serve(args) = cli.command else {
            panic!("not serve")
        };
        assert!(args.enabled_languages.contains(Language::Go));
        assert!(!args.enabled_languages.contains(Language::Python));
        assert_eq!(
            args.agent_images,
            [(Language::Java, "registry.local/java:1".to_owned())]
        );
        assert!(
            Cli::try_parse_from(["otel-injector", "serve", "--enabled-languages", "php"]).is_err()
        );
    }
}
