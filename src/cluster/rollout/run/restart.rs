//! Restarting a workload as `kubectl rollout restart` does, by its pod template's
//! `restartedAt` annotation (through [`crate::cluster::workloads`]).

use kube::Client;
use serde_json::json;

use super::FIELD_MANAGER;
use crate::census::Workload;
use crate::cluster::workloads::{WorkloadObject, merge_patch};
use crate::keys::RESTARTED_AT;

/// Restarts a workload as `kubectl rollout restart` does: a merge patch of its pod
/// template's `kubectl.kubernetes.io/restartedAt` annotation. `None`: not a kind a rollout
/// restarts.
pub async fn restart(
    client: &Client,
    w: &Workload,
    stamp: &str,
) -> kube::Result<Option<WorkloadObject>> {
    let patch = json!({"spec": {"template": {"metadata": {"annotations": {RESTARTED_AT: stamp}}}}});
    merge_patch(client, w, &patch, FIELD_MANAGER).await
}

/// Now, as `kubectl rollout restart` writes it (RFC 3339, whole seconds, UTC).
pub fn stamp_now() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}
