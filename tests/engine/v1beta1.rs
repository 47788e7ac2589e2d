//! Injection from v1beta1 Instrumentations through the engine, with exact outputs: the
//! envConfig fields, the resource switches, the missing default image, and the declarative
//! configuration file delivered in the pod's own annotation.

use crate::common::{assert_skipped, catalog, fref, head, lit, run, run_with};
use otel_injector::agents::Language;
use otel_injector::crd::convert::to_v1alpha1;
use otel_injector::crd::{SpecHash, parse_instrumentations};
use otel_injector::engine::{EngineConfig, SkipReason};
use serde_json::{Value, json};

fn pod(inject: &str, containers: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "checkout", "namespace": "shop",
            "annotations": {format!("instrumentation.opentelemetry.io/inject-{inject}"): "true"}},
        "spec": {"containers": containers}
    })
}

fn app() -> Value {
    json!([{"name": "app", "image": "shop/checkout:1.4.2"}])
}

const ENV_CONFIG: &str = r#"
apiVersion: opentelemetry.io/v1beta1
kind: Instrumentation
metadata: {name: beta, namespace: shop}
spec:
  envConfig:
    exporter: {endpoint: "http://collector:4317", protocol: grpc}
    propagators: [tracecontext]
    env: [{name: FROM_CONFIG, value: "1"}, {name: SHARED, value: config}]
  env: [{name: SHARED, value: spec}]
  resource:
    attributes: {team: payments}
    k8sMetadata: {enabled: false}
    serviceMetadata: {enabled: false}
  java: {image: "example/java:2.33.1"}
"#;

