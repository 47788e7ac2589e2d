//! The status of an Instrumentation, the same in both versions: the Operator's
//! `upgradeBlockedVersions` and what otel-injector's status controller keeps from the pods
//! that asked (counts per outcome and reason, workloads, the rollout, rollbacks).

use std::collections::BTreeMap;

use super::object::schema_objects;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

schema_objects! {
    /// Status of an Instrumentation. `upgradeBlockedVersions` is the Operator's; the rest is kept
    /// by otel-injector's status controller (field manager `otel-injector-status`) from the pods
    /// that asked for injection.
    pub struct InstrumentationStatus {
        /// Language images that could not be upgraded automatically, mapped to the reason.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        pub upgrade_blocked_versions: BTreeMap<String, String>,
        /// Pods injected with the current spec (one per injected language).
        pub injected: Option<i64>,
        /// Pods injected with an earlier spec: a restart injects the current one.
        pub outdated: Option<i64>,
        /// Pods that asked for this Instrumentation and were not injected.
        pub skipped: Option<i64>,
        /// Pods that asked for this Instrumentation and were admitted without an outcome: the
        /// webhook was unreachable, or not registered yet, when they were created (found by
        /// their `inject-*` label, or in a namespace that asks). A restart injects them.
        pub missed: Option<i64>,
        /// Of `injected`, the pods failing (a container in `CrashLoopBackOff`, OOM-killed, or
        /// restarted 3 times or more), with `--detect-failures`; the `Failing` condition names
        /// their workloads.
        pub failing: Option<i64>,
        /// The most frequent reasons of the skipped pods (at most 5), most pods first.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub skipped_reasons: Vec<SkippedReason>,
        /// The workloads of those pods (at most 50), those with the most outdated and skipped
        /// pods first.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub workloads: Vec<WorkloadStatus>,
        /// Workloads left out of `workloads` for its bound.
        pub workloads_omitted: Option<i64>,
        /// The digest of the current spec (8 hex digits), as recorded on the pods injected with it.
        pub spec_hash: Option<String>,
        /// The `metadata.generation` this status was computed for.
        pub observed_generation: Option<i64>,
        /// When `injected`, `outdated`, `skipped` or `missed` last changed.
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
        pub rollout: Option<RolloutStatus>,
    }
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

schema_objects! {
    /// Where the automatic rollout of the current spec stands.
    #[derive(Eq)]
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
        pub workload: Option<String>,
        /// Stopped: `Timeout`, `CrashLoop`, `ProgressDeadlineExceeded`, `WorkloadGone` or
        /// `APIError`.
        pub reason: Option<String>,
        /// What happened, for people.
        pub message: Option<String>,
        /// When `state` last changed.
        pub last_transition_time: Option<Time>,
    }

    /// Skipped pods of one reason.
    #[derive(Eq)]
    pub struct SkippedReason {
        /// The reason, as in the pod's `otel-injector/status` annotation and the metrics.
        pub reason: String,
        /// How many pods.
        pub pods: i64,
    }

    /// The pods of one workload that asked for this Instrumentation.
    #[derive(Eq)]
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
        /// Of `injected`, `outdated` and `missed`, the pods this Instrumentation's selector
        /// (`otel-injector/selector`) asked for, not an `inject-*` key.
        #[serde(default, skip_serializing_if = "is_zero")]
        pub selected: i64,
        /// When these counts last changed.
        pub last_change_time: Option<Time>,
    }
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}
