//! A v1beta1 Instrumentation with a declarative configuration, from `kubectl`-style creation
//! through the API server (converted by the shared conversion webhook) to a span: the real
//! Java agent, configured only by the file the webhook rendered into the pod's annotation
//! and the pod runner projected by its downwardAPI volume, sends a span whose resource has
//! the attribute that exists only in the file and the pod's own `k8s.pod.name`.

use serde_json::json;

use crate::harness::{Env, Options, env_value};
use crate::support::api;
use crate::support::runner;
use crate::telemetry::{INJECT, app, collector, deploy_asking, request, the_server_span};

#[tokio::test]
async fn a_java_pod_configured_only_by_a_declarative_config_sends_its_span() {
    let c = collector().await;
    let env = Env::start_with("java-declarative", Options::default()).await;
    let ns = env.namespace("shop", &[]).await;
    env.await_webhook(&ns).await;
    let inst = json!({
        "apiVersion": "opentelemetry.io/v1beta1", "kind": "Instrumentation",
        "metadata": {"name": "declarative", "namespace": ns},
        "spec": {
            "declarativeConfig": {
                "file_format": "1.0",
                "resource": {"attributes": [
                    {"name": "only.in.the.file", "value": "declarative-e2e"}
                ]},
                "tracer_provider": {
                    "processors": [{"batch": {
                        "schedule_delay": 200,
                        "exporter": {"otlp_http": {
                            "endpoint": format!("{}/v1/traces", c.http_endpoint())
                        }}
                    }}],
                    "sampler": {"parent_based": {"root": {"always_on": {}}}}
                }
            },
            "java": {"image": runner::JAVA_AGENT_DECLARATIVE}
        }
    });
    let r = api::send(
        &env.client,
        axum::http::Method::POST,
        &format!("/apis/opentelemetry.io/v1beta1/namespaces/{ns}/instrumentations"),
        Some(&inst),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 201, "{}", r.body);
    assert!(r.warnings.is_empty(), "{:?}", r.warnings);

    let port = crate::support::process::free_port();
    let mut running = deploy_asking(
        &env,
        ns.clone(),
        "checkout",
        &[(&format!("{INJECT}java"), "true")],
        json!([app("app", runner::JAVA_APP, port)]),
    )
    .await;
    let pod = &running.pod;
    assert_eq!(
        env_value(pod, 0, "OTEL_CONFIG_FILE"),
        "/otel-injector/sdk-config/sdk-config.yaml"
    );
    let names: Vec<&str> = pod["spec"]["containers"][0]["env"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["name"].as_str())
        .collect();
    for absent in [
        "OTEL_RESOURCE_ATTRIBUTES",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_TRACES_SAMPLER",
    ] {
        assert!(!names.contains(&absent), "{absent} in {names:?}");
    }
    let file = pod["metadata"]["annotations"]["otel-injector/sdk-config"]
        .as_str()
        .expect("the rendered file on the pod");
    assert!(file.contains("only.in.the.file"), "{file}");

    let (status, body) = request(&mut running, port, "/hello").await;
    assert_eq!((status, body.as_str()), (200, "java /hello"));
    let span = the_server_span(c, &running, "checkout").await;
    let pod_name = running.name().to_owned();
    for (key, value) in [
        ("only.in.the.file", "declarative-e2e"),
        ("k8s.pod.name", pod_name.as_str()),
        ("k8s.namespace.name", ns.as_str()),
        ("k8s.container.name", "app"),
        ("k8s.deployment.name", "checkout"),
        ("service.name", "checkout"),
        ("service.version", "1.0.0"),
        ("telemetry.sdk.language", "java"),
    ] {
        assert_eq!(span.res(key), value, "{key}: {:?}", span.resource);
    }
    assert_eq!(
        span.res("service.instance.id"),
        format!("{ns}.{pod_name}.app")
    );
}
