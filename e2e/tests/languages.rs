//! One annotated pod per language (and one pod with two languages) created through the
//! apiserver. Each stored pod (GET) must be exactly what the engine itself makes of the same
//! pod and Instrumentation (`harness::engine_result`), except for the fields the apiserver
//! defaults (`harness::APISERVER_DEFAULTS`); and a few key values are pinned here as
//! literals, so that a case fails whether the engine or the way through the apiserver
//! breaks. A pod the apiserver rejects after the patch fails `Env::create` (HTTP 201
//! expected); a webhook call that failed open leaves the pod without the marker annotation,
//! which every case asserts.

use otel_injector::agents;
use otel_injector::agents::Language;
use otel_injector::keys::{
    DOTNET_RUNTIME, GO_TARGET_EXE, INJECT_APACHE_HTTPD, INJECT_DOTNET, INJECT_GO, INJECT_JAVA,
    INJECT_NGINX, INJECT_NODEJS, INJECT_PYTHON, INJECT_SDK, INJECTED_ANNOTATION, PYTHON_PLATFORM,
};
use serde_json::{Value, json};

use crate::harness::*;
use crate::support::api;

/// Every language, Go included (it is off by default).
const ALL_LANGUAGES: &str = "java,nodejs,python,dotnet,go,apache-httpd,nginx,sdk";

/// The variables put before a target's own env.
const HEAD: [&str; 2] = ["OTEL_NODE_IP", "OTEL_POD_IP"];
/// The SDK variables after the language's, with a sampler argument.
const TAIL: [&str; 8] = [
    "OTEL_SERVICE_NAME",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_RESOURCE_ATTRIBUTES_POD_NAME",
    "OTEL_RESOURCE_ATTRIBUTES_NODE_NAME",
    "OTEL_PROPAGATORS",
    "OTEL_TRACES_SAMPLER",
    "OTEL_TRACES_SAMPLER_ARG",
    "OTEL_RESOURCE_ATTRIBUTES",
];

/// Exporter, propagators, a ratio sampler and one common variable; `lang` adds its own
/// section (`{"nodejs": {...}}`).
fn spec(endpoint: &str, lang: Value) -> Value {
    let mut s = json!({
        "exporter": {"endpoint": endpoint},
        "propagators": ["tracecontext", "baggage"],
        "sampler": {"type": "parentbased_traceidratio", "argument": "0.25"},
        "env": [{"name": "OTEL_LOGS_EXPORTER", "value": "otlp"}]
    });
    for (k, v) in lang.as_object().into_iter().flatten() {
        s[k] = v.clone();
    }
    s
}

fn one_env(name: &str, value: &str) -> Value {
    json!({"env": [{"name": name, "value": value}]})
}

/// A pod named `name` with these annotations and containers.
fn pod_of(name: &str, annotations: Value, containers: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {"containers": containers}
    })
}

/// `HEAD`, then `middle`, then `TAIL`.
fn env_order<'a>(middle: &[&'a str]) -> Vec<&'a str> {
    HEAD.iter()
        .chain(middle)
        .chain(TAIL.iter())
        .copied()
        .collect()
}

fn names(list: &Value) -> Vec<&str> {
    list.as_array()
        .into_iter()
        .flatten()
        .map(|c| c["name"].as_str().unwrap_or("?"))
        .collect()
}

fn container<'a>(pod: &'a Value, name: &str) -> &'a Value {
    pod["spec"]["containers"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["name"] == name))
        .unwrap_or_else(|| panic!("no container {name}: {pod}"))
}

fn init<'a>(pod: &'a Value, name: &str) -> &'a Value {
    pod["spec"]["initContainers"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["name"] == name))
        .unwrap_or_else(|| panic!("no init container {name}: {pod}"))
}

/// The literal value of `name` in a container's env (present exactly once).
fn var<'a>(c: &'a Value, name: &str) -> &'a str {
    let found: Vec<&Value> = c["env"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["name"] == name)
        .collect();
    assert_eq!(found.len(), 1, "{name} in {}: {c}", c["name"]);
    found[0]["value"]
        .as_str()
        .unwrap_or_else(|| panic!("{name} has no literal value: {}", found[0]))
}

fn has_var(c: &Value, name: &str) -> bool {
    names(&c["env"]).contains(&name)
}

/// A test's webhook (with `options`), registered, and one namespace it serves.
async fn setup(id: &str, options: Options) -> (Env, String) {
    let env = Env::start_with(id, options).await;
    let ns = env.namespace("shop", &[]).await;
    env.await_webhook(&ns).await;
    (env, ns)
}

