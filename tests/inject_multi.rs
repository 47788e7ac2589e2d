//! Several languages in one pod, exporter TLS, and pods injected before (by this webhook or
//! by the OpenTelemetry Operator).

mod common;

use common::{assert_idempotent, catalog, env_value, lit, names, run};
use otel_injector::agents::Language;
use otel_injector::engine::{INJECTED_ANNOTATION, ObjectKind, SkipReason};
use serde_json::{Value, json};

const INST: &str = r#"
apiVersion: opentelemetry.io/v1alpha1
kind: Instrumentation
metadata:
  name: all
  namespace: shop
spec:
  exporter:
    endpoint: https://collector.observability:4318
"#;

fn pod(annotations: Value, containers: Value) -> Value {
    json!({"metadata": {"name": "p", "annotations": annotations}, "spec": {"containers": containers}})
}

fn two_containers() -> Value {
    json!([{"name": "api", "image": "api:1"}, {"name": "worker", "image": "worker:1"}])
}

#[test]
fn java_and_python_each_with_their_own_containers() {
    let p = pod(
        json!({
            "instrumentation.opentelemetry.io/inject-java": "true",
            "instrumentation.opentelemetry.io/java-container-names": "api",
            "instrumentation.opentelemetry.io/inject-python": "true",
            "instrumentation.opentelemetry.io/python-container-names": "worker"
        }),
        two_containers(),
    );
    let cat = catalog(INST);
    let (out, d) = run(&cat, &p);
    assert_eq!(d.injected, [Language::Java, Language::Python]);
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
    assert_eq!(
        out["metadata"]["annotations"][INJECTED_ANNOTATION],
        "java,python"
    );
    assert_eq!(
        names(&out["spec"]["initContainers"]),
        [
            "opentelemetry-auto-instrumentation-java",
            "opentelemetry-auto-instrumentation-python"
        ]
    );
    assert_eq!(
        names(&out["spec"]["volumes"]),
        [
            "opentelemetry-auto-instrumentation-java",
            "opentelemetry-auto-instrumentation-python"
        ]
    );
    let (api, worker) = (&out["spec"]["containers"][0], &out["spec"]["containers"][1]);
    assert!(env_value(api, "JAVA_TOOL_OPTIONS").is_some());
    assert!(env_value(api, "PYTHONPATH").is_none());
    assert!(env_value(worker, "PYTHONPATH").is_some());
    assert!(env_value(worker, "JAVA_TOOL_OPTIONS").is_none());
    assert_eq!(env_value(api, "OTEL_SERVICE_NAME"), Some(&json!("p")));
    assert_idempotent(&cat, &out);
}

#[test]
fn the_same_container_can_get_two_languages_without_duplicate_env() {
    let p = pod(
        json!({
            "instrumentation.opentelemetry.io/inject-java": "true",
            "instrumentation.opentelemetry.io/inject-sdk": "true",
            "instrumentation.opentelemetry.io/container-names": "api"
        }),
        two_containers(),
    );
    let cat = catalog(INST);
    let (out, d) = run(&cat, &p);
    assert_eq!(d.injected, [Language::Java, Language::Sdk]);
    let env = out["spec"]["containers"][0]["env"]
        .as_array()
        .unwrap()
        .clone();
    let mut seen: Vec<&str> = env.iter().map(|e| e["name"].as_str().unwrap()).collect();
    let n = seen.len();
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(seen.len(), n, "duplicate variables in {env:?}");
    assert_eq!(env.last().unwrap()["name"], "OTEL_RESOURCE_ATTRIBUTES");
    assert_eq!(out["spec"]["containers"][1], p["spec"]["containers"][1]);
    assert_idempotent(&cat, &out);
}

#[test]
fn several_languages_need_container_names_for_each() {
    let cat = catalog(INST);
    let none = pod(
        json!({"instrumentation.opentelemetry.io/inject-java": "true",
               "instrumentation.opentelemetry.io/inject-nodejs": "true"}),
        two_containers(),
    );
    let (out, d) = run(&cat, &none);
    assert_eq!(out, none);
    assert_eq!(d.skipped[0].reason, SkipReason::InvalidContainerNames);
    assert_eq!(
        d.warnings,
        ["otel-injector: several languages requested; set <lang>-container-names for each"]
    );

    let mixed = pod(
        json!({"instrumentation.opentelemetry.io/inject-java": "true",
               "instrumentation.opentelemetry.io/java-container-names": "api",
               "instrumentation.opentelemetry.io/inject-nodejs": "true"}),
        two_containers(),
    );
    let (out, d) = run(&cat, &mixed);
    assert_eq!(out, mixed);
    assert_eq!(
        d.warnings,
        [
            "otel-injector: some requested languages have container names and some not; set them for all"
        ]
    );
}

