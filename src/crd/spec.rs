//! The Instrumentation resource itself (kube derive) and the spec sections every language shares:
//! exporter, propagators, sampler, resource attributes, defaults.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::core::v1::{EnvVar, SecurityContext};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::kind::instrumentation_kind;
use super::{
    ApacheHttpd, DotNet, Go, Java, MSG_JAEGER_REMOTE_ARGUMENT, MSG_RATIO_ARGUMENT, Nginx, NodeJs,
    Python, RULE_JAEGER_REMOTE_ARGUMENT, RULE_RATIO_ARGUMENT, SAMPLER_ARGUMENT_MAX_LENGTH,
    V1beta1Fields,
};

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
        pub init_container_security_context: Option<Box<SecurityContext>>,
        /// Java auto-instrumentation.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub java: Option<Box<Java>>,
        /// Node.js auto-instrumentation.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub nodejs: Option<Box<NodeJs>>,
        /// Python auto-instrumentation.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub python: Option<Box<Python>>,
        /// .NET auto-instrumentation.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub dotnet: Option<Box<DotNet>>,
        /// Go auto-instrumentation (eBPF sidecar). Needs OTEL_GO_AUTO_TARGET_EXE, from env or the
        /// instrumentation.opentelemetry.io/otel-go-auto-target-exe pod annotation.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub go: Option<Box<Go>>,
        /// Apache HTTPD auto-instrumentation.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub apache_httpd: Option<Box<ApacheHttpd>>,
        /// Nginx auto-instrumentation.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub nginx: Option<Box<Nginx>>,
        /// What the object carries of v1beta1 (read by `Instrumentation::read_carried` from its
        /// annotation): not a field of the v1alpha1 schema.
        #[serde(skip)]
        #[schemars(skip)]
        pub v1beta1: Option<Box<V1beta1Fields>>,
    }
}

/// Status of an Instrumentation. `upgradeBlockedVersions` is the Operator's; the rest is kept
/// by otel-injector's status controller (field manager `otel-injector-status`) from the pods
/// that asked for injection.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InstrumentationStatus {
    /// Language images that could not be upgraded automatically, mapped to the reason.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub upgrade_blocked_versions: BTreeMap<String, String>,
    /// Pods injected with the current spec (one per injected language).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub injected: Option<i64>,
    /// Pods injected with an earlier spec: a restart injects the current one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outdated: Option<i64>,
    /// Pods that asked for this Instrumentation and were not injected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped: Option<i64>,
    /// Pods that asked for this Instrumentation and were admitted without an outcome: the
    /// webhook was unreachable, or not registered yet, when they were created (found by
    /// their `inject-*` label, or in a namespace that asks). A restart injects them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missed: Option<i64>,
    /// Of `injected`, the pods failing (a container in `CrashLoopBackOff`, OOM-killed, or
    /// restarted 3 times or more), with `--detect-failures`; the `Failing` condition names
    /// their workloads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failing: Option<i64>,
    /// The most frequent reasons of the skipped pods (at most 5), most pods first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped_reasons: Vec<SkippedReason>,
    /// The workloads of those pods (at most 50), those with the most outdated and skipped
    /// pods first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workloads: Vec<WorkloadStatus>,
    /// Workloads left out of `workloads` for its bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workloads_omitted: Option<i64>,
    /// The digest of the current spec (8 hex digits), as recorded on the pods injected with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_hash: Option<String>,
    /// The `metadata.generation` this status was computed for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// When `injected`, `outdated`, `skipped` or `missed` last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_change_time: Option<Time>,
    /// `Ready`: the object is readable and the objects it references exist; `Degraded`: why
    /// not (`Unreadable`, `ExporterTLSSecretMissing`, `ExporterTLSConfigMapMissing`);
    /// `Failing` (`--detect-failures`): whether workloads' pods injected with the current
    /// spec are failing, and which.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// Workloads rolled back from this Instrumentation's current spec after their pods failed
    /// with it (`otel-injector/on-failure: rollback`, `--rollback`), the last 50: their pod
    /// template carries `otel-injector/rolled-back` until a person removes it; a changed spec
    /// is tried again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rolled_back: Vec<RolledBackWorkload>,
    /// The automatic rollout of an Instrumentation annotated `otel-injector/rollout:
    /// automatic` (field manager `otel-injector-rollout`); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<RolloutStatus>,
}

/// A workload rolled back from an Instrumentation's spec.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolledBackWorkload {
    /// `Deployment`, `StatefulSet` or `DaemonSet`.
    pub kind: String,
    pub namespace: String,
    pub name: String,
    /// The languages rolled back (`java`, or `java,python`).
    pub languages: String,
    /// The spec its pods failed with (8 hex digits).
    pub spec_hash: String,
    /// How one of its pods failed (`pod web-7d9f-x2x container app: OOMKilled (exit code
    /// 137), 4 restarts`).
    pub reason: String,
    /// When it was rolled back.
    pub time: Time,
}

/// Where the automatic rollout of the current spec stands.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutStatus {
    /// `Progressing`, `Complete` or `Stopped` (not retried for this spec).
    pub state: String,
    /// The spec digest the rollout brings the workloads to.
    pub spec_hash: String,
    /// Workloads restarted so far (`Kind/namespace/name`, the last 50).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub restarted: Vec<String>,
    /// How many workloads were restarted.
    #[serde(default)]
    pub restarted_count: i64,
    /// How many planned workloads are not restarted (yet, or because it stopped).
    #[serde(default)]
    pub pending: i64,
    /// Stopped: the workload that stopped it (`Kind/namespace/name`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload: Option<String>,
    /// Stopped: `Timeout`, `CrashLoop`, `ProgressDeadlineExceeded`, `WorkloadGone` or
    /// `APIError`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// What happened, for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// When `state` last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
}

/// Skipped pods of one reason.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SkippedReason {
    /// The reason, as in the pod's `otel-injector/status` annotation and the metrics.
    pub reason: String,
    /// How many pods.
    pub pods: i64,
}

/// The pods of one workload that asked for this Instrumentation.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadStatus {
    /// `Deployment`, `StatefulSet`, `DaemonSet`, `Job`, `ReplicaSet`, ...: the pods' controller
    /// (a Deployment's ReplicaSet counts as the Deployment).
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub injected: i64,
    pub outdated: i64,
    pub skipped: i64,
    /// Admitted without the webhook.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub missed: i64,
    /// Of `injected`, the pods failing (`--detect-failures`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub failing: i64,
    /// When these counts last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_change_time: Option<Time>,
}

fn is_zero(n: &i64) -> bool {
    *n == 0
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
