//! Flags of the offline commands, `inject`, `explain` and `convert`: the manifests, where
//! Instrumentations and namespace annotations come from, and the engine's own flags (the
//! same as `serve`'s, so the decision is the same).

use std::path::PathBuf;

use clap::Args;

use super::engine::EngineArgs;
use crate::offline::OutputFormat;

/// The manifests an offline command reads (`-f`).
#[derive(Debug, Args)]
pub struct Manifests {
    /// Manifests to read: a file (multi-document YAML, or JSON), a directory (its .yaml,
    /// .yml and .json files, not recursively, in name order) or `-` for stdin. Repeatable.
    #[arg(short = 'f', long = "filename", required = true, value_name = "FILE|DIR|-")]
    pub files: Vec<PathBuf>,
}

/// Where the manifests and what the webhook would read come from.
#[derive(Debug, Args)]
pub struct OfflineArgs {
    #[command(flatten)]
    pub manifests: Manifests,

    /// Instrumentations (YAML) the webhook would find in the cluster. Repeatable.
    /// Instrumentation objects among the manifests count too. Either replaces a cluster
    /// Instrumentation of the same namespace and name (--cluster); the same one twice among
    /// files and manifests is an error.
    #[arg(long, value_name = "FILE")]
    pub instrumentation_file: Vec<PathBuf>,

    /// An annotation of a namespace, as NAMESPACE:KEY=VALUE (for example
    /// `shop:instrumentation.opentelemetry.io/inject-java=true`). Repeatable; wins over the
    /// same key of the manifests' own Namespace objects, which win over the cluster's.
    /// Namespace `instrumentation.opentelemetry.io/` labels are read too and, as in the
    /// webhook, win over an annotation with the same key.
    #[arg(long, value_name = "NS:KEY=VALUE", value_parser = namespace_annotation)]
    pub namespace_annotation: Vec<(String, String, String)>,

    #[command(flatten)]
    pub read: ClusterRead,

    /// Namespace of the objects that name none.
    #[arg(short = 'n', long, default_value = "default")]
    pub namespace: String,

    #[command(flatten)]
    pub engine: EngineArgs,
}

/// Whether a cluster is read, and which (the offline commands and `policy`).
#[derive(Debug, Args)]
pub struct ClusterRead {
    /// Read the cluster once (list, no watch) as the webhook would see it: every
    /// Instrumentation, every namespace's annotations and labels, and the API server's
    /// version and ImageVolume feature gate (which decide the `auto` modes; without a cluster
    /// both are unknown: `auto` delivery gives init containers, the Go sidecar is classic).
    /// Uses --kubeconfig, else the in-cluster config, else $KUBECONFIG or ~/.kube/config.
    /// Needs list on instrumentations.opentelemetry.io and namespaces in all namespaces;
    /// the gate also needs get on /metrics (else the version decides).
    #[arg(long)]
    pub cluster: bool,

    /// Kubeconfig of the cluster to read; implies --cluster.
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
}

impl ClusterRead {
    /// Whether the cluster is read, and with which kubeconfig (`None`: inferred).
    pub fn cluster(&self) -> Option<Option<&std::path::Path>> {
        (self.cluster || self.kubeconfig.is_some()).then_some(self.kubeconfig.as_deref())
    }
}

/// `inject`.
#[derive(Debug, Args)]
#[command(after_help = "\
What survives: a YAML document that nothing changes (no pod template, nothing asked, already \
injected) is written back byte for byte, comments and key order included. A document that \
changes is written anew from its parsed value, with its keys sorted: its comments, anchors, \
quoting style and key order do not survive. JSON input is always written anew.

Exit status: 0 done; 1 bad input (the message names the file and document) or a cluster that \
cannot be read (--cluster); 2 with --strict \
when an object asked for a language that was not injected (the webhook's warnings are on \
stderr in any case).")]
pub struct InjectArgs {
    #[command(flatten)]
    pub input: OfflineArgs,

    /// Output format. Several JSON documents are written as one `List`.
    #[arg(short = 'o', long, value_enum, default_value_t = OutputFormat::Yaml)]
    pub output: OutputFormat,

    /// Print a unified diff of each file against its injected form instead of the manifests.
    #[arg(long)]
    pub diff: bool,

    /// Exit with 2 when any object asked for a language that was not injected.
    #[arg(long)]
    pub strict: bool,
}

/// Output of `explain`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ExplainFormat {
    #[default]
    Text,
    Json,
}

