//! Several languages in one pod, exporter TLS, and pods injected before (by this webhook or
//! by the OpenTelemetry Operator).

use crate::common::{
    APACHE, GO, NGINX, SDK, assert_idempotent, catalog, disabled, env_value, lit, names, run,
    run_with,
};
use otel_injector::agents::Language;
use otel_injector::cluster::StaticCatalog;
use otel_injector::engine::{ObjectKind, SkipReason};
use otel_injector::keys::{GO_TARGET_EXE, INJECTED_ANNOTATION};
use rstest::rstest;
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
fn sdk_and_an_agent_on_different_containers() {
    let pod = json!({
        "metadata": {"name": "mixed", "annotations": {
            SDK.inject: "true",
            "instrumentation.opentelemetry.io/inject-java": "true",
            "instrumentation.opentelemetry.io/java-container-names": "jvm",
            "instrumentation.opentelemetry.io/sdk-container-names": "native"}},
        "spec": {"containers": [
            {"name": "jvm", "image": "mixed/jvm:1"},
            {"name": "native", "image": "mixed/native:2"}
        ]}
    });
    let (out, d) = run(&SDK.catalog(), &pod);
    assert_eq!(d.injected, [Language::Java, Language::Sdk]);
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
    assert_eq!(
        out["metadata"]["annotations"][INJECTED_ANNOTATION],
        "java,sdk"
    );
    let cs = &out["spec"]["containers"];
    assert_eq!(
        cs[1],
        SDK.instrumented(&pod["spec"]["containers"][1], "mixed", Some("2"))
    );
    // Only Java's init container and volume.
    let inits = out["spec"]["initContainers"].as_array().unwrap();
    assert_eq!(inits.len(), 1);
    assert_eq!(inits[0]["name"], "opentelemetry-auto-instrumentation-java");
    assert_eq!(out["spec"]["volumes"].as_array().unwrap().len(), 1);
}

/// Several languages on one pod need to know which container is whose.
#[rstest]
#[case::none_has_names(
    json!({"instrumentation.opentelemetry.io/inject-java": "true",
           "instrumentation.opentelemetry.io/inject-nodejs": "true"}),
    "otel-injector: several languages requested; set <lang>-container-names for each"
)]
#[case::some_have_names(
    json!({"instrumentation.opentelemetry.io/inject-java": "true",
           "instrumentation.opentelemetry.io/java-container-names": "api",
           "instrumentation.opentelemetry.io/inject-nodejs": "true"}),
    "otel-injector: some requested languages have container names and some not; set them for all"
)]
fn several_languages_need_container_names_for_each(
    #[case] annotations: Value,
    #[case] warning: &str,
) {
    let p = pod(annotations, two_containers());
    let (out, d) = run(&catalog(INST), &p);
    assert_eq!(out, p);
    assert_eq!(d.skipped[0].reason, SkipReason::InvalidContainerNames);
    assert_eq!(d.warnings, [warning]);
}

