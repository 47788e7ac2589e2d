//! From a Deployment to a span: the Deployment is created through the apiserver, the real
//! controllers make its pod, the real webhook injects it, the pod runner (`support/runner.rs`)
//! runs the stored pod's init and app containers under bubblewrap with the real agents, a
//! request is sent to the app, and the span is read from the real collector's file exporter.
//! Each case asserts what arrived against what the webhook put in the pod (the stored pod's
//! environment expanded by the kubelet's rules) and against literals.

mod languages;
mod propagation;
mod user;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::OnceCell;

use crate::harness::{Env, Options, cluster, is_injected};
use crate::support::collector::{Collector, Span};
use crate::support::controllers::NODE;
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
