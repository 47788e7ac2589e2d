//! From a Deployment to a span: the Deployment is created through the apiserver, the real
//! controllers make its pod, the real webhook injects it, the pod runner (`support/runner.rs`)
//! runs the stored pod's init and app containers under bubblewrap with the real agents, a
//! request is sent to the app, and the span is read from the real collector's file exporter.
//! Each case asserts what arrived against what the webhook put in the pod (the stored pod's
//! environment expanded by the kubelet's rules) and against literals.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::OnceCell;

use crate::harness::{Env, cluster, env_value, is_injected};
use crate::support::collector::{Collector, Span};
use crate::support::controllers::NODE;
use crate::support::process::free_port;
use crate::support::runner::{self, Images, RunningPod};
use crate::support::webhook::http_get;
use crate::workloads::{create, running_pods, template};

pub const INJECT: &str = "instrumentation.opentelemetry.io/inject-";
/// OTLP span kind SERVER.
pub const SERVER: i64 = 2;

static COLLECTOR: OnceCell<Result<Collector, String>> = OnceCell::const_new();

/// The collector shared by this test process (plain OTLP; its dir inside the control plane's).
pub async fn collector() -> &'static Collector {
    let cp = cluster().await;
    let r = COLLECTOR
        .get_or_init(|| async { Collector::start(None, Some(&cp.dir)).await })
        .await;
    r.as_ref()
        .unwrap_or_else(|e| panic!("the collector could not start: {e}"))
}

pub fn images() -> Images {
    Images::e2e().unwrap_or_else(|e| panic!("{e}"))
}

/// Common settings of the tests' Instrumentations: export each span at once, no metrics or
/// logs unless a test asks.
pub fn fast_export_env() -> Value {
    json!([
        {"name": "OTEL_BSP_SCHEDULE_DELAY", "value": "100"},
        {"name": "OTEL_METRICS_EXPORTER", "value": "none"},
        {"name": "OTEL_LOGS_EXPORTER", "value": "none"}
    ])
}

/// An Instrumentation spec exporting to `endpoint`, with the local agent images and one
/// resource attribute. The agents' cloud resource detectors stay off (as they are by
/// default in the Java agent and the Python distro; Node.js lists its detectors): they
/// would ask a cloud metadata address, and the tests talk to 127.0.0.1 only.
pub fn spec(endpoint: &str) -> Value {
    json!({
        "exporter": {"endpoint": endpoint},
        "resource": {"resourceAttributes": {"deployment.environment.name": "e2e"}},
        "env": fast_export_env(),
        "java": {"image": runner::JAVA_AGENT, "env": [
            {"name": "OTEL_RESOURCE_PROVIDERS_AWS_ENABLED", "value": "false"},
            {"name": "OTEL_RESOURCE_PROVIDERS_AZURE_ENABLED", "value": "false"},
            {"name": "OTEL_RESOURCE_PROVIDERS_GCP_ENABLED", "value": "false"}
        ]},
        "nodejs": {"image": runner::NODEJS_AGENT, "env": [
            {"name": "OTEL_NODE_RESOURCE_DETECTORS", "value": "env,host,os,process,container"}
        ]},
        "python": {"image": runner::PYTHON_AGENT}
    })
}

/// A container of the test apps listening on `port`.
pub fn app(name: &str, image: &str, port: u16) -> Value {
    json!({"name": name, "image": image, "env": [{"name": "PORT", "value": port.to_string()}]})
}

/// What a test deployed and runs.
pub struct Running {
    pub ns: String,
    /// The pod as stored.
    pub pod: Value,
    pub run: RunningPod,
}

impl Running {
    /// The pod's name.
    pub fn name(&self) -> &str {
        self.pod["metadata"]["name"].as_str().unwrap_or("")
    }

    /// The resource attributes the webhook set for `container`: `OTEL_RESOURCE_ATTRIBUTES`
    /// as the container got it (expanded by the kubelet's rules), plus `service.name` from
    /// `OTEL_SERVICE_NAME`.
    pub fn promised_resource(&self, container: &str) -> BTreeMap<String, String> {
        let env = &self.run.envs[container];
        let get = |k: &str| {
            env.iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.clone())
                .unwrap_or_default()
        };
        let mut out: BTreeMap<String, String> = get("OTEL_RESOURCE_ATTRIBUTES")
            .split(',')
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        out.insert("service.name".into(), get("OTEL_SERVICE_NAME"));
        out
    }
}

