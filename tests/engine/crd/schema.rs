//! The generated CRD's schema: names and subresources, the Operator's schema, the CEL rules,
//! enum spellings, and the types' empty values and sizes.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaProps;
use otel_injector::crd::v1beta1::{MSG_CONFIG_EXCLUSIVE, RULE_CONFIG_EXCLUSIVE};
use otel_injector::crd::{
    CrdError, Instrumentation, LanguageSpec, MSG_JAEGER_REMOTE_ARGUMENT, MSG_RATIO_ARGUMENT,
    MSG_VOLUME_EXCLUSIVE, Propagator, QUANTITY_PATTERN, RULE_JAEGER_REMOTE_ARGUMENT,
    RULE_RATIO_ARGUMENT, RULE_VOLUME_EXCLUSIVE, SamplerType, crd, crd_yaml, parse_instrumentations,
};
use serde_json::{Value, json};

use super::{LANGUAGE_SECTIONS, beta_schema, property, property_names, root_schema, rules};

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
    let java = std::mem::size_of::<otel_injector::crd::JavaSpec>();
    eprintln!(
        "InstrumentationSpec {spec} B, Java section {java} B (unboxed: PersistentVolumeClaimTemplate {} B, SecurityContext {} B)",
        std::mem::size_of::<PersistentVolumeClaimTemplate>(),
        std::mem::size_of::<SecurityContext>()
    );
    assert!(spec <= 1024, "InstrumentationSpec is {spec} bytes");
    assert!(java <= 256, "a language section is {java} bytes");
}
