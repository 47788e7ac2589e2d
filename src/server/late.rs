//! A pod that asks for an Instrumentation this replica has not seen yet: applied together
//! with the Instrumentation (`kubectl apply -f dir/`, a GitOps sync), or a moment after it
//! while the replica's watch catches up (a relist after the CRD changed, say). The review is
//! answered as soon as the cache holds what the pod asks for, within `--instrumentation-wait`
//! and the caller's deadline; past that, the pod is admitted with the skip as before. The
//! wait reads the cache's change notifications: no API call, and no wait at all for a pod
//! that finds its Instrumentation.

use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::engine::{Report, SkipReason};

/// How a review waits for a missing Instrumentation.
#[derive(Clone, Debug)]
pub struct InstrumentationWait {
    /// Moves after each change of the Instrumentation index, once it is readable.
    changes: watch::Receiver<u64>,
    longest: Duration,
}

impl InstrumentationWait {
    /// `None` when `longest` is zero: no wait.
    pub fn new(changes: watch::Receiver<u64>, longest: Duration) -> Option<Self> {
        (!longest.is_zero()).then_some(InstrumentationWait { changes, longest })
    }

    /// A follower of the changes from now on: taken before the first review, so that a
    /// change made while it runs is not missed.
    pub fn follow(&self) -> Follower {
        let mut changes = self.changes.clone();
        changes.borrow_and_update();
        Follower {
            changes,
            longest: self.longest,
        }
    }
}

/// The changes of one review's wait.
pub struct Follower {
    changes: watch::Receiver<u64>,
    longest: Duration,
}

impl Follower {
    /// When the wait started at `started` ends, at the latest by `deadline`.
    pub fn until(&self, started: Instant, deadline: Instant) -> Instant {
        (started + self.longest).min(deadline)
    }

    /// Waits for the next change of the Instrumentations, until `until`; `false` when none
    /// came (or the cache's writer is gone).
    pub async fn changed(&mut self, until: Instant) -> bool {
        match tokio::time::timeout_at(until, self.changes.changed()).await {
            Ok(Ok(())) => {
                self.changes.borrow_and_update();
                true
            }
            Ok(Err(_)) | Err(_) => false,
        }
    }
}

/// Whether `report` skips a language for want of an Instrumentation the cache may come to
/// hold: none in the namespace (`"true"`), or the one named.
pub fn missing(report: &Report) -> bool {
    report.skipped.iter().any(|s| {
        matches!(
            s.reason,
            SkipReason::NoInstrumentation | SkipReason::InstrumentationNotFound
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Skip;

    fn skipped(reason: SkipReason) -> Report {
        Report {
            skipped: vec![Skip {
                language: None,
                reason,
                instrumentation: None,
                message: String::new(),
            }],
            ..Report::default()
        }
    }

    #[test]
    fn only_a_missing_instrumentation_is_waited_for() {
        assert!(missing(&skipped(SkipReason::NoInstrumentation)));
        assert!(missing(&skipped(SkipReason::InstrumentationNotFound)));
        for other in SkipReason::ALL {
            if !matches!(
                other,
                SkipReason::NoInstrumentation | SkipReason::InstrumentationNotFound
            ) {
                assert!(!missing(&skipped(other)), "{other:?}");
            }
        }
        assert!(!missing(&Report::default()));
    }

    #[tokio::test(start_paused = true)]
    async fn a_follower_wakes_on_a_change_made_after_it_started_and_not_before() {
        let (tx, rx) = watch::channel(0u64);
        tx.send_replace(1);
        let wait = InstrumentationWait::new(rx, Duration::from_secs(2)).unwrap();
        let mut follower = wait.follow();
        let start = Instant::now();
        let until = follower.until(start, start + Duration::from_secs(10));
        assert_eq!(until, start + Duration::from_secs(2));
        assert_eq!(
            follower.until(start, start + Duration::from_secs(1)),
            start + Duration::from_secs(1),
            "the caller's deadline comes first"
        );
        // The change made before it followed is not one.
        assert!(!follower.changed(until).await);
        assert_eq!(Instant::now(), until);

        let mut follower = wait.follow();
        let later = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            tx.send_replace(2);
            tx
        });
        let start = Instant::now();
        assert!(follower.changed(start + Duration::from_secs(2)).await);
        assert_eq!(Instant::now() - start, Duration::from_millis(300));
        drop(later.await.unwrap());
        assert!(
            !follower.changed(start + Duration::from_secs(2)).await,
            "writer gone"
        );
        assert!(InstrumentationWait::new(wait.changes.clone(), Duration::ZERO).is_none());
    }
}
