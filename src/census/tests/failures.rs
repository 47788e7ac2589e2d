//! Tests of the failure detection and of failing pods in the tally.

use super::*;

fn container(name: &str, status: serde_json::Value) -> serde_json::Value {
    let mut c = serde_json::json!({"name": name, "image": "i", "ready": false, "restartCount": 0});
    c.as_object_mut()
        .unwrap()
        .extend(status.as_object().unwrap().clone());
    c
}

fn pod_status(init: serde_json::Value, containers: serde_json::Value) -> PodStatus_ {
    serde_json::from_value(serde_json::json!({
        "initContainerStatuses": init, "containerStatuses": containers,
    }))
    .unwrap()
}

type PodStatus_ = k8s_openapi::api::core::v1::PodStatus;

#[test]
fn a_failure_is_a_crash_loop_an_oom_kill_or_three_restarts_with_the_last_termination() {
    use serde_json::json;
    let running = json!({"state": {"running": {}}, "ready": true});
    let of = |init, containers| {
        PodFailure::of("web-1", &pod_status(init, containers)).map(|f| f.to_string())
    };
    assert_eq!(
        of(json!([]), json!([container("app", running.clone())])),
        None
    );
    assert_eq!(
        of(
            json!([]),
            json!([
                container("side", running.clone()),
                container(
                    "app",
                    json!({
                        "restartCount": 4,
                        "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                        "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}},
                    })
                )
            ])
        ),
        Some("pod web-1 container app: Error (exit code 1), 4 restarts".into())
    );
    // Killed for memory once, running again: failing already.
    assert_eq!(
        of(
            json!([]),
            json!([container(
                "app",
                json!({
                    "restartCount": 1, "state": {"running": {}},
                    "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}},
                })
            )])
        ),
        Some("pod web-1 container app: OOMKilled (exit code 137), 1 restart".into())
    );
    // Three restarts, whatever the state; below that and not waiting in back-off, not yet.
    let restarted = |n: i32| {
        container(
            "app",
            json!({"restartCount": n, "state": {"running": {}}, "lastState": {"terminated": {"exitCode": 2, "reason": "Error"}}}),
        )
    };
    assert_eq!(of(json!([]), json!([restarted(2)])), None);
    assert_eq!(
        of(json!([]), json!([restarted(3)])),
        Some("pod web-1 container app: Error (exit code 2), 3 restarts".into())
    );
    // The agent's init container first; a back-off without a termination recorded yet.
    assert_eq!(
        of(
            json!([container("opentelemetry-auto-instrumentation-java", json!({"restartCount": 4, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}))]),
            json!([restarted(3)])
        ),
        Some(
            "pod web-1 container opentelemetry-auto-instrumentation-java: CrashLoopBackOff, 4 restarts"
                .into()
        )
    );
}

#[test]
fn failing_pods_count_for_the_current_spec_only_with_one_failure_per_workload() {
    let mut names = Interner::default();
    let failure = PodFailure {
        pod: "web-1".into(),
        container: "app".into(),
        reason: Some("OOMKilled".into()),
        exit_code: Some(137),
        restarts: 2,
    };
    let record = |name: &str, owner, status: &str, failing: bool, names: &mut Interner| {
        let mut r = PodRecord::from_meta(&meta(name, owner, Some("h"), status), names).unwrap();
        r.failure = failing.then(|| {
            Box::new(PodFailure {
                pod: name.into(),
                ..failure.clone()
            })
        });
        r
    };
    let web = Some(("ReplicaSet", "web-h"));
    let pods = [
        record(
            "web-1",
            web,
            "java=injected shop/java 01020304",
            true,
            &mut names,
        ),
        record(
            "web-2",
            web,
            "java=injected shop/java 01020304",
            true,
            &mut names,
        ),
        record(
            "web-3",
            web,
            "java=injected shop/java 01020304",
            false,
            &mut names,
        ),
        // An outdated pod's failure is not the current spec's.
        record(
            "api-1",
            Some(("ReplicaSet", "api-h")),
            "java=injected shop/java 0a0b0c0d",
            true,
            &mut names,
        ),
    ];
    let existing = [("shop/java".to_owned(), SpecHash([1, 2, 3, 4]))].into();
    let tallies = census(&pods, &existing);
    let t = &tallies["shop/java"];
    assert_eq!((t.pods.current, t.pods.failing, t.pods.outdated), (3, 2, 1));
    assert_eq!(t.workloads[&workload("Deployment", "web")].failing, 2);
    assert_eq!(t.workloads[&workload("Deployment", "api")].failing, 0);
    assert_eq!(
        t.failures
            .iter()
            .map(|(w, f)| (
                w.name.as_str(),
                f.failure.pod.as_ref(),
                f.languages.iter().copied().collect::<Vec<_>>()
            ))
            .collect::<Vec<_>>(),
        [("web", "web-1", vec![Language::Java])]
    );
}
