//! What the pods that asked for injection say about each Instrumentation: how many run its
//! current spec, how many an older one (outdated), how many were skipped and why, how many
//! were missed (they asked, and were admitted without an outcome), and the workloads they
//! belong to. Computed from pod metadata alone (the `otel-injector/status` annotation, the
//! injection keys and the controller owner), for the status controller and `rollout`. Pure:
//! the callers read the pods and the current spec digests.
//!
//! Between the engine (whose outcome grammar it reads) and the cluster layer (whose watches
//! and rollout feed it): [`record`] what is kept of a pod, [`failure`] a failing one,
//! [`workload`] the workload it belongs to, [`tally`] the counts.

pub mod failure;
pub mod record;
pub mod tally;
pub mod workload;

pub use failure::{CRASH_RESTARTS, PodFailure};
pub use record::{CountedEntry, Interner, PodRecord};
pub use tally::{Counts, Failing, Tally, census};
pub use workload::{Workload, restartable_kind};

#[cfg(test)]
mod tests;
