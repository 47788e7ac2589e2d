//! The agents copied by an init container (Node.js, Python, .NET) and the SDK-only injection,
//! each pod stored as the engine injects it.

use otel_injector::agents;
use otel_injector::agents::Language;
use serde_json::json;

use crate::harness::*;

use super::{
    DOTNET_RUNTIME, INJECT_DOTNET, INJECT_NODEJS, INJECT_PYTHON, INJECT_SDK, PYTHON_PLATFORM,
    container, create_injected, env_order, init, names, one_env, pod_of, setup, spec, var,
};

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