/// Creates `pod` in `ns` for real once its dry run comes back injected, and returns it as
/// stored, after asserting that it was accepted (HTTP 201), carries the marker of `langs`
/// (not failed open), and is exactly the engine's result but the apiserver defaults.
async fn create_injected(
    env: &Env,
    ns: &str,
    insts: &[Value],
    pod: &Value,
    langs: &[Language],
) -> Value {
    let name = pod["metadata"]["name"].as_str().expect("pod name");
    let (expected, d) = engine_result(env, ns, insts, pod);
    assert_eq!(
        d.injected, langs,
        "the engine's own decision for {name}: warnings {:?}, skipped {:?}",
        d.warnings, d.skipped
    );
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
    // The webhook's Instrumentation cache fills from a watch.
    env.until_dry_run(ns, pod, "injection", |r| is_injected(&r.body))
        .await;

    let before = env.requests().await;
    let created = env.create(ns, pod).await;
    assert!(created.warnings.is_empty(), "{:?}", created.warnings);
    assert_eq!(
        env.requests().await.patched,
        before.patched + 1.0,
        "the webhook patched {name}"
    );
    let stored = env.stored(ns, name).await;
    let marker: Vec<&str> = langs.iter().map(|l| l.as_str()).collect();
    assert_eq!(
        stored["metadata"]["annotations"][INJECTED_ANNOTATION],
        marker.join(","),
        "{name} is stored injected (a failed webhook call would have been ignored): {stored}"
    );
    let met = assert_stored_as_expected(&stored, &expected);
    eprintln!(
        "[e2e] {}: {ns}/{name} stored as the engine injects it; apiserver defaults met: {:?}",
        env.id, met
    );
    stored
}

#[tokio::test]
async fn nodejs_pod_is_stored_as_the_engine_injects_it() {
    let (env, ns) = setup("lang-nodejs", Options::default()).await;
    let inst = env
        .instrumentation(
            &ns,
            "node-inst",
            spec(
                "http://otel-collector.observability:4318",
                json!({"nodejs": one_env("OTEL_NODE_RESOURCE_DETECTORS", "env,host")}),
            ),
        )
        .await;
    let p = pod_of(
        "web",
        json!({INJECT_NODEJS: "true"}),
        json!([{"name": "app", "image": "shop/web:2.1.0",
                "env": [{"name": "PORT", "value": "3000"}]}]),
    );
    let stored = create_injected(&env, &ns, &[inst], &p, &[Language::NodeJs]).await;

    let app = container(&stored, "app");
    assert_eq!(
        names(&app["env"]),
        env_order(&[
            "PORT",
            "OTEL_NODE_RESOURCE_DETECTORS",
            "OTEL_LOGS_EXPORTER",
            "NODE_OPTIONS",
            "OTEL_METRICS_EXPORTER",
        ])
    );
    assert_eq!(
        var(app, "NODE_OPTIONS"),
        " --require /otel-auto-instrumentation-nodejs/autoinstrumentation.js"
    );
    assert_eq!(var(app, "OTEL_SERVICE_NAME"), "web");
    assert_eq!(
        app["volumeMounts"],
        json!([{"name": "opentelemetry-auto-instrumentation-nodejs",
                "mountPath": "/otel-auto-instrumentation-nodejs"}])
    );
    assert_eq!(
        names(&stored["spec"]["initContainers"]),
        ["opentelemetry-auto-instrumentation-nodejs"]
    );
    let i = init(&stored, "opentelemetry-auto-instrumentation-nodejs");
    assert_eq!(i["image"], agents::nodejs::DEFAULT_IMAGE);
    assert_eq!(
        i["command"],
        json!([
            "cp",
            "-r",
            "/autoinstrumentation/.",
            "/otel-auto-instrumentation-nodejs"
        ])
    );
    assert_eq!(
        stored["spec"]["volumes"],
        json!([{"name": "opentelemetry-auto-instrumentation-nodejs",
                "emptyDir": {"sizeLimit": "200Mi"}}])
    );
}

