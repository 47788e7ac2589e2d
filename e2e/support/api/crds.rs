//! The CRDs installed from their manifests, the conversion pointed at a webhook, and the
//! stand-in CRDs of other projects.

use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::json;

use super::read_yaml_docs;

/// Creates the CRDs of a file (an existing one is left alone) and waits until each is
/// Established.
pub async fn install_crds(client: &Client, path: &Path) -> Result<(), String> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for doc in read_yaml_docs(path)? {
        let crd: CustomResourceDefinition =
            serde_json::from_value(doc).map_err(|e| format!("{}: {e}", path.display()))?;
        install_crd(&api, &crd).await?;
    }
    Ok(())
}

/// Points the Instrumentation CRD's conversion webhook at `url` (a webhook process of the
/// test), trusting `ca_pem` (`None`: the caBundle it has): what the Service and the caBundle
/// of an install do.
pub async fn point_conversion(
    client: &Client,
    url: &str,
    ca_pem: Option<&str>,
) -> Result<(), String> {
    use base64::Engine as _;
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut config = serde_json::json!({"service": null, "url": url});
    if let Some(ca) = ca_pem {
        config["caBundle"] = base64::engine::general_purpose::STANDARD.encode(ca).into();
    }
    let patch = serde_json::json!({"spec": {"conversion": {"strategy": "Webhook", "webhook": {
        "conversionReviewVersions": ["v1"],
        "clientConfig": config}}}});
    api.patch(
        "instrumentations.opentelemetry.io",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&patch),
    )
    .await
    .map_err(|e| format!("point the CRD's conversion at {url}: {e}"))?;
    Ok(())
}

/// Creates one CRD (AlreadyExists is fine) and waits until it is Established.
pub async fn install_crd(
    api: &Api<CustomResourceDefinition>,
    crd: &CustomResourceDefinition,
) -> Result<(), String> {
    let name = crd.metadata.name.clone().unwrap_or_default();
    match api.create(&PostParams::default(), crd).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => return Err(format!("create CRD {name}: {e}")),
    }
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let established = api
            .get(&name)
            .await
            .ok()
            .and_then(|c| c.status)
            .and_then(|s| s.conditions)
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
            });
        if established {
            return Ok(());
        }
        if Instant::now() > until {
            return Err(format!("CRD {name} not Established within 30 s"));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A stand-in for a CRD of another project (cert-manager's, the Prometheus Operator's):
/// the kind exists, any content is accepted. An existing CRD of that name is left alone.
pub async fn install_stand_in_crd(
    client: &Client,
    group: &str,
    kind: &str,
    plural: &str,
) -> Result<(), String> {
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}")},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"kind": kind, "plural": plural, "singular": kind.to_lowercase(),
                      "listKind": format!("{kind}List")},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object",
                    "x-kubernetes-preserve-unknown-fields": true}}}]
        }
    }))
    .map_err(|e| e.to_string())?;
    install_crd(&Api::all(client.clone()), &crd).await
}
