//! The outcome on the pod and the Events, through the real API server (and, for Deployments,
//! the real controller-manager, scheduler and kwok): an injected pod carries the
//! `otel-injector/status` annotation with the Instrumentation and the digest of its spec as
//! stored, and the label `otel-injector/injected=true`; a skipped pod only the annotation and
//! the label `false`; a pod that asked for nothing is stored as sent. A Deployment whose pods
//! are skipped gets a Warning `InstrumentationSkipped` Event about its ReplicaSet (with the
//! ReplicaSet's UID), read through the events API and `kubectl get events`; a bare pod's
//! Event is about the Instrumentation it named, or its Namespace.

use otel_injector::keys::{INJECT_JAVA, INJECTED_LABEL, STATUS_ANNOTATION};
use std::time::{Duration, Instant};

use axum::http::Method;
use otel_injector::crd::{Instrumentation, SpecHash};
use serde_json::{Value, json};

use crate::harness::*;
use crate::support::api;
use crate::workloads::{create, list, template};

/// The stored Instrumentation's spec digest (what the webhook records).
async fn stored_hash(env: &Env, ns: &str, name: &str) -> SpecHash {
    let r = api::send(
        &env.client,
        Method::GET,
        &format!("/apis/opentelemetry.io/v1alpha1/namespaces/{ns}/instrumentations/{name}"),
        None,
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 200, "{}", r.body);
    let inst: Instrumentation = serde_json::from_value(r.body).unwrap();
    SpecHash::of(&inst.spec)
}

