//! The API server alone (no webhook, v1alpha1 only) injects a Deployment's Java agent that
//! sends a span: as an image volume, and copied by an init container.

use otel_injector::keys::{INJECT_JAVA, INJECTED_LABEL, STATUS_ANNOTATION};
use std::path::{Path, PathBuf};
use std::time::Duration;

use axum::http::Method;
use serde_json::json;

use crate::harness::{env_value, is_injected};
use crate::support::api;

use super::build::inst;
use super::{create_all, render, until};

/// The CRD of v1alpha1 alone (no conversion, so nothing of ours is needed to read it).
pub(super) fn v1alpha1_crd(dir: &Path) -> PathBuf {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_e2e-otel-injector"))
        .args(["crd", "--v1beta1=false"])
        .output()
        .expect("otel-injector crd");
    assert!(out.status.success());
    let path = dir.join("crd-v1alpha1.yaml");
    std::fs::write(&path, out.stdout).expect("write the CRD");
    path
}

/// The acceptance test: no webhook registered and no otel-injector process, a Deployment's
/// pod asking for Java is injected by the API server, and the real Java agent in it sends a
/// span to the real Collector, in either delivery.
#[tokio::test]
async fn the_api_server_alone_injects_a_deployments_java_agent_that_sends_a_span() {
    use crate::support::controlplane::ControlPlane;
    use crate::support::runner;
    use crate::telemetry;

    let mut cp = ControlPlane::start()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    cp.start_controllers()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let client = cp.client();
    api::install_crds(&client, &v1alpha1_crd(&cp.dir))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let c = telemetry::collector().await;
    let ns = "shop";
    api::create_namespace(&client, ns, &[], &[])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let inst = inst(ns, "java", telemetry::spec(&c.http_endpoint()));
    let r = api::create_instrumentation(&client, ns, &inst)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 201, "{}", r.body);
    let (objects, coverage) = render(&cp.dir, &[inst], &["--agent-delivery=image-volume"]);
    assert!(
        coverage.contains(
            "shop/java: policy injects java, nodejs, python, dotnet, apache-httpd, nginx, sdk"
        ),
        "{coverage}"
    );
    create_all(&client, &objects).await;
    // Nothing else could have injected it.
    let hooks = api::send(
        &client,
        Method::GET,
        "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
        None,
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(hooks.body["items"], json!([]), "no webhook is registered");

    let pod = traced(&client, &cp.dir, c, ns).await;
    // What the API server stored: the agent's image volume, its mount, the agent option, the
    // SDK's variables and the outcome.
    let spec = &pod["spec"];
    assert_eq!(
        spec["volumes"][spec["volumes"].as_array().unwrap().len() - 1],
        json!({"name": "opentelemetry-auto-instrumentation-java", "image": {"reference": runner::JAVA_AGENT, "pullPolicy": "IfNotPresent"}})
    );
    assert_eq!(
        spec["containers"][0]["volumeMounts"]
            .as_array()
            .unwrap()
            .last()
            .unwrap(),
        &json!({"name": "opentelemetry-auto-instrumentation-java", "mountPath": "/otel-auto-instrumentation-java-app", "readOnly": true})
    );
    assert_eq!(
        env_value(&pod, 0, "JAVA_TOOL_OPTIONS"),
        " -javaagent:/otel-auto-instrumentation-java-app/javaagent.jar"
    );
    assert_eq!(env_value(&pod, 0, "OTEL_SERVICE_NAME"), "checkout");
    assert_eq!(
        env_value(&pod, 0, "OTEL_EXPORTER_OTLP_ENDPOINT"),
        c.http_endpoint()
    );
    let status = pod["metadata"]["annotations"][STATUS_ANNOTATION]
        .as_str()
        .unwrap_or("");
    let hash = objects[0]["metadata"]["annotations"]["otel-injector/spec-hash"]
        .as_str()
        .unwrap();
    assert_eq!(status, format!("java=injected {ns}/java {hash}"));
    assert_eq!(pod["metadata"]["labels"][INJECTED_LABEL], "true");

    // The flag's default delivery, in another namespace: the policy adds the init container
    // that copies the agent into an emptyDir, which runs before the app, as the webhook's.
    let copied = "shop-copied";
    api::create_namespace(&client, copied, &[], &[])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let java = super::build::inst(copied, "java", telemetry::spec(&c.http_endpoint()));
    let r = api::create_instrumentation(&client, copied, &java)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 201, "{}", r.body);
    let (objects, _) = render(&cp.dir, &[java], &["--name-prefix", "copied"]);
    create_all(&client, &objects).await;
    let pod = traced(&client, &cp.dir, c, copied).await;
    assert_eq!(
        pod["spec"]["initContainers"][0]["command"],
        json!([
            "cp",
            "/javaagent.jar",
            "/otel-auto-instrumentation-java/javaagent.jar"
        ])
    );
    let volumes = pod["spec"]["volumes"].as_array().unwrap();
    assert_eq!(
        volumes.last().unwrap(),
        &json!({"name": "opentelemetry-auto-instrumentation-java", "emptyDir": {"sizeLimit": "200Mi"}})
    );

    // Item 4: the status controller, as the chart's mode `policy` runs it (no webhook
    // registered), counts the pods the policy injected.
    let status = crate::support::webhook::Webhook::start_with(
        &crate::harness::webhook_binary(),
        &cp.kubeconfig,
        &[
            "--status=true".into(),
            format!("--lease-namespace={ns}"),
            "--lease-duration=3s".into(),
        ],
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    crate::status::await_status_with(
        &client,
        ns,
        "java",
        crate::status::want(
            1,
            0,
            json!([]),
            json!([["Deployment", "checkout", 1, 0, 0]]),
        ),
        Duration::from_secs(30),
    )
    .await;
    drop(status);
    cp.stop();
}