#[tokio::test]
async fn python_pods_glibc_and_musl_are_stored_as_the_engine_injects_them() {
    let (env, ns) = setup("lang-python", Options::default()).await;
    let inst = env
        .instrumentation(
            &ns,
            "py-inst",
            spec(
                "http://otel-collector.observability:4318",
                json!({"python": one_env("OTEL_PYTHON_LOGGING_AUTO_INSTRUMENTATION_ENABLED", "true")}),
            ),
        )
        .await;
    let containers = json!([{"name": "app", "image": "shop/recs:0.9",
                             "env": [{"name": "WORKERS", "value": "4"}]}]);
    for (name, platform, source) in [
        ("recs", None, "/autoinstrumentation/."),
        ("recs-musl", Some("musl"), "/autoinstrumentation-musl/."),
    ] {
        let mut annotations = json!({INJECT_PYTHON: "true"});
        if let Some(p) = platform {
            annotations[PYTHON_PLATFORM] = json!(p);
        }
        let p = pod_of(name, annotations, containers.clone());
        let stored = create_injected(
            &env,
            &ns,
            std::slice::from_ref(&inst),
            &p,
            &[Language::Python],
        )
        .await;

        let app = container(&stored, "app");
        assert_eq!(
            names(&app["env"]),
            env_order(&[
                "WORKERS",
                "OTEL_PYTHON_LOGGING_AUTO_INSTRUMENTATION_ENABLED",
                "PYTHONPATH",
                "OTEL_LOGS_EXPORTER",
                "OTEL_EXPORTER_OTLP_PROTOCOL",
                "OTEL_TRACES_EXPORTER",
                "OTEL_METRICS_EXPORTER",
            ]),
            "{name}"
        );
        assert_eq!(
            var(app, "PYTHONPATH"),
            "/otel-auto-instrumentation-python/opentelemetry/instrumentation/auto_instrumentation:\
             /otel-auto-instrumentation-python"
        );
        assert_eq!(var(app, "OTEL_EXPORTER_OTLP_PROTOCOL"), "http/protobuf");
        assert_eq!(
            names(&stored["spec"]["initContainers"]),
            ["opentelemetry-auto-instrumentation-python"]
        );
        let i = init(&stored, "opentelemetry-auto-instrumentation-python");
        assert_eq!(i["image"], agents::python::DEFAULT_IMAGE);
        assert_eq!(
            i["command"],
            json!(["cp", "-r", source, "/otel-auto-instrumentation-python"]),
            "{name}: the {} build is copied",
            platform.unwrap_or("glibc")
        );
        assert_eq!(
            app["volumeMounts"],
            json!([{"name": "opentelemetry-auto-instrumentation-python",
                    "mountPath": "/otel-auto-instrumentation-python"}])
        );
    }
}

#[tokio::test]
async fn dotnet_pods_glibc_and_musl_are_stored_as_the_engine_injects_them() {
    let (env, ns) = setup("lang-dotnet", Options::default()).await;
    let inst = env
        .instrumentation(
            &ns,
            "dotnet-inst",
            spec(
                "http://otel-collector.observability:4318",
                json!({"dotnet": one_env("OTEL_DOTNET_AUTO_TRACES_CONSOLE_EXPORTER_ENABLED", "false")}),
            ),
        )
        .await;
    let containers = json!([{"name": "app", "image": "shop/cart:8.0.1",
                             "env": [{"name": "ASPNETCORE_URLS", "value": "http://+:8080"}]}]);
    for (name, runtime, profiler) in [
        (
            "cart",
            None,
            "/otel-auto-instrumentation-dotnet/linux/OpenTelemetry.AutoInstrumentation.Native.so",
        ),
        (
            "cart-musl",
            Some("linux-musl-x64"),
            "/otel-auto-instrumentation-dotnet/linux-musl/OpenTelemetry.AutoInstrumentation.Native.so",
        ),
    ] {
        let mut annotations = json!({INJECT_DOTNET: "true"});
        if let Some(r) = runtime {
            annotations[DOTNET_RUNTIME] = json!(r);
        }
        let p = pod_of(name, annotations, containers.clone());
        let stored = create_injected(
            &env,
            &ns,
            std::slice::from_ref(&inst),
            &p,
            &[Language::DotNet],
        )
        .await;

        let app = container(&stored, "app");
        assert_eq!(
            names(&app["env"]),
            env_order(&[
                "ASPNETCORE_URLS",
                "OTEL_DOTNET_AUTO_TRACES_CONSOLE_EXPORTER_ENABLED",
                "OTEL_LOGS_EXPORTER",
                "CORECLR_ENABLE_PROFILING",
                "CORECLR_PROFILER",
                "CORECLR_PROFILER_PATH",
                "DOTNET_STARTUP_HOOKS",
                "DOTNET_ADDITIONAL_DEPS",
                "OTEL_DOTNET_AUTO_HOME",
                "DOTNET_SHARED_STORE",
            ]),
            "{name}"
        );
        assert_eq!(var(app, "CORECLR_PROFILER_PATH"), profiler, "{name}");
        assert_eq!(var(app, "CORECLR_ENABLE_PROFILING"), "1");
        assert_eq!(
            var(app, "CORECLR_PROFILER"),
            "{918728DD-259F-4A6A-AC2B-B85E1B658318}"
        );
        assert_eq!(
            var(app, "DOTNET_STARTUP_HOOKS"),
            "/otel-auto-instrumentation-dotnet/net/OpenTelemetry.AutoInstrumentation.StartupHook.dll"
        );
        assert_eq!(
            names(&stored["spec"]["initContainers"]),
            ["opentelemetry-auto-instrumentation-dotnet"]
        );
        let i = init(&stored, "opentelemetry-auto-instrumentation-dotnet");
        assert_eq!(i["image"], agents::dotnet::DEFAULT_IMAGE);
        assert_eq!(
            i["command"],
            json!([
                "cp",
                "-r",
                "/autoinstrumentation/.",
                "/otel-auto-instrumentation-dotnet"
            ])
        );
    }
}

