//! Tests of the Instrumentation types, the generated CRD and Instrumentation file parsing.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps,
};
use otel_injector::crd::v1beta1::{MSG_CONFIG_EXCLUSIVE, RULE_CONFIG_EXCLUSIVE};
use otel_injector::crd::{
    CrdError, Instrumentation, LanguageSpec, MSG_JAEGER_REMOTE_ARGUMENT, MSG_RATIO_ARGUMENT,
    MSG_VOLUME_EXCLUSIVE, Propagator, QUANTITY_PATTERN, RULE_JAEGER_REMOTE_ARGUMENT,
    RULE_RATIO_ARGUMENT, RULE_VOLUME_EXCLUSIVE, SamplerType, crd, crd_yaml, parse_instrumentations,
};
use serde_json::{Value, json};

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

#[test]
fn crd_names_and_subresources() {
    let crd = crd();
    assert_eq!(
        crd.metadata.name.as_deref(),
        Some("instrumentations.opentelemetry.io")
    );
    assert_eq!(crd.spec.group, "opentelemetry.io");
    assert_eq!(crd.spec.scope, "Namespaced");
    assert_eq!(crd.spec.names.kind, "Instrumentation");
    assert_eq!(crd.spec.names.plural, "instrumentations");
    assert_eq!(
        crd.spec.names.short_names.as_deref(),
        Some(&["otelinst".to_owned(), "otelinsts".to_owned()][..])
    );
    let version = &crd.spec.versions[0];
    assert_eq!(version.name, "v1alpha1");
    assert!(version.served && version.storage);
    assert!(
        version
            .subresources
            .as_ref()
            .and_then(|s| s.status.as_ref())
            .is_some(),
        "status subresource"
    );
    let columns: Vec<_> = version
        .additional_printer_columns
        .iter()
        .flatten()
        .map(|c| (c.name.as_str(), c.json_path.as_str()))
        .collect();
    assert_eq!(
        columns,
        [
            ("Age", ".metadata.creationTimestamp"),
            ("Endpoint", ".spec.exporter.endpoint"),
            ("Sampler", ".spec.sampler.type"),
            ("Sampler Arg", ".spec.sampler.argument"),
            ("Injected", ".status.injected"),
            ("Outdated", ".status.outdated"),
            ("Skipped", ".status.skipped"),
            ("Missed", ".status.missed"),
            ("Failing", ".status.failing"),
            ("Rolled Back", ".status.rolledBack[*].name"),
        ]
    );
    // The status controller's counts are integers, and the rolled-back workloads' names a
    // string, shown by `kubectl get` without `-o wide`.
    let columns: Vec<_> = version
        .additional_printer_columns
        .iter()
        .flatten()
        .collect();
    for c in &columns[4..] {
        let want = if c.name == "Rolled Back" {
            "string"
        } else {
            "integer"
        };
        assert_eq!((c.type_.as_str(), c.priority), (want, None), "{}", c.name);
    }
}

