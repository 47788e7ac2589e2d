//! Which shipped webhook configuration ([`Variant`]) and which shipped RBAC ([`Rbac`]) a test's
//! webhook runs with, and the ServiceAccount identity made for each RBAC.

use std::collections::BTreeMap;

use crate::support::api;
use crate::support::chart;
use crate::support::identity::{self, Identity};

use super::controlplane::cluster;

/// Which shipped webhook configuration a test's webhook is registered with.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Variant {
    /// `manifests/base/webhook.yaml`: every pod but the excluded ones.
    Default,
    /// `manifests/components/targeted/webhook-targeted.yaml`: pods that ask, and pods of labeled namespaces.
    Targeted,
    /// The Helm chart's default rendering (`support/chart.rs`).
    Chart,
}

impl Variant {
    pub fn manifest(self) -> std::path::PathBuf {
        match self {
            Variant::Default => api::webhook_manifest_path(),
            Variant::Targeted => api::targeted_webhook_manifest_path(),
            Variant::Chart => chart::default_rendering_file().unwrap_or_else(|e| panic!("{e}")),
        }
    }
}

/// The RBAC a test's webhook runs with: the shipped manifests' roles bound to a
/// ServiceAccount whose token the webhook uses (never the admin kubeconfig).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Rbac {
    /// `base/otel-injector.yaml` and `components/events/rbac.yaml` (in every overlay) as
    /// shipped, for its own ServiceAccount `otel-injector`.
    Default,
    /// Plus `components/targeted/rbac.yaml` (patch on namespaces), for `e2e-targeted`.
    Targeted,
    /// Plus `components/built-in/rbac.yaml` (the built-in certificate's Secret and caBundle), for
    /// `e2e-self-signed`.
    SelfSigned,
    /// Plus `components/verify-exporter-tls/rbac.yaml` (list/watch Secrets and ConfigMaps), for
    /// `e2e-verify-exporter-tls`.
    VerifyExporterTls,
    /// The Roles, ClusterRoles and bindings of the Helm chart's default rendering, for
    /// `e2e-chart`.
    Chart,
    /// Plus `components/agent-delivery-auto` (get on `/metrics`, to read the `ImageVolume` gate),
    /// for `e2e-agent-delivery-auto`.
    AgentDeliveryAuto,
    /// Plus `components/status/rbac.yaml` (the pod watch, the status patch, the Lease) and
    /// `components/verify-exporter-tls/rbac.yaml` (for the Degraded condition of a missing
    /// Secret), for `e2e-status`.
    Status,
    /// Plus `components/rollout/rbac.yaml` (restart workloads, status.rollout, Events, the
    /// Lease), for `e2e-rollout`.
    Rollout,
    /// Plus `components/status/rbac.yaml`, `components/rollout/rbac.yaml` and
    /// `components/events/rbac.yaml`: the status controller finding missed pods, announcing
    /// them and the automatic rollout restarting them, for `e2e-missed`.
    Missed,
    /// Plus `components/status/rbac.yaml`, `components/rollback/rbac.yaml` and
    /// `components/rollout/rbac.yaml`: the safety net detecting failing workloads, rolling
    /// them back and announcing both, and the automatic rollout with its canary, for
    /// `e2e-safety`.
    SafetyNet,
    /// Plus `components/live-policies/rbac.yaml` (write the admission policies, the Lease),
    /// for `e2e-live-policies`.
    LivePolicies,
}

impl Rbac {
    /// The ServiceAccount and the manifests whose RBAC it gets.
    fn account(self) -> (&'static str, &'static [&'static str]) {
        match self {
            Rbac::Default => (
                identity::SERVICE_ACCOUNT,
                &["base/otel-injector.yaml", "components/events/rbac.yaml"],
            ),
            Rbac::Targeted => (
                "e2e-targeted",
                &["base/otel-injector.yaml", "components/targeted/rbac.yaml"],
            ),
            Rbac::SelfSigned => (
                "e2e-self-signed",
                &["base/otel-injector.yaml", "components/built-in/rbac.yaml"],
            ),
            Rbac::VerifyExporterTls => (
                "e2e-verify-exporter-tls",
                &[
                    "base/otel-injector.yaml",
                    "components/verify-exporter-tls/rbac.yaml",
                ],
            ),
            Rbac::Chart => ("e2e-chart", &[]),
            Rbac::Status => (
                "e2e-status",
                &[
                    "base/otel-injector.yaml",
                    "components/status/rbac.yaml",
                    "components/verify-exporter-tls/rbac.yaml",
                ],
            ),
            Rbac::Rollout => (
                "e2e-rollout",
                &["base/otel-injector.yaml", "components/rollout/rbac.yaml"],
            ),
            Rbac::Missed => (
                "e2e-missed",
                &[
                    "base/otel-injector.yaml",
                    "components/status/rbac.yaml",
                    "components/rollout/rbac.yaml",
                    "components/events/rbac.yaml",
                ],
            ),
            Rbac::SafetyNet => (
                "e2e-safety",
                &[
                    "base/otel-injector.yaml",
                    "components/status/rbac.yaml",
                    "components/rollback/rbac.yaml",
                    "components/rollout/rbac.yaml",
                ],
            ),
            Rbac::LivePolicies => (
                "e2e-live-policies",
                &[
                    "base/otel-injector.yaml",
                    "components/live-policies/rbac.yaml",
                ],
            ),
            Rbac::AgentDeliveryAuto => (
                "e2e-agent-delivery-auto",
                &[
                    "base/otel-injector.yaml",
                    "components/agent-delivery-auto/rbac.yaml",
                ],
            ),
        }
    }
}

pub(super) static IDENTITIES: tokio::sync::Mutex<BTreeMap<Rbac, Identity>> =
    tokio::sync::Mutex::const_new(BTreeMap::new());

/// The identity with this RBAC (made once per test process; see `support/identity.rs`).
pub async fn identity(rbac: Rbac) -> Identity {
    let cp = cluster().await;
    let mut made = IDENTITIES.lock().await;
    if let Some(id) = made.get(&rbac) {
        return id.clone();
    }
    let (sa, manifests) = rbac.account();
    let dir = cp.dir.join("identities");
    let id = if rbac == Rbac::Chart {
        let path = chart::default_rendering_file().unwrap_or_else(|e| panic!("{e}"));
        let docs = api::read_yaml_docs(&path).unwrap_or_else(|e| panic!("{e}"));
        identity::issue_from(cp, sa, &docs, &dir).await
    } else {
        identity::issue(cp, sa, manifests, &dir).await
    }
    .unwrap_or_else(|e| panic!("identity {rbac:?}: {e}"));
    made.insert(rbac, id.clone());
    id
}