#[tokio::test]
async fn go_pod_gets_a_privileged_sidecar_that_the_apiserver_accepts() {
    let (env, ns) = setup(
        "lang-go",
        Options {
            args: vec![
                "--enabled-languages".into(),
                ALL_LANGUAGES.into(),
                "--go-sidecar=classic".into(),
            ],
            ..Options::default()
        },
    )
    .await;
    let inst = env
        .instrumentation(
            &ns,
            "go-inst",
            spec(
                "http://otel-collector.observability:4318",
                json!({"go": one_env("OTEL_GO_AUTO_INCLUDE_DB_STATEMENT", "true")}),
            ),
        )
        .await;
    let p = pod_of(
        "checkout",
        json!({INJECT_GO: "true", GO_TARGET_EXE: "/app/checkout"}),
        json!([{"name": "app", "image": "shop/checkout:1.4.2",
                "env": [{"name": "PORT", "value": "8080"}]}]),
    );
    let stored = create_injected(&env, &ns, &[inst], &p, &[Language::Go]).await;

    assert_eq!(stored["spec"]["shareProcessNamespace"], true);
    assert_eq!(
        names(&stored["spec"]["containers"]),
        ["app", "opentelemetry-auto-instrumentation"]
    );
    assert!(stored["spec"]["initContainers"].is_null(), "{stored}");
    let app = container(&stored, "app");
    assert_eq!(
        app["env"],
        json!([{"name": "PORT", "value": "8080"}]),
        "the app is left alone"
    );
    assert!(app["volumeMounts"].is_null(), "{app}");
    let sidecar = container(&stored, "opentelemetry-auto-instrumentation");
    assert_eq!(sidecar["image"], agents::golang::DEFAULT_IMAGE);
    assert_eq!(
        names(&sidecar["env"]),
        env_order(&[
            "OTEL_GO_AUTO_TARGET_EXE",
            "OTEL_GO_AUTO_INCLUDE_DB_STATEMENT",
            "OTEL_LOGS_EXPORTER",
        ])
    );
    assert_eq!(var(sidecar, "OTEL_GO_AUTO_TARGET_EXE"), "/app/checkout");
    assert_eq!(var(sidecar, "OTEL_SERVICE_NAME"), "checkout");
    assert!(
        var(sidecar, "OTEL_RESOURCE_ATTRIBUTES").contains("k8s.container.name=app,"),
        "the target's attributes: {sidecar}"
    );
    assert_eq!(
        sidecar["securityContext"],
        json!({"privileged": true, "runAsUser": 0})
    );
    assert_eq!(
        sidecar["volumeMounts"],
        json!([{"name": "kernel-debug", "mountPath": "/sys/kernel/debug"}])
    );
    assert_eq!(
        stored["spec"]["volumes"],
        json!([{"name": "kernel-debug", "hostPath": {"path": "/sys/kernel/debug", "type": ""}}])
    );
}