#[test]
fn crd_schema_matches_the_operator() {
    let crd = crd();
    let root = root_schema(&crd);
    assert!(
        root.required.iter().flatten().all(|r| r != "spec"),
        "spec is optional"
    );
    let spec = property(root, &["spec"]);
    assert_eq!(spec.default.as_ref().map(|d| &d.0), Some(&json!({})));
    for field in [
        "exporter",
        "propagators",
        "sampler",
        "resource",
        "env",
        "defaults",
        "imagePullPolicy",
        "initContainerSecurityContext",
    ]
    .into_iter()
    .chain(LANGUAGE_SECTIONS)
    {
        property(spec, &[field]);
    }
    for field in [
        "secretName",
        "configMapName",
        "ca_file",
        "cert_file",
        "key_file",
    ] {
        property(spec, &["exporter", "tls", field]);
    }
    property(spec, &["resource", "resourceAttributes"]);
    property(spec, &["resource", "addK8sUIDAttributes"]);
    property(spec, &["java", "resources"]);
    property(spec, &["java", "extensions"]);
    property(spec, &["nodejs", "resourceRequirements"]);
    property(spec, &["go", "securityContext"]);
    property(root, &["status", "upgradeBlockedVersions"]);
    // The status controller's fields (the Operator has none of them).
    for field in [
        "injected",
        "outdated",
        "skipped",
        "skippedReasons",
        "workloads",
        "workloadsOmitted",
        "specHash",
        "observedGeneration",
        "lastChangeTime",
        "conditions",
    ] {
        property(root, &["status", field]);
    }
    let conditions = property(root, &["status", "conditions"]);
    assert_eq!(
        conditions.x_kubernetes_list_map_keys.as_deref(),
        Some(&["type".to_owned()][..])
    );
    assert_eq!(conditions.x_kubernetes_list_type.as_deref(), Some("map"));
    // The automatic rollout's own block (field manager otel-injector-rollout).
    let rollout = property(root, &["status", "rollout"]);
    let mut required = rollout.required.clone().unwrap_or_default();
    required.sort();
    assert_eq!(required, ["specHash", "state"]);
    let fields = property_names(rollout);
    assert_eq!(
        fields,
        [
            "lastTransitionTime",
            "message",
            "pending",
            "reason",
            "restarted",
            "restartedCount",
            "specHash",
            "state",
            "workload"
        ]
    );

    let enum_values = |s: &JSONSchemaProps| -> Vec<Value> {
        s.enum_.iter().flatten().map(|v| v.0.clone()).collect()
    };
    let propagators = match &property(spec, &["propagators"]).items {
        Some(
            k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaPropsOrArray::Schema(items),
        ) => enum_values(items),
        other => panic!("propagators items: {other:?}"),
    };
    assert_eq!(
        propagators,
        json!([
            "tracecontext",
            "baggage",
            "b3",
            "b3multi",
            "jaeger",
            "xray",
            "ottrace",
            "none"
        ])
        .as_array()
        .cloned()
        .unwrap_or_default()
    );
    assert_eq!(
        enum_values(property(spec, &["sampler", "type"])),
        json!([
            "always_on",
            "always_off",
            "traceidratio",
            "parentbased_always_on",
            "parentbased_always_off",
            "parentbased_traceidratio",
            "jaeger_remote",
            "parentbased_jaeger_remote",
            "xray"
        ])
        .as_array()
        .cloned()
        .unwrap_or_default()
    );

    for (section, field) in [("apacheHttpd", "configPath"), ("nginx", "configFile")] {
        let s = property(spec, &[section, field]);
        assert_eq!(s.pattern.as_deref(), Some("^[A-Za-z0-9._/-]*$"));
        assert_eq!(s.max_length, Some(256));
    }
    for section in LANGUAGE_SECTIONS {
        let size = property(spec, &[section, "volumeLimitSize"]);
        assert_eq!(size.pattern.as_deref(), Some(QUANTITY_PATTERN), "{section}");
    }
    assert_eq!(
        property(spec, &["sampler", "argument"]).max_length,
        Some(1024),
        "bounds the CEL cost"
    );

    let yaml = crd_yaml();
    assert!(
        !yaml.contains("nullable"),
        "nulls are pruned, as in the Operator"
    );
    // Client-side `kubectl apply` keeps the object's compact JSON in an annotation, and the
    // annotations of an object total at most 256 KiB.
    let applied = serde_json::to_string(&crd).unwrap();
    assert!(applied.len() < 200_000, "fits client-side kubectl apply");
}

#[test]
fn crd_cel_rules_are_where_expected() {
    let crd = crd();
    let spec = property(root_schema(&crd), &["spec"]);
    assert_eq!(
        rules(property(spec, &["sampler"])),
        [
            (
                RULE_RATIO_ARGUMENT.to_owned(),
                MSG_RATIO_ARGUMENT.to_owned()
            ),
            (
                RULE_JAEGER_REMOTE_ARGUMENT.to_owned(),
                MSG_JAEGER_REMOTE_ARGUMENT.to_owned()
            ),
        ]
    );
    assert_eq!(
        MSG_RATIO_ARGUMENT,
        "sampler.argument must be a number between 0 and 1 for traceidratio samplers"
    );
    for section in LANGUAGE_SECTIONS {
        assert_eq!(
            rules(property(spec, &[section])),
            [(
                RULE_VOLUME_EXCLUSIVE.to_owned(),
                MSG_VOLUME_EXCLUSIVE.to_owned()
            )],
            "{section}"
        );
    }
    let beta = beta_schema(&crd);
    assert_eq!(
        rules(property(beta, &["spec"])),
        [(
            RULE_CONFIG_EXCLUSIVE.to_owned(),
            MSG_CONFIG_EXCLUSIVE.to_owned()
        )]
    );
    assert_eq!(
        rules(property(beta, &["spec", "envConfig", "sampler"])),
        rules(property(spec, &["sampler"]))
    );
    let rule_count = crd_yaml().matches("rule: ").count();
    assert_eq!(rule_count, 9 + 3, "no CEL rules elsewhere");
    // CEL string literals here use no backslash escapes.
    for rule in [
        RULE_RATIO_ARGUMENT,
        RULE_JAEGER_REMOTE_ARGUMENT,
        RULE_VOLUME_EXCLUSIVE,
    ] {
        assert!(!rule.contains('\\'), "{rule}");
    }
}

