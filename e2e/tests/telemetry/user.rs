//! What the user set stays in effect: two services in one pod, a service name of their own,
//! their `JAVA_TOOL_OPTIONS`, an exporter CA from a Secret.

use std::time::Duration;

use serde_json::json;

use crate::harness::{Env, cluster, env_value};
use crate::support::collector::Collector;
use crate::support::process::free_port;
use crate::support::runner;
use crate::workloads::create;

use super::propagation::get_with_headers;
use super::{
    SERVER, app, assert_resource, collector, deploy, deploy_in, request, server_spans, spec,
    the_server_span,
};
use otel_injector::keys::INJECT_PREFIX;

#[tokio::test]
async fn java_and_python_containers_of_one_pod_report_two_services() {
    let c = collector().await;
    let env = Env::start("two-langs").await;
    let (java_port, python_port) = (free_port(), free_port());
    let mut worker = app("worker", runner::PYTHON_APP, python_port);
    worker["env"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "PYTHONPATH", "value": "/app/lib"}));
    let mut r = deploy(
        &env,
        "checkout",
        spec(&c.http_endpoint()),
        &[
            (&format!("{INJECT_PREFIX}java"), "true"),
            (&format!("{INJECT_PREFIX}python"), "true"),
            (
                "instrumentation.opentelemetry.io/java-container-names",
                "api",
            ),
            (
                "instrumentation.opentelemetry.io/python-container-names",
                "worker",
            ),
        ],
        json!([app("api", runner::JAVA_APP, java_port), worker]),
    )
    .await;
    assert_eq!(
        request(&mut r, java_port, "/a").await,
        (200, "java /a".to_owned())
    );
    assert_eq!(
        request(&mut r, python_port, "/b").await,
        (200, "python /b".to_owned())
    );
    let what = format!("two server spans in {}", r.ns);
    let ns = r.ns.clone();
    let spans = c
        .await_spans(&what, Duration::from_secs(60), |spans| {
            spans
                .iter()
                .filter(|s| s.kind == SERVER && s.res("k8s.namespace.name") == ns)
                .count()
                >= 2
        })
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", r.run.logs()));
    let mut servers: Vec<_> = spans
        .iter()
        .filter(|s| s.kind == SERVER && s.res("k8s.namespace.name") == r.ns)
        .collect();
    servers.sort_by_key(|s| s.res("k8s.container.name").to_owned());
    assert_eq!(servers.len(), 2, "{servers:#?}");
    let (api, worker) = (servers[0], servers[1]);
    for (span, container, language) in [(api, "api", "java"), (worker, "worker", "python")] {
        let promised = r.promised_resource(container);
        assert_eq!(span.res("k8s.container.name"), container);
        assert_eq!(span.res("telemetry.sdk.language"), language);
        assert_eq!(span.res("service.name"), promised["service.name"]);
        assert_eq!(
            span.res("service.instance.id"),
            format!("{}.{}.{container}", r.ns, r.name())
        );
        for (k, v) in &promised {
            assert_eq!(span.res(k), v, "{container}: {k}");
        }
    }
    assert_eq!(
        (api.res("service.name"), worker.res("service.name")),
        ("checkout", "checkout")
    );
}

#[tokio::test]
async fn a_service_name_the_user_set_is_kept_and_reported() {
    let c = collector().await;
    let env = Env::start("user-env").await;
    let port = free_port();
    let mut container = app("app", runner::NODEJS_APP, port);
    container["env"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "OTEL_SERVICE_NAME", "value": "payments-api"}));
    let mut r = deploy(
        &env,
        "checkout",
        spec(&c.http_endpoint()),
        &[(&format!("{INJECT_PREFIX}nodejs"), "true")],
        json!([container]),
    )
    .await;
    let names: Vec<_> = r.pod["spec"]["containers"][0]["env"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "OTEL_SERVICE_NAME")
        .collect();
    assert_eq!(
        names,
        [&json!({"name": "OTEL_SERVICE_NAME", "value": "payments-api"})]
    );
    request(&mut r, port, "/hello").await;
    let span = the_server_span(c, &r, "payments-api").await;
    assert_eq!(span.res("k8s.deployment.name"), "checkout");
    assert_eq!(span.res("k8s.pod.name"), r.name());
}

