//! Command line: every flag also reads an environment variable (`OTEL_INJECTOR_*`).
//! `serve`'s flags come in groups, one per part of the webhook, each building its part:
//! [`ServerArgs`] and [`AdminArgs`] the listeners, [`ShutdownArgs`] the drain, [`TlsArgs`]
//! the served certificate, [`ClusterArgs`] the caches, [`EngineArgs`] the engine's
//! configuration, [`LogArgs`] the logs, [`StatusArgs`] the status controller and its Lease.

mod cluster;
mod engine;
mod log;
mod offline;
mod policies;
pub mod reference;
mod rollout;
mod server;
mod status;
mod tls;

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

pub use cluster::ClusterArgs;
pub use engine::EngineArgs;
pub use log::LogArgs;
pub use offline::{
    ClusterRead, ConvertArgs, ConvertTo, ExplainArgs, ExplainFormat, InjectArgs, OfflineArgs,
    PolicyArgs,
};
pub use policies::{Apply, LivePolicyArgs};
pub use rollout::{RolloutArgs, RolloutServeArgs};
pub use server::{AdminArgs, EventArgs, ServerArgs, ShutdownArgs};
pub use status::StatusArgs;
pub use tls::TlsArgs;

#[derive(Debug, Parser)]
#[command(
    name = "otel-injector",
    version,
    long_version = crate::build_info::LONG_VERSION,
    about = "OpenTelemetry auto-instrumentation admission webhook for Kubernetes",
    long_about = "OpenTelemetry auto-instrumentation admission webhook for Kubernetes.\n\n\
        Reads opentelemetry.io/v1alpha1 Instrumentation resources (and serves v1beta1, \
        converting it at /convert) and the instrumentation.opentelemetry.io/inject-* pod and \
        namespace annotations (the same API as the OpenTelemetry Operator) and answers pod \
        CREATE admission reviews with a JSON patch that adds the agent's init containers, \
        volumes and OTEL_* environment."
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
    Crd(CrdArgs),
    /// Write a development CA and a serving certificate (ca.crt, ca.key, tls.crt, tls.key).
    DevCerts(DevCertsArgs),
    /// Write manifests back with every pod template mutated as the webhook would mutate the
    /// pods it produces (Pod, Deployment, ReplicaSet, StatefulSet, DaemonSet, Job, CronJob,
    /// ReplicationController); everything else unchanged, in order. No cluster needed
    /// (`--cluster` reads one once).
    Inject(Box<InjectArgs>),
    /// Explain, for each pod or workload of the manifests, what the webhook would inject and
    /// why: which annotation asked, which Instrumentation was chosen, the target containers,
    /// where each variable's value comes from, and every skip with its reason and fix.
    Explain(Box<ExplainArgs>),
    /// Rewrite Instrumentation manifests into v1beta1 or v1alpha1 exactly as the conversion
    /// webhook serves them (for GitOps repositories); everything else unchanged, in order.
    Convert(ConvertArgs),
    /// Render the Instrumentations as MutatingAdmissionPolicies (Kubernetes 1.36 or later) that
    /// make the API server itself inject what the webhook would (in its delivery: init
    /// container or image volume), for the languages and pods CEL can express; the webhook,
    /// when installed, serves the rest.
    Policy(Box<PolicyArgs>),
    /// Print the webhook configuration in the API server's manifest form, for its admission
    /// configuration's staticManifestsDir (Kubernetes 1.37+): loaded before the API server's
    /// first request, called by URL, and protected from API writes (named *.static.k8s.io).
    StaticWebhook(StaticWebhookArgs),
    /// Restart, as `kubectl rollout restart` does, the Deployments, StatefulSets and
    /// DaemonSets whose pods run an outdated spec of an Instrumentation, were admitted without
    /// the webhook, or were skipped because it did not exist yet, a few at a time, waiting for each to complete; stops at
    /// the first that does not (--dry-run: only print the plan).
    Rollout(Box<RolloutArgs>),
}

/// `static-webhook`.
#[derive(Debug, Args)]
pub struct StaticWebhookArgs {
    /// Where the API server calls the webhook: an https:// URL it can reach from where it
    /// runs (the manifest form has no Service reference), e.g. the Service's ClusterIP,
    /// `https://10.96.0.20/mutate-v1-pod`; the serving certificate must name its host.
    #[arg(long)]
    pub url: String,

    /// PEM CA of the webhook's serving certificate, written as caBundle. Unset: the API
    /// server's system roots verify it.
    #[arg(long)]
    pub ca_file: Option<PathBuf>,

    /// The configuration's name; the API server loads only names ending in .static.k8s.io.
    #[arg(long, default_value = "otel-injector.static.k8s.io")]
    pub name: String,

    /// failurePolicy: Ignore (pods are created uninstrumented while no replica answers) or
    /// Fail.
    #[arg(long, default_value = "Ignore", value_parser = ["Ignore", "Fail"])]
    pub failure_policy: String,

    /// timeoutSeconds of the call (1–30).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=30))]
    pub timeout_seconds: u32,

