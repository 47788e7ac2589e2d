//! Rollout: restart the workloads whose pods run an Instrumentation's outdated spec, were
//! admitted without the webhook, or were skipped because it did not exist yet, so that their
//! new pods are injected with the current one. [`plan`] decides which (pure), [`progress`] when a restarted workload is done
//! or failed (pure), [`run`] reads the cluster and restarts them at most N at a time, as
//! `kubectl rollout restart` does, stopping at the first that fails. Used by the `rollout`
//! command and by the automatic mode ([`auto`]) of `serve`; never by the admission path.

pub mod auto;
pub mod plan;
pub mod progress;
pub mod run;

pub use auto::AutoRollout;
pub use plan::{Exclusions, Left, Plan, Restart};
pub use progress::Progress;
pub use run::{Ended, RolloutError, Settings, Step, Stop, StopReason};