/// Apache and nginx would share the clone container: only Apache is injected.
#[rstest]
#[case::instrumentation_for_all(catalog(INST), pod(
    json!({
        "instrumentation.opentelemetry.io/inject-apache-httpd": "true",
        "instrumentation.opentelemetry.io/apache-httpd-container-names": "api",
        "instrumentation.opentelemetry.io/inject-nginx": "true",
        "instrumentation.opentelemetry.io/inject-nginx-container-names": "worker"
    }),
    two_containers(),
))]
#[case::nginx_instrumentation_with_an_apache_section(
    catalog(&format!("{}  apacheHttpd:\n    version: \"2.4\"\n", NGINX.shop)),
    pod(
        json!({
            "instrumentation.opentelemetry.io/inject-apache-httpd": "true",
            "instrumentation.opentelemetry.io/apache-httpd-container-names": "web",
            "instrumentation.opentelemetry.io/inject-nginx": "true",
            "instrumentation.opentelemetry.io/inject-nginx-container-names": "proxy"
        }),
        json!([{"name": "web", "image": "httpd"}, {"name": "proxy", "image": "nginx"}]),
    )
)]
fn apache_and_nginx_in_one_pod_inject_only_apache_and_say_so(
    #[case] catalog: StaticCatalog,
    #[case] p: Value,
) {
    let (out, d) = run(&catalog, &p);
    assert_eq!(d.injected, [Language::ApacheHttpd]);
    assert_eq!(
        d.skipped
            .iter()
            .map(|s| (s.language, s.reason))
            .collect::<Vec<_>>(),
        [(Some(Language::Nginx), SkipReason::NothingInstrumented)]
    );
    assert_eq!(
        d.warnings,
        [
            "nginx: apache-httpd and nginx cannot be injected into one pod (same clone container); nginx not injected"
        ]
    );
    assert_eq!(
        names(&out["spec"]["initContainers"]),
        [
            "otel-agent-source-container-clone",
            "otel-agent-attach-apache"
        ]
    );
    assert_eq!(out["spec"]["containers"][1], p["spec"]["containers"][1]);
    assert_eq!(
        out["metadata"]["annotations"][INJECTED_ANNOTATION],
        "apache-httpd"
    );
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

/// [`java_pod`] asking for Go instead.
fn go_pod() -> Value {
    pod(
        json!({"instrumentation.opentelemetry.io/inject-go": "true",
               "instrumentation.opentelemetry.io/otel-go-auto-target-exe": "/app/server"}),
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
    let p = go_pod();
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

/// `java_pod` with a container of an earlier injection added to `list`.
fn java_pod_holding(list: &str, name: &str) -> Value {
    let mut p = java_pod();
    let existing = json!({"name": name, "image": "x"});
    match p["spec"][list].as_array_mut() {
        Some(a) => a.push(existing),
        None => p["spec"][list] = json!([existing]),
    }
    p
}

/// A pod that holds a container of an earlier injection (by this webhook or the Operator,
/// say in a migration with both installed) is left alone without a word.
#[rstest]
#[case::a_java_agent_copy(
    catalog(INST),
    java_pod_holding("initContainers", "opentelemetry-auto-instrumentation-java")
)]
#[case::a_web_server_clone(
    catalog(INST),
    java_pod_holding("initContainers", "otel-agent-source-container-clone")
)]
#[case::a_go_sidecar(
    catalog(INST),
    java_pod_holding("containers", "opentelemetry-auto-instrumentation")
)]
#[case::a_go_sidecar_in_a_pod_asking_for_go(GO.catalog(), GO.pod(
    json!({GO_TARGET_EXE: "/app"}),
    json!({"containers": [{"name": "app", "image": "app"},
                          {"name": "opentelemetry-auto-instrumentation", "image": "x"}]})
))]
#[case::a_clone_in_a_pod_asking_for_apache(APACHE.catalog(), APACHE.pod(
    json!({}),
    json!({"initContainers": [{"name": "otel-agent-source-container-clone", "image": "httpd"}],
           "containers": [{"name": "web", "image": "httpd"}]})
))]
fn pods_injected_before_are_not_injected_again(#[case] catalog: StaticCatalog, #[case] p: Value) {
    let (out, d) = run(&catalog, &p);
    assert_eq!(out, p);
    assert!(d.injected.is_empty() && d.already_injected);
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
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
fn true_counts_an_unreadable_instrumentation_too() {
    // As the policies count them: two objects in the namespace, whatever their state.
    let cat = catalog(INST).with_unreadable("shop", "broken", "unknown variant `bogus`");
    let (out, d) = run(&cat, &java_pod());
    assert_eq!(out, java_pod());
    assert_eq!(d.skipped[0].reason, SkipReason::MultipleInstrumentations);
    let alone = StaticCatalog::new([]).with_unreadable("shop", "broken", "unknown variant `bogus`");
    let (_, d) = run(&alone, &java_pod());
    assert_eq!(
        d.skipped[0].reason,
        SkipReason::InstrumentationInvalid,
        "named by its flaw"
    );
}

#[test]
fn a_disabled_language_is_reported_and_does_not_block_the_others() {
    let p = pod(
        json!({"instrumentation.opentelemetry.io/inject-java": "true",
               "instrumentation.opentelemetry.io/inject-go": "true"}),
        two_containers(),
    );
    let (out, d) = run_with(&catalog(INST), &disabled(Language::Go), &p);
    assert_eq!(d.injected, [Language::Java]);
    assert_eq!(d.skipped[0].reason, SkipReason::LanguageDisabled);
    assert_eq!(
        d.warnings,
        ["inject-go: go injection is disabled on this webhook"]
    );
    assert!(env_value(&out["spec"]["containers"][0], "JAVA_TOOL_OPTIONS").is_some());
}

/// The privileged Go sidecar is not injected where the namespace enforces a Pod Security
/// level that would reject the pod.
#[rstest]
fn go_is_not_injected_where_pod_security_would_reject_the_pod(
    #[values("baseline", "restricted")] level: &str,
) {
    let p = go_pod();
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

#[test]
fn go_is_injected_where_pod_security_is_privileged() {
    let (_, d) = run(
        &catalog(INST).with_pod_security("shop", "privileged"),
        &go_pod(),
    );
    assert_eq!(d.injected, [Language::Go]);
}

/// A container list naming no container of the pod is reported with the annotation it came
/// from.
#[rstest]
#[case::nginx_list(
    json!({"instrumentation.opentelemetry.io/inject-nginx": "true",
           "instrumentation.opentelemetry.io/inject-nginx-container-names": "ghost"}),
    "inject-nginx-container-names: no container \"ghost\" in this pod; pod not injected"
)]
#[case::java_list_beside_the_common_one(
    json!({"instrumentation.opentelemetry.io/inject-java": "true",
           "instrumentation.opentelemetry.io/container-names": "api",
           "instrumentation.opentelemetry.io/java-container-names": "ghost"}),
    "java-container-names: no container \"ghost\" in this pod; pod not injected"
)]
fn a_bad_container_name_is_reported_with_the_annotation_it_came_from(
    #[case] annotations: Value,
    #[case] warning: &str,
) {
    let p = pod(annotations, two_containers());
    let (out, d) = run(&catalog(INST), &p);
    assert_eq!(out, p);
    assert_eq!(d.warnings, [warning]);
}
