//! From a Deployment to a span: the Deployment is created through the apiserver, the real
//! controllers make its pod, the real webhook injects it, the pod runner (`support/runner.rs`)
//! runs the stored pod's init and app containers under bubblewrap with the real agents, a
//! request is sent to the app, and the span is read from the real collector's file exporter.
//! Each case asserts what arrived against what the webhook put in the pod (the stored pod's
//! environment expanded by the kubelet's rules) and against literals.

use otel_injector::keys::INJECT_PREFIX;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::OnceCell;

use rstest::rstest;

use crate::harness::{Env, Options, cluster, env_value, is_injected};
use crate::support::collector::{Collector, Span};
use crate::support::controllers::NODE;
use crate::support::process::free_port;
use crate::support::runner::{self, Images, RunningPod, disk_usage};
use crate::support::webhook::http_get;
use crate::workloads::{create, running_pods, template};

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

/// How the agents reach the pod: the webhook's `--agent-delivery`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// `init-container`: an init container copies the agent into an emptyDir.
    Copy,
    /// `image-volume`: the agent image is mounted read-only, nothing is copied.
    ImageVolume,
}

impl Delivery {
    pub fn flag(self) -> &'static str {
        match self {
            Delivery::Copy => "init-container",
            Delivery::ImageVolume => "image-volume",
        }
    }

    /// A webhook started with `--agent-delivery=<this>`, its id `id` plus the mode.
    pub async fn env(self, id: &str) -> Env {
        let id = match self {
            Delivery::Copy => format!("{id}-copy"),
            Delivery::ImageVolume => format!("{id}-iv"),
        };
        Env::start_with(
            &id,
            Options {
                args: vec![format!("--agent-delivery={}", self.flag())],
                ..Options::default()
            },
        )
        .await
    }

    /// Asserts how `lang`'s agent reached the app container `container` of `r`: in the
    /// stored pod (the volume, the mount, the init container) and on the pod runner's disk
    /// (the agent's files copied into the emptyDir, or nothing written at all). Returns the
    /// bytes written under the pod's volumes.
    pub fn assert_delivered(self, r: &Running, lang: &str, container: &str) -> u64 {
        let (image, mount_path, sub_path, file) = match lang {
            "java" => (
                runner::JAVA_AGENT,
                format!("/otel-auto-instrumentation-java-{container}"),
                None,
                "javaagent.jar",
            ),
            "nodejs" => (
                runner::NODEJS_AGENT,
                "/otel-auto-instrumentation-nodejs".to_owned(),
                Some("autoinstrumentation"),
                "autoinstrumentation.js",
            ),
            "python" => (
                runner::PYTHON_AGENT,
                "/otel-auto-instrumentation-python".to_owned(),
                Some("autoinstrumentation"),
                "opentelemetry/instrumentation/auto_instrumentation/sitecustomize.py",
            ),
            _ => panic!("no agent delivery for {lang}"),
        };
        let volume = format!("opentelemetry-auto-instrumentation-{lang}");
        let spec = &r.pod["spec"];
        let find = |list: &Value, what: &str| {
            list.as_array()
                .into_iter()
                .flatten()
                .find(|v| v["name"] == volume)
                .unwrap_or_else(|| panic!("{self:?}: no {what} {volume}: {}", r.pod))
                .clone()
        };
        let app = spec["containers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == container)
            .unwrap_or_else(|| panic!("no container {container}"));
        let mount = find(&app["volumeMounts"], "mount");
        let written = disk_usage(&r.run.volumes_dir());
        let agent_file = images().0[image]
            .root
            .join(sub_path.unwrap_or(""))
            .join(file);
        let agent_size = std::fs::metadata(&agent_file)
            .unwrap_or_else(|e| panic!("{}: {e}", agent_file.display()))
            .len();
        match self {
            Delivery::Copy => {
                assert_eq!(
                    find(&spec["volumes"], "volume"),
                    json!({"name": volume, "emptyDir": {"sizeLimit": "200Mi"}})
                );
                assert_eq!(mount, json!({"name": volume, "mountPath": mount_path}));
                let init = find(&spec["initContainers"], "init container");
                assert_eq!(init["image"], image);
                // The init container copied the agent into the pod's emptyDir.
                let copied = r.run.volumes_dir().join(&volume).join(file);
                assert_eq!(
                    std::fs::metadata(&copied)
                        .unwrap_or_else(|e| panic!("{}: {e}", copied.display()))
                        .len(),
                    agent_size
                );
                assert!(written >= agent_size, "{written} < {agent_size}");
            }
            Delivery::ImageVolume => {
                assert!(spec["initContainers"].is_null(), "{}", r.pod);
                assert_eq!(
                    find(&spec["volumes"], "volume"),
                    json!({"name": volume,
                           "image": {"reference": image, "pullPolicy": "IfNotPresent"}})
                );
                let mut expected = json!({"name": volume, "mountPath": mount_path,
                                          "readOnly": true});
                if let Some(sub) = sub_path {
                    expected["subPath"] = json!(sub);
                }
                assert_eq!(mount, expected);
                // Nothing made, nothing written: the agent is read from its image.
                let made: Vec<_> = std::fs::read_dir(r.run.volumes_dir())
                    .unwrap()
                    .map(|e| e.unwrap().file_name())
                    .collect();
                assert!(made.is_empty(), "{made:?}");
                assert_eq!(written, 0);
            }
        }
        written
    }
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
    deploy_in(env, ns, name, inst_spec, annotations, containers).await
}

