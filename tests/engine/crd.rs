//! Tests of the Instrumentation types, the generated CRD and Instrumentation file parsing.

mod parse;
mod schema;
mod versions;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps,
};
use otel_injector::crd::{crd, crd_yaml};
use serde_json::Value;

/// The spec's per-language sections.
const LANGUAGE_SECTIONS: [&str; 7] = [
    "java",
    "nodejs",
    "python",
    "dotnet",
    "go",
    "apacheHttpd",
    "nginx",
];

const MANIFEST: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/manifests/crd.yaml");
/// The Helm chart's copy (Helm installs `crds/` as it is, never templated).
const CHART_CRD: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/charts/otel-injector/crds/instrumentations.yaml"
);

/// An Instrumentation in the shape of the Operator's documentation: every language section,
/// exporter with TLS, propagators, a parent-based ratio sampler, resource attributes and env.
const FULL_EXAMPLE: &str = r#"
apiVersion: opentelemetry.io/v1alpha1
kind: Instrumentation
metadata:
  name: my-instrumentation
  namespace: apps
spec:
  exporter:
    endpoint: https://otel-collector.observability:4317
    tls:
      secretName: otel-client-tls
      configMapName: otel-ca
      ca_file: ca.crt
      cert_file: tls.crt
      key_file: tls.key
  propagators:
    - tracecontext
    - baggage
    - b3
  sampler:
    type: parentbased_traceidratio
    argument: "0.25"
  resource:
    addK8sUIDAttributes: true
    resourceAttributes:
      deployment.environment: staging
      team: payments
  defaults:
    useLabelsForResourceAttributes: true
  env:
    - name: OTEL_METRICS_EXPORTER
      value: none
    - name: HOST_IP
      valueFrom:
        fieldRef:
          fieldPath: status.hostIP
  imagePullPolicy: IfNotPresent
  initContainerSecurityContext:
    runAsNonRoot: true
    runAsUser: 1000
  java:
    image: ghcr.io/open-telemetry/opentelemetry-operator/autoinstrumentation-java:2.10.0
    env:
      - name: OTEL_INSTRUMENTATION_JDBC_ENABLED
        value: "false"
    resources:
      limits:
        cpu: 500m
        memory: 256Mi
      requests:
        cpu: 50m
        memory: 64Mi
    extensions:
      - image: registry.example/java-ext:1.0
        dir: /extensions
  nodejs:
    image: registry.example/nodejs:1.0
    resourceRequirements:
      limits:
        memory: 256Mi
    volumeLimitSize: 300Mi
  python:
    image: registry.example/python:1.0
    env:
      - name: OTEL_LOGS_EXPORTER
        value: otlp
    volumeClaimTemplate:
      spec:
        accessModes:
          - ReadWriteOnce
        resources:
          requests:
            storage: 1Gi
  dotnet:
    image: registry.example/dotnet:1.0
  go:
    image: registry.example/go:1.0
    env:
      - name: OTEL_GO_AUTO_TARGET_EXE
        value: /app/server
    securityContext:
      privileged: true
      runAsUser: 0
  apacheHttpd:
    image: registry.example/apache:1.0
    version: "2.2"
    configPath: /usr/local/apache2/conf
    attrs:
      - name: ApacheModuleOtelMaxQueueSize
        value: "4096"
  nginx:
    image: registry.example/nginx:1.0
    configFile: /etc/nginx/nginx.conf
    attrs:
      - name: NginxModuleOtelMaxQueueSize
        value: "4096"
"#;

fn yaml_value(yaml: &str) -> Value {
    serde_saphyr::from_str(yaml).expect("test YAML parses")
}

fn root_schema(crd: &CustomResourceDefinition) -> &JSONSchemaProps {
    crd.spec.versions[0]
        .schema
        .as_ref()
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .expect("the CRD has a schema")
}

fn beta_schema(crd: &CustomResourceDefinition) -> &JSONSchemaProps {
    let beta = crd.spec.versions.iter().find(|v| v.name == "v1beta1");
    beta.and_then(|v| v.schema.as_ref())
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .expect("v1beta1 has a schema")
}

fn property<'a>(schema: &'a JSONSchemaProps, path: &[&str]) -> &'a JSONSchemaProps {
    path.iter().fold(schema, |s, name| {
        s.properties
            .as_ref()
            .and_then(|p| p.get(*name))
            .unwrap_or_else(|| panic!("schema property {name} of {path:?} exists"))
    })
}

/// The names of a schema node's properties, sorted.
fn property_names(schema: &JSONSchemaProps) -> Vec<&str> {
    let mut names: Vec<&str> = schema
        .properties
        .iter()
        .flatten()
        .map(|(k, _)| k.as_str())
        .collect();
    names.sort();
    names
}

/// (rule, message) pairs of a schema node.
fn rules(schema: &JSONSchemaProps) -> Vec<(String, String)> {
    schema
        .x_kubernetes_validations
        .iter()
        .flatten()
        .map(|r| (r.rule.clone(), r.message.clone().unwrap_or_default()))
        .collect()
}

#[test]
fn manifest_is_up_to_date() {
    let generated = crd_yaml();
    for path in [MANIFEST, CHART_CRD] {
        if std::env::var_os("UPDATE_CRD").is_some_and(|v| v == "1") {
            std::fs::write(path, &generated).unwrap_or_else(|e| panic!("write {path}: {e}"));
            continue;
        }
        let on_disk = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            on_disk == generated,
            "{path} is out of date; run `UPDATE_CRD=1 cargo test --test crd` (or `just crd`)"
        );
    }
}

#[test]
fn crd_yaml_has_header_and_no_document_marker() {
    let yaml = crd_yaml();
    assert!(yaml.starts_with('#'), "{yaml:.200}");
    assert!(yaml.contains("Generated by `otel-injector crd`"));
    assert!(!yaml.lines().any(|l| l.trim_end() == "---"));
    let parsed: CustomResourceDefinition = serde_saphyr::from_str(&yaml).expect("CRD YAML parses");
    assert_eq!(parsed, crd());
}
