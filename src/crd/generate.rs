//! The CRD manifest: kube's generated CRD post-processed to behave like the Operator's, and its
//! YAML rendering (what `otel-injector crd` prints and `manifests/crd.yaml` holds).

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceConversion, CustomResourceDefinition, JSON, JSONSchemaProps,
    JSONSchemaPropsOrArray, JSONSchemaPropsOrBool, ServiceReference, WebhookClientConfig,
    WebhookConversion,
};
use kube::CustomResourceExt;
use serde_json::Value;

use super::error::CrdError;
use super::spec::Instrumentation;
use super::v1beta1;
use super::validation::QUANTITY_PATTERN;

/// Where the API server sends ConversionReviews: the webhook's Service (port 443, the
/// webhook port), as the manifests and the Helm chart's defaults name it.
pub const CONVERSION_SERVICE: (&str, &str) = ("otel-injector", "otel-injector");
/// The path of the conversion webhook.
pub const CONVERSION_PATH: &str = "/convert";
/// cert-manager's CA injector fills the conversion's `caBundle` from the Certificate this
/// annotation names (the cert-manager install's: the Service's namespace and name); the
/// built-in certificate mode writes it itself.
const INJECT_CA_FROM: &str = "cert-manager.io/inject-ca-from";

/// Properties whose schemas come from Kubernetes types (EnvVar, ResourceRequirements,
/// SecurityContext, PersistentVolumeClaimTemplate). Their nested descriptions are dropped.
const EMBEDDED_K8S_FIELDS: &[&str] = &[
    "env",
    "attrs",
    "resources",
    "resourceRequirements",
    "volumeClaimTemplate",
    "securityContext",
    "initContainerSecurityContext",
];

/// The Instrumentation CRD: [`Instrumentation::crd()`] adjusted to behave like the Operator's:
/// - no `nullable: true` (nor `null` enum values), so the apiserver drops `null` fields instead
///   of storing them, and CEL `has()` never sees a null;
/// - quantities (`volumeLimitSize`, resource limits and requests) carry [`QUANTITY_PATTERN`];
/// - `spec` is optional and defaults to `{}`;
/// - descriptions inside embedded Kubernetes types are dropped (our own field descriptions are
///   kept), which keeps the manifest small enough for client-side `kubectl apply`.
///
/// Two versions: v1alpha1, stored, and v1beta1, served and converted by the webhook's
/// `/convert` ([`CONVERSION_SERVICE`]).
pub fn crd() -> CustomResourceDefinition {
    crd_serving(CONVERSION_SERVICE, Served::Both)
}

/// Which versions the CRD serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Served {
    /// v1alpha1 (stored) and v1beta1 (converted by the webhook).
    Both,
    /// v1alpha1 alone, with no conversion (the Operator's shape).
    V1alpha1,
}

/// The CRD serving `versions`, its conversion webhook (if any) at the Service
/// `namespace/name`, whose Certificate of the same name cert-manager's CA injector reads.
pub fn crd_serving((namespace, name): (&str, &str), versions: Served) -> CustomResourceDefinition {
    if versions == Served::V1alpha1 {
        return adjusted(Instrumentation::crd());
    }
    let mut crd = kube::core::crd::merge_crds(
        vec![Instrumentation::crd(), v1beta1::Instrumentation::crd()],
        "v1alpha1",
    )
    .expect("both versions have the same group, kind and scope");
    crd.metadata.annotations = Some(
        [(INJECT_CA_FROM.to_owned(), format!("{namespace}/{name}"))]
            .into_iter()
            .collect(),
    );
    crd.spec.conversion = Some(CustomResourceConversion {
        strategy: "Webhook".to_owned(),
        webhook: Some(WebhookConversion {
            conversion_review_versions: vec!["v1".to_owned()],
            client_config: Some(WebhookClientConfig {
                service: Some(ServiceReference {
                    namespace: namespace.to_owned(),
                    name: name.to_owned(),
                    path: Some(CONVERSION_PATH.to_owned()),
                    port: Some(443),
                }),
                ..Default::default()
            }),
        }),
    });
    adjusted(crd)
}

