//! The one retry policy for work that must eventually succeed (building the Kubernetes
//! client, keeping the built-in certificate's Secret and `caBundle`): exponential backoff
//! from 500 ms, doubling, capped at 30 s, never giving up. The delays come from `backon`
//! (already in the tree through kube-runtime); the loop is here so that it cannot end
//! without a value.

use std::future::Future;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};

/// First delay after a failure.
pub const MIN_DELAY: Duration = Duration::from_millis(500);
/// Longest delay between two attempts.
pub const MAX_DELAY: Duration = Duration::from_secs(30);

/// The policy: 500 ms, 1 s, 2 s, … 30 s, 30 s, … (no jitter, no limit on attempts).
pub fn policy() -> ExponentialBuilder {
    ExponentialBuilder::new()
        .with_min_delay(MIN_DELAY)
        .with_max_delay(MAX_DELAY)
        .with_factor(2.0)
        .without_max_times()
}

/// Longest base wait between two attempts of a watch (or its list); jitter adds up to as
/// much again. A watch resuming after an outage needs at most two attempts (the watch,
/// then, when its history was compacted meanwhile, the list), so an Instrumentation changed
/// while the API server was away is served within about two seconds of its return.
pub const WATCH_MAX_DELAY: Duration = Duration::from_millis(400);

/// The watches' backoff (kube-runtime's is 800 ms doubling to 30 s): 100 ms doubling to
/// [`WATCH_MAX_DELAY`], each wait plus a random part up to its own length, started over
/// once the watch delivers again. A failing watch costs the API server under two requests a
/// second per replica and watch, a handful in all for a webhook's few replicas and watches,
/// where kube-runtime's default is sized for fleets of controllers.
pub struct WatchBackoff(backon::ExponentialBackoff);

impl Default for WatchBackoff {
    fn default() -> Self {
        let delays = ExponentialBuilder::new()
            .with_min_delay(Duration::from_millis(100))
            .with_max_delay(WATCH_MAX_DELAY)
            .with_factor(2.0)
            .with_jitter()
            .without_max_times();
        WatchBackoff(delays.build())
    }
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        Some(self.0.next().unwrap_or(WATCH_MAX_DELAY))
    }
}

impl kube::runtime::utils::Backoff for WatchBackoff {
    fn reset(&mut self) {
        *self = WatchBackoff::default();
    }
}

/// Calls `op` until it returns `Ok`, waiting the [`policy`]'s delays between attempts.
/// `notify` sees each error and the delay before the next attempt (to log them). The
/// delays start over on the next call.
pub async fn until_ok<T, E, Fut>(op: impl FnMut() -> Fut, notify: impl FnMut(&E, Duration)) -> T
where
    Fut: Future<Output = Result<T, E>>,
{
    until_ok_with(policy(), op, notify).await
}

async fn until_ok_with<T, E, Fut>(
    policy: ExponentialBuilder,
    mut op: impl FnMut() -> Fut,
    mut notify: impl FnMut(&E, Duration),
) -> T
where
    Fut: Future<Output = Result<T, E>>,
{
    let mut delays = policy.build();
    loop {
        match op().await {
            Ok(v) => return v,
            Err(e) => {
                let delay = delays.next().unwrap_or(MAX_DELAY);
                notify(&e, delay);
                tokio::time::sleep(delay).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watches_retry_within_a_second_and_start_over_after_a_success() {
        use kube::runtime::utils::Backoff as _;
        let mut b = WatchBackoff::default();
        let delays: Vec<Duration> = b.by_ref().take(12).collect();
        // Jitter adds up to one more minimum delay.
        assert!(delays[0] >= Duration::from_millis(100) && delays[0] < Duration::from_millis(300));
        assert!(
            delays.iter().all(|d| *d <= WATCH_MAX_DELAY * 2),
            "{delays:?}"
        );
        assert!(
            delays[8..].iter().all(|d| *d >= WATCH_MAX_DELAY),
            "{delays:?}"
        );
        b.reset();
        assert!(b.next().unwrap() < Duration::from_millis(300));
    }

    #[test]
    fn delays_double_from_half_a_second_to_thirty_seconds_and_go_on() {
        let delays: Vec<_> = policy().build().take(9).collect();
        let ms = |v: u64| Duration::from_millis(v);
        assert_eq!(
            delays,
            [
                ms(500),
                ms(1_000),
                ms(2_000),
                ms(4_000),
                ms(8_000),
                ms(16_000),
                ms(30_000),
                ms(30_000),
                ms(30_000)
            ]
        );
        assert_eq!(policy().build().nth(10_000), Some(MAX_DELAY));
    }

    #[tokio::test]
    async fn retries_until_ok_and_reports_each_failure_with_its_delay() {
        let fast = policy().with_min_delay(Duration::from_millis(1));
        let mut attempts = 0;
        let mut seen = Vec::new();
        let v = until_ok_with(
            fast,
            || {
                attempts += 1;
                let n = attempts;
                async move { if n < 4 { Err(n) } else { Ok("done") } }
            },
            |e: &u32, d| seen.push((*e, d.as_millis())),
        )
        .await;
        assert_eq!(v, "done");
        assert_eq!(attempts, 4);
        assert_eq!(seen, [(1, 1), (2, 2), (3, 4)]);
    }
}