/// envConfig.env ranks below spec.env, the protocol follows them; without k8s and service
/// metadata only the spec's attributes and the pod's annotations remain.
#[test]
fn env_config_protocol_and_the_resource_switches() {
    let (out, d) = run(&catalog(ENV_CONFIG), &pod("sdk", app()));
    assert_eq!(d.injected, [Language::Sdk]);
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
    let mut expected = head();
    expected.extend([
        lit("SHARED", "spec"),
        lit("FROM_CONFIG", "1"),
        lit("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        lit("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317"),
        fref("OTEL_RESOURCE_ATTRIBUTES_POD_NAME", "metadata.name"),
        fref("OTEL_RESOURCE_ATTRIBUTES_NODE_NAME", "spec.nodeName"),
        lit("OTEL_PROPAGATORS", "tracecontext"),
        lit("OTEL_RESOURCE_ATTRIBUTES", "team=payments"),
    ]);
    assert_eq!(out["spec"]["containers"][0]["env"], Value::Array(expected));

    // The pod's own service name still applies without service metadata.
    let mut named = pod("sdk", app());
    named["metadata"]["annotations"]["resource.opentelemetry.io/service.name"] = json!("cart");
    let (out, _) = run(&catalog(ENV_CONFIG), &named);
    let env = out["spec"]["containers"][0]["env"]
        .as_array()
        .unwrap()
        .clone();
    assert!(env.contains(&lit("OTEL_SERVICE_NAME", "cart")), "{env:?}");
}

/// v1beta1 has no default image: a language without one is skipped with the reason.
#[test]
fn a_v1beta1_language_without_an_image_is_skipped() {
    let yaml = "apiVersion: opentelemetry.io/v1beta1\nkind: Instrumentation\n\
                metadata: {name: beta, namespace: shop}\nspec: {nodejs: {env: [{name: A, value: b}]}}\n";
    let (_, d) = run(&catalog(yaml), &pod("nodejs", app()));
    assert_skipped(
        &d,
        SkipReason::ImageRequired,
        "inject-nodejs: v1beta1 Instrumentation shop/beta sets no nodejs image and v1beta1 has no default; not injected",
    );
    // The same object written as v1alpha1 gets the default image.
    let alpha = yaml.replace("v1beta1", "v1alpha1");
    let (_, d) = run(&catalog(&alpha), &pod("nodejs", app()));
    assert_eq!(d.injected, [Language::NodeJs]);
    // The SDK needs no image.
    let (_, d) = run(&catalog(yaml), &pod("sdk", app()));
    assert_eq!(d.injected, [Language::Sdk]);
}

const DECLARATIVE: &str = r#"
apiVersion: opentelemetry.io/v1beta1
kind: Instrumentation
metadata: {name: decl, namespace: shop}
spec:
  declarativeConfig:
    file_format: "1.0"
    resource:
      attributes:
        - {name: deployment.environment.name, value: staging}
        - {name: service.namespace, value: from-the-file}
    tracer_provider:
      processors:
        - batch:
            exporter:
              otlp_http: {endpoint: "http://collector:4318/v1/traces"}
  resource:
    attributes: {team: payments}
  java: {image: "example/java:2.33.1"}
  nodejs: {image: "example/nodejs:1"}
"#;

const RENDERED: &str = r#"file_format: "1.0"
resource:
  attributes:
  - name: deployment.environment.name
    value: staging
  - name: service.namespace
    value: from-the-file
  - name: k8s.container.name
    value: app
  - name: k8s.namespace.name
    value: shop
  - name: k8s.node.name
    value: ${OTEL_RESOURCE_ATTRIBUTES_NODE_NAME}
  - name: k8s.pod.name
    value: ${OTEL_RESOURCE_ATTRIBUTES_POD_NAME}
  - name: service.instance.id
    value: shop.${OTEL_RESOURCE_ATTRIBUTES_POD_NAME}.app
  - name: service.name
    value: ${OTEL_SERVICE_NAME}
  - name: service.version
    value: "1.4.2"
  - name: team
    value: payments
tracer_provider:
  processors:
  - batch:
      exporter:
        otlp_http:
          endpoint: http://collector:4318/v1/traces
"#;

/// The file travels in the pod's annotation, projected by a downwardAPI volume; the SDK
/// variables are the file's references, and no OTEL_RESOURCE_ATTRIBUTES is set.
#[test]
fn the_declarative_configuration_reaches_the_pod_without_a_write() {
    let (out, d) = run(&catalog(DECLARATIVE), &pod("java", app()));
    assert_eq!(d.injected, [Language::Java]);
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
    assert_eq!(
        out["metadata"]["annotations"]["otel-injector/sdk-config"],
        RENDERED
    );
    let c = &out["spec"]["containers"][0];
    let mut expected = head();
    expected.extend([
        lit(
            "JAVA_TOOL_OPTIONS",
            " -javaagent:/otel-auto-instrumentation-java-app/javaagent.jar",
        ),
        lit("OTEL_SERVICE_NAME", "checkout"),
        fref("OTEL_RESOURCE_ATTRIBUTES_POD_NAME", "metadata.name"),
        fref("OTEL_RESOURCE_ATTRIBUTES_NODE_NAME", "spec.nodeName"),
        lit(
            "OTEL_CONFIG_FILE",
            "/otel-injector/sdk-config/sdk-config.yaml",
        ),
    ]);
    assert_eq!(c["env"], Value::Array(expected));
    assert_eq!(
        c["volumeMounts"][1],
        json!({"name": "otel-injector-sdk-config", "mountPath": "/otel-injector/sdk-config", "readOnly": true})
    );
    assert_eq!(
        out["spec"]["volumes"][1],
        json!({"name": "otel-injector-sdk-config", "downwardAPI": {"items": [{
            "path": "sdk-config.yaml",
            "fieldRef": {"fieldPath": "metadata.annotations['otel-injector/sdk-config']"}
        }]}})
    );

    // Node.js's default agent does not read the file: skipped, unless the flag says it does.
    let (_, d) = run(&catalog(DECLARATIVE), &pod("nodejs", app()));
    assert_skipped(
        &d,
        SkipReason::DeclarativeConfigUnsupported,
        "inject-nodejs: shop/decl has a declarativeConfig, which the nodejs agent does not read; not injected",
    );
    let config = EngineConfig {
        declarative: [Language::Java, Language::NodeJs].into_iter().collect(),
        ..EngineConfig::default()
    };
    let (_, d) = run_with(&catalog(DECLARATIVE), &config, &pod("nodejs", app()));
    assert_eq!(d.injected, [Language::NodeJs]);
}

/// A Java agent released before it read OTEL_CONFIG_FILE (2.26.0) would export to its
/// default endpoint with the file ignored: the language is skipped, saying why, instead.
#[test]
fn an_agent_older_than_the_config_file_is_skipped_not_silent() {
    let with_image = |image: &str| {
        catalog(&DECLARATIVE.replace(
            "java: {image: \"example/java:2.33.1\"}",
            &format!("java: {{image: \"{image}\"}}"),
        ))
    };
    let ghcr = "ghcr.io/open-telemetry/opentelemetry-operator/autoinstrumentation-java";
    for tag in ["2.20.1", "2.25.0", "1.33.6"] {
        let (out, d) = run(&with_image(&format!("{ghcr}:{tag}")), &pod("java", app()));
        assert_skipped(
            &d,
            SkipReason::AgentPredatesConfigFile,
            &format!(
                "inject-java: agent image {tag} reads no declarativeConfig (OTEL_CONFIG_FILE); not injected"
            ),
        );
        assert_eq!(out, pod("java", app()), "nothing of the agent is added");
    }
    // From 2.26.0 on, and for images whose tag says nothing about the agent, the file goes.
    for image in [
        format!("{ghcr}:2.26.0"),
        "otel/autoinstrumentation-java:2.30.0".to_owned(),
        format!("{ghcr}:latest"),
        "registry.example/java-agent:1.0.0".to_owned(),
    ] {
        let (_, d) = run(&with_image(&image), &pod("java", app()));
        assert_eq!(d.injected, [Language::Java], "{image}");
    }
}

/// Values that differ between the instrumented containers become per-container variables.
#[test]
fn containers_share_one_file_and_keep_their_own_values() {
    let mut two = pod(
        "java",
        json!([{"name": "a", "image": "shop/a:1"}, {"name": "b", "image": "shop/b:2"}]),
    );
    two["metadata"]["annotations"]["instrumentation.opentelemetry.io/container-names"] =
        json!("a,b");
    let (out, d) = run(&catalog(DECLARATIVE), &two);
    assert_eq!(d.injected, [Language::Java]);
    let file = out["metadata"]["annotations"]["otel-injector/sdk-config"]
        .as_str()
        .unwrap();
    for line in [
        "value: ${OTEL_INJECTOR_RESOURCE_K8S_CONTAINER_NAME}",
        "value: ${OTEL_INJECTOR_RESOURCE_SERVICE_INSTANCE_ID}",
        "value: ${OTEL_INJECTOR_RESOURCE_SERVICE_VERSION}",
    ] {
        assert!(file.contains(line), "{file}");
    }
    let env = |i: usize, name: &str| {
        out["spec"]["containers"][i]["env"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == name)
            .map(|e| e["value"].clone())
    };
    assert_eq!(
        env(0, "OTEL_INJECTOR_RESOURCE_K8S_CONTAINER_NAME"),
        Some(json!("a"))
    );
    assert_eq!(
        env(1, "OTEL_INJECTOR_RESOURCE_SERVICE_INSTANCE_ID"),
        Some(json!("shop.$(OTEL_RESOURCE_ATTRIBUTES_POD_NAME).b"))
    );
    assert_eq!(
        env(1, "OTEL_INJECTOR_RESOURCE_SERVICE_VERSION"),
        Some(json!("2"))
    );
}

/// The digest pods record is of the engine's model: the same object read from its v1beta1
/// manifest or from its stored v1alpha1 form has one digest.
#[test]
fn a_conversion_alone_never_changes_the_spec_hash() {
    let beta = parse_instrumentations(DECLARATIVE).unwrap().remove(0);
    let document: Value = serde_saphyr::from_str(DECLARATIVE).unwrap();
    let stored = serde_saphyr::to_string(&to_v1alpha1(&document).unwrap()).unwrap();
    let alpha = parse_instrumentations(&stored).unwrap().remove(0);
    assert_eq!(SpecHash::of(&alpha.spec), SpecHash::of(&beta.spec));
    assert_eq!(alpha.spec, beta.spec);
    // And the v1beta1 meaning counts: the same spec without it has another digest.
    let mut plain = beta.spec.clone();
    plain.v1beta1 = None;
    assert_ne!(SpecHash::of(&plain), SpecHash::of(&beta.spec));
}

/// Two languages of one declarative Instrumentation share the pod's one file, rendered over
/// all their containers; another Instrumentation's file is refused.
#[test]
fn languages_of_one_declarative_instrumentation_share_the_file() {
    let with_python = format!("{DECLARATIVE}  python: {{image: \"example/python:1\"}}\n");
    let yaml = format!(
        "{with_python}---\n{}",
        with_python
            .replace("name: decl,", "name: other,")
            .replace("staging", "production")
    );
    let config = EngineConfig {
        declarative: [Language::Java, Language::Python].into_iter().collect(),
        ..EngineConfig::default()
    };
    let mut two = pod(
        "java",
        json!([{"name": "api", "image": "shop/api:1"}, {"name": "worker", "image": "shop/worker:2"}]),
    );
    let annotations = &mut two["metadata"]["annotations"];
    annotations["instrumentation.opentelemetry.io/inject-java"] = json!("shop/decl");
    annotations["instrumentation.opentelemetry.io/inject-python"] = json!("shop/decl");
    annotations["instrumentation.opentelemetry.io/java-container-names"] = json!("api");
    annotations["instrumentation.opentelemetry.io/python-container-names"] = json!("worker");
    let (out, d) = run_with(&catalog(&yaml), &config, &two);
    assert_eq!(
        d.injected,
        [Language::Java, Language::Python],
        "{:?}",
        d.warnings
    );
    let file = out["metadata"]["annotations"]["otel-injector/sdk-config"]
        .as_str()
        .unwrap();
    assert!(
        file.contains(
            "- name: k8s.container.name\n    value: ${OTEL_INJECTOR_RESOURCE_K8S_CONTAINER_NAME}"
        ),
        "{file}"
    );
    for (i, name) in ["api", "worker"].into_iter().enumerate() {
        let env = out["spec"]["containers"][i]["env"].as_array().unwrap();
        assert!(
            env.contains(&lit("OTEL_INJECTOR_RESOURCE_K8S_CONTAINER_NAME", name)),
            "{env:?}"
        );
        assert!(env.contains(&lit(
            "OTEL_CONFIG_FILE",
            "/otel-injector/sdk-config/sdk-config.yaml"
        )));
    }

    // Python from another declarative Instrumentation: one file per pod.
    two["metadata"]["annotations"]["instrumentation.opentelemetry.io/inject-python"] =
        json!("shop/other");
    let (_, d) = run_with(&catalog(&yaml), &config, &two);
    assert_eq!(d.injected, [Language::Java]);
    assert_eq!(d.skipped[0].reason, SkipReason::NameCollision);
    assert_eq!(
        d.warnings,
        [
            "inject-python: the pod already gets the SDK configuration file of shop/decl; not injected"
        ]
    );
}

/// The file is bounded by itself and with the pod's annotations (Kubernetes' 256 KiB).
#[test]
fn a_file_over_its_bounds_is_a_skip_not_an_invalid_pod() {
    let mut crowded = pod("java", app());
    crowded["metadata"]["annotations"]["example.com/notes"] = json!("x".repeat(255 * 1024));
    let (_, d) = run(&catalog(DECLARATIVE), &crowded);
    assert!(d.injected.is_empty());
    assert_eq!(d.skipped[0].reason, SkipReason::DeclarativeConfigTooLarge);
    assert!(
        d.warnings[0].starts_with("inject-java: pod annotations ("),
        "{:?}",
        d.warnings
    );

    let huge = DECLARATIVE.replace(
        "value: staging",
        &format!("value: {}", "y".repeat(70 * 1024)),
    );
    let (_, d) = run(&catalog(&huge), &pod("java", app()));
    assert!(d.injected.is_empty());
    assert_eq!(d.skipped[0].reason, SkipReason::DeclarativeConfigTooLarge);
    assert!(
        d.warnings[0].starts_with("inject-java: the rendered SDK configuration is "),
        "{:?}",
        d.warnings
    );
}
