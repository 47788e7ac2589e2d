//! Reading Instrumentation YAML: the full example, round trips, multi-document files, the
//! v1beta1 form read into the stored version, and the documents that are rejected.

use otel_injector::crd::{CrdError, LanguageSpec, Propagator, SamplerType, parse_instrumentations};

use super::{FULL_EXAMPLE, yaml_value};

#[test]
fn full_example_parses() {
    let parsed = parse_instrumentations(FULL_EXAMPLE).expect("example parses");
    assert_eq!(parsed.len(), 1);
    let inst = &parsed[0];
    assert_eq!(inst.metadata.name.as_deref(), Some("my-instrumentation"));
    assert_eq!(inst.metadata.namespace.as_deref(), Some("apps"));
    let spec = &inst.spec;

    let exporter = spec.exporter.as_ref().expect("exporter");
    assert_eq!(
        exporter.endpoint.as_deref(),
        Some("https://otel-collector.observability:4317")
    );
    let tls = exporter.tls.as_ref().expect("tls");
    assert_eq!(tls.secret_name.as_deref(), Some("otel-client-tls"));
    assert_eq!(tls.config_map_name.as_deref(), Some("otel-ca"));
    assert_eq!(tls.ca_file.as_deref(), Some("ca.crt"));
    assert_eq!(tls.cert_file.as_deref(), Some("tls.crt"));
    assert_eq!(tls.key_file.as_deref(), Some("tls.key"));

    assert_eq!(
        spec.propagators,
        [
            Propagator::TraceContext,
            Propagator::Baggage,
            Propagator::B3
        ]
    );
    let sampler = spec.sampler.as_ref().expect("sampler");
    assert_eq!(sampler.type_, Some(SamplerType::ParentBasedTraceIdRatio));
    assert_eq!(sampler.argument.as_deref(), Some("0.25"));

    let resource = spec.resource.as_ref().expect("resource");
    assert_eq!(resource.add_k8s_uid_attributes, Some(true));
    assert_eq!(resource.resource_attributes["team"], "payments");
    assert_eq!(
        spec.defaults
            .as_ref()
            .and_then(|d| d.use_labels_for_resource_attributes),
        Some(true)
    );
    assert_eq!(spec.env.len(), 2);
    assert_eq!(spec.image_pull_policy.as_deref(), Some("IfNotPresent"));
    assert!(spec.init_container_security_context.is_some());

    let java = spec.java.as_ref().expect("java");
    assert_eq!(java.extensions[0].dir, "/extensions");
    assert_eq!(
        java.resources()
            .and_then(|r| r.limits.as_ref())
            .map(|l| l["cpu"].0.as_str()),
        Some("500m")
    );
    let nodejs = spec.nodejs.as_ref().expect("nodejs");
    assert!(nodejs.resources().is_some(), "resourceRequirements is read");
    assert_eq!(
        nodejs.volume_limit_size().map(|q| q.0.as_str()),
        Some("300Mi")
    );
    let python = spec.python.as_ref().expect("python");
    assert!(python.volume_claim_template().is_some());
    assert_eq!(python.env()[0].name, "OTEL_LOGS_EXPORTER");
    assert_eq!(
        spec.dotnet.as_ref().and_then(|d| d.image()),
        Some("registry.example/dotnet:1.0")
    );
    let go = spec.go.as_ref().expect("go");
    assert_eq!(
        go.security_context.as_ref().and_then(|s| s.privileged),
        Some(true)
    );
    let apache = spec.apache_httpd.as_ref().expect("apacheHttpd");
    assert_eq!(apache.version.as_deref(), Some("2.2"));
    assert_eq!(
        apache.config_path.as_deref(),
        Some("/usr/local/apache2/conf")
    );
    assert_eq!(apache.attrs[0].value.as_deref(), Some("4096"));
    let nginx = spec.nginx.as_ref().expect("nginx");
    assert_eq!(nginx.config_file.as_deref(), Some("/etc/nginx/nginx.conf"));
    assert_eq!(nginx.attrs[0].name, "NginxModuleOtelMaxQueueSize");
}

