//! Pods that are admitted without injection: why, with which warning, and whether the
//! webhook was called at all.

use otel_injector::keys::{INJECT_JAVA, OPT_OUT_LABEL};
use std::time::{Duration, Instant};

use crate::harness::*;
use crate::support::api;

#[tokio::test]
async fn no_instrumentation_admits_the_pod_unchanged_with_a_warning() {
    let env = Env::start("none").await;
    let ns = env.namespace("empty", &[]).await;
    env.await_webhook(&ns).await;

    let p = pod("lonely", &[(INJECT_JAVA, "true")]);
    let created = env.create(&ns, &p).await;
    assert!(
        created.warnings.iter().any(|w| w.contains("inject-java")
            && w.contains("no Instrumentation")
            && w.contains(&ns)),
        "warnings: {:?}",
        created.warnings
    );
    assert_unchanged(&env.stored(&ns, "lonely").await, &p);
}

#[tokio::test]
async fn two_instrumentations_and_true_admit_the_pod_unchanged_with_a_warning() {
    let env = Env::start("two").await;
    let ns = env.namespace("crowded", &[]).await;
    env.await_webhook(&ns).await;
    env.instrumentation(&ns, "one", endpoint_spec("http://one.example:4318"))
        .await;
    env.instrumentation(&ns, "two", endpoint_spec("http://two.example:4318"))
        .await;
    let p = pod("ambiguous", &[(INJECT_JAVA, "true")]);
    // Until the webhook has both in its cache it would inject the first one.
    env.until_dry_run(&ns, &p, "the 'several Instrumentations' warning", |r| {
        r.warnings.iter().any(|w| w.contains("2 Instrumentations"))
    })
    .await;

    let created = env.create(&ns, &p).await;
    assert!(
        created.warnings.iter().any(|w| w.contains("inject-java")
            && w.contains("2 Instrumentations")
            && w.contains(&ns)),
        "warnings: {:?}",
        created.warnings
    );
    assert_unchanged(&env.stored(&ns, "ambiguous").await, &p);
}

#[tokio::test]
async fn targeted_pod_without_annotations_in_a_plain_namespace_never_reaches_the_webhook() {
    let env = Env::targeted("not-sent", "Ignore").await;
    let ns = env.namespace("plain", &[]).await;
    env.await_webhook(&ns).await; // the configuration covers this namespace

    let before = env.requests().await;
    let p = pod("quiet", &[]);
    let created = env.create(&ns, &p).await;
    assert!(created.warnings.is_empty(), "{:?}", created.warnings);
    assert_eq!(
        env.requests().await,
        before,
        "matchConditions kept the pod away from the webhook"
    );
    assert_unchanged(&env.stored(&ns, "quiet").await, &p);

    // The same namespace, a pod that asks: the webhook is called (the configuration is
    // live for this namespace; only the condition filtered the first pod).
    env.create(&ns, &pod("asks", &[(INJECT_JAVA, "true")]))
        .await;
    assert_eq!(env.requests().await.total(), before.total() + 1.0);
}

#[tokio::test]
async fn webhook_down_with_failure_policy_ignore_admits_pods_unchanged() {
    let mut env = Env::start("down-ignore").await;
    let ns = env.namespace("shop", &[]).await;
    env.await_webhook(&ns).await;
    env.instrumentation(&ns, "java", endpoint_spec("http://collector.example:4318"))
        .await;
    env.until_dry_run(
        &ns,
        &pod("probe", &[(INJECT_JAVA, "true")]),
        "injection",
        |r| is_injected(&r.body),
    )
    .await;

    env.webhook.stop();
    let p = pod("unserved", &[(INJECT_JAVA, "true")]);
    env.create(&ns, &p).await;
    assert_unchanged(&env.stored(&ns, "unserved").await, &p);
    // The default configuration sends every pod: one that asks for nothing is admitted too.
    let plain = pod("plain", &[]);
    env.create(&ns, &plain).await;
    assert_unchanged(&env.stored(&ns, "plain").await, &plain);
}

#[tokio::test]
async fn targeted_webhook_down_with_failure_policy_fail_rejects_only_pods_that_ask() {
    let mut env = Env::targeted("down-fail", "Fail").await;
    let ns = env.namespace("shop", &[]).await;
    env.await_webhook(&ns).await;

    env.webhook.stop();
    let asks = pod("asks", &[(INJECT_JAVA, "true")]);
    let r = api::create_pod(&env.client, &ns, &asks, false)
        .await
        .unwrap();
    assert_eq!(r.status, 500, "{}", r.body);
    assert!(
        r.message().contains("failed calling webhook"),
        "{}",
        r.message()
    );
    assert_eq!(api::get_pod(&env.client, &ns, "asks").await.unwrap(), None);

    // The targeted variant's matchConditions keep everything else independent of the
    // webhook's health (the default configuration, which sends every pod, would reject it).
    let plain = pod("plain", &[]);
    env.create(&ns, &plain).await;
    assert_unchanged(&env.stored(&ns, "plain").await, &plain);
}

#[tokio::test]
async fn removing_the_namespace_annotation_removes_the_label_and_pods_stop_reaching_the_webhook() {
    let env = Env::labeling("ns-removed").await;
    let ns = env.namespace("team", &[(INJECT_JAVA, "true")]).await;
    env.await_namespace_label(&ns, true).await;
    env.await_webhook(&ns).await;
    env.instrumentation(&ns, "java", endpoint_spec("http://team.example:4318"))
        .await;
    // Labeled: a pod without annotations is sent (by the `namespaces.` entry) and injected.
    env.until_dry_run(&ns, &pod("probe", &[]), "namespace-level injection", |r| {
        is_injected(&r.body)
    })
    .await;

    env.annotate_namespace(&ns, INJECT_JAVA, None).await;
    env.await_namespace_label(&ns, false).await;
    let stored_ns = env.stored_namespace(&ns).await;
    assert!(
        stored_ns["metadata"]["labels"].get(OPT_OUT_LABEL).is_none(),
        "{}",
        stored_ns["metadata"]
    );
    assert_eq!(
        stored_ns["metadata"]["labels"][SCOPE_LABEL], env.id,
        "the other labels are kept: {}",
        stored_ns["metadata"]
    );

    // The apiserver matches namespaceSelector against its own namespace informer, which may
    // trail the GET above by a moment: dry-run until a pod without annotations is no longer
    // sent (bounded), counting the ones that still were.
    let t0 = Instant::now();
    let mut still_sent = 0;
    loop {
        let before = env.requests().await.total();
        env.dry_run(&ns, &pod("probe", &[])).await;
        if env.requests().await.total() == before {
            break;
        }
        still_sent += 1;
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "pods without annotations still reach the webhook 5 s after the label went"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    eprintln!(
        "[e2e] {}: {still_sent} dry-run(s) still sent after the label went",
        env.id
    );

    let before = env.requests().await;
    let p = pod("after", &[]);
    let created = env.create(&ns, &p).await;
    assert!(created.warnings.is_empty(), "{:?}", created.warnings);
    assert_eq!(
        env.requests().await,
        before,
        "the pod did not reach the webhook (counters unchanged)"
    );
    assert_unchanged(&env.stored(&ns, "after").await, &p);

    // A pod that asks still reaches it (`pods.` entry) and is injected.
    env.create(&ns, &pod("asks", &[(INJECT_JAVA, "true")]))
        .await;
    assert_eq!(env.requests().await.patched, before.patched + 1.0);
    assert!(is_injected(&env.stored(&ns, "asks").await));
}