/// `explain`.
#[derive(Debug, Args)]
pub struct ExplainArgs {
    #[command(flatten)]
    pub input: OfflineArgs,

    /// Output format: text for people, JSON for tools.
    #[arg(short = 'o', long, value_enum, default_value_t = ExplainFormat::Text)]
    pub output: ExplainFormat,
}

fn namespace_annotation(v: &str) -> Result<(String, String, String), String> {
    let err = || format!("expected NAMESPACE:KEY=VALUE, got {v:?}");
    let (ns, rest) = v.split_once(':').ok_or_else(err)?;
    let (key, value) = rest.split_once('=').ok_or_else(err)?;
    if ns.trim().is_empty() || key.trim().is_empty() {
        return Err(err());
    }
    Ok((
        ns.trim().to_owned(),
        key.trim().to_owned(),
        value.to_owned(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespace_annotations_parse() {
        assert_eq!(
            namespace_annotation("shop:instrumentation.opentelemetry.io/inject-java=a=b"),
            Ok((
                "shop".to_owned(),
                "instrumentation.opentelemetry.io/inject-java".to_owned(),
                "a=b".to_owned()
            ))
        );
        assert!(namespace_annotation("shop=x").is_err());
        assert!(namespace_annotation(":k=v").is_err());
        assert!(namespace_annotation("ns:=v").is_err());
    }
}

/// The version `convert` writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ConvertTo {
    V1beta1,
    V1alpha1,
}

impl ConvertTo {
    pub fn version(self) -> crate::crd::convert::Version {
        match self {
            ConvertTo::V1beta1 => crate::crd::convert::Version::V1beta1,
            ConvertTo::V1alpha1 => crate::crd::convert::Version::V1alpha1,
        }
    }
}

/// `convert`.
#[derive(Debug, Args)]
#[command(after_help = "\
The conversion is the webhook's: exact both ways. What the other version cannot hold rides in \
an annotation (on v1beta1 the Operator's instrumentation.opentelemetry.io/v1alpha1-fields, on \
v1alpha1 otel-injector/v1beta1-fields) and comes back on the way back; an object keeps the \
meaning of the version it was written in (a v1alpha1 object converted to v1beta1 keeps its \
default images: to take v1beta1's meaning, set every language's image and remove the \
annotation). Documents that are not Instrumentations, or already in that version, are written \
back byte for byte; a converted one is written anew with its keys sorted.

Exit status: 0 done; 1 bad input (the message names the file and document).")]
pub struct ConvertArgs {
    /// The version to write.
    #[arg(long, value_enum)]
    pub to: ConvertTo,

    #[command(flatten)]
    pub manifests: Manifests,

    /// Output format. Several JSON documents are written as one `List`.
    #[arg(short = 'o', long, value_enum, default_value_t = OutputFormat::Yaml)]
    pub output: OutputFormat,
}

/// `policy`.
#[derive(Debug, Args)]
#[command(after_help = "\
What comes out: per Instrumentation a MutatingAdmissionPolicy and its binding \
(admissionregistration.k8s.io/v1, Kubernetes 1.36 or later) that make the API server inject \
the pods asking for it as the webhook does, in the webhook's delivery (--agent-delivery, or \
the Instrumentation's otel-injector/agent-delivery; auto is image-volume), for Java, \
Node.js, Python, .NET, Apache httpd, nginx and the SDK; with --mode policy also the policy that marks the pods they do not \
cover skipped (otel-injector/status, reason policy_unsupported or the webhook's) and a \
ValidatingAdmissionPolicy that warns about them at kubectl time. Render again whenever an \
Instrumentation changes (a deleted one stops injecting at once: the binding's paramRef). \
Every object carries the label otel-injector/policy=true. With --static-manifests, the same \
objects as the API server's manifest files, loaded at its start (docs/policy.md). Coverage per \
Instrumentation and language is written to stderr. Applying the objects needs permission to write admission \
policies, which can mutate anything: keep it with whoever applies the manifests \
(docs/policy.md).