#[tokio::test]
async fn java_tool_options_the_user_set_still_take_effect_with_the_agent() {
    let c = collector().await;
    let env = Env::start("jto").await;
    let port = free_port();
    let mut container = app("app", runner::JAVA_APP, port);
    // An option the agent itself reads: it must see it, and the agent must be attached.
    container["env"].as_array_mut().unwrap().push(json!({
        "name": "JAVA_TOOL_OPTIONS",
        "value": "-Dotel.instrumentation.http.server.capture-request-headers=x-tenant"
    }));
    let mut r = deploy(
        &env,
        "checkout",
        spec(&c.http_endpoint()),
        &[(&format!("{INJECT_PREFIX}java"), "true")],
        json!([container]),
    )
    .await;
    assert_eq!(
        env_value(&r.pod, 0, "JAVA_TOOL_OPTIONS"),
        "-Dotel.instrumentation.http.server.capture-request-headers=x-tenant \
         -javaagent:/otel-auto-instrumentation-java-app/javaagent.jar"
    );
    request(&mut r, port, "/warm-up").await;
    // The warm-up's span first (it carries no header), then the request with the header.
    c.await_spans("the warm-up span", Duration::from_secs(60), |s| {
        !server_spans(s, &r.ns, "checkout").is_empty()
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", r.run.logs()));
    let (status, _) = get_with_headers(port, "/tenant", &[("x-tenant", "acme")]).await;
    assert_eq!(status, 200);
    let ns = r.ns.clone();
    let spans = c
        .await_spans("the /tenant span", Duration::from_secs(30), |s| {
            server_spans(s, &ns, "checkout")
                .iter()
                .any(|s| s.attr("url.path") == "/tenant")
        })
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", r.run.logs()));
    let span = server_spans(&spans, &r.ns, "checkout")
        .into_iter()
        .find(|s| s.attr("url.path") == "/tenant")
        .unwrap()
        .clone();
    assert_eq!(
        span.attributes.get("http.request.header.x-tenant"),
        Some(&json!(["acme"])),
        "{span:#?}"
    );
}

#[tokio::test]
async fn exporter_tls_ca_from_a_secret_lets_spans_reach_a_tls_collector() {
    let cp = cluster().await;
    let certs = otel_injector::certs::generate("e2e collector CA", &["127.0.0.1".to_owned()])
        .unwrap_or_else(|e| panic!("{e}"));
    let dir = tempfile::Builder::new()
        .prefix("collector-tls.")
        .tempdir_in(&cp.dir)
        .unwrap();
    certs.write_to(dir.path()).unwrap_or_else(|e| panic!("{e}"));
    let tls = Collector::start(
        Some(crate::support::collector::Tls {
            cert: &dir.path().join("tls.crt"),
            key: &dir.path().join("tls.key"),
        }),
        Some(&cp.dir),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(tls.http_endpoint().starts_with("https://127.0.0.1:"));
    let env = Env::start("tls").await;
    let port = free_port();
    let ns = env.namespace("shop", &[]).await;
    create(
        &env,
        &format!("/api/v1/namespaces/{ns}/secrets"),
        &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "collector-ca"},
                "stringData": {"ca.crt": certs.ca_cert}}),
    )
    .await;
    let mut s = spec(&tls.http_endpoint());
    s["exporter"]["tls"] = json!({"secretName": "collector-ca", "ca_file": "ca.crt"});
    let mut r = deploy_in(
        &env,
        ns,
        "checkout",
        s,
        &[(&format!("{INJECT_PREFIX}java"), "true")],
        json!([app("app", runner::JAVA_APP, port)]),
    )
    .await;
    let ca_path = env_value(&r.pod, 0, "OTEL_EXPORTER_OTLP_CERTIFICATE").to_owned();
    assert!(ca_path.ends_with("/ca.crt"), "{ca_path}");
    request(&mut r, port, "/hello").await;
    let span = the_server_span(&tls, &r, "checkout").await;
    assert_resource(&span, &r, "app", "checkout");
}
