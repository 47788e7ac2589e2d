//! Tests of `lease`.

use super::*;

fn at(ms: i64) -> Timestamp {
    Timestamp::from_millisecond(ms).unwrap()
}

fn lease(holder: Option<&str>, renewed_ms: Option<i64>, seconds: Option<i32>) -> Lease {
    Lease {
        metadata: ObjectMeta::default(),
        spec: Some(LeaseSpec {
            holder_identity: holder.map(str::to_owned),
            renew_time: renewed_ms.map(|ms| MicroTime(at(ms))),
            lease_duration_seconds: seconds,
            ..LeaseSpec::default()
        }),
    }
}

const T0: i64 = 1_800_000_000_000;
const FALLBACK: Duration = Duration::from_secs(15);

#[test]
fn the_takeover_decision_follows_the_holder_and_the_expiry() {
    let d = |l: Option<&Lease>, now_ms: i64| decide(l, at(now_ms), "b", FALLBACK);
    assert_eq!(d(None, T0), LeaseAction::Create);
    let wait = |until_ms| LeaseAction::Wait {
        holder: "a".into(),
        until_ms,
    };
    let cases = [
        // Ours: renew, whatever the time.
        (
            lease(Some("b"), Some(T0), Some(15)),
            T0 + 60_000,
            LeaseAction::Renew,
        ),
        // Another's: wait until renewTime + duration, then take over (the boundary included).
        (
            lease(Some("a"), Some(T0), Some(15)),
            T0 + 14_999,
            wait(T0 + 15_000),
        ),
        (
            lease(Some("a"), Some(T0), Some(15)),
            T0 + 15_000,
            LeaseAction::TakeOver,
        ),
        // Released (no holder, or an empty one): take over at once.
        (lease(None, Some(T0), Some(15)), T0, LeaseAction::TakeOver),
        (
            lease(Some(""), Some(T0), Some(15)),
            T0,
            LeaseAction::TakeOver,
        ),
        // No renew time: expired. No duration: the fallback's.
        (lease(Some("a"), None, Some(15)), T0, LeaseAction::TakeOver),
        (
            lease(Some("a"), Some(T0), None),
            T0 + 1_000,
            wait(T0 + 15_000),
        ),
        (
            lease(Some("a"), Some(T0), None),
            T0 + 15_000,
            LeaseAction::TakeOver,
        ),
    ];
    for (lease, now_ms, want) in cases {
        assert_eq!(d(Some(&lease), now_ms), want, "{lease:?} at {now_ms}");
    }
    // A spec-less Lease is free.
    let empty = Lease::default();
    assert_eq!(d(Some(&empty), T0), LeaseAction::TakeOver);
    // The acquire time stands in for a missing renew time.
    let mut acquired = lease(Some("a"), None, Some(3));
    acquired.spec.as_mut().unwrap().acquire_time = Some(MicroTime(at(T0)));
    let until_ms = T0 + 3_000;
    let want = LeaseAction::Wait {
        holder: "a".into(),
        until_ms,
    };
    assert_eq!(d(Some(&acquired), T0 + 2_000), want);
}

#[test]
fn the_holder_stops_leading_before_the_lease_can_expire() {
    let config = LeaseConfig {
        namespace: "ns".into(),
        name: DEFAULT_NAME.into(),
        identity: "a".into(),
        duration: DEFAULT_DURATION,
        renew_every: DEFAULT_RENEW_EVERY,
    };
    assert_eq!(config.renew_deadline(), Duration::from_secs(10));
    assert_eq!(config.duration_seconds(), 15);
    let short = LeaseConfig {
        duration: Duration::from_millis(500),
        ..config
    };
    assert_eq!(short.duration_seconds(), 1);
    assert!(short.renew_deadline() < short.duration);
}

#[test]
fn the_identity_is_the_pod_name_or_a_random_one() {
    assert_eq!(
        identity_from(Some("otel-injector-7d9f-x2".into())),
        "otel-injector-7d9f-x2"
    );
    let a = identity_from(None);
    let b = identity_from(Some(" ".into()));
    assert!(
        a.starts_with("otel-injector-") && a.len() == "otel-injector-".len() + 8,
        "{a}"
    );
    assert_ne!(a, b);
}

#[tokio::test]
async fn a_leadership_that_never_leads_reports_false() {
    let l = Leadership::never();
    assert!(!l.is_leader());
    let mut c = l.clone();
    let waited = tokio::time::timeout(Duration::from_millis(50), c.changed()).await;
    assert!(waited.is_err(), "no change ever comes");
    l.release().await;
}