/// The stored Instrumentation's UID.
async fn stored_uid(env: &Env, ns: &str, name: &str) -> String {
    let r = api::send(
        &env.client,
        Method::GET,
        &format!("/apis/opentelemetry.io/v1alpha1/namespaces/{ns}/instrumentations/{name}"),
        None,
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    r.body["metadata"]["uid"].as_str().unwrap().to_owned()
}

/// Waits (at most 30 s) for `InstrumentationSkipped` Events in `ns` about an object of
/// `kind` named `name`; returns them (events.k8s.io/v1).
async fn events_about(env: &Env, ns: &str, kind: &str, name: &str) -> Vec<Value> {
    let t0 = Instant::now();
    loop {
        let events: Vec<Value> = list(
            env,
            &format!("/apis/events.k8s.io/v1/namespaces/{ns}/events"),
        )
        .await
        .into_iter()
        .filter(|e| {
            e["reason"] == "InstrumentationSkipped"
                && e["regarding"]["kind"] == kind
                && e["regarding"]["name"] == name
        })
        .collect();
        if !events.is_empty() {
            return events;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "no InstrumentationSkipped Event about {kind} {ns}/{name} within 30 s; webhook log:\n{}",
            env.webhook.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `kubectl ARGS` with the harness's kubeconfig, as a user would run it: its stdout.
async fn kubectl(args: &[&str]) -> String {
    let cp = cluster().await;
    let out = tokio::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&cp.kubeconfig)
        .args(args)
        .output()
        .await
        .expect("kubectl runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `kubectl get events -n ns` with the harness's kubeconfig, as a user would run it.
async fn kubectl_get_events(ns: &str) -> String {
    let cp = cluster().await;
    let out = tokio::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&cp.kubeconfig)
        .args([
            "get",
            "events",
            "-n",
            ns,
            "--field-selector",
            "reason=InstrumentationSkipped",
        ])
        .output()
        .await
        .expect("kubectl runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test]
async fn injected_skipped_and_untouched_pods_carry_their_outcome() {
    let env = Env::start("outcome").await;
    let ns = env.namespace("outcome", &[]).await;
    env.await_webhook(&ns).await;
    env.instrumentation(&ns, "java", endpoint_spec("http://collector.example:4318"))
        .await;
    let injected = pod("injected", &[(INJECT_JAVA, "java")]);
    env.until_dry_run(&ns, &injected, "injection", |r| is_injected(&r.body))
        .await;
    let hash = stored_hash(&env, &ns, "java").await;

    env.create(&ns, &injected).await;
    let stored = env.stored(&ns, "injected").await;
    assert_eq!(
        stored["metadata"]["annotations"][STATUS_ANNOTATION],
        format!("java=injected {ns}/java {hash}")
    );
    assert_eq!(
        stored["metadata"]["labels"],
        json!({INJECTED_LABEL: "true"})
    );
    assert!(is_injected(&stored));

    let skipped = pod("skipped", &[(INJECT_JAVA, "missing")]);
    let created = env.create(&ns, &skipped).await;
    assert_eq!(
        created.warnings,
        [format!(
            "inject-java: Instrumentation \"{ns}/missing\" not found; not injected"
        )]
    );
    let stored = env.stored(&ns, "skipped").await;
    assert_eq!(
        stored["metadata"]["annotations"],
        json!({INJECT_JAVA: "missing",
               STATUS_ANNOTATION: format!("java=skipped instrumentation_not_found {ns}/missing")})
    );
    assert_eq!(
        stored["metadata"]["labels"],
        json!({INJECTED_LABEL: "false"})
    );
    assert_eq!(stored["spec"]["initContainers"], Value::Null);

    let plain = pod("plain", &[]);
    env.create(&ns, &plain).await;
    let stored = env.stored(&ns, "plain").await;
    assert_unchanged(&stored, &plain);
    assert_eq!(stored["metadata"].get("labels"), None);
    assert_eq!(stored["metadata"].get("annotations"), None);

    // `-l otel-injector/injected` selects every pod that asked; `=true` the injected one.
    let names = |pods: Vec<Value>| -> Vec<String> {
        let mut n: Vec<String> = pods
            .iter()
            .map(|p| p["metadata"]["name"].as_str().unwrap().to_owned())
            .collect();
        n.sort();
        n
    };
    let asked = list(
        &env,
        &format!("/api/v1/namespaces/{ns}/pods?labelSelector={INJECTED_LABEL}"),
    )
    .await;
    assert_eq!(names(asked), ["injected", "skipped"]);
    let true_only = list(
        &env,
        &format!("/api/v1/namespaces/{ns}/pods?labelSelector={INJECTED_LABEL}%3Dtrue"),
    )
    .await;
    assert_eq!(names(true_only), ["injected"]);

    // Bare pods: the Event is about the Instrumentation the skip names when it exists (Go is
    // not enabled by default: skipped, wanting `ns/java`), else the Namespace.
    env.create(
        &ns,
        &pod(
            "bare-go",
            &[("instrumentation.opentelemetry.io/inject-go", "java")],
        ),
    )
    .await;
    let about_inst = events_about(&env, &ns, "Instrumentation", "java").await;
    let e = &about_inst[0];
    assert_eq!(e["type"], "Warning");
    assert_eq!(
        e["regarding"]["uid"],
        stored_uid(&env, &ns, "java").await.as_str()
    );
    assert_eq!(e["regarding"]["apiVersion"], "opentelemetry.io/v1alpha1");
    assert_eq!(
        e["note"],
        "inject-go: go injection is disabled on this webhook"
    );
    assert_eq!(e["reportingController"], "otel-injector");
    assert_eq!(e["action"], "InjectGo");
    let about_ns = events_about(&env, &ns, "Namespace", &ns).await;
    assert_eq!(
        about_ns[0]["note"],
        format!("inject-java: Instrumentation \"{ns}/missing\" not found; not injected")
    );
    let text = kubectl_get_events(&ns).await;
    eprintln!("[e2e] kubectl get events -n {ns}:\n{text}");
    let describe = kubectl(&["describe", "pod", "-n", &ns, "skipped"]).await;
    eprintln!("[e2e] kubectl describe pod -n {ns} skipped:\n{describe}");
    assert!(
        describe.contains(&format!(
            "otel-injector/status: java=skipped instrumentation_not_found {ns}/missing"
        )),
        "{describe}"
    );
    assert!(
        describe.contains("otel-injector/injected=false"),
        "{describe}"
    );
    let describe = kubectl(&["describe", "pod", "-n", &ns, "injected"]).await;
    eprintln!("[e2e] kubectl describe pod -n {ns} injected:\n{describe}");
    assert!(
        describe.contains(&format!(
            "otel-injector/status: java=injected {ns}/java {hash}"
        )),
        "{describe}"
    );
    assert!(
        describe.contains("otel-injector/injected=true"),
        "{describe}"
    );
}

#[tokio::test]
async fn a_deployment_whose_pods_are_skipped_gets_an_event_on_its_replicaset() {
    let env = Env::start("outcome-deploy").await;
    let ns = env.namespace("shop", &[]).await;
    env.await_webhook(&ns).await;
    let t = template("cart", &[(INJECT_JAVA, "missing")]);
    // Settled: the answer records the skip.
    let mut dry = json!({"apiVersion": "v1", "kind": "Pod", "metadata": t["metadata"].clone(),
                         "spec": t["spec"].clone()});
    dry["metadata"]["name"] = json!("cart-dry-run");
    env.until_dry_run(&ns, &dry, "the skip recorded", |r| {
        r.body["metadata"]["annotations"][STATUS_ANNOTATION].is_string()
    })
    .await;
    create(
        &env,
        &format!("/apis/apps/v1/namespaces/{ns}/deployments"),
        &json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "cart"},
                "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "cart"}},
                         "template": t}}),
    )
    .await;
    let t0 = Instant::now();
    let rs = loop {
        let rss = list(
            &env,
            &format!("/apis/apps/v1/namespaces/{ns}/replicasets?labelSelector=app=cart"),
        )
        .await;
        if let Some(rs) = rss.into_iter().next() {
            break rs;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "no ReplicaSet");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let rs_name = rs["metadata"]["name"].as_str().unwrap().to_owned();
    let events = events_about(&env, &ns, "ReplicaSet", &rs_name).await;
    // Two pods, one message: one Event (the second deduplicated or in its series).
    assert_eq!(events.len(), 1, "{events:?}");
    let e = &events[0];
    assert_eq!(e["type"], "Warning");
    assert_eq!(e["reason"], "InstrumentationSkipped");
    assert_eq!(e["action"], "InjectJava");
    assert_eq!(
        e["note"],
        format!("inject-java: Instrumentation \"{ns}/missing\" not found; not injected")
    );
    assert_eq!(
        e["regarding"],
        json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs_name,
               "namespace": ns, "uid": rs["metadata"]["uid"]})
    );
    // The Event follows the first pod; the ReplicaSet may still be creating the second.
    let t0 = Instant::now();
    let pods = loop {
        let pods = list(
            &env,
            &format!("/api/v1/namespaces/{ns}/pods?labelSelector=app=cart"),
        )
        .await;
        if pods.len() == 2 {
            break pods;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "2 pods of the ReplicaSet within 30 s; have {}",
            pods.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    for p in &pods {
        assert_eq!(
            p["metadata"]["annotations"][STATUS_ANNOTATION],
            format!("java=skipped instrumentation_not_found {ns}/missing")
        );
        assert_eq!(p["metadata"]["labels"][INJECTED_LABEL], "false");
    }

    let text = kubectl_get_events(&ns).await;
    eprintln!("[e2e] kubectl get events -n {ns}:\n{text}");
    let line = text
        .lines()
        .find(|l| l.contains(&format!("replicaset/{rs_name}")))
        .unwrap_or_else(|| panic!("{text}"));
    for word in [
        "Warning",
        "InstrumentationSkipped",
        &format!("replicaset/{rs_name}"),
        &format!("inject-java: Instrumentation \"{ns}/missing\" not found; not injected"),
    ] {
        assert!(line.contains(word), "{word:?} in {line:?}");
    }
    let describe = kubectl(&["describe", "replicaset", "-n", &ns, &rs_name]).await;
    let events = describe
        .split("Events:")
        .nth(1)
        .unwrap_or_else(|| panic!("{describe}"));
    eprintln!("[e2e] kubectl describe replicaset -n {ns} {rs_name} (its Events):{events}");
    assert!(
        events.contains("Warning  InstrumentationSkipped"),
        "{describe}"
    );
    let metrics = env.webhook.metrics().await;
    let recorded = metrics
        .lines()
        .find_map(|l| l.strip_prefix("otel_injector_events_total{result=\"recorded\"} "))
        .and_then(|v| v.trim().parse::<f64>().ok());
    assert!(recorded.is_some_and(|n| n >= 1.0), "{metrics}");
}

/// The acceptance test: the admission path makes no API call. A webhook in cluster mode
/// against a control plane of its own syncs, then that API server is stopped (SIGSTOP: it
/// accepts connections and never answers): reviews sent straight to the webhook are still
/// answered at once, with the outcome in the patch, and with `--event-queue-size=2` the Events
/// pile up and are dropped, counted in `/metrics`.
#[tokio::test]
async fn reviews_are_answered_with_the_api_server_stopped_and_events_are_dropped() {
    use crate::support::controlplane::ControlPlane;
    use crate::support::identity;
    use crate::support::webhook::Webhook;

    let mut cp = ControlPlane::start_with(&[])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let client = cp.client();
    api::install_crds(
        &client,
        &crate::support::tools::root().join("manifests/crd.yaml"),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let id = identity::issue(
        &cp,
        "e2e-outcome-offline",
        &["base/otel-injector.yaml", "components/events/rbac.yaml"],
        &cp.dir.join("identities"),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let mut webhook = Webhook::start_with(
        std::path::Path::new(env!("CARGO_BIN_EXE_e2e-otel-injector")),
        &id.kubeconfig,
        // Without the wait for a missing Instrumentation (`injection.rs` proves it), which
        // would hold each of these reviews 2 s: here only the Events' queue is on trial.
        &[
            "--event-queue-size=2".into(),
            "--instrumentation-wait=0s".into(),
        ],
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    webhook
        .wait_ready(Duration::from_secs(30))
        .await
        .unwrap_or_else(|e| panic!("{e}"));

    let (_, apiserver) = cp.pids();
    let apiserver = apiserver.expect("the API server runs");
    let signal = |sig: &str| {
        let ok = std::process::Command::new("kill")
            .args([sig, &apiserver.to_string()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill {sig} {apiserver}");
    };
    signal("-STOP");

    let review = |i: usize| {
        json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": format!("00000000-0000-4000-8000-{i:012}"),
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "namespace": "shop", "operation": "CREATE",
                "object": {
                    "apiVersion": "v1", "kind": "Pod",
                    "metadata": {
                        "generateName": "cart-5d4f8-",
                        "labels": {"app": "cart"},
                        "annotations": {INJECT_JAVA: format!("missing-{i}")},
                        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                            "name": "cart-5d4f8", "uid": "6f1c0000-0000-4000-8000-000000000001",
                            "controller": true}]
                    },
                    "spec": {"containers": [{"name": "app", "image": "shop/cart:1"}]}
                }
            }
        })
    };
    let sent = 12;
    let t0 = Instant::now();
    for i in 0..sent {
        let asked = Instant::now();
        let (status, body) = webhook
            .post_review(&review(i))
            .await
            .unwrap_or_else(|e| panic!("review {i} with the API server stopped: {e}"));
        let took = asked.elapsed();
        assert_eq!(status, 200, "{body}");
        let r = &body["response"];
        assert_eq!(r["allowed"], true);
        assert_eq!(r["uid"], format!("00000000-0000-4000-8000-{i:012}"));
        let patch: Value = serde_json::from_slice(
            &base64::Engine::decode(
                &base64::engine::general_purpose::STANDARD,
                r["patch"].as_str().expect("a patch"),
            )
            .unwrap(),
        )
        .unwrap();
        assert_eq!(
            patch,
            json!([
                {"op": "add", "path": "/metadata/annotations/otel-injector~1status",
                    "value": format!("java=skipped instrumentation_not_found shop/missing-{i}")},
                {"op": "add", "path": "/metadata/labels/otel-injector~1injected", "value": "false"}
            ])
        );
        assert!(took < Duration::from_secs(1), "review {i} took {took:?}");
    }
    eprintln!(
        "[e2e] API server stopped: {sent} reviews answered in {:?}",
        t0.elapsed()
    );
    let metrics = webhook.metrics().await;
    let dropped: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("otel_injector_events_total{result=\"dropped\"} "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("{metrics}"));
    eprintln!("[e2e] otel_injector_events_total{{result=\"dropped\"}} {dropped}");
    // One in the worker's hands (waiting on the stopped server), two in the queue.
    assert!(dropped >= (sent - 3) as f64, "{metrics}");
    assert!(
        metrics.contains("otel_injector_events_total{result=\"recorded\"} 0"),
        "{metrics}"
    );

    signal("-CONT");
    webhook.stop();
    cp.stop();
}