/// [`deploy`] into an existing namespace of the test.
pub async fn deploy_in(
    env: &Env,
    ns: String,
    name: &str,
    inst_spec: Value,
    annotations: &[(&str, &str)],
    containers: Value,
) -> Running {
    env.await_webhook(&ns).await;
    env.instrumentation(&ns, "inst", inst_spec).await;
    deploy_asking(env, ns, name, annotations, containers).await
}

/// The Deployment of [`deploy_in`], once the namespace's Instrumentation exists: created when
/// a dry run shows the injection, its pod run once Running.
pub async fn deploy_asking(
    env: &Env,
    ns: String,
    name: &str,
    annotations: &[(&str, &str)],
    containers: Value,
) -> Running {
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
    let (status, body, _) = first_answer(r, port, path).await;
    (status, body)
}

/// [`request`], trying every 20 ms, and the time from the pod's start (the pod runner's
/// [`RunningPod::started`]) to the answer.
pub async fn first_answer(r: &mut Running, port: u16, path: &str) -> (u16, String, Duration) {
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let t0 = Instant::now();
    loop {
        if let Err(e) = r.run.check_alive() {
            panic!("{e}");
        }
        if let Ok((status, body)) = http_get(addr, path).await {
            let since_start = r.run.started.elapsed();
            eprintln!(
                "[e2e] GET {path} answered after {:?} ({since_start:?} after the pod's start)",
                t0.elapsed()
            );
            return (status, body, since_start);
        }
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "the app on {addr} did not answer within 120 s:\n{}",
            r.run.logs()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
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
async fn one_language(
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

/// A plain HTTP/1.1 GET with extra headers (`Connection: close`): (status, body).
pub async fn get_with_headers(port: u16, path: &str, headers: &[(&str, &str)]) -> (u16, String) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap_or_else(|e| panic!("connect {port}: {e}"));
    let extra: String = headers
        .iter()
        .map(|(k, v)| format!("{k}: {v}\r\n"))
        .collect();
    s.write_all(
        format!(
            "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{extra}Connection: close\r\n\r\n"
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), s.read_to_end(&mut buf))
        .await
        .expect("an answer within 30 s")
        .unwrap();
    let text = String::from_utf8_lossy(&buf).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, body.to_owned())
}

/// A downstream "app" in the test: accepts one HTTP request on 127.0.0.1, answers 200 and
/// hands over the request's headers (lower-case names).
pub async fn downstream() -> (
    u16,
    tokio::sync::oneshot::Receiver<BTreeMap<String, String>>,
) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", free_port()))
        .await
        .expect("bind the downstream");
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let Ok((mut s, _)) = listener.accept().await else {
            return;
        };
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
            match s.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        let text = String::from_utf8_lossy(&buf).into_owned();
        let headers = text
            .lines()
            .skip(1)
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        let _ = s
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")
            .await;
        let _ = tx.send(headers);
    });
    (port, rx)
}