    /// Namespaces never sent (the webhook's own included), besides those labeled
    /// otel-injector/inject=disabled.
    #[arg(long, value_delimiter = ',', default_values_t = ["kube-system".to_owned(), "otel-injector".to_owned()])]
    pub excluded_namespaces: Vec<String>,
}

/// `crd`.
#[derive(Debug, Args)]
pub struct CrdArgs {
    /// The Service (`NAMESPACE/NAME`, port 443) the API server sends ConversionReviews to:
    /// the webhook's, when it is installed under other names than otel-injector/otel-injector
    /// (the cert-manager annotation names a Certificate of the same namespace and name).
    #[arg(long, value_name = "NAMESPACE/NAME", default_value = "otel-injector/otel-injector", value_parser = crate::certs::builtin::parse_secret_ref)]
    pub conversion_service: (String, String),

    /// Serve v1beta1 (converted by the webhook). `--v1beta1=false` prints a CRD of v1alpha1
    /// alone, with no conversion: nothing then depends on the webhook being reachable to
    /// read Instrumentations (`kubectl get otelinst` included), and v1beta1 is not served.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub v1beta1: bool,
}

impl CrdArgs {
    /// The CRD these flags ask for, as YAML.
    pub fn yaml(&self) -> String {
        let (namespace, name) = &self.conversion_service;
        let versions = match self.v1beta1 {
            true => crate::crd::Served::Both,
            false => crate::crd::Served::V1alpha1,
        };
        crate::crd::crd_yaml_for((namespace, name), versions)
    }
}

/// `serve`: one group of flags per part.
#[derive(Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub server: ServerArgs,
    #[command(flatten)]
    pub admin: AdminArgs,
    #[command(flatten)]
    pub tls: TlsArgs,
    #[command(flatten)]
    pub cluster: ClusterArgs,
    #[command(flatten)]
    pub engine: EngineArgs,
    #[command(flatten)]
    pub log: LogArgs,
    #[command(flatten)]
    pub shutdown: ShutdownArgs,
    #[command(flatten)]
    pub events: EventArgs,
    #[command(flatten)]
    pub status: StatusArgs,
    #[command(flatten)]
    pub rollout: RolloutServeArgs,
    #[command(flatten)]
    pub policies: LivePolicyArgs,
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
    #[arg(long, env = "OTEL_INJECTOR_CA_NAME", default_value = "otel-injector development CA")]
    pub ca_name: String,

    /// Also write client.crt and client.key: a client certificate of the CA with this
    /// common name, for a caller the webhook verifies with --webhook-client-ca-file
    /// (ca.crt), such as the API server.
    #[arg(long, env = "OTEL_INJECTOR_CLIENT_NAME")]
    pub client: Option<String>,
}

/// Parses durations such as `10s`, `500ms`, `1m30s`.
fn duration(v: &str) -> Result<Duration, String> {
    crate::duration::parse(v)
        .ok_or_else(|| format!("invalid duration {v:?} (use e.g. 10s, 500ms, 1m)"))
}

/// The default of every list of namespaces left alone: the webhook configuration's
/// exclusions by name (kube-system and the webhook's own namespace).
fn excluded_by_name() -> Vec<String> {
    crate::keys::EXCLUDED_BY_NAME.map(String::from).to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agents::Language;
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
        assert!(args.engine.enabled_languages.contains(Language::Go));
        assert!(!args.engine.enabled_languages.contains(Language::Python));
        assert_eq!(
            args.engine.agent_images,
            [(Language::Java, "registry.local/java:1".to_owned())]
        );
        let config = args.engine.build();
        assert_eq!(config.enabled, args.engine.enabled_languages);
        assert!(
            Cli::try_parse_from(["otel-injector", "serve", "--enabled-languages", "php"]).is_err()
        );
    }

    #[test]
    fn durations_and_defaults() {
        let cli = Cli::try_parse_from([
            "otel-injector",
            "serve",
            "--shutdown-delay",
            "1m30s",
            "--idle-timeout",
            "500ms",
        ])
        .unwrap();
        let Command::Serve(args) = cli.command else {
            panic!("not serve")
        };
        assert_eq!(args.shutdown.shutdown_delay, Duration::from_secs(90));
        assert_eq!(args.shutdown.shutdown_timeout, Duration::from_secs(100));
        let limits = args.server.limits();
        assert_eq!(limits.idle, Duration::from_millis(500));
        assert_eq!(
            limits,
            crate::server::ConnLimits {
                idle: Duration::from_millis(500),
                ..Default::default()
            }
        );
        assert_eq!(limits.header, Duration::from_secs(5));
        assert_eq!(limits.max_connections, 512);
        let admin = args.admin.limits(&limits);
        assert_eq!(admin.max_connections, 64);
        assert_eq!((admin.header, admin.idle), (limits.header, limits.idle));
        assert!(Cli::try_parse_from(["otel-injector", "serve", "--shutdown-delay", "5"]).is_err());
    }
}