#[test]
fn full_example_round_trips() {
    let parsed = parse_instrumentations(FULL_EXAMPLE).expect("example parses");
    let serialized = serde_json::to_value(&parsed[0]).expect("serializes");
    assert_eq!(serialized, yaml_value(FULL_EXAMPLE));

    let yaml = serde_saphyr::to_string(&parsed[0]).expect("renders as YAML");
    let reparsed = parse_instrumentations(&yaml).expect("rendered YAML parses");
    assert_eq!(reparsed, parsed);
}

#[test]
fn operator_stored_object_round_trips() {
    // What the Operator's defaulting webhook leaves in the apiserver: defaulted resources and
    // an empty volumeClaimTemplate next to volumeLimitSize, plus empty sections.
    let yaml = r#"
apiVersion: opentelemetry.io/v1alpha1
kind: Instrumentation
metadata:
  name: defaulted
  namespace: default
  annotations:
    instrumentation.opentelemetry.io/default-auto-instrumentation-java-image: java:1
spec:
  exporter: {}
  resource: {}
  sampler: {}
  defaults: {}
  java:
    image: java:1
    resources:
      limits: {cpu: 500m, memory: 256Mi}
      requests: {cpu: 50m, memory: 64Mi}
    volumeClaimTemplate:
      metadata: {}
      spec:
        resources: {}
    volumeLimitSize: 200Mi
status:
  upgradeBlockedVersions:
    java: "version is not upgradable"
"#;
    let parsed = parse_instrumentations(yaml).expect("parses");
    let inst = &parsed[0];
    let java = inst.spec.java.as_ref().expect("java");
    assert!(java.volume_claim_template.is_some(), "kept for round trips");
    assert!(
        java.volume_claim_template().is_none(),
        "an empty template counts as unset"
    );
    assert_eq!(
        inst.status
            .as_ref()
            .map(|s| s.upgrade_blocked_versions.len()),
        Some(1)
    );
    assert_eq!(
        serde_json::to_value(inst).expect("serializes"),
        yaml_value(yaml)
    );
}

