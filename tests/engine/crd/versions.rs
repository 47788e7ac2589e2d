//! The two versions in the CRD: v1beta1 served, v1alpha1 stored, and the conversion service.

use otel_injector::crd::crd;
use serde_json::{Value, json};

use super::{LANGUAGE_SECTIONS, beta_schema, property, property_names};

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