#[test]
fn enum_names_match_serde() {
    let propagators = [
        Propagator::TraceContext,
        Propagator::Baggage,
        Propagator::B3,
        Propagator::B3Multi,
        Propagator::Jaeger,
        Propagator::XRay,
        Propagator::OtTrace,
        Propagator::None,
    ];
    for p in propagators {
        assert_eq!(serde_json::to_value(p).ok(), Some(json!(p.as_str())));
        assert_eq!(p.to_string(), p.as_str());
    }
    let samplers = [
        SamplerType::AlwaysOn,
        SamplerType::AlwaysOff,
        SamplerType::TraceIdRatio,
        SamplerType::ParentBasedAlwaysOn,
        SamplerType::ParentBasedAlwaysOff,
        SamplerType::ParentBasedTraceIdRatio,
        SamplerType::JaegerRemote,
        SamplerType::ParentBasedJaegerRemote,
        SamplerType::XRay,
    ];
    for s in samplers {
        assert_eq!(serde_json::to_value(s).ok(), Some(json!(s.as_str())));
        assert_eq!(s.to_string(), s.as_str());
    }
}

#[test]
fn language_spec_treats_empty_values_as_unset() {
    let yaml = r#"
apiVersion: opentelemetry.io/v1alpha1
kind: Instrumentation
metadata: {name: x}
spec:
  java: {image: ""}
  nginx:
    image: nginx-module:1
    volumeClaimTemplate:
      metadata: {labels: {a: b}}
      spec: {}
"#;
    let parsed = parse_instrumentations(yaml).expect("parses");
    let spec = &parsed[0].spec;
    let java = spec.java.as_ref().expect("java");
    assert_eq!(java.image(), None);
    assert!(java.env().is_empty());
    assert!(java.resources().is_none());
    let nginx = spec.nginx.as_ref().expect("nginx");
    assert_eq!(nginx.image(), Some("nginx-module:1"));
    assert!(
        nginx.volume_claim_template().is_some(),
        "metadata alone makes a template non-empty"
    );
    let instrumentation: &Instrumentation = &parsed[0];
    assert!(instrumentation.status.is_none());
}

#[test]
fn crd_error_stays_small() {
    // Callers wrap CrdError in their own errors; clippy's result_large_err limit is 128 bytes.
    assert!(std::mem::size_of::<CrdError>() <= 80);
}

/// Every Instrumentation in the cache costs its spec's size however few sections it sets:
/// the large optional parts (language sections, volume claim templates, security contexts)
/// are boxed, so an unset one costs a pointer.
#[test]
fn an_instrumentation_spec_is_small_when_its_sections_are_unset() {
    use k8s_openapi::api::core::v1::{PersistentVolumeClaimTemplate, SecurityContext};
    let spec = std::mem::size_of::<otel_injector::crd::InstrumentationSpec>();
    let java = std::mem::size_of::<otel_injector::crd::Java>();
    eprintln!(
        "InstrumentationSpec {spec} B, Java section {java} B (unboxed: PersistentVolumeClaimTemplate {} B, SecurityContext {} B)",
        std::mem::size_of::<PersistentVolumeClaimTemplate>(),
        std::mem::size_of::<SecurityContext>()
    );
    assert!(spec <= 1024, "InstrumentationSpec is {spec} bytes");
    assert!(java <= 256, "a language section is {java} bytes");
}