/// A Deployment `checkout` in `ns` whose Java app asks for injection, created once the
/// policy injects its pods; its pod run with the real agent, asked for `/checkout`, and the
/// server span it sent to the Collector checked. Returns the pod as the API server stored it.
async fn traced(
    client: &kube::Client,
    dir: &Path,
    c: &crate::support::collector::Collector,
    ns: &str,
) -> serde_json::Value {
    use crate::support::process::free_port;
    use crate::support::runner;
    use crate::telemetry;

    let port = free_port();
    let mut t = crate::workloads::template("checkout", &[(INJECT_JAVA, "true")]);
    t["spec"]["containers"] = json!([telemetry::app("app", runner::JAVA_APP, port)]);
    let dry = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "dry", "annotations": t["metadata"]["annotations"]}, "spec": t["spec"]});
    until(client, ns, &dry, "the policy's injection", |p| {
        is_injected(p)
    })
    .await;
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "checkout"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "checkout"}}, "template": t}});
    let r = api::send(
        client,
        Method::POST,
        &format!("/apis/apps/v1/namespaces/{ns}/deployments"),
        Some(&deployment),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 201, "{}", r.body);
    let pod = crate::support::controllers::running_pods(
        client,
        ns,
        "app=checkout",
        1,
        Duration::from_secs(60),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"))
    .remove(0);
    let run = runner::run(client, &pod, &telemetry::images(), dir)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut r = telemetry::Running {
        ns: ns.to_owned(),
        pod: pod.clone(),
        run,
    };
    let (code, _) = telemetry::request(&mut r, port, "/checkout").await;
    assert_eq!(code, 200);
    let span = telemetry::the_server_span(c, &r, "checkout").await;
    telemetry::assert_resource(&span, &r, "app", "checkout");
    eprintln!(
        "[e2e] span through the policy path ({ns}): {} {:?}",
        span.name,
        span.resource.get("k8s.deployment.name")
    );
    pod
}
