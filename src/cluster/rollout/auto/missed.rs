//! When the automatic rollout restarts the workloads of pods admitted without the webhook:
//! once an Instrumentation's missed count has settled, and not again for an hour.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::DEBOUNCE;
use crate::census::restartable_kind;
use crate::crd::Instrumentation;

/// A rolled-out Instrumentation whose restartable workloads have pods admitted without the
/// webhook (`status.workloads[].missed`) is rolled out again to restart them once that count
/// has stayed the same for [`DEBOUNCE`] (an outage that still makes missed pods has not
/// ended), and at most once per this (a webhook still unreachable at the restart would
/// otherwise have them restarted over and over).
pub const MISSED_RETRY: Duration = Duration::from_secs(3600);

/// When the workloads of an Instrumentation's missed pods are due for a restart.
#[derive(Debug, Default)]
pub struct MissedTrigger {
    /// Per Instrumentation: its missed count and since when it has been that.
    seen: BTreeMap<String, (i64, Instant)>,
    /// Per Instrumentation: when its missed pods' workloads were last restarted.
    tried: BTreeMap<String, Instant>,
}

impl MissedTrigger {
    /// Whether to restart the workloads of `key`'s missed pods now: `missed` (its
    /// `status.missed`) has stayed the same, above 0 and in a restartable workload, for
    /// [`DEBOUNCE`], and they were not restarted within [`MISSED_RETRY`].
    pub fn due(&mut self, key: &str, missed: i64, restartable: bool, now: Instant) -> bool {
        if missed == 0 || !restartable {
            self.seen.remove(key);
            return false;
        }
        let since = match self.seen.get(key) {
            Some((n, t)) if *n == missed => *t,
            _ => {
                self.seen.insert(key.to_owned(), (missed, now));
                now
            }
        };
        let retry = self
            .tried
            .get(key)
            .is_none_or(|t| now.saturating_duration_since(*t) >= MISSED_RETRY);
        now.saturating_duration_since(since) >= DEBOUNCE && retry
    }

    /// Records that `key`'s workloads are being restarted.
    pub fn tried(&mut self, key: &str, now: Instant) {
        self.seen.remove(key);
        self.tried.insert(key.to_owned(), now);
    }

    /// How long until a count now settling is due.
    pub(super) fn next(&self, now: Instant) -> Option<Duration> {
        self.seen
            .iter()
            .filter(|(k, _)| !self.tried.contains_key(*k))
            .map(|(_, (_, t))| DEBOUNCE.saturating_sub(now.saturating_duration_since(*t)))
            .min()
    }
}
/// Whether the status counts missed pods in a workload a rollout restarts.
pub(super) fn restartable_missed(inst: &Instrumentation) -> bool {
    inst.status
        .iter()
        .flat_map(|s| &s.workloads)
        .any(|w| w.missed > 0 && restartable_kind(&w.kind))
}