#[test]
fn apache_and_nginx_in_one_pod_inject_only_apache_and_say_so() {
    let p = pod(
        json!({
            "instrumentation.opentelemetry.io/inject-apache-httpd": "true",
            "instrumentation.opentelemetry.io/apache-httpd-container-names": "api",
            "instrumentation.opentelemetry.io/inject-nginx": "true",
            "instrumentation.opentelemetry.io/inject-nginx-container-names": "worker"
        }),
        two_containers(),
    );
    let (out, d) = run(&catalog(INST), &p);
    assert_eq!(d.injected, [Language::ApacheHttpd]);
    assert_eq!(d.warnings.len(), 1, "{:?}", d.warnings);
    assert!(d.warnings[0].starts_with("nginx:"), "{:?}", d.warnings);
    assert_eq!(out["spec"]["containers"][1], p["spec"]["containers"][1]);
}

const TLS: &str = r#"
apiVersion: opentelemetry.io/v1alpha1
kind: Instrumentation
metadata:
  name: tls
  namespace: shop
spec:
  exporter:
    endpoint: https://collector.observability:4318
    tls:
      secretName: otel-client-tls
      configMapName: otel-ca
      ca_file: ca.crt
      cert_file: tls.crt
      key_file: /etc/absolute/tls.key
"#;

fn java_pod() -> Value {
    pod(
        json!({"instrumentation.opentelemetry.io/inject-java": "true"}),
        json!([{"name": "app", "image": "app:1"}]),
    )
}

#[test]
fn exporter_tls_mounts_the_secret_and_config_map_and_points_the_sdk_at_them() {
    let cat = catalog(TLS).with_objects(&[
        (ObjectKind::Secret, "shop", "otel-client-tls"),
        (ObjectKind::ConfigMap, "shop", "otel-ca"),
    ]);
    let (out, d) = run(&cat, &java_pod());
    assert_eq!(d.injected, [Language::Java]);
    let app = &out["spec"]["containers"][0];
    let env = app["env"].as_array().unwrap();
    let at = |n: &str| env.iter().position(|e| e["name"] == n).unwrap();
    // Right after the endpoint, in the Operator's order.
    assert_eq!(
        at("OTEL_EXPORTER_OTLP_CERTIFICATE"),
        at("OTEL_EXPORTER_OTLP_ENDPOINT") + 1
    );
    assert_eq!(
        &env[at("OTEL_EXPORTER_OTLP_CERTIFICATE")..=at("OTEL_EXPORTER_OTLP_CLIENT_KEY")],
        [
            lit(
                "OTEL_EXPORTER_OTLP_CERTIFICATE",
                "/otel-auto-instrumentation-configmap-otel-ca/ca.crt"
            ),
            lit(
                "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
                "/otel-auto-instrumentation-secret-otel-client-tls/tls.crt"
            ),
            lit("OTEL_EXPORTER_OTLP_CLIENT_KEY", "/etc/absolute/tls.key"),
        ]
    );
    assert_eq!(
        app["volumeMounts"],
        json!([
            {"name": "opentelemetry-auto-instrumentation-java", "mountPath": "/otel-auto-instrumentation-java-app"},
            {"name": "otel-auto-secret-otel-client-tls", "mountPath": "/otel-auto-instrumentation-secret-otel-client-tls", "readOnly": true},
            {"name": "otel-auto-configmap-otel-ca", "mountPath": "/otel-auto-instrumentation-configmap-otel-ca", "readOnly": true}
        ])
    );
    assert_eq!(
        out["spec"]["volumes"],
        json!([
            {"name": "opentelemetry-auto-instrumentation-java", "emptyDir": {"sizeLimit": "200Mi"}},
            {"name": "otel-auto-secret-otel-client-tls", "secret": {"secretName": "otel-client-tls"}},
            {"name": "otel-auto-configmap-otel-ca", "configMap": {"name": "otel-ca"}}
        ])
    );
    assert_idempotent(&cat, &out);
}

#[test]
fn a_missing_exporter_tls_secret_is_reported_and_that_language_skipped() {
    let cat = catalog(TLS).with_objects(&[(ObjectKind::ConfigMap, "shop", "otel-ca")]);
    let (out, d) = run(&cat, &java_pod());
    assert_eq!(out, java_pod());
    assert_eq!(d.skipped[0].reason, SkipReason::ExporterTlsMissing);
    assert_eq!(
        d.warnings,
        [
            "inject-java: exporter TLS Secret \"otel-client-tls\" not found in namespace \"shop\"; not injected"
        ]
    );
    // Untracked (--verify-exporter-tls=false): injected without the check.
    let (_, d) = run(&catalog(TLS), &java_pod());
    assert_eq!(d.injected, [Language::Java]);
}