/// kube's generated CRD post-processed as [`crd()`] says.
fn adjusted(mut crd: CustomResourceDefinition) -> CustomResourceDefinition {
    for version in &mut crd.spec.versions {
        let Some(root) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        else {
            continue;
        };
        walk(root, &mut |schema| {
            schema.nullable = None;
            if let Some(values) = &mut schema.enum_ {
                values.retain(|v| !v.0.is_null());
            }
            // Every int-or-string in this schema is a k8s Quantity.
            if schema.x_kubernetes_int_or_string == Some(true) && schema.pattern.is_none() {
                schema.pattern = Some(QUANTITY_PATTERN.to_owned());
            }
            // Kept as written (the declarative configuration's moving parts): a structural
            // schema says so by this flag alone, never by additionalProperties.
            if schema.x_kubernetes_preserve_unknown_fields == Some(true) {
                schema.additional_properties = None;
            }
        });
        if let Some(required) = &mut root.required {
            required.retain(|name| name != "spec");
            if required.is_empty() {
                root.required = None;
            }
        }
        if let Some(spec) = root.properties.as_mut().and_then(|p| p.get_mut("spec")) {
            spec.default = Some(JSON(Value::Object(serde_json::Map::new())));
            trim_embedded_docs(spec);
        }
    }
    crd
}

/// Mutable references to the direct subschemas of `schema`.
fn subschemas(schema: &mut JSONSchemaProps) -> Vec<&mut JSONSchemaProps> {
    let mut out: Vec<&mut JSONSchemaProps> = Vec::new();
    out.extend(schema.properties.iter_mut().flat_map(|p| p.values_mut()));
    match &mut schema.items {
        Some(JSONSchemaPropsOrArray::Schema(child)) => out.push(child),
        Some(JSONSchemaPropsOrArray::Schemas(children)) => out.extend(children.iter_mut()),
        None => {}
    }
    if let Some(JSONSchemaPropsOrBool::Schema(child)) = &mut schema.additional_properties {
        out.push(child);
    }
    out.extend(schema.all_of.iter_mut().flatten());
    out.extend(schema.any_of.iter_mut().flatten());
    out.extend(schema.one_of.iter_mut().flatten());
    if let Some(child) = &mut schema.not {
        out.push(child);
    }
    out
}

/// Applies `f` to `schema` and every schema nested in it.
fn walk(schema: &mut JSONSchemaProps, f: &mut impl FnMut(&mut JSONSchemaProps)) {
    f(schema);
    for child in subschemas(schema) {
        walk(child, f);
    }
}

fn trim_embedded_docs(schema: &mut JSONSchemaProps) {
    for (name, property) in schema.properties.iter_mut().flatten() {
        if EMBEDDED_K8S_FIELDS.contains(&name.as_str()) {
            for child in subschemas(property) {
                walk(child, &mut |s| s.description = None);
            }
        } else {
            trim_embedded_docs(property);
        }
    }
}

fn render(crd: &CustomResourceDefinition, header: &str) -> Result<String, CrdError> {
    let body = serde_saphyr::to_string(crd).map_err(|err| CrdError::Render(Box::new(err)))?;
    Ok(format!("{header}{body}"))
}

/// [`crd()`] as YAML, preceded by a comment header (no `---`): `manifests/crd.yaml`.
pub fn crd_yaml() -> String {
    crd_yaml_for(CONVERSION_SERVICE, Served::Both)
}

/// [`crd_serving`] as YAML (what `otel-injector crd` prints), preceded by a comment header,
/// falling back to JSON (which is valid YAML) if YAML rendering ever fails.
pub fn crd_yaml_for(service: (&str, &str), versions: Served) -> String {
    let crd = crd_serving(service, versions);
    let header = match versions {
        Served::Both => format!(
            "# Instrumentation CRD (opentelemetry.io/v1alpha1, stored, and v1beta1, converted by\n\
             # the webhook's /convert on the Service {}/{}).\n\
             # Generated by `otel-injector crd`; do not edit by hand.\n",
            service.0, service.1
        ),
        Served::V1alpha1 => {
            "# Instrumentation CRD (opentelemetry.io/v1alpha1 alone, no conversion).\n\
             # Generated by `otel-injector crd --v1beta1=false`; do not edit by hand.\n"
                .to_owned()
        }
    };
    render(&crd, &header).unwrap_or_else(|err| {
        let json = serde_json::to_string_pretty(&crd)
            .unwrap_or_else(|json_err| format!("# {err}; as JSON: {json_err}"));
        format!("{header}{json}\n")
    })
}
