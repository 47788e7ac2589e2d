//! Tests of `events`.

use std::sync::Mutex;

use super::*;
use crate::cluster::files::StaticCatalog;

fn rs(name: &str) -> ObjectReference {
    ObjectReference {
        kind: Some("ReplicaSet".into()),
        namespace: Some("shop".into()),
        name: Some(name.into()),
        uid: Some(format!("uid-{name}")),
        ..ObjectReference::default()
    }
}

// The limiter reads the clock it is given: each test moves its own, `at(seconds)`.
fn clock() -> impl Fn(f64) -> Instant {
    let t0 = Instant::now();
    move |s| t0 + Duration::from_secs_f64(s)
}

#[test]
fn repeats_within_the_window_are_counted_not_sent() {
    let at = clock();
    let mut l = Limiter::new(Limits::default(), at(0.0));
    let a = rs("a");
    assert_eq!(l.check(&a, "java: not found", at(0.0)), None);
    assert_eq!(
        l.check(&a, "java: not found", at(0.0)),
        Some(EventResult::Deduplicated)
    );
    // Another message, or another object: its own event.
    assert_eq!(l.check(&a, "python: not found", at(0.0)), None);
    assert_eq!(l.check(&rs("b"), "java: not found", at(0.0)), None);
    assert_eq!(
        l.check(&a, "java: not found", at(299.0)),
        Some(EventResult::Deduplicated)
    );
    assert_eq!(l.check(&a, "java: not found", at(301.0)), None);
}

#[test]
fn one_object_gets_a_burst_then_one_a_minute() {
    let at = clock();
    let mut l = Limiter::new(Limits::default(), at(0.0));
    let a = rs("a");
    let sent = (0..25)
        .filter(|i| l.check(&a, &format!("m{i}"), at(0.0)).is_none())
        .count();
    assert_eq!(sent, 10);
    assert_eq!(
        l.check(&a, "late", at(59.0)),
        Some(EventResult::RateLimited)
    );
    assert_eq!(l.check(&a, "late", at(60.5)), None);
    assert_eq!(
        l.check(&a, "later", at(61.0)),
        Some(EventResult::RateLimited)
    );
    // Others are not held back by it.
    assert_eq!(l.check(&rs("b"), "m", at(61.0)), None);
}

#[test]
fn all_objects_together_get_a_burst_then_five_a_second() {
    let at = clock();
    let mut l = Limiter::new(Limits::default(), at(0.0));
    let sent = (0..100)
        .filter(|i| l.check(&rs(&format!("o{i}")), "m", at(0.0)).is_none())
        .count();
    assert_eq!(sent, 25);
    let sent = (100..200)
        .filter(|i| l.check(&rs(&format!("o{i}")), "m", at(1.0)).is_none())
        .count();
    assert_eq!(sent, 5);
}

#[test]
fn memory_is_bounded_by_max_tracked() {
    let at = clock();
    let limits = Limits {
        max_tracked: 8,
        global_burst: 1000,
        ..Limits::default()
    };
    let mut l = Limiter::new(limits, at(0.0));
    let refused = (0..100)
        .filter(|i| l.check(&rs(&format!("o{i}")), "m", at(0.0)).is_some())
        .count();
    assert_eq!(refused, 92);
    assert!(l.recent.len() <= 8 && l.objects.len() <= 8);
    // Once the window has passed (and the buckets refilled), room is made again.
    assert_eq!(l.check(&rs("new"), "m", at(3600.0)), None);
    assert!(l.recent.len() <= 8 && l.objects.len() <= 8);
}

fn skip(owner: Option<OwnerReference>, instrumentation: Option<&str>) -> Notice {
    Notice {
        reason: Reason::Skipped,
        namespace: "shop".into(),
        owner,
        instrumentation: instrumentation.map(str::to_owned),
        language: Some(Language::ApacheHttpd),
        note: "inject-apache-httpd: nope".into(),
    }
}