#[tokio::test]
async fn apache_httpd_pod_with_a_probe_gets_a_valid_clone_and_the_module() {
    let (env, ns) = setup("lang-apache", Options::default()).await;
    let inst = env
        .instrumentation(
            &ns,
            "web-inst",
            spec(
                "http://otel-collector.observability:4317",
                json!({"apacheHttpd": one_env("APACHE_OTEL_DEBUG", "0")}),
            ),
        )
        .await;
    // A readiness probe and envFrom on the server: the clone init container must not keep
    // the probe (the apiserver rejects probes on init containers).
    let mut p = pod_of(
        "frontend",
        json!({INJECT_APACHE_HTTPD: "true"}),
        json!([{
            "name": "web", "image": "httpd:2.4.62",
            "env": [{"name": "LISTEN", "value": "8080"}],
            "envFrom": [{"configMapRef": {"name": "web-env"}}],
            "securityContext": {"runAsUser": 33},
            "readinessProbe": {"httpGet": {"path": "/", "port": 8080}},
            "volumeMounts": [
                {"name": "conf", "mountPath": "/usr/local/apache2/conf/httpd.conf", "subPath": "httpd.conf"},
                {"name": "html", "mountPath": "/usr/local/apache2/htdocs"}
            ]
        }]),
    );
    p["spec"]["volumes"] = json!([{"name": "conf", "configMap": {"name": "web-conf"}},
                                  {"name": "html", "emptyDir": {}}]);
    let stored = create_injected(&env, &ns, &[inst], &p, &[Language::ApacheHttpd]).await;

    let web = container(&stored, "web");
    assert_eq!(
        names(&web["env"]),
        env_order(&["LISTEN", "APACHE_OTEL_DEBUG", "OTEL_LOGS_EXPORTER"])
    );
    assert_eq!(var(web, "OTEL_SERVICE_NAME"), "frontend");
    assert_eq!(
        web["volumeMounts"],
        json!([
            {"name": "html", "mountPath": "/usr/local/apache2/htdocs"},
            {"name": "otel-apache-agent", "mountPath": "/opt/opentelemetry-webserver/agent"},
            {"name": "otel-apache-conf-dir", "mountPath": "/usr/local/apache2/conf"}
        ])
    );
    assert_eq!(
        names(&stored["spec"]["initContainers"]),
        [
            "otel-agent-source-container-clone",
            "otel-agent-attach-apache"
        ]
    );
    let clone = init(&stored, "otel-agent-source-container-clone");
    assert_eq!(clone["image"], "httpd:2.4.62");
    assert_eq!(
        clone["command"],
        json!([
            "cp",
            "-r",
            "/usr/local/apache2/conf/.",
            "/opt/opentelemetry-webserver/source-conf"
        ])
    );
    assert!(clone.get("readinessProbe").is_none(), "{clone}");
    assert_eq!(clone["securityContext"], json!({"runAsUser": 33}));
    let attach = init(&stored, "otel-agent-attach-apache");
    assert_eq!(attach["image"], agents::apache::DEFAULT_IMAGE);
    assert_eq!(attach["command"], json!(["/bin/sh", "-c"]));
    assert_eq!(
        attach["args"],
        json!([
            agents::apache::ATTACH_SCRIPT,
            "--",
            "/usr/local/apache2/conf"
        ])
    );
    // The kubelet expands a `$(VAR)` in the module config only from variables before it.
    assert_eq!(
        names(&attach["env"]),
        [
            "OTEL_NODE_IP",
            "OTEL_POD_IP",
            "APACHE_OTEL_DEBUG",
            "OTEL_LOGS_EXPORTER",
            "OTEL_APACHE_AGENT_CONF",
            "APACHE_SERVICE_INSTANCE_ID"
        ]
    );
    let conf = var(attach, "OTEL_APACHE_AGENT_CONF");
    for line in [
        "LoadModule otel_apache_module /opt/opentelemetry-webserver/agent/WebServerModule/Apache/libmod_apache_otel.so\n",
        "ApacheModuleOtelExporterEndpoint http://otel-collector.observability:4317\n",
        "ApacheModuleServiceName frontend\n",
        &format!("ApacheModuleServiceNamespace {ns}\n"),
    ] {
        assert!(conf.contains(line), "{line:?} in {conf:?}");
    }
    assert_eq!(
        names(&stored["spec"]["volumes"]),
        ["conf", "html", "otel-apache-conf-dir", "otel-apache-agent"]
    );
}

