//! A v1beta1 Instrumentation with a declarative configuration, created through the API
//! server (converted by the shared conversion webhook), to a span: the real Java agent, and
//! the real Python auto-instrumentation with `opentelemetry-sdk[file-configuration]`,
//! configured only by the file the webhook rendered into the pod's annotation and the pod
//! runner projected by its downwardAPI volume, send a span whose resource has the attribute
//! that exists only in the file and the pod's own `k8s.pod.name`.

use otel_injector::keys::INJECT_PREFIX;
use rstest::rstest;
use serde_json::json;

use crate::harness::{Env, Options, env_value};
use crate::support::api;
use crate::support::runner;
use crate::telemetry::{app, collector, deploy_asking, request, the_server_span};

#[rstest]
#[case::java("java", runner::JAVA_AGENT_DECLARATIVE, runner::JAVA_APP)]
#[case::python("python", runner::PYTHON_AGENT, runner::PYTHON_APP)]
#[tokio::test]
async fn a_pod_configured_only_by_a_declarative_config_sends_its_span(
    #[case] lang: &str,
    #[case] agent: &str,
    #[case] image: &str,
) {
    let c = collector().await;
    let env = Env::start_with(
        &format!("{lang}-declarative"),
        Options {
            args: vec!["--declarative-config-languages=java,python".to_owned()],
            ..Options::default()
        },
    )
    .await;
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
                "propagator": {"composite": [{"tracecontext": {}}, {"baggage": {}}]},
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
            lang: {"image": agent}
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
    let mut container = app("app", image, port);
    if lang == "python" {
        // The app's own libraries (Flask), as in the env-configured Python case.
        container["env"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "PYTHONPATH", "value": "/app/lib"}));
    }
    let mut running = deploy_asking(
        &env,
        ns.clone(),
        "checkout",
        &[(&format!("{INJECT_PREFIX}{lang}"), "true")],
        json!([container]),
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
    assert_eq!((status, body), (200, format!("{lang} /hello")));
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
        ("telemetry.sdk.language", lang),
    ] {
        assert_eq!(span.res(key), value, "{key}: {:?}", span.resource);
    }
    assert_eq!(
        span.res("service.instance.id"),
        format!("{ns}.{pod_name}.app")
    );
}