/// v1beta1 is served and converted by the webhook; v1alpha1 stays the stored version.
#[test]
fn v1beta1_is_served_and_v1alpha1_stored() {
    let crd = crd();
    let versions: Vec<(&str, bool, bool)> = crd
        .spec
        .versions
        .iter()
        .map(|v| (v.name.as_str(), v.served, v.storage))
        .collect();
    assert_eq!(
        versions,
        [("v1alpha1", true, true), ("v1beta1", true, false)]
    );
    let conversion = crd.spec.conversion.as_ref().expect("a conversion");
    assert_eq!(conversion.strategy, "Webhook");
    let webhook = conversion.webhook.as_ref().unwrap();
    assert_eq!(webhook.conversion_review_versions, ["v1"]);
    let service = webhook
        .client_config
        .as_ref()
        .and_then(|c| c.service.as_ref())
        .unwrap();
    assert_eq!(
        (
            service.namespace.as_str(),
            service.name.as_str(),
            service.path.as_deref(),
            service.port
        ),
        (
            "otel-injector",
            "otel-injector",
            Some("/convert"),
            Some(443)
        )
    );
    assert_eq!(
        crd.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("cert-manager.io/inject-ca-from"))
            .map(String::as_str),
        Some("otel-injector/otel-injector"),
        "cert-manager's CA injector fills the conversion's caBundle"
    );

    let beta = beta_schema(&crd);
    let spec = property(beta, &["spec"]);
    let fields = property_names(spec);
    assert_eq!(
        fields,
        [
            "apacheHttpd",
            "declarativeConfig",
            "dotnet",
            "env",
            "envConfig",
            "go",
            "imagePullPolicy",
            "initContainerSecurityContext",
            "java",
            "nginx",
            "nodejs",
            "python",
            "resource"
        ]
    );
    let protocol = property(spec, &["envConfig", "exporter", "protocol"]);
    let protocols: Vec<Value> = protocol
        .enum_
        .iter()
        .flatten()
        .map(|v| v.0.clone())
        .collect();
    assert_eq!(
        protocols,
        [json!("grpc"), json!("http/protobuf"), json!("http/json")]
    );
    for section in LANGUAGE_SECTIONS {
        let image = property(spec, &[section, "image"]);
        assert_eq!(image.min_length, Some(1), "{section}");
        assert!(
            property(spec, &[section])
                .properties
                .as_ref()
                .unwrap()
                .get("volumeLimitSize")
                .is_none(),
            "{section}: volumeLimitSize is v1alpha1's"
        );
        property(spec, &[section, "resources"]);
    }
    for path in [
        &["resource", "k8sMetadata", "enabled"][..],
        &["resource", "k8sMetadata", "includeUIDs"],
        &["resource", "serviceMetadata", "enabled"],
        &["resource", "attributes"],
    ] {
        property(spec, path);
    }
    let config = property(spec, &["declarativeConfig"]);
    assert_eq!(
        config.required.as_deref(),
        Some(&["file_format".to_owned()][..])
    );
    assert_eq!(
        property(config, &["file_format"]).pattern.as_deref(),
        Some(otel_injector::crd::declarative::FILE_FORMAT_PATTERN)
    );
    // The parts of the schema that still move are kept as written, and only those.
    for path in [
        &[][..],
        &["resource"],
        &["tracer_provider"],
        &["meter_provider"],
        &["logger_provider"],
    ] {
        assert_eq!(
            property(config, path).x_kubernetes_preserve_unknown_fields,
            Some(true),
            "{path:?}"
        );
    }
    let exporter = match &property(config, &["tracer_provider", "processors"]).items {
        Some(k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaPropsOrArray::Schema(p)) => {
            property(p, &["batch", "exporter"]).clone()
        }
        other => panic!("processors: {other:?}"),
    };
    for otlp in ["otlp_http", "otlp_grpc"] {
        property(&exporter, &[otlp, "endpoint"]);
    }
    assert_eq!(
        property(spec, &["envConfig"]).x_kubernetes_preserve_unknown_fields,
        None
    );
}

/// `otel-injector crd --conversion-service NS/NAME` and `--v1beta1=false`.
#[test]
fn the_crd_names_the_conversion_service_or_serves_v1alpha1_alone() {
    use otel_injector::crd::{Served, crd_serving};
    let moved = crd_serving(("observability", "injector"), Served::Both);
    let service = moved
        .spec
        .conversion
        .as_ref()
        .unwrap()
        .webhook
        .as_ref()
        .unwrap();
    let service = service
        .client_config
        .as_ref()
        .unwrap()
        .service
        .as_ref()
        .unwrap();
    assert_eq!(
        (service.namespace.as_str(), service.name.as_str()),
        ("observability", "injector")
    );
    assert_eq!(
        moved.metadata.annotations.unwrap()["cert-manager.io/inject-ca-from"],
        "observability/injector"
    );
    let alone = crd_serving(("observability", "injector"), Served::V1alpha1);
    assert!(alone.spec.conversion.is_none());
    assert!(alone.metadata.annotations.is_none());
    let versions: Vec<(&str, bool, bool)> = alone
        .spec
        .versions
        .iter()
        .map(|v| (v.name.as_str(), v.served, v.storage))
        .collect();
    assert_eq!(versions, [("v1alpha1", true, true)]);
    // The same v1alpha1 schema as in the two-version CRD.
    assert_eq!(alone.spec.versions[0], crd().spec.versions[0]);
}
