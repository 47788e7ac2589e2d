//! The workload a pod belongs to, as the census counts it, and which kinds `rollout` can
//! restart.

/// The workload a pod belongs to: its controller owner, a ReplicaSet named after a
/// Deployment (`<deployment>-<pod-template-hash>`) read as that Deployment.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Workload {
    pub namespace: String,
    pub kind: String,
    pub name: String,
}

impl std::fmt::Display for Workload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}/{}", self.kind, self.namespace, self.name)
    }
}

impl Workload {
    /// Whether `rollout` can restart it (through its pod template annotation).
    pub fn restartable(&self) -> bool {
        restartable_kind(&self.kind)
    }
}

/// Whether `rollout` restarts workloads of this kind.
pub fn restartable_kind(kind: &str) -> bool {
    matches!(kind, "Deployment" | "StatefulSet" | "DaemonSet")
}