#[test]
fn the_go_sidecar_gets_the_exporter_tls_mounts() {
    let mut p = java_pod();
    p["metadata"]["annotations"] = json!({
        "instrumentation.opentelemetry.io/inject-go": "true",
        "instrumentation.opentelemetry.io/otel-go-auto-target-exe": "/app/server"
    });
    let (out, d) = run(&catalog(TLS), &p);
    assert_eq!(d.injected, [Language::Go]);
    let sidecar = &out["spec"]["containers"][1];
    assert_eq!(sidecar["name"], "opentelemetry-auto-instrumentation");
    assert_eq!(
        names(&sidecar["volumeMounts"]),
        [
            "kernel-debug",
            "otel-auto-secret-otel-client-tls",
            "otel-auto-configmap-otel-ca"
        ]
    );
    assert_eq!(out["spec"]["containers"][0], p["spec"]["containers"][0]);
}

#[test]
fn pods_injected_by_the_operator_are_not_injected_again() {
    let cat = catalog(INST);
    for (list, name) in [
        ("initContainers", "opentelemetry-auto-instrumentation-java"),
        ("initContainers", "otel-agent-source-container-clone"),
        ("containers", "opentelemetry-auto-instrumentation"),
    ] {
        let mut p = java_pod();
        let existing = json!({"name": name, "image": "x"});
        match p["spec"][list].as_array_mut() {
            Some(a) => a.push(existing),
            None => p["spec"][list] = json!([existing]),
        }
        let (out, d) = run(&cat, &p);
        assert_eq!(out, p, "{name}");
        assert!(d.already_injected && d.warnings.is_empty(), "{name}");
    }
}

#[test]
fn an_unreadable_instrumentation_is_named_in_the_warning() {
    let cat = catalog(INST).with_unreadable("shop", "broken", "unknown variant `bogus`");
    let mut p = java_pod();
    p["metadata"]["annotations"]["instrumentation.opentelemetry.io/inject-java"] = json!("broken");
    let (out, d) = run(&cat, &p);
    assert_eq!(out, p);
    assert_eq!(d.skipped[0].reason, SkipReason::InstrumentationInvalid);
    assert_eq!(
        d.warnings,
        [
            "inject-java: Instrumentation \"shop/broken\" cannot be read (unknown variant `bogus`); not injected"
        ]
    );
}

#[test]
fn a_disabled_language_is_reported_and_does_not_block_the_others() {
    let mut config = otel_injector::engine::EngineConfig::default();
    config.enabled.remove(Language::Go);
    let p = pod(
        json!({"instrumentation.opentelemetry.io/inject-java": "true",
               "instrumentation.opentelemetry.io/inject-go": "true"}),
        two_containers(),
    );
    let (out, d) = common::run_with(&catalog(INST), &config, &p);
    assert_eq!(d.injected, [Language::Java]);
    assert_eq!(d.skipped[0].reason, SkipReason::LanguageDisabled);
    assert_eq!(
        d.warnings,
        ["inject-go: go injection is disabled on this webhook"]
    );
    assert!(env_value(&out["spec"]["containers"][0], "JAVA_TOOL_OPTIONS").is_some());
}

#[test]
fn go_is_not_injected_where_pod_security_would_reject_the_pod() {
    let mut p = java_pod();
    p["metadata"]["annotations"] = json!({
        "instrumentation.opentelemetry.io/inject-go": "true",
        "instrumentation.opentelemetry.io/otel-go-auto-target-exe": "/app/server"
    });
    for level in ["baseline", "restricted"] {
        let (out, d) = run(&catalog(INST).with_pod_security("shop", level), &p);
        assert_eq!(out, p, "{level}");
        assert_eq!(d.skipped[0].reason, SkipReason::PodSecurity);
        assert_eq!(
            d.warnings,
            [format!(
                "inject-go: namespace enforces Pod Security \"{level}\", which rejects the privileged go agent; not injected"
            )]
        );
    }
    let (_, d) = run(&catalog(INST).with_pod_security("shop", "privileged"), &p);
    assert_eq!(d.injected, [Language::Go]);
}

#[test]
fn a_bad_container_name_is_reported_with_the_annotation_it_came_from() {
    let cat = catalog(INST);
    let p = pod(
        json!({"instrumentation.opentelemetry.io/inject-nginx": "true",
               "instrumentation.opentelemetry.io/inject-nginx-container-names": "ghost"}),
        two_containers(),
    );
    let (out, d) = run(&cat, &p);
    assert_eq!(out, p);
    assert_eq!(
        d.warnings,
        ["inject-nginx-container-names: no container \"ghost\" in this pod; pod not injected"]
    );
    let p = pod(
        json!({"instrumentation.opentelemetry.io/inject-java": "true",
               "instrumentation.opentelemetry.io/container-names": "api",
               "instrumentation.opentelemetry.io/java-container-names": "ghost"}),
        two_containers(),
    );
    let (_, d) = run(&cat, &p);
    assert_eq!(
        d.warnings,
        ["java-container-names: no container \"ghost\" in this pod; pod not injected"]
    );
}