Exit status: 0 done; 1 bad input or a cluster that cannot be read.")]
pub struct PolicyArgs {
    /// Manifests with Instrumentations (and Namespace objects): files, directories or `-`.
    /// Repeatable; other objects are ignored.
    #[arg(short = 'f', long = "filename", value_name = "FILE|DIR|-")]
    pub files: Vec<PathBuf>,

    /// The cluster's Instrumentations and namespaces (the files' replace the cluster's of the
    /// same namespace and name).
    #[command(flatten)]
    pub read: ClusterRead,

    /// Namespace of the Instrumentations that name none.
    #[arg(short = 'n', long, default_value = "default")]
    pub namespace: String,

    /// `policy`: the policies alone, no webhook; `both`: the webhook serves what they leave.
    #[arg(long, value_enum, default_value_t = crate::policy::Mode::Policy)]
    pub mode: crate::policy::Mode,

    /// The first part of every object's name: `<prefix>.<namespace>.<instrumentation>`,
    /// `<prefix>.not-injected`, `<prefix>.warn-not-injected`.
    #[arg(long, default_value = "otel-injector")]
    pub name_prefix: String,

    /// Bind only in namespaces with this label, as KEY=VALUE (repeatable: all of them): a
    /// staged rollout, or policies beside a webhook that serves other namespaces.
    #[arg(long, value_name = "KEY=VALUE", value_parser = label)]
    pub namespace_label: Vec<(String, String)>,

    /// Output format. JSON is one `List`.
    #[arg(short = 'o', long, value_enum, default_value_t = OutputFormat::Yaml)]
    pub output: OutputFormat,

    /// Write the API server's manifest form (Kubernetes 1.37, ManifestBasedAdmissionControlConfig)
    /// into DIR instead of printing objects: DIR/mutating/<prefix>.yaml for the
    /// MutatingAdmissionPolicy plugin's staticManifestsDir and, with --mode policy,
    /// DIR/validating/<prefix>.yaml for the ValidatingAdmissionPolicy plugin's. The API
    /// server loads them at its start, before any object exists, and reads them again when
    /// they change (it watches the directory; at the latest within a minute). Names end in
    /// .static.k8s.io and nothing reads the Instrumentation at admission: a deleted one
    /// injects until the files are rendered again.
    #[arg(long, value_name = "DIR")]
    pub static_manifests: Option<PathBuf>,

    /// The webhook runs with --verify-exporter-tls (it leaves a language whose exporter TLS
    /// Secret or ConfigMap is missing from the pod's namespace): leave Instrumentations with
    /// exporter TLS to it, since a policy cannot look them up. Without it, their policies
    /// mount the Secret and ConfigMap as the webhook does by default, and a pod whose Secret
    /// is missing waits for it (the kubelet's FailedMount event).
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set)]
    pub verify_exporter_tls: bool,

    #[command(flatten)]
    pub engine: EngineArgs,
}

impl PolicyArgs {
    pub fn options(&self) -> crate::policy::PolicyOptions {
        crate::policy::PolicyOptions {
            mode: self.mode,
            form: match self.static_manifests {
                Some(_) => crate::policy::Form::Static,
                None => crate::policy::Form::Api,
            },
            prefix: self.name_prefix.clone(),
            namespace_labels: self.namespace_label.clone(),
            verify_exporter_tls: self.verify_exporter_tls,
            // A render is kept: a namespace that comes to ask later must find its policies
            // open to every pod.
            namespaces_read: false,
        }
    }
}

pub(super) fn label(v: &str) -> Result<(String, String), String> {
    match v.split_once('=') {
        Some((k, val)) if !k.trim().is_empty() => Ok((k.trim().to_owned(), val.trim().to_owned())),
        _ => Err(format!("expected KEY=VALUE, got {v:?}")),
    }
}
