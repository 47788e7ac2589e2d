//! Go: the privileged sidecar the API server accepts, a native sidecar by default.

use otel_injector::agents;
use otel_injector::agents::Language;
use serde_json::json;

use crate::harness::*;

use super::{
    ALL_LANGUAGES, GO_TARGET_EXE, INJECT_GO, container, create_injected, env_order, names, one_env,
    pod_of, setup, spec, var,
};

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
