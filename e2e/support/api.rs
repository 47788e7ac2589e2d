//! Kubernetes API helpers on top of `kube::Client`: raw requests that keep the response's
//! `Warning` headers (the typed `Api` drops them), CRDs, webhook configurations built from
//! `manifests/base/webhook.yaml` or `components/targeted/webhook-targeted.yaml`, server-side apply of manifest files,
//! and SubjectAccessReviews.

mod access;
mod crds;
mod webhooks;

pub use access::{Access, may, may_url};
pub use crds::{install_crds, install_stand_in_crd, point_conversion};
pub use webhooks::{
    Registration, base64_of, create_webhook_configuration, replace_webhook_configuration,
    targeted_webhook_manifest_path, webhook_configuration, webhook_manifest_path,
};

use std::path::Path;
use std::time::{Duration, Instant};

use axum::http::{Method, Request, header};
use http_body_util::BodyExt as _;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::Scope;
use kube::{Client, client::Body};
use serde_json::{Value, json};

/// An API response: status, JSON body (or `{"raw": text}`), and the warnings the client
/// would print.
#[derive(Clone, Debug)]
pub struct Response {
    pub status: u16,
    pub body: Value,
    pub warnings: Vec<String>,
}

impl Response {
    /// The `message` of a `Status` body.
    pub fn message(&self) -> &str {
        self.body["message"].as_str().unwrap_or("")
    }
}

/// Sends `method path` with an optional JSON body.
pub async fn send(
    client: &Client,
    method: Method,
    path: &str,
    body: Option<&Value>,
) -> Result<Response, String> {
    send_as(client, method, path, body, "application/json").await
}

/// [`send`] with the body's content type (e.g. a merge patch).
pub async fn send_as(
    client: &Client,
    method: Method,
    path: &str,
    body: Option<&Value>,
    content_type: &str,
) -> Result<Response, String> {
    let mut req = Request::builder()
        .method(method.clone())
        .uri(path)
        .header(header::ACCEPT, "application/json");
    let bytes = match body {
        Some(v) => {
            req = req.header(header::CONTENT_TYPE, content_type);
            serde_json::to_vec(v).map_err(|e| e.to_string())?
        }
        None => Vec::new(),
    };
    let req = req.body(Body::from(bytes)).map_err(|e| e.to_string())?;
    let resp = client
        .send(req)
        .await
        .map_err(|e| format!("{method} {path}: {e}"))?;
    let status = resp.status().as_u16();
    let warnings = resp
        .headers()
        .get_all("warning")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(parse_warnings)
        .collect();
    let bytes = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("{method} {path}: reading the body: {e}"))?
        .to_bytes();
    let body = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| json!({"raw": String::from_utf8_lossy(&bytes)}));
    Ok(Response {
        status,
        body,
        warnings,
    })
}

/// `PATCH path` with a JSON merge patch (RFC 7386).
pub async fn merge_patch(client: &Client, path: &str, patch: &Value) -> Result<Response, String> {
    send_as(
        client,
        Method::PATCH,
        path,
        Some(patch),
        "application/merge-patch+json",
    )
    .await
}

/// The namespace as stored, `None` on 404.
pub async fn get_namespace(client: &Client, name: &str) -> Result<Option<Value>, String> {
    let r = send(
        client,
        Method::GET,
        &format!("/api/v1/namespaces/{name}"),
        None,
    )
    .await?;
    match r.status {
        200 => Ok(Some(r.body)),
        404 => Ok(None),
        s => Err(format!("GET namespace {name}: HTTP {s}: {}", r.body)),
    }
}

/// GET returning (status, text): health endpoints answer plain text.
pub async fn get_text(client: &Client, path: &str) -> Result<(u16, String), String> {
    let r = send(client, Method::GET, path, None).await?;
    let text = match &r.body {
        Value::Object(m) if m.contains_key("raw") => r.body["raw"].as_str().unwrap_or("").into(),
        v => v.to_string(),
    };
    Ok((r.status, text))
}

