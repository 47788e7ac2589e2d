//! Each language's agent sends a server span with the resource the injection promised.

use rstest::rstest;
use serde_json::{Value, json};

use crate::harness::env_value;
use crate::support::collector::Span;
use crate::support::process::free_port;
use crate::support::runner;

use super::{
    Delivery, Running, app, assert_resource, collector, deploy, request, spec, the_server_span,
};
use otel_injector::keys::INJECT_PREFIX;

/// Both delivery modes: the same environment, the same span, the same resource.
#[rstest]
#[case::copy(Delivery::Copy)]
#[case::image_volume(Delivery::ImageVolume)]
#[tokio::test]
async fn java_deployment_sends_a_server_span_with_the_promised_resource(
    #[case] delivery: Delivery,
) {
    let c = collector().await;
    let env = delivery.env("java-span").await;
    let port = free_port();
    let mut r = deploy(
        &env,
        "checkout",
        spec(&c.http_endpoint()),
        &[(&format!("{INJECT_PREFIX}java"), "true")],
        json!([app("app", runner::JAVA_APP, port)]),
    )
    .await;
    assert_eq!(
        env_value(&r.pod, 0, "JAVA_TOOL_OPTIONS"),
        " -javaagent:/otel-auto-instrumentation-java-app/javaagent.jar"
    );
    delivery.assert_delivered(&r, "java", "app");
    let (status, body) = request(&mut r, port, "/hello").await;
    assert_eq!((status, body.as_str()), (200, "java /hello"));
    let span = the_server_span(c, &r, "checkout").await;
    assert_resource(&span, &r, "app", "checkout");
    let rs = r.pod["metadata"]["ownerReferences"][0]["name"]
        .as_str()
        .unwrap();
    assert_eq!(span.res("k8s.deployment.name"), "checkout");
    assert_eq!(span.res("k8s.replicaset.name"), rs);
    assert_eq!(span.res("service.version"), "1.0.0");
    assert_eq!(span.res("telemetry.sdk.language"), "java");
    assert_eq!(
        span.res("telemetry.distro.name"),
        "opentelemetry-java-instrumentation"
    );
    // The JDK server's context path is the route.
    assert_eq!(span.name, "GET /", "{span:#?}");
    assert_eq!(span.attr("http.route"), "/", "{span:#?}");
    assert_eq!(span.attr("url.path"), "/hello", "{span:#?}");
    assert_eq!(span.attr("http.response.status_code"), "200");
}

/// One app container of `image` with the given extra env, `inject-<lang>: "true"`, one
/// request to `/hello`, the agent delivered by `delivery` (asserted unless `lang` has no
/// agent): returns what ran and the one server span.
pub(super) async fn one_language(
    id: &str,
    lang: &str,
    image: &str,
    extra_env: Value,
    answer: &str,
    delivery: Delivery,
) -> (Running, Span) {
    let c = collector().await;
    let env = delivery.env(id).await;
    let port = free_port();
    let mut container = app("app", image, port);
    for e in extra_env.as_array().into_iter().flatten() {
        container["env"].as_array_mut().unwrap().push(e.clone());
    }
    let mut r = deploy(
        &env,
        "checkout",
        spec(&c.http_endpoint()),
        &[(&format!("{INJECT_PREFIX}{lang}"), "true")],
        json!([container]),
    )
    .await;
    if lang != "sdk" {
        delivery.assert_delivered(&r, lang, "app");
    }
    let (status, body) = request(&mut r, port, "/hello").await;
    assert_eq!((status, body.as_str()), (200, answer));
    let span = the_server_span(c, &r, "checkout").await;
    assert_resource(&span, &r, "app", "checkout");
    let rs = r.pod["metadata"]["ownerReferences"][0]["name"]
        .as_str()
        .unwrap();
    assert_eq!(span.res("k8s.deployment.name"), "checkout");
    assert_eq!(span.res("k8s.replicaset.name"), rs);
    assert_eq!(span.res("service.version"), "1.0.0");
    (r, span)
}

#[rstest]
#[case::copy(Delivery::Copy)]
#[case::image_volume(Delivery::ImageVolume)]
#[tokio::test]
async fn nodejs_deployment_sends_a_server_span_with_the_promised_resource(
    #[case] delivery: Delivery,
) {
    let (r, span) = one_language(
        "node-span",
        "nodejs",
        runner::NODEJS_APP,
        json!([]),
        "nodejs /hello",
        delivery,
    )
    .await;
    assert_eq!(
        env_value(&r.pod, 0, "NODE_OPTIONS"),
        " --require /otel-auto-instrumentation-nodejs/autoinstrumentation.js"
    );
    assert_eq!(span.res("telemetry.sdk.language"), "nodejs");
    assert_eq!(
        span.scope, "@opentelemetry/instrumentation-http",
        "{span:#?}"
    );
    assert_eq!(span.name, "GET", "{span:#?}");
    assert_eq!(span.attr("url.path"), "/hello", "{span:#?}");
    assert_eq!(span.attr("http.response.status_code"), "200", "{span:#?}");
    // Only the detectors the Instrumentation lists ran: no cloud metadata lookup.
    assert!(
        !r.run.log("app").contains("MetadataLookupWarning"),
        "{}",
        r.run.log("app")
    );
    assert_eq!(span.res("process.runtime.name"), "nodejs");
}

#[rstest]
#[case::copy(Delivery::Copy)]
#[case::image_volume(Delivery::ImageVolume)]
#[tokio::test]
async fn python_deployment_sends_a_server_span_with_the_promised_resource(
    #[case] delivery: Delivery,
) {
    let (r, span) = one_language(
        "python-span",
        "python",
        runner::PYTHON_APP,
        json!([{"name": "PYTHONPATH", "value": "/app/lib"}]),
        "python /hello",
        delivery,
    )
    .await;
    // The user's PYTHONPATH (the app's libraries) between the agent's two directories.
    assert_eq!(
        env_value(&r.pod, 0, "PYTHONPATH"),
        "/otel-auto-instrumentation-python/opentelemetry/instrumentation/auto_instrumentation:\
         /app/lib:/otel-auto-instrumentation-python"
    );
    assert_eq!(span.res("telemetry.sdk.language"), "python");
    assert_eq!(
        span.scope, "opentelemetry.instrumentation.flask",
        "{span:#?}"
    );
    assert_eq!(span.name, "GET /<path:path>", "{span:#?}");
    assert_eq!(span.attr("http.route"), "/<path:path>", "{span:#?}");
}

#[tokio::test]
async fn sdk_only_python_app_configured_by_the_injected_env_sends_its_span() {
    let (r, span) = one_language(
        "sdk-span",
        "sdk",
        runner::PYTHON_SDK_APP,
        json!([{"name": "PYTHONPATH", "value": "/app/lib"}]),
        "python-sdk /hello",
        // No agent: the delivery mode has nothing to deliver.
        Delivery::ImageVolume,
    )
    .await;
    // No agent: no init container, no volume; the app's own PYTHONPATH untouched.
    assert!(r.pod["spec"]["initContainers"].is_null(), "{}", r.pod);
    assert!(r.pod["spec"]["volumes"].is_null(), "{}", r.pod);
    assert_eq!(env_value(&r.pod, 0, "PYTHONPATH"), "/app/lib");
    assert_eq!(span.res("telemetry.sdk.language"), "python");
    assert_eq!(span.scope, "e2e.python-sdk");
    assert_eq!(span.name, "GET /hello");
    assert_eq!(span.attr("url.path"), "/hello");
}
