//! The decision engine: a pure function from one [`Snapshot`] (Instrumentations, the
//! namespace, settings) and a pod to a [`Decision`]: the plan, the warnings that explain it
//! and the outcome per language. No I/O, no logging, no patch encoding: the admission layer
//! turns the plan into a patch, logs and counts.

mod asked;
mod bound;
mod config;
mod decision;
mod keys_read;
pub mod outcome;
mod plan;
mod reason;
mod references;
mod selector;
mod snapshot;

use k8s_openapi::api::core::v1::Pod;

use crate::pod::plan::PodPlan;
use outcome::PodStatus;

pub use asked::{Asked, AskedBy, Naming, Targets};
pub use bound::{Bounded, refuse_undecoded};
pub use config::{
    AgentDelivery, CrossNamespace, DEFAULT_MAX_POD_BYTES, EngineConfig, GoSidecar,
    MIN_PATCH_BYTES_PER_TARGET, auto_image_volumes,
};
pub use decision::{Decision, InjectedLanguage, Report, Skip};
pub use keys_read::{KeyRead, KeyUse, ReadOn, keys_read};
pub use plan::{OPERATOR_INIT_CONTAINERS, OPERATOR_SIDECAR};
pub use reason::SkipReason;
pub use references::{NamingRule, NamingValue, Unusable, shared_with_others, unusable};
pub use selector::{NAMESPACE_NAME_LABEL, Selector};
pub use snapshot::{
    Based, Catalog, IndexEntry, Instrumentations, MAX_BASES, NamespaceInfo, ObjectKind,
    ObjectLookup, Snapshot,
};

/// Decides what to inject into `pod`, created in the snapshot's namespace, short of the
/// exact size check ([`decide_within`] makes it with the patch).
pub fn decide<'p>(snapshot: &Snapshot<'_>, pod: &'p Pod) -> Decision<'p> {
    let mut d = Report::default();
    let plan = plan::plan(snapshot, pod, &mut d);
    Decision { plan, report: d }
}

/// Decides for `pod` as [`decide`] does, then checks the patch `write` makes of the plan and
/// the outcome against the size bound ([`bound`]): the answer the webhook gives.
pub fn decide_within<'p, P, E>(
    snapshot: &Snapshot<'_>,
    pod: &'p Pod,
    write: impl Fn(&Pod, Option<&PodPlan<'_>>, Option<&PodStatus>) -> Result<Option<P>, E>,
) -> Bounded<'p, P>
where
    P: AsRef<[u8]>,
    E: std::fmt::Display,
{
    let mut report = Report::default();
    let plan = plan::plan(snapshot, pod, &mut report);
    bound::fit(snapshot, pod, plan, report, &write)
}
