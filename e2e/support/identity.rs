//! The webhook's own identity: a ServiceAccount of namespace `otel-injector` with the RBAC of
//! the shipped manifests bound to it, and a kubeconfig holding a token the API server issued
//! for it (TokenRequest). A webhook process started with that kubeconfig runs with exactly
//! that RBAC, as in a cluster, not as the admin user the tests use.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use axum::http::Method;
use kube::Client;
use serde_json::{Value, json};

use super::api::{self, Access};
use super::controlplane::ControlPlane;
use super::tools::root;

/// The namespace of the shipped manifests, and of every identity made here.
pub const NAMESPACE: &str = "otel-injector";
/// The ServiceAccount the shipped manifests bind their roles to.
pub const SERVICE_ACCOUNT: &str = "otel-injector";

/// A ServiceAccount with a token and a kubeconfig for it.
#[derive(Clone, Debug)]
pub struct Identity {
    /// `system:serviceaccount:<namespace>:<name>`.
    pub user: String,
    /// The groups the API server gives every token of this ServiceAccount.
    pub groups: Vec<String>,
    pub token: String,
    /// Server and CA of the control plane, user: the token.
    pub kubeconfig: PathBuf,
}

impl Identity {
    /// A client that authenticates with this identity's token.
    pub async fn client(&self) -> Result<Client, String> {
        let config = super::tools::kube_config(&self.kubeconfig).await?;
        Client::try_from(config).map_err(|e| e.to_string())
    }
}

/// Makes ServiceAccount `otel-injector/<sa>` and gives it the RBAC of `manifests` (paths
/// under `manifests/`): their Roles and ClusterRoles are applied as they are, and their
/// bindings too when `sa` is the manifests' own `otel-injector`; for any other `sa`, each
/// binding is applied as a copy named `<binding>.<sa>` whose one subject is `sa`, so
/// identities with different modes can exist side by side. Waits until the authorizer
/// allows the first verb of every rule, then issues a token (TokenRequest, 1 h) and writes a
/// kubeconfig for it into `dir`.
pub async fn issue(
    cp: &ControlPlane,
    sa: &str,
    manifests: &[&str],
    dir: &Path,
) -> Result<Identity, String> {
    let mut docs = Vec::new();
    for file in manifests {
        docs.extend(api::read_yaml_docs(&root().join("manifests").join(file))?);
    }
    issue_from(cp, sa, &docs, dir).await
}

/// [`issue`] with the RBAC of these documents (say, a chart's rendered output): their Roles,
/// ClusterRoles and bindings, as [`issue`] applies those of the manifests; other kinds are
/// ignored.
pub async fn issue_from(
    cp: &ControlPlane,
    sa: &str,
    docs: &[Value],
    dir: &Path,
) -> Result<Identity, String> {
    let client = cp.client();
    api::create_namespace(&client, NAMESPACE, &[], &[]).await?;
    let manager = format!("otel-injector-e2e-identity-{sa}");
    let account = json!({
        "apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": sa, "namespace": NAMESPACE}
    });
    api::apply_doc(&client, &manager, &account, false).await?;
    let mut rules = Vec::new();
    for doc in docs {
        let kind = doc["kind"].as_str().unwrap_or_default();
        match kind {
            "Role" | "ClusterRole" => {
                api::apply_doc(&client, &manager, doc, false).await?;
                let ns = doc["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or("")
                    .to_owned();
                for rule in doc["rules"].as_array().into_iter().flatten() {
                    rules.push((ns.clone(), rule.clone()));
                }
            }
            "RoleBinding" | "ClusterRoleBinding" => {
                let binding = bound_to(doc, sa)?;
                api::apply_doc(&client, &manager, &binding, false).await?;
            }
            _ => {}
        }
    }
    let user = format!("system:serviceaccount:{NAMESPACE}:{sa}");
    let groups: Vec<String> = [
        "system:serviceaccounts".to_owned(),
        format!("system:serviceaccounts:{NAMESPACE}"),
        "system:authenticated".to_owned(),
    ]
    .to_vec();
    // The authorizer reads bindings from its informers: wait until it has them.
    for (ns, rule) in &rules {
        let first = |k: &str| rule[k][0].as_str().unwrap_or("").to_owned();
        if rule["nonResourceURLs"].is_array() {
            let (verb, path) = (first("verbs"), first("nonResourceURLs"));
            let t0 = Instant::now();
            while !api::may_url(&client, &user, &groups, &verb, &path).await? {
                if t0.elapsed() > Duration::from_secs(10) {
                    return Err(format!(
                        "{user}: {verb} {path} not allowed 10 s after binding"
                    ));
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            continue;
        }
        let (verb, group, resource, name) = (
            first("verbs"),
            first("apiGroups"),
            first("resources"),
            first("resourceNames"),
        );
        let access = Access {
            verb: &verb,
            group: &group,
            resource: &resource,
            namespace: ns,
            name: &name,
        };
        let t0 = Instant::now();
        while !api::may(&client, &user, &groups, access).await? {
            if t0.elapsed() > Duration::from_secs(10) {
                return Err(format!("{user}: {access} not allowed 10 s after binding"));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let token = token_for(&client, sa).await?;
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let kubeconfig = dir.join(format!("{sa}.kubeconfig"));
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: e2e\n  cluster:\n    server: {url}\n    \
         certificate-authority: {ca}\nusers:\n- name: {sa}\n  user:\n    token: {token}\n\
         contexts:\n- name: e2e\n  context:\n    cluster: e2e\n    user: {sa}\n\
         current-context: e2e\n",
        url = cp.url,
        ca = cp.dir.join("certs/ca.crt").display(),
    );
    std::fs::write(&kubeconfig, text).map_err(|e| format!("{}: {e}", kubeconfig.display()))?;
    Ok(Identity {
        user,
        groups,
        token,
        kubeconfig,
    })
}

/// The binding as applied for `sa`: itself when it names the manifests' own ServiceAccount
/// and `sa` is that one, else a copy named `<name>.<sa>` with `sa` as its one subject.
fn bound_to(doc: &Value, sa: &str) -> Result<Value, String> {
    let name = doc["metadata"]["name"].as_str().unwrap_or_default();
    let own = json!([{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": NAMESPACE}]);
    if doc["subjects"] != own {
        return Err(format!(
            "binding {name}: the manifests bind {own}, found {}",
            doc["subjects"]
        ));
    }
    if sa == SERVICE_ACCOUNT {
        return Ok(doc.clone());
    }
    let mut copy = doc.clone();
    copy["metadata"]["name"] = json!(format!("{name}.{sa}"));
    copy["subjects"] = json!([{"kind": "ServiceAccount", "name": sa, "namespace": NAMESPACE}]);
    Ok(copy)
}

/// A token for ServiceAccount `otel-injector/<sa>` (TokenRequest, valid 1 h).
async fn token_for(client: &Client, sa: &str) -> Result<String, String> {
    let request = json!({
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"expirationSeconds": 3600}
    });
    let path = format!("/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{sa}/token");
    let r = api::send(client, Method::POST, &path, Some(&request)).await?;
    match r.body["status"]["token"].as_str() {
        Some(t) if r.status == 201 => Ok(t.to_owned()),
        _ => Err(format!("POST {path}: HTTP {}: {}", r.status, r.body)),
    }
}
