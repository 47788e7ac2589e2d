//! Across languages: two agents in one pod, Pod Security `restricted`, and the image volume
//! delivery of every copied agent.

use otel_injector::agents::Language;
use otel_injector::keys::{
    INJECT_DOTNET, INJECT_JAVA, INJECT_NODEJS, INJECT_PYTHON, INJECTED_ANNOTATION,
};
use serde_json::json;

use crate::harness::*;
use crate::support::api;

use super::{
    container, create_injected, env_order, has_var, names, one_env, pod_of, setup, spec, var,
};

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
            lang.names().default_image.unwrap(),
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