/// The texts of one `Warning` header value (RFC 7234: `299 - "text"`, comma-separated,
/// `\` escapes inside the quotes).
pub fn parse_warnings(header: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = header;
    while let Some(start) = rest.find('"') {
        let mut text = String::new();
        let mut chars = rest[start + 1..].char_indices();
        let mut end = None;
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    if let Some((_, n)) = chars.next() {
                        text.push(n);
                    }
                }
                '"' => {
                    end = Some(start + 1 + i + 1);
                    break;
                }
                c => text.push(c),
            }
        }
        out.push(text);
        match end {
            Some(e) => rest = &rest[e..],
            None => break,
        }
    }
    out
}

/// POST a pod (`dryRun=All` when asked).
pub async fn create_pod(
    client: &Client,
    ns: &str,
    pod: &Value,
    dry_run: bool,
) -> Result<Response, String> {
    let q = if dry_run { "?dryRun=All" } else { "" };
    send(
        client,
        Method::POST,
        &format!("/api/v1/namespaces/{ns}/pods{q}"),
        Some(pod),
    )
    .await
}

/// The pod as stored, `None` on 404.
pub async fn get_pod(client: &Client, ns: &str, name: &str) -> Result<Option<Value>, String> {
    let r = send(
        client,
        Method::GET,
        &format!("/api/v1/namespaces/{ns}/pods/{name}"),
        None,
    )
    .await?;
    match r.status {
        200 => Ok(Some(r.body)),
        404 => Ok(None),
        s => Err(format!("GET pod {ns}/{name}: HTTP {s}: {}", r.body)),
    }
}

/// The API path of Instrumentation `ns/name`.
pub fn instrumentation_path(ns: &str, name: &str) -> String {
    format!("/apis/opentelemetry.io/v1alpha1/namespaces/{ns}/instrumentations/{name}")
}

/// Instrumentation `ns/name` as stored (panics unless it is there: a test's own object).
pub async fn get_instrumentation(client: &Client, ns: &str, name: &str) -> Value {
    let path = instrumentation_path(ns, name);
    let r = send(client, Method::GET, &path, None)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 200, "GET {path}: {}", r.body);
    r.body
}

/// POST an Instrumentation into `ns`.
pub async fn create_instrumentation(
    client: &Client,
    ns: &str,
    inst: &Value,
) -> Result<Response, String> {
    send(
        client,
        Method::POST,
        &format!("/apis/opentelemetry.io/v1alpha1/namespaces/{ns}/instrumentations"),
        Some(inst),
    )
    .await
}

/// Creates a namespace with labels and annotations.
pub async fn create_namespace(
    client: &Client,
    name: &str,
    labels: &[(&str, &str)],
    annotations: &[(&str, &str)],
) -> Result<(), String> {
    let map = |kv: &[(&str, &str)]| {
        kv.iter()
            .map(|(k, v)| (k.to_string(), json!(v)))
            .collect::<serde_json::Map<_, _>>()
    };
    let ns = json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": name, "labels": map(labels), "annotations": map(annotations)}
    });
    let r = send(client, Method::POST, "/api/v1/namespaces", Some(&ns)).await?;
    match r.status {
        201 | 409 => Ok(()),
        s => Err(format!(
            "create namespace {name}: HTTP {s}: {}",
            r.message()
        )),
    }
}

/// Reads one YAML file with any number of documents (empty ones skipped).
pub fn read_yaml_docs(path: &Path) -> Result<Vec<Value>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(docs.into_iter().filter(|d| !d.is_null()).collect())
}