#[tokio::test]
async fn nginx_pod_gets_the_module_and_the_library_path() {
    let (env, ns) = setup("lang-nginx", Options::default()).await;
    let inst = env
        .instrumentation(
            &ns,
            "web-inst",
            spec(
                "http://otel-collector.observability:4317",
                json!({"nginx": one_env("NGINX_OTEL_DEBUG", "0")}),
            ),
        )
        .await;
    let mut p = pod_of(
        "edge",
        json!({INJECT_NGINX: "true"}),
        json!([{
            "name": "proxy", "image": "nginx:1.27.0",
            "env": [{"name": "LD_LIBRARY_PATH", "value": "/opt/lib"}],
            "securityContext": {"runAsUser": 101},
            "volumeMounts": [
                {"name": "conf", "mountPath": "/etc/nginx/nginx.conf", "subPath": "nginx.conf"},
                {"name": "cache", "mountPath": "/var/cache/nginx"}
            ]
        }]),
    );
    p["spec"]["volumes"] = json!([{"name": "conf", "configMap": {"name": "edge-conf"}},
                                  {"name": "cache", "emptyDir": {}}]);
    let stored = create_injected(&env, &ns, &[inst], &p, &[Language::Nginx]).await;

    let proxy = container(&stored, "proxy");
    assert_eq!(
        names(&proxy["env"]),
        env_order(&["LD_LIBRARY_PATH", "NGINX_OTEL_DEBUG", "OTEL_LOGS_EXPORTER"])
    );
    assert_eq!(
        var(proxy, "LD_LIBRARY_PATH"),
        "/opt/lib:/opt/opentelemetry-webserver/agent/sdk_lib/lib"
    );
    assert_eq!(
        proxy["volumeMounts"],
        json!([
            {"name": "cache", "mountPath": "/var/cache/nginx"},
            {"name": "otel-nginx-agent", "mountPath": "/opt/opentelemetry-webserver/agent"},
            {"name": "otel-nginx-conf-dir", "mountPath": "/etc/nginx"}
        ])
    );
    assert_eq!(
        names(&stored["spec"]["initContainers"]),
        [
            "otel-agent-source-container-clone",
            "otel-agent-attach-nginx"
        ]
    );
    let clone = init(&stored, "otel-agent-source-container-clone");
    assert_eq!(clone["image"], "nginx:1.27.0");
    assert_eq!(clone["command"], json!(["/bin/sh", "-c"]));
    assert_eq!(
        clone["args"],
        json!([agents::nginx::CLONE_SCRIPT, "--", "/etc/nginx"])
    );
    let attach = init(&stored, "otel-agent-attach-nginx");
    assert_eq!(attach["image"], agents::nginx::DEFAULT_IMAGE);
    assert_eq!(attach["command"], json!(["/bin/sh", "-c"]));
    assert_eq!(
        attach["args"],
        json!([agents::nginx::ATTACH_SCRIPT, "--", "nginx.conf"])
    );
    assert_eq!(
        names(&attach["env"]),
        [
            "OTEL_NODE_IP",
            "OTEL_POD_IP",
            "NGINX_OTEL_DEBUG",
            "OTEL_LOGS_EXPORTER",
            "OTEL_NGINX_AGENT_CONF",
            "OTEL_NGINX_SERVICE_INSTANCE_ID"
        ]
    );
    let conf = var(attach, "OTEL_NGINX_AGENT_CONF");
    for line in [
        "NginxModuleEnabled ON;\n",
        "NginxModuleOtelExporterEndpoint http://otel-collector.observability:4317;\n",
        "NginxModuleServiceName edge;\n",
        &format!("NginxModuleServiceNamespace {ns};\n"),
    ] {
        assert!(conf.contains(line), "{line:?} in {conf:?}");
    }
    assert_eq!(
        names(&stored["spec"]["volumes"]),
        ["conf", "cache", "otel-nginx-conf-dir", "otel-nginx-agent"]
    );
}

#[tokio::test]
async fn sdk_pod_gets_only_the_sdk_env() {
    let (env, ns) = setup("lang-sdk", Options::default()).await;
    let inst = env
        .instrumentation(
            &ns,
            "sdk-inst",
            json!({
                "exporter": {"endpoint": "http://otel-collector.observability:4317"},
                "propagators": ["tracecontext", "baggage", "b3"],
                "sampler": {"type": "parentbased_always_on"},
                "env": [{"name": "OTEL_EXPORTER_OTLP_PROTOCOL", "value": "grpc"}]
            }),
        )
        .await;
    let p = pod_of(
        "gateway",
        json!({INJECT_SDK: "true"}),
        json!([{"name": "app", "image": "shop/gateway:1.2",
                "env": [{"name": "RUST_LOG", "value": "info"}]}]),
    );
    let stored = create_injected(&env, &ns, &[inst], &p, &[Language::Sdk]).await;

    let app = container(&stored, "app");
    assert_eq!(
        names(&app["env"]),
        [
            "OTEL_NODE_IP",
            "OTEL_POD_IP",
            "RUST_LOG",
            "OTEL_EXPORTER_OTLP_PROTOCOL",
            "OTEL_SERVICE_NAME",
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "OTEL_RESOURCE_ATTRIBUTES_POD_NAME",
            "OTEL_RESOURCE_ATTRIBUTES_NODE_NAME",
            "OTEL_PROPAGATORS",
            "OTEL_TRACES_SAMPLER",
            "OTEL_RESOURCE_ATTRIBUTES",
        ]
    );
    assert_eq!(var(app, "OTEL_PROPAGATORS"), "tracecontext,baggage,b3");
    assert_eq!(var(app, "OTEL_TRACES_SAMPLER"), "parentbased_always_on");
    assert_eq!(var(app, "OTEL_SERVICE_NAME"), "gateway");
    assert!(app["volumeMounts"].is_null(), "{app}");
    assert!(stored["spec"]["initContainers"].is_null(), "{stored}");
    assert!(stored["spec"]["volumes"].is_null(), "{stored}");
}

