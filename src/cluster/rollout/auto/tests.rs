//! Tests of `auto`.

use super::*;
use crate::cluster::rollout::run::StopReason;

fn recorded(state: &str, spec: &str) -> RolloutStatus {
    RolloutStatus {
        state: state.into(),
        spec_hash: spec.into(),
        ..Default::default()
    }
}

#[test]
fn a_spec_is_rolled_out_once_whether_it_completed_or_stopped() {
    let h = SpecHash([0x3f, 0x2a, 0x9c, 0x1b]);
    let cases = [
        (false, None, Due::Nothing),
        (false, Some(recorded(COMPLETE, "3f2a9c1b")), Due::Clear),
        (true, None, Due::Roll(h)),
        (true, Some(recorded(COMPLETE, "3f2a9c1b")), Due::Done),
        (true, Some(recorded(STOPPED, "3f2a9c1b")), Due::Done),
        (true, Some(recorded(PROGRESSING, "3f2a9c1b")), Due::Roll(h)),
        (true, Some(recorded(STOPPED, "00000000")), Due::Roll(h)),
        (true, Some(recorded(COMPLETE, "00000000")), Due::Roll(h)),
    ];
    for (automatic, status, want) in cases {
        assert_eq!(
            due(automatic, h, status.as_ref()),
            want,
            "{automatic} {status:?}"
        );
    }
}

#[test]
fn missed_pods_are_restarted_once_their_count_settles_and_then_not_again_for_an_hour() {
    let t0 = Instant::now();
    let at = |s: u64| t0 + Duration::from_secs(s);
    let mut t = MissedTrigger::default();
    assert!(!t.due("a", 0, true, at(0)));
    assert!(!t.due("a", 3, false, at(0)), "no restartable workload");
    assert!(!t.due("a", 3, true, at(0)));
    assert_eq!(t.next(at(1)), Some(Duration::from_secs(4)));
    // Still growing: the debounce starts again.
    assert!(!t.due("a", 4, true, at(4)));
    assert!(!t.due("a", 4, true, at(8)));
    assert!(t.due("a", 4, true, at(9)));
    t.tried("a", at(9));
    assert_eq!(t.next(at(9)), None);
    // Missed again (the webhook still unreachable at the restart): not before an hour.
    assert!(!t.due("a", 4, true, at(20)));
    assert!(!t.due("a", 4, true, at(3608)));
    assert!(t.due("a", 4, true, at(3609)));
    // Another Instrumentation is its own.
    assert!(!t.due("b", 1, true, at(3609)));
    assert!(t.due("b", 1, true, at(3614)));
}

fn w(name: &str) -> Workload {
    Workload {
        namespace: "shop".into(),
        kind: "Deployment".into(),
        name: name.into(),
    }
}

#[test]
fn the_status_says_what_was_restarted_and_where_it_stopped() {
    let h = SpecHash([1, 2, 3, 4]);
    let t = Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
    let mut report = Ended {
        restarted: vec![w("a"), w("b")],
        completed: vec![w("a")],
        ..Ended::default()
    };
    assert_eq!(
        status_of(h, 3, &report, false, &t),
        RolloutStatus {
            state: PROGRESSING.into(),
            spec_hash: "01020304".into(),
            restarted: vec!["Deployment/shop/a".into(), "Deployment/shop/b".into()],
            restarted_count: 2,
            pending: 1,
            workload: None,
            reason: None,
            message: Some("2 of 3 workloads restarted, 1 complete".into()),
            last_transition_time: Some(t.clone()),
        }
    );
    report.stopped = Some(Stop {
        workload: w("b"),
        reason: StopReason::Timeout,
        message: "not complete within 30s: 0 of 1 updated pods available".into(),
    });
    let s = status_of(h, 3, &report, true, &t);
    assert_eq!(
        (
            s.state.as_str(),
            s.workload.as_deref(),
            s.reason.as_deref(),
            s.message.as_deref(),
            s.pending
        ),
        (
            STOPPED,
            Some("Deployment/shop/b"),
            Some("Timeout"),
            Some("not complete within 30s: 0 of 1 updated pods available"),
            1
        )
    );
    report.stopped = None;
    report.restarted.push(w("c"));
    let s = status_of(h, 3, &report, true, &t);
    assert_eq!(
        (
            s.state.as_str(),
            s.message.as_deref(),
            s.pending,
            s.restarted_count
        ),
        (COMPLETE, Some("3 workloads restarted and complete"), 0, 3)
    );
    let s = status_of(h, 0, &Ended::default(), true, &t);
    assert_eq!(
        (s.state.as_str(), s.message.as_deref()),
        (COMPLETE, Some("nothing to restart"))
    );
    let many = Ended {
        restarted: (0..60).map(|i| w(&format!("w{i:02}"))).collect(),
        ..Ended::default()
    };
    let s = status_of(h, 60, &many, true, &t);
    assert_eq!(s.restarted.len(), RESTARTED_KEPT);
    assert_eq!(s.restarted[0], "Deployment/shop/w10");
    assert_eq!(s.restarted_count, 60);
}