#[test]
fn events_are_about_the_controller_else_the_instrumentation_else_the_namespace() {
    let mut inst: crate::crd::Instrumentation = crate::crd::parse_instrumentations(
        "apiVersion: opentelemetry.io/v1alpha1\nkind: Instrumentation\n\
         metadata: {name: inst, namespace: shop}\nspec: {}\n",
    )
    .unwrap()
    .remove(0);
    inst.metadata.uid = Some("inst-uid".into());
    let catalog = StaticCatalog::new([inst]);
    let owner = OwnerReference {
        api_version: "apps/v1".into(),
        kind: "ReplicaSet".into(),
        name: "web-5d4f".into(),
        uid: "rs-uid".into(),
        controller: Some(true),
        ..OwnerReference::default()
    };
    let r = regarding(&skip(Some(owner), Some("shop/inst")), &catalog);
    assert_eq!(
        (
            r.api_version.as_deref(),
            r.kind.as_deref(),
            r.name.as_deref()
        ),
        (Some("apps/v1"), Some("ReplicaSet"), Some("web-5d4f"))
    );
    assert_eq!(
        (r.namespace.as_deref(), r.uid.as_deref()),
        (Some("shop"), Some("rs-uid"))
    );
    let r = regarding(&skip(None, Some("shop/inst")), &catalog);
    assert_eq!(
        (r.kind.as_deref(), r.name.as_deref(), r.uid.as_deref()),
        (Some("Instrumentation"), Some("inst"), Some("inst-uid"))
    );
    assert_eq!(r.api_version.as_deref(), Some("opentelemetry.io/v1alpha1"));
    for missing in [Some("shop/gone"), Some("shop/*"), None] {
        let r = regarding(&skip(None, missing), &catalog);
        assert_eq!(
            (r.kind.as_deref(), r.name.as_deref(), r.namespace.as_deref()),
            (Some("Namespace"), Some("shop"), Some("shop")),
            "{missing:?}"
        );
        assert_eq!(r.uid, None);
    }
    let e = event(&skip(None, None));
    assert_eq!(
        (e.type_, e.reason.as_str(), e.action.as_str()),
        (
            EventType::Warning,
            "InstrumentationSkipped",
            "InjectApacheHttpd"
        )
    );
    assert_eq!(e.note.as_deref(), Some("inject-apache-httpd: nope"));
}

/// Publishes into a list, or fails, or never answers.
#[derive(Default, Clone)]
struct Fake {
    sent: Arc<Mutex<Vec<(String, ObjectReference)>>>,
    fail: bool,
    hang: bool,
}

impl Publish for Fake {
    async fn publish(&self, event: &Event, regarding: &ObjectReference) -> Result<(), String> {
        if self.hang {
            std::future::pending::<()>().await;
        }
        if self.fail {
            return Err("events.events.k8s.io is forbidden".into());
        }
        self.sent
            .lock()
            .unwrap()
            .push((event.note.clone().unwrap_or_default(), regarding.clone()));
        Ok(())
    }
}

fn count(m: &Metrics, result: EventResult) -> u64 {
    m.events.get(result)
}

#[tokio::test]
async fn the_worker_publishes_counts_and_never_blocks_the_sender() {
    let limits = Limits {
        publish_timeout: Duration::from_millis(50),
        ..Limits::default()
    };
    let metrics = Arc::new(Metrics::register(&mut crate::metrics::root()));
    let catalog: Arc<dyn Catalog + Send + Sync> = Arc::new(StaticCatalog::new([]));
    // A publisher that never answers, a queue of 2: the rest is dropped, each `record`
    // returning at once (the worker has not run yet on this single-threaded runtime).
    let (sink, rx) = queue(2, metrics.clone());
    let hang = Fake {
        hang: true,
        ..Fake::default()
    };
    let worker = tokio::spawn(run(rx, hang, catalog.clone(), limits, metrics.clone()));
    for i in 0..10 {
        sink.record(Notice {
            reason: Reason::Skipped,
            note: format!("n{i}"),
            ..skip(None, None)
        });
    }
    assert_eq!(count(&metrics, EventResult::Dropped), 8);
    // Each publish gives up after its timeout: failed, not stuck.
    drop(sink);
    worker.await.unwrap();
    assert_eq!(count(&metrics, EventResult::Failed), 2);

    // A working publisher: one recorded, the repeat deduplicated.
    let fake = Fake::default();
    let (sink, rx) = queue(16, metrics.clone());
    let worker = tokio::spawn(run(
        rx,
        fake.clone(),
        catalog.clone(),
        limits,
        metrics.clone(),
    ));
    sink.record(skip(None, None));
    sink.record(skip(None, None));
    drop(sink);
    worker.await.unwrap();
    assert_eq!(count(&metrics, EventResult::Recorded), 1);
    assert_eq!(count(&metrics, EventResult::Deduplicated), 1);
    let sent = fake.sent.lock().unwrap().clone();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].0, "inject-apache-httpd: nope");
    assert_eq!(sent[0].1.kind.as_deref(), Some("Namespace"));

    // Refused (no RBAC): counted failed; admission never sees it.
    let (sink, rx) = queue(16, metrics.clone());
    let failing = Fake {
        fail: true,
        ..Fake::default()
    };
    let worker = tokio::spawn(run(rx, failing, catalog, limits, metrics.clone()));
    sink.record(Notice {
        reason: Reason::Skipped,
        note: "other".into(),
        ..skip(None, None)
    });
    drop(sink);
    worker.await.unwrap();
    assert_eq!(count(&metrics, EventResult::Failed), 3);

    // Disabled: nothing is queued or counted.
    EventSink::disabled(metrics.clone()).record(skip(None, None));
    assert_eq!(count(&metrics, EventResult::Dropped), 8);
}