#[test]
fn multi_document_files() {
    let yaml = r#"
---
apiVersion: opentelemetry.io/v1alpha1
kind: Instrumentation
metadata:
  name: first
  namespace: team-a
spec:
  sampler:
    type: always_on
---
---
# only a comment
---
apiVersion: opentelemetry.io/v1alpha1
kind: Instrumentation
metadata:
  name: second
---
apiVersion: opentelemetry.io/v1alpha1
kind: Instrumentation
metadata:
  name: third
  namespace: ""
spec: ~
"#;
    let parsed = parse_instrumentations(yaml).expect("parses");
    let names: Vec<_> = parsed
        .iter()
        .map(|i| {
            (
                i.metadata.name.as_deref().unwrap_or_default(),
                i.metadata.namespace.as_deref().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        names,
        [
            ("first", "team-a"),
            ("second", "default"),
            ("third", "default")
        ]
    );
    assert_eq!(parsed[1].spec, Default::default(), "missing spec is empty");
    assert_eq!(parse_instrumentations("").expect("empty file").len(), 0);
}

#[test]
fn wrong_kind_names_the_document() {
    let yaml = r#"
apiVersion: opentelemetry.io/v1alpha1
kind: Instrumentation
metadata:
  name: ok
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: not-me
"#;
    let err = parse_instrumentations(yaml).expect_err("a ConfigMap is rejected");
    assert!(
        matches!(&err, CrdError::WrongKind { index: 2, api_version, kind, .. }
            if api_version == "v1" && kind == "ConfigMap"),
        "{err:?}"
    );
    let message = err.to_string();
    assert!(message.contains("document 2"), "{message}");
    assert!(
        message.contains("opentelemetry.io/v1alpha1") && message.contains("Instrumentation"),
        "{message}"
    );

    let other_version =
        "apiVersion: opentelemetry.io/v2\nkind: Instrumentation\nmetadata: {name: x}\n";
    assert!(matches!(
        parse_instrumentations(other_version),
        Err(CrdError::WrongKind { index: 1, .. })
    ));
}

/// v1beta1 documents are read as the API server would store them: converted, their
/// v1beta1 fields carried; a field of the wrong type names the document.
#[test]
fn v1beta1_documents_are_read_into_the_stored_version() {
    let yaml = r#"
apiVersion: opentelemetry.io/v1beta1
kind: Instrumentation
metadata: {name: beta, namespace: apps}
spec:
  envConfig:
    exporter: {endpoint: "http://collector:4318", protocol: http/protobuf}
    env: [{name: FROM_CONFIG, value: "1"}]
  resource:
    attributes: {team: payments}
    k8sMetadata: {enabled: false, includeUIDs: true}
  java: {image: "example/java:1"}
---
apiVersion: opentelemetry.io/v1alpha1
kind: Instrumentation
metadata: {name: alpha}
spec: {java: {}}
"#;
    let items = parse_instrumentations(yaml).unwrap();
    let beta = &items[0];
    assert_eq!(
        beta.spec.exporter.as_ref().unwrap().endpoint.as_deref(),
        Some("http://collector:4318")
    );
    assert_eq!(
        beta.spec.resource.as_ref().unwrap().add_k8s_uid_attributes,
        Some(true)
    );
    let carried = beta.spec.v1beta1.as_deref().expect("v1beta1 fields");
    assert!(!carried.default_images);
    assert!(!carried.k8s_metadata);
    assert!(carried.service_metadata);
    assert_eq!(
        carried.protocol,
        Some(otel_injector::crd::v1beta1::Protocol::HttpProtobuf)
    );
    assert_eq!(carried.env[0].name, "FROM_CONFIG");
    assert!(!beta.default_images());
    assert!(items[1].spec.v1beta1.is_none());
    assert!(items[1].default_images());

    let bad = "apiVersion: opentelemetry.io/v1beta1\nkind: Instrumentation\nmetadata: {name: x}\nspec:\n  envConfig: {exporter: {protocol: udp}}\n";
    let err = parse_instrumentations(bad).unwrap_err();
    assert!(
        matches!(
            &err,
            CrdError::InvalidV1beta1 {
                index: 1,
                line: 1,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("udp"), "{err}");
}

#[test]
fn missing_name_is_rejected() {
    let yaml =
        "apiVersion: opentelemetry.io/v1alpha1\nkind: Instrumentation\nmetadata:\n  namespace: a\n";
    let err = parse_instrumentations(yaml).expect_err("no name");
    assert!(
        matches!(err, CrdError::MissingName { index: 1, .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("metadata.name"), "{err}");

    let no_metadata = "apiVersion: opentelemetry.io/v1alpha1\nkind: Instrumentation\n";
    assert!(matches!(
        parse_instrumentations(no_metadata),
        Err(CrdError::MissingName { .. })
    ));
}

#[test]
fn invalid_documents_are_rejected() {
    let bad_enum = "apiVersion: opentelemetry.io/v1alpha1\nkind: Instrumentation\nmetadata: {name: x}\nspec:\n  sampler:\n    type: probabilistic\n";
    let err = parse_instrumentations(bad_enum).expect_err("unknown sampler");
    assert!(matches!(err, CrdError::Invalid { index: 1, .. }), "{err:?}");
    assert!(err.to_string().contains("probabilistic"), "{err}");

    let second_bad = format!("{bad_enum}---\n{bad_enum}").replacen("probabilistic", "always_on", 1);
    let err = parse_instrumentations(&second_bad).expect_err("second document is invalid");
    assert!(matches!(err, CrdError::Invalid { index: 2, .. }), "{err:?}");
    assert!(err.to_string().contains("line 13"), "{err}");

    let scalar = "just a string\n";
    assert!(matches!(
        parse_instrumentations(scalar),
        Err(CrdError::NotAnObject { index: 1, .. })
    ));

    let broken = "apiVersion: [unclosed\n";
    assert!(matches!(
        parse_instrumentations(broken),
        Err(CrdError::Yaml(_))
    ));
}
