//! Flags of the caches the engine reads, and of the namespace labeler.

use std::path::PathBuf;

use clap::{ArgAction, Args};

use crate::cluster::{Caches, FileCatalog};

#[derive(Debug, Args)]
#[command(next_help_heading = "Cluster")]
pub struct ClusterArgs {
    /// Read Instrumentations from this YAML file (one or more documents) instead of watching
    /// the cluster. Repeatable (comma-separated in the env var). With it the webhook makes
    /// no Kubernetes API call at all, so namespace-level inject annotations do not apply.
    /// The files are read once the listeners are bound (not ready until then); one that
    /// cannot be read or parsed ends the process with an error.
    #[arg(long, env = "OTEL_INJECTOR_INSTRUMENTATION_FILE", value_delimiter = ',')]
    pub instrumentation_file: Vec<PathBuf>,

    /// Kubeconfig to use; by default the in-cluster config or $KUBECONFIG / ~/.kube/config.
    #[arg(long, env = "OTEL_INJECTOR_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,

    /// Watch Secret and ConfigMap names so that an Instrumentation whose
    /// `spec.exporter.tls` names one missing from the pod's namespace is reported, and that
    /// language not injected. Off by default: it needs list/watch on every Secret and
    /// ConfigMap of the cluster, and a list returns whole Secrets whatever the client asks
    /// for, so a stolen token could read them all (manifests/components/verify-exporter-tls grants
    /// it). Without it, a missing object is reported by the kubelet's own event on the pod,
    /// and only names that are not valid are refused. Live policies (--apply-policies) then
    /// leave Instrumentations with exporter TLS to the webhook (a policy cannot look up).
    #[arg(long, env = "OTEL_INJECTOR_VERIFY_EXPORTER_TLS")]
    #[arg(default_value_t = false, action = ArgAction::Set)]
    pub verify_exporter_tls: bool,

    /// Keep the label `otel-injector/inject=true` on namespaces whose annotations ask for
    /// injection, for the opt-in "targeted" webhook configuration that selects them
    /// (webhook `matchConditions` cannot see namespace annotations). Needs patch on
    /// namespaces (manifests/components/targeted); the default install sends every pod instead and
    /// writes nothing.
    #[arg(long, env = "OTEL_INJECTOR_LABEL_NAMESPACES")]
    #[arg(default_value_t = false, action = ArgAction::Set)]
    pub label_namespaces: bool,
}

impl ClusterArgs {
    /// The caches, empty: the Instrumentation files to read once the listeners are bound,
    /// or the stores that the watches fill once started.
    pub fn build(&self) -> Caches {
        if self.instrumentation_file.is_empty() {
            return Caches::watched(self.verify_exporter_tls);
        }
        Caches::Files(std::sync::Arc::new(FileCatalog::new(
            self.instrumentation_file.clone(),
        )))
    }
}