#[tokio::test]
async fn sampler_ratio_zero_sends_no_span_while_the_agent_reports_the_request() {
    let c = collector().await;
    let env = Env::start("sampler").await;
    let port = free_port();
    let mut s = spec(&c.http_endpoint());
    s["sampler"] = json!({"type": "parentbased_traceidratio", "argument": "0"});
    // Metrics on, every 500 ms: they prove the agent ran and saw the request.
    s["env"] = json!([
        {"name": "OTEL_BSP_SCHEDULE_DELAY", "value": "100"},
        {"name": "OTEL_METRIC_EXPORT_INTERVAL", "value": "500"},
        {"name": "OTEL_LOGS_EXPORTER", "value": "none"}
    ]);
    let mut r = deploy(
        &env,
        "checkout",
        s,
        &[(&format!("{INJECT_PREFIX}java"), "true")],
        json!([app("app", runner::JAVA_APP, port)]),
    )
    .await;
    assert_eq!(
        env_value(&r.pod, 0, "OTEL_TRACES_SAMPLER"),
        "parentbased_traceidratio"
    );
    assert_eq!(env_value(&r.pod, 0, "OTEL_TRACES_SAMPLER_ARG"), "0");
    let (status, _) = request(&mut r, port, "/hello").await;
    assert_eq!(status, 200);
    let t0 = Instant::now();
    let ns = r.ns.clone();
    let counted = |m: &crate::support::collector::Metric| {
        m.name == "http.server.request.duration"
            && m.resource.get("k8s.namespace.name") == Some(&json!(ns))
            && m.data.to_string().contains("\"count\":\"1\"")
    };
    loop {
        if c.metrics().iter().any(counted) {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "no http.server.request.duration of {ns} counting the request:\n{}",
            r.run.logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let metric = c.metrics().into_iter().find(counted).unwrap();
    assert_eq!(metric.resource["service.name"], "checkout");
    // The request was handled inside the agent: its span, had it been sampled, left with
    // the metrics' export (100 ms batches). None arrived.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let spans = c.spans();
    let of_ns: Vec<_> = spans
        .iter()
        .filter(|s| s.res("k8s.namespace.name") == r.ns)
        .collect();
    assert!(of_ns.is_empty(), "no sampled span: {of_ns:#?}");
}

#[tokio::test]
async fn b3_propagator_puts_a_b3_header_on_the_apps_outgoing_call() {
    let c = collector().await;
    let env = Env::start("b3").await;
    let port = free_port();
    let (down, headers) = downstream().await;
    let mut s = spec(&c.http_endpoint());
    s["propagators"] = json!(["b3"]);
    let mut container = app("app", runner::JAVA_APP, port);
    container["env"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "DOWNSTREAM_URL", "value": format!("http://127.0.0.1:{down}/stock")}));
    let mut r = deploy(
        &env,
        "checkout",
        s,
        &[(&format!("{INJECT_PREFIX}java"), "true")],
        json!([container]),
    )
    .await;
    assert_eq!(env_value(&r.pod, 0, "OTEL_PROPAGATORS"), "b3");
    let (status, body) = request(&mut r, port, "/call").await;
    assert_eq!((status, body.as_str()), (200, "java /call downstream 200"));
    let headers = tokio::time::timeout(Duration::from_secs(10), headers)
        .await
        .expect("the downstream was called")
        .expect("headers");
    let server = the_server_span(c, &r, "checkout").await;
    let spans = c.spans();
    let clients: Vec<_> = spans
        .iter()
        .filter(|s| s.kind == 3 && s.res("k8s.namespace.name") == r.ns)
        .collect();
    assert_eq!(clients.len(), 1, "{clients:#?}");
    let client = clients[0];
    assert_eq!(client.trace_id, server.trace_id);
    assert_eq!(client.parent_span_id, server.span_id);
    // Single-header B3: {trace id}-{span id}-{sampled}; no W3C header.
    assert_eq!(
        headers.get("b3"),
        Some(&format!("{}-{}-1", client.trace_id, client.span_id)),
        "{headers:?}"
    );
    assert!(!headers.contains_key("traceparent"), "{headers:?}");
}

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
