//! `--hold`: the live spans of the demo's app as they reach the collector, until Ctrl-C.

use std::time::{Duration, Instant};

use crate::support;
use crate::support::api;
use crate::support::collector::Collector;
use crate::support::controlplane::ControlPlane;
use crate::support::runner::{self, Images, RunningPod};

use super::Clock;
use otel_injector::keys::INJECTED_ANNOTATION;

/// What the live part keeps running until the end: the collector and the pod's processes.
pub(super) struct Live {
    _pod: RunningPod,
    _collector: Collector,
}

/// Starts kube-controller-manager, kube-scheduler, kwok and the collector, creates the
/// namespace `shop` with an Instrumentation sending to the collector and a Deployment
/// `checkout` of the Java test app, runs its pod, sends it one request and returns the span
/// the agent sent, described.
pub(super) async fn live_span(
    cp: &mut ControlPlane,
    client: &kube::Client,
    clock: &mut Clock,
) -> Result<(String, Live), String> {
    cp.start_controllers().await?;
    clock.step("controllers: kube-controller-manager, kube-scheduler, kwok node Ready");
    let collector = Collector::start(None, Some(&cp.dir)).await?;
    let images = Images::e2e()?;
    clock.step(&format!(
        "collector (otelcol, OTLP on {}) and agent images ready",
        collector.http_endpoint()
    ));
    let ns = "shop";
    api::create_namespace(client, ns, &[], &[]).await?;
    let inst = serde_json::json!({
        "apiVersion": "opentelemetry.io/v1alpha1", "kind": "Instrumentation",
        "metadata": {"name": "java", "namespace": ns},
        "spec": {
            "exporter": {"endpoint": collector.http_endpoint()},
            "resource": {"resourceAttributes": {"deployment.environment.name": "demo"}},
            "env": [{"name": "OTEL_BSP_SCHEDULE_DELAY", "value": "100"},
                    {"name": "OTEL_METRICS_EXPORTER", "value": "none"},
                    {"name": "OTEL_LOGS_EXPORTER", "value": "none"}],
            "java": {"image": runner::JAVA_AGENT}
        }
    });
    let r = api::create_instrumentation(client, ns, &inst).await?;
    if r.status != 201 {
        return Err(format!(
            "create Instrumentation: HTTP {}: {}",
            r.status, r.body
        ));
    }
    let port = support::process::free_port();
    let template = serde_json::json!({
        "metadata": {"labels": {"app": "checkout"},
                     "annotations": {"instrumentation.opentelemetry.io/inject-java": "true"}},
        "spec": {"containers": [{"name": "app", "image": runner::JAVA_APP,
                                 "env": [{"name": "PORT", "value": port.to_string()}]}],
                 "tolerations": [support::controllers::toleration()]}
    });
    // The webhook's Instrumentation cache fills from a watch: dry-run the template first.
    let mut dry = serde_json::json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": template["metadata"].clone(), "spec": template["spec"].clone()});
    dry["metadata"]["name"] = "checkout-dry-run".into();
    let until = Instant::now() + Duration::from_secs(30);
    while !api::create_pod(client, ns, &dry, true).await?.body["metadata"]["annotations"]
        [INJECTED_ANNOTATION]
        .is_string()
    {
        if Instant::now() > until {
            return Err("the webhook did not inject the dry-run pod within 30 s".into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let deployment = serde_json::json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "checkout"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "checkout"}},
                 "template": template}
    });
    let r = api::send(
        client,
        axum::http::Method::POST,
        &format!("/apis/apps/v1/namespaces/{ns}/deployments"),
        Some(&deployment),
    )
    .await?;
    if r.status != 201 {
        return Err(format!("create Deployment: HTTP {}: {}", r.status, r.body));
    }
    let pod =
        support::controllers::running_pods(client, ns, "app=checkout", 1, Duration::from_secs(60))
            .await?
            .remove(0);
    let pod_name = pod["metadata"]["name"].as_str().unwrap_or("").to_owned();
    clock.step(&format!(
        "Deployment {ns}/checkout created; the ReplicaSet controller made pod {pod_name}, \
         the webhook injected it, the scheduler bound it to {}, kwok marked it Running",
        pod["spec"]["nodeName"].as_str().unwrap_or("")
    ));
    let running = runner::run(client, &pod, &images, &cp.dir).await?;
    clock.step("pod runner: init container copied the agent, app container started (bubblewrap)");
    let addr: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
    let until = Instant::now() + Duration::from_secs(120);
    let answer = loop {
        if let Ok(a) = support::webhook::http_get(addr, "/hello").await {
            break a;
        }
        if Instant::now() > until {
            return Err(format!(
                "the app did not answer in 120 s:\n{}",
                running.logs()
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    clock.step(&format!("GET /hello answered {} {:?}", answer.0, answer.1));
    let spans = collector
        .await_spans("the app's server span", Duration::from_secs(60), |spans| {
            spans
                .iter()
                .any(|s| s.kind == 2 && s.res("k8s.pod.name") == pod_name)
        })
        .await?;
    let span = spans
        .into_iter()
        .find(|s| s.kind == 2 && s.res("k8s.pod.name") == pod_name)
        .expect("found above");
    clock.step("span received by the collector");
    let mut out = String::new();
    out.push_str(&format!(
        "Span received by the collector from the Java agent in pod {ns}/{pod_name}:\n"
    ));
    out.push_str(&format!(
        "  service.name: {}\n  span: {} (kind SERVER), trace {}\n  resource attributes:\n",
        span.res("service.name"),
        span.name,
        span.trace_id
    ));
    for (k, v) in &span.resource {
        let v = v
            .as_str()
            .map(str::to_owned)
            .unwrap_or_else(|| v.to_string());
        out.push_str(&format!("    {k}={v}\n"));
    }
    out.push_str("  span attributes:\n");
    for (k, v) in &span.attributes {
        let v = v
            .as_str()
            .map(str::to_owned)
            .unwrap_or_else(|| v.to_string());
        out.push_str(&format!("    {k}={v}\n"));
    }
    Ok((
        out,
        Live {
            _pod: running,
            _collector: collector,
        },
    ))
}

/// Ctrl-C or SIGTERM.
pub(super) async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