#[tokio::test]
async fn java_and_python_in_one_pod_each_container_gets_only_its_agent() {
    let (env, ns) = setup("lang-multi", Options::default()).await;
    let inst = env
        .instrumentation(
            &ns,
            "all",
            spec(
                "http://otel-collector.observability:4318",
                json!({
                    "java": one_env("OTEL_INSTRUMENTATION_JDBC_ENABLED", "false"),
                    "python": one_env("OTEL_PYTHON_LOGGING_AUTO_INSTRUMENTATION_ENABLED", "true")
                }),
            ),
        )
        .await;
    let p = pod_of(
        "mixed",
        json!({
            INJECT_JAVA: "true",
            "instrumentation.opentelemetry.io/java-container-names": "api",
            INJECT_PYTHON: "true",
            "instrumentation.opentelemetry.io/python-container-names": "worker"
        }),
        json!([
            {"name": "api", "image": "shop/api:3.0", "env": [{"name": "PORT", "value": "8080"}]},
            {"name": "worker", "image": "shop/worker:3.0"}
        ]),
    );
    let stored = create_injected(&env, &ns, &[inst], &p, &[Language::Java, Language::Python]).await;

    assert_eq!(
        stored["metadata"]["annotations"][INJECTED_ANNOTATION],
        "java,python"
    );
    assert_eq!(
        names(&stored["spec"]["initContainers"]),
        [
            "opentelemetry-auto-instrumentation-java",
            "opentelemetry-auto-instrumentation-python"
        ]
    );
    assert_eq!(
        names(&stored["spec"]["volumes"]),
        [
            "opentelemetry-auto-instrumentation-java",
            "opentelemetry-auto-instrumentation-python"
        ]
    );
    let (api, worker) = (container(&stored, "api"), container(&stored, "worker"));
    assert_eq!(
        names(&api["env"]),
        env_order(&[
            "PORT",
            "OTEL_INSTRUMENTATION_JDBC_ENABLED",
            "OTEL_LOGS_EXPORTER",
            "JAVA_TOOL_OPTIONS",
        ])
    );
    assert_eq!(
        var(api, "JAVA_TOOL_OPTIONS"),
        " -javaagent:/otel-auto-instrumentation-java-api/javaagent.jar"
    );
    assert!(!has_var(api, "PYTHONPATH"), "{api}");
    assert_eq!(
        names(&api["volumeMounts"]),
        ["opentelemetry-auto-instrumentation-java"]
    );
    assert_eq!(
        names(&worker["env"]),
        env_order(&[
            "OTEL_PYTHON_LOGGING_AUTO_INSTRUMENTATION_ENABLED",
            "PYTHONPATH",
            "OTEL_LOGS_EXPORTER",
            "OTEL_EXPORTER_OTLP_PROTOCOL",
            "OTEL_TRACES_EXPORTER",
            "OTEL_METRICS_EXPORTER",
        ])
    );
    assert_eq!(
        var(worker, "PYTHONPATH"),
        "/otel-auto-instrumentation-python/opentelemetry/instrumentation/auto_instrumentation:\
         /otel-auto-instrumentation-python"
    );
    assert!(!has_var(worker, "JAVA_TOOL_OPTIONS"), "{worker}");
    assert_eq!(
        names(&worker["volumeMounts"]),
        ["opentelemetry-auto-instrumentation-python"]
    );
    // One service for the pod, one instance per container.
    for (c, name) in [(api, "api"), (worker, "worker")] {
        assert_eq!(var(c, "OTEL_SERVICE_NAME"), "mixed");
        assert!(
            var(c, "OTEL_RESOURCE_ATTRIBUTES").contains(&format!("k8s.container.name={name},")),
            "{c}"
        );
    }
}