/// Server-side apply of every document of a manifest file, with a field manager named after
/// the file (as `kubectl apply --server-side --field-manager=...` per file would), so an
/// overlay file does not take away the fields another file set; `dry_run` sends
/// `dryRun=All` (nothing stored). Returns `kind/name` of each applied object.
pub async fn server_side_apply(
    client: &Client,
    path: &Path,
    dry_run: bool,
) -> Result<Vec<String>, String> {
    Ok(server_side_apply_each(client, path, |_| dry_run)
        .await?
        .into_iter()
        .map(|(id, _)| id)
        .collect())
}

/// [`server_side_apply`], deciding per document whether it is a dry run; returns
/// `kind/name` and the object as the API server returned it (stored, or as it would be).
pub async fn server_side_apply_each(
    client: &Client,
    path: &Path,
    dry_run: impl Fn(&Value) -> bool,
) -> Result<Vec<(String, Value)>, String> {
    let stem = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("manifest");
    let manager = format!("otel-injector-e2e-{stem}");
    let mut applied = Vec::new();
    for doc in read_yaml_docs(path)? {
        let id = format!(
            "{}/{}",
            doc["kind"].as_str().unwrap_or_default(),
            doc["metadata"]["name"].as_str().unwrap_or_default()
        );
        let stored = apply_doc(client, &manager, &doc, dry_run(&doc))
            .await
            .map_err(|e| format!("{}: {e}", path.display()))?;
        applied.push((id, stored));
    }
    Ok(applied)
}

/// The API of a document's kind (discovery), namespaced by its `metadata.namespace`.
pub async fn dynamic_api(client: &Client, doc: &Value) -> Result<Api<DynamicObject>, String> {
    let api_version = doc["apiVersion"].as_str().unwrap_or_default();
    let kind = doc["kind"].as_str().unwrap_or_default();
    let (group, version) = match api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    };
    let gvk = GroupVersionKind::gvk(group, version, kind);
    // Discovery of a just-established CRD can lag by a moment.
    let mut tries = 0;
    let (ar, caps) = loop {
        match kube::discovery::pinned_kind(client, &gvk).await {
            Ok(found) => break found,
            Err(_) if tries < 50 => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => return Err(format!("{api_version} {kind}: {e}")),
        }
    };
    Ok(match caps.scope {
        Scope::Cluster => Api::all_with(client.clone(), &ar),
        Scope::Namespaced => Api::namespaced_with(
            client.clone(),
            doc["metadata"]["namespace"].as_str().unwrap_or("default"),
            &ar,
        ),
    })
}

/// Server-side apply of one object (forced, as field manager `manager`); returns it as the
/// API server returned it.
pub async fn apply_doc(
    client: &Client,
    manager: &str,
    doc: &Value,
    dry_run: bool,
) -> Result<Value, String> {
    let api = dynamic_api(client, doc).await?;
    let name = doc["metadata"]["name"].as_str().unwrap_or_default();
    let mut params = PatchParams::apply(manager).force();
    if dry_run {
        params = params.dry_run();
    }
    let stored = api
        .patch(name, &params, &Patch::Apply(doc))
        .await
        .map_err(|e| format!("{}/{name}: {e}", doc["kind"].as_str().unwrap_or_default()))?;
    serde_json::to_value(stored).map_err(|e| e.to_string())
}

/// Deletes the object a document names, if it exists; waits until it is gone.
pub async fn delete_doc(client: &Client, doc: &Value) -> Result<(), String> {
    let api = dynamic_api(client, doc).await?;
    let name = doc["metadata"]["name"].as_str().unwrap_or_default();
    let kind = doc["kind"].as_str().unwrap_or_default();
    match api.delete(name, &Default::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
        Err(e) => return Err(format!("delete {kind}/{name}: {e}")),
    }
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        match api.get_opt(name).await {
            Ok(None) => return Ok(()),
            Ok(Some(_)) if Instant::now() < until => {
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            Ok(Some(_)) => return Err(format!("{kind}/{name} still there 10 s after delete")),
            Err(e) => return Err(format!("get {kind}/{name}: {e}")),
        }
    }
}