/// Creates the namespace (with `spec` as its Instrumentation `inst`), a Deployment `name`
/// of one replica with `containers` and `annotations`, waits for its pod to be Running on
/// the kwok node, and runs it.
pub async fn deploy(
    env: &Env,
    name: &str,
    inst_spec: Value,
    annotations: &[(&str, &str)],
    containers: Value,
) -> Running {
    let ns = env.namespace("shop", &[]).await;
    env.await_webhook(&ns).await;
    env.instrumentation(&ns, "inst", inst_spec).await;
    let mut t = template(name, annotations);
    t["spec"]["containers"] = containers;
    let mut dry = json!({"apiVersion": "v1", "kind": "Pod", "metadata": t["metadata"].clone(),
                         "spec": t["spec"].clone()});
    dry["metadata"]["name"] = json!(format!("{name}-dry-run"));
    env.until_dry_run(&ns, &dry, "injection", |r| is_injected(&r.body))
        .await;
    create(
        env,
        &format!("/apis/apps/v1/namespaces/{ns}/deployments"),
        &json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
                "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                         "template": t}}),
    )
    .await;
    let pod = running_pods(env, &ns, &format!("app={name}"), 1, Duration::from_secs(60))
        .await
        .remove(0);
    assert!(is_injected(&pod), "{pod}");
    let cp = cluster().await;
    let t0 = Instant::now();
    let run = runner::run(&env.client, &pod, &images(), &cp.dir)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    eprintln!(
        "[e2e] {}: pod {ns}/{} started in {:?}",
        env.id,
        pod["metadata"]["name"],
        t0.elapsed()
    );
    Running { ns, pod, run }
}

/// GET `path` from the app on `port` until it answers (at most 120 s: a JVM with the agent
/// starts slowly on a busy machine); returns (status, body).
pub async fn request(r: &mut Running, port: u16, path: &str) -> (u16, String) {
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let t0 = Instant::now();
    loop {
        if let Err(e) = r.run.check_alive() {
            panic!("{e}");
        }
        if let Ok(answer) = http_get(addr, path).await {
            eprintln!("[e2e] GET {path} answered after {:?}", t0.elapsed());
            return answer;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "the app on {addr} did not answer within 120 s:\n{}",
            r.run.logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The server spans of `ns` (by resource `k8s.namespace.name`) for `service`.
pub fn server_spans<'a>(spans: &'a [Span], ns: &str, service: &str) -> Vec<&'a Span> {
    spans
        .iter()
        .filter(|s| s.kind == SERVER && s.res("k8s.namespace.name") == ns)
        .filter(|s| s.res("service.name") == service)
        .collect()
}

/// Waits for one server span of `ns`/`service`, then 2 s more, and returns the only one.
pub async fn the_server_span(c: &Collector, r: &Running, service: &str) -> Span {
    let what = format!("a server span of {service} in {}", r.ns);
    c.await_spans(&what, Duration::from_secs(60), |spans| {
        !server_spans(spans, &r.ns, service).is_empty()
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", r.run.logs()));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let spans = c.spans();
    let found = server_spans(&spans, &r.ns, service);
    assert_eq!(found.len(), 1, "one request, one server span: {found:#?}");
    found[0].clone()
}

/// Asserts that every resource attribute the webhook promised arrived with its value, and
/// the literal values every case shares.
pub fn assert_resource(span: &Span, r: &Running, container: &str, service: &str) {
    let promised = r.promised_resource(container);
    for (k, v) in &promised {
        assert_eq!(
            span.res(k),
            v,
            "resource attribute {k} of the span ({:?})",
            span.resource
        );
    }
    let pod = r.name();
    for (k, v) in [
        ("service.name", service.to_owned()),
        ("k8s.namespace.name", r.ns.clone()),
        ("k8s.pod.name", pod.to_owned()),
        ("k8s.container.name", container.to_owned()),
        ("k8s.node.name", NODE.to_owned()),
        ("service.instance.id", format!("{}.{pod}.{container}", r.ns)),
        ("deployment.environment.name", "e2e".to_owned()),
    ] {
        assert_eq!(span.res(k), v, "{k}: {:?}", span.resource);
    }
}

#[tokio::test]
async fn java_deployment_sends_a_server_span_with_the_promised_resource() {
    let c = collector().await;
    let env = Env::start("java-span").await;
    let port = free_port();
    let mut r = deploy(
        &env,
        "checkout",
        spec(&c.http_endpoint()),
        &[(&format!("{INJECT}java"), "true")],
        json!([app("app", runner::JAVA_APP, port)]),
    )
    .await;
    assert_eq!(
        env_value(&r.pod, 0, "JAVA_TOOL_OPTIONS"),
        " -javaagent:/otel-auto-instrumentation-java-app/javaagent.jar"
    );
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
/// request to `/hello`: returns what ran and the one server span.
async fn one_language(
    id: &str,
    lang: &str,
    image: &str,
    extra_env: Value,
    answer: &str,
) -> (Running, Span) {
    let c = collector().await;
    let env = Env::start(id).await;
    let port = free_port();
    let mut container = app("app", image, port);
    for e in extra_env.as_array().into_iter().flatten() {
        container["env"].as_array_mut().unwrap().push(e.clone());
    }
    let mut r = deploy(
        &env,
        "checkout",
        spec(&c.http_endpoint()),
        &[(&format!("{INJECT}{lang}"), "true")],
        json!([container]),
    )
    .await;
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

#[tokio::test]
async fn nodejs_deployment_sends_a_server_span_with_the_promised_resource() {
    let (r, span) = one_language(
        "node-span",
        "nodejs",
        runner::NODEJS_APP,
        json!([]),
        "nodejs /hello",
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

#[tokio::test]
async fn python_deployment_sends_a_server_span_with_the_promised_resource() {
    let (r, span) = one_language(
        "python-span",
        "python",
        runner::PYTHON_APP,
        json!([{"name": "PYTHONPATH", "value": "/app/lib"}]),
        "python /hello",
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
