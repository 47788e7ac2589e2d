//! Kubernetes API helpers on top of `kube::Client`: raw requests that keep the response's
//! `Warning` headers (the typed `Api` drops them), CRDs, webhook configurations built from
//! `manifests/base/webhook.yaml` or `components/targeted/webhook-targeted.yaml`, server-side apply of manifest files,
//! and SubjectAccessReviews.

use std::path::Path;
use std::time::{Duration, Instant};

use axum::http::{Method, Request, header};
use http_body_util::BodyExt as _;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
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

/// What a SubjectAccessReview asks: may this user do `verb` on `resource`?
#[derive(Clone, Copy, Debug)]
pub struct Access<'a> {
    pub verb: &'a str,
    pub group: &'a str,
    pub resource: &'a str,
    /// Empty: every namespace (or a cluster-scoped resource).
    pub namespace: &'a str,
    /// Empty: any name.
    pub name: &'a str,
}

impl std::fmt::Display for Access<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let group = if self.group.is_empty() {
            "core"
        } else {
            self.group
        };
        write!(f, "{} {group}/{}", self.verb, self.resource)?;
        if !self.name.is_empty() {
            write!(f, "/{}", self.name)?;
        }
        if !self.namespace.is_empty() {
            write!(f, " in {}", self.namespace)?;
        }
        Ok(())
    }
}

/// Whether the API server's authorizer allows `access` to `user` with `groups` (a
/// SubjectAccessReview, sent with `client`'s own rights).
pub async fn may(
    client: &Client,
    user: &str,
    groups: &[String],
    access: Access<'_>,
) -> Result<bool, String> {
    let review = json!({
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {
            "user": user, "groups": groups,
            "resourceAttributes": {
                "verb": access.verb, "group": access.group, "resource": access.resource,
                "namespace": access.namespace, "name": access.name,
            }
        }
    });
    let r = send(
        client,
        Method::POST,
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        Some(&review),
    )
    .await?;
    if r.status != 201 {
        return Err(format!(
            "SubjectAccessReview ({access}): HTTP {}: {}",
            r.status, r.body
        ));
    }
    Ok(r.body["status"]["allowed"] == true)
}

/// Whether `user` (with `groups`) may `verb` the non-resource URL `path` (`/metrics`), as the
/// authorizer answers a SubjectAccessReview.
pub async fn may_url(
    client: &Client,
    user: &str,
    groups: &[String],
    verb: &str,
    path: &str,
) -> Result<bool, String> {
    let review = json!({
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": user, "groups": groups,
                 "nonResourceAttributes": {"verb": verb, "path": path}}
    });
    let r = send(
        client,
        Method::POST,
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        Some(&review),
    )
    .await?;
    if r.status != 201 {
        return Err(format!(
            "SubjectAccessReview ({verb} {path}): HTTP {}: {}",
            r.status, r.body
        ));
    }
    Ok(r.body["status"]["allowed"] == true)
}

/// How a webhook configuration made from a shipped manifest differs from it.
pub struct Registration<'a> {
    /// The manifest whose entries are registered: [`webhook_manifest_path`] or
    /// [`targeted_webhook_manifest_path`].
    pub manifest: &'a Path,
    /// Name of the MutatingWebhookConfiguration (configurations run in name order).
    pub name: &'a str,
    /// `https://127.0.0.1:PORT/mutate-v1-pod`.
    pub url: &'a str,
    pub ca_pem: &'a str,
    /// `Ignore` or `Fail`.
    pub failure_policy: &'a str,
    pub timeout_seconds: i32,
    /// Restrict to namespaces carrying this label (tests sharing one control plane).
    pub scope: Option<(&'a str, &'a str)>,
}

/// The default webhook configuration: `$E2E_WEBHOOK_MANIFEST`, or `manifests/base/webhook.yaml`.
pub fn webhook_manifest_path() -> std::path::PathBuf {
    std::env::var_os("E2E_WEBHOOK_MANIFEST")
        .map(Into::into)
        .unwrap_or_else(|| super::tools::root().join("manifests/base/webhook.yaml"))
}

/// The targeted variant's webhook configuration: `$E2E_TARGETED_WEBHOOK_MANIFEST`, or
/// `manifests/components/targeted/webhook-targeted.yaml`.
pub fn targeted_webhook_manifest_path() -> std::path::PathBuf {
    std::env::var_os("E2E_TARGETED_WEBHOOK_MANIFEST")
        .map(Into::into)
        .unwrap_or_else(|| {
            super::tools::root().join("manifests/components/targeted/webhook-targeted.yaml")
        })
}

/// The MutatingWebhookConfiguration of `r.manifest` with every one of its webhook entries
/// (`pods.…` in the default one; `pods.…` and `namespaces.…` in the targeted one), each
/// keeping its own name, rules, matchPolicy, reinvocationPolicy, sideEffects,
/// admissionReviewVersions, namespaceSelector, objectSelector and matchConditions, pointed
/// at `url` with the test CA, the given failure policy and timeout, and optionally scoped
/// by a namespace label added to each entry's namespaceSelector.
pub fn webhook_configuration(r: &Registration<'_>) -> Result<Value, String> {
    let path = r.manifest;
    let doc = read_yaml_docs(path)?
        .into_iter()
        .find(|d| d["kind"] == "MutatingWebhookConfiguration")
        .ok_or_else(|| format!("{}: no MutatingWebhookConfiguration", path.display()))?;
    let mut webhooks = doc["webhooks"]
        .as_array()
        .cloned()
        .ok_or_else(|| format!("{}: no webhooks", path.display()))?;
    for wh in &mut webhooks {
        wh["clientConfig"] = json!({
            "url": r.url,
            "caBundle": base64_of(r.ca_pem.as_bytes()),
        });
        wh["failurePolicy"] = json!(r.failure_policy);
        wh["timeoutSeconds"] = json!(r.timeout_seconds);
        if let Some((k, v)) = r.scope {
            // Added to the entry's own selector (its matchExpressions are kept): the
            // requirements are ANDed.
            if !wh["namespaceSelector"].is_object() {
                wh["namespaceSelector"] = json!({});
            }
            if !wh["namespaceSelector"]["matchLabels"].is_object() {
                wh["namespaceSelector"]["matchLabels"] = json!({});
            }
            wh["namespaceSelector"]["matchLabels"][k] = json!(v);
        }
    }
    Ok(json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": r.name},
        "webhooks": webhooks,
    }))
}

/// Creates a MutatingWebhookConfiguration.
pub async fn create_webhook_configuration(client: &Client, config: &Value) -> Result<(), String> {
    let r = send(
        client,
        Method::POST,
        "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
        Some(config),
    )
    .await?;
    if r.status != 201 {
        return Err(format!(
            "create MutatingWebhookConfiguration {}: HTTP {}: {}",
            config["metadata"]["name"],
            r.status,
            r.message()
        ));
    }
    Ok(())
}

/// Creates a MutatingWebhookConfiguration, replacing one of the same name.
pub async fn replace_webhook_configuration(client: &Client, config: &Value) -> Result<(), String> {
    delete_doc(client, config).await?;
    create_webhook_configuration(client, config).await
}

pub fn base64_of(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}