#[tokio::test]
async fn injected_pods_pass_pod_security_restricted() {
    // PodSecurity admission runs after the mutating webhooks: it judges the injected pod.
    // An app container that meets `restricted` must still meet it with the agent's init
    // containers (which copy its securityContext) for every language but Go, whose
    // privileged sidecar cannot meet even `baseline` (Go is off by default).
    let env = Env::start("restricted").await;
    let ns = format!("{}-shop", env.id);
    api::create_namespace(
        &env.client,
        &ns,
        &[
            (SCOPE_LABEL, &env.id),
            ("pod-security.kubernetes.io/enforce", "restricted"),
        ],
        &[],
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let restricted = json!({
        "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": true, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}
    });
    // Dry runs: the marker pod must itself pass `restricted`.
    let mut marker = pod("probe", &[(INJECT_JAVA, "true")]);
    marker["spec"]["containers"][0]["securityContext"] = restricted.clone();
    env.instrumentation(&ns, "inst", endpoint_spec("http://collector.example:4317"))
        .await;
    env.until_dry_run(&ns, &marker, "injection", |r| is_injected(&r.body))
        .await;

    for lang in [
        "java",
        "nodejs",
        "python",
        "dotnet",
        "apache-httpd",
        "nginx",
        "sdk",
    ] {
        let inject = format!("instrumentation.opentelemetry.io/inject-{lang}");
        let mut p = pod(lang, &[(&inject, "true")]);
        p["spec"]["containers"][0]["securityContext"] = restricted.clone();
        let r = api::create_pod(&env.client, &ns, &p, false)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.status, 201, "{lang}: {}", r.message());
        assert!(r.warnings.is_empty(), "{lang}: {:?}", r.warnings);
        let stored = env.stored(&ns, lang).await;
        assert_eq!(stored["metadata"]["annotations"][INJECTED_ANNOTATION], lang);
    }
}

#[tokio::test]
async fn go_runs_as_a_native_sidecar_by_default_on_this_apiserver() {
    // `--go-sidecar=auto` (the default): the webhook read the API server's version (1.37)
    // at start, so the sidecar is an init container with `restartPolicy: Always`.
    let (env, ns) = setup(
        "lang-go-native",
        Options {
            args: vec!["--enabled-languages".into(), ALL_LANGUAGES.into()],
            ..Options::default()
        },
    )
    .await;
    let inst = env
        .instrumentation(&ns, "go-inst", spec("http://c:4318", json!({})))
        .await;
    let p = pod_of(
        "checkout",
        json!({INJECT_GO: "true", GO_TARGET_EXE: "/app/checkout"}),
        json!([{"name": "app", "image": "shop/checkout:1.4.2"}]),
    );
    let stored = create_injected(&env, &ns, &[inst], &p, &[Language::Go]).await;
    assert_eq!(names(&stored["spec"]["containers"]), ["app"]);
    assert_eq!(
        names(&stored["spec"]["initContainers"]),
        ["opentelemetry-auto-instrumentation"]
    );
    assert_eq!(
        stored["spec"]["initContainers"][0]["restartPolicy"],
        "Always"
    );
    assert_eq!(stored["spec"]["shareProcessNamespace"], true);
}

#[tokio::test]
async fn image_volume_delivery_is_accepted_for_every_copied_agent() {
    let (env, ns) = setup(
        "lang-image-volumes",
        Options {
            args: vec!["--agent-delivery=image-volume".into()],
            ..Options::default()
        },
    )
    .await;
    let inst = env
        .instrumentation(&ns, "inst", spec("http://c:4318", json!({})))
        .await;
    let cases = [
        (
            INJECT_JAVA,
            Language::Java,
            "opentelemetry-auto-instrumentation-java",
            None,
        ),
        (
            INJECT_NODEJS,
            Language::NodeJs,
            "opentelemetry-auto-instrumentation-nodejs",
            Some("autoinstrumentation"),
        ),
        (
            INJECT_PYTHON,
            Language::Python,
            "opentelemetry-auto-instrumentation-python",
            Some("autoinstrumentation"),
        ),
        (
            INJECT_DOTNET,
            Language::DotNet,
            "opentelemetry-auto-instrumentation-dotnet",
            Some("autoinstrumentation"),
        ),
    ];
    for (key, lang, volume, sub_path) in cases {
        let name = format!("image-{lang}");
        let p = pod_of(
            &name,
            json!({key: "true"}),
            json!([{"name": "app", "image": "shop/app:1"}]),
        );
        let stored = create_injected(&env, &ns, std::slice::from_ref(&inst), &p, &[lang]).await;
        assert!(
            stored["spec"]["initContainers"].is_null(),
            "{lang}: {stored}"
        );
        let image = &stored["spec"]["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == volume)
            .unwrap_or_else(|| panic!("{lang}: no volume {volume}: {stored}"))["image"];
        assert_eq!(
            image["reference"],
            lang.agent().default_image().unwrap(),
            "{lang}"
        );
        let mount = &container(&stored, "app")["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == volume)
            .unwrap_or_else(|| panic!("{lang}: no mount: {stored}"))
            .clone();
        assert_eq!(mount["readOnly"], true, "{lang}");
        assert_eq!(mount["subPath"].as_str(), sub_path, "{lang}");
    }
}
