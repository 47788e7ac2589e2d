//! A test's own webhook: [`Options`], started with the identity of its RBAC, registered with its
//! variant's configuration scoped to its namespaces, restarted, and checked against the manifest.

use std::path::Path;
use std::time::Duration;

use axum::http::Method;
use serde_json::{Value, json};

use crate::support::api::{self, Registration};
use crate::support::identity::Identity;
use crate::support::webhook::Webhook;

use super::controlplane::{CLUSTER_WIDE, cluster};
use super::rbac::{Rbac, Variant, identity};
use super::{ClusterWide, Env, SCOPE_LABEL};

/// The tests whose webhook runs the namespace labeler hold this while their webhook runs:
/// every labeler writes the label on every namespace of the cluster, so with one at a time
/// the label a test waits for on its namespace was written by its own webhook. A test that
/// asserts that nobody labels its namespace holds it too.
pub(super) static LABELING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// How a test's webhook is started and registered.
#[derive(Clone, Debug)]
pub struct Options {
    /// `failurePolicy` of every entry of the configuration.
    pub failure_policy: &'static str,
    /// The shipped configuration whose entries are registered.
    pub variant: Variant,
    /// The RBAC of the webhook's identity.
    pub rbac: Rbac,
    /// Run the namespace labeler (`--label-namespaces`, off by default in the product, on in
    /// the targeted variant). Needs [`Rbac::Targeted`]. See [`LABELING`].
    pub label_namespaces: bool,
    /// No other test's labeler runs while this webhook runs (implied by
    /// `label_namespaces`): for a test that asserts its namespaces stay unlabeled.
    pub exclusive_namespace_labels: bool,
    /// Further `otel-injector serve` flags.
    pub args: Vec<String>,
    /// Register the configuration with the harness's CA as `caBundle` (the webhook serves
    /// the harness's certificate). `false`: an empty `caBundle`, for a webhook that makes
    /// its own certificate and writes the `caBundle` itself (`--certificate-secret`).
    pub register_ca_bundle: bool,
    /// The configuration's name (an existing one is replaced); default
    /// `e2e-<id>-a-otel-injector`.
    pub configuration_name: Option<String>,
    /// Serve `tls.crt`/`tls.key` of this directory (e.g. a projected Secret) instead of the
    /// harness's certificate; then `register_ca_bundle` must be `false`.
    pub tls_dir: Option<std::path::PathBuf>,
    /// Annotations of the configuration (e.g. cert-manager's inject-ca-from).
    pub configuration_annotations: serde_json::Map<String, Value>,
    /// Hold [`CLUSTER_WIDE`] exclusively while the webhook runs: no other test's webhook
    /// runs meanwhile (a status controller writes the status of every Instrumentation of
    /// the cluster).
    pub exclusive: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            failure_policy: "Ignore",
            variant: Variant::Default,
            rbac: Rbac::Default,
            label_namespaces: false,
            exclusive_namespace_labels: false,
            args: Vec::new(),
            register_ca_bundle: true,
            configuration_name: None,
            tls_dir: None,
            configuration_annotations: serde_json::Map::new(),
            exclusive: false,
        }
    }
}

/// `serve` of [`webhook_binary`] (the e2e build unless a measurement's recipe names the
/// release build) as `identity` with `args` (serving `tls_dir`'s certificate, or the
/// harness's), once ready.
pub(super) async fn ready_webhook(
    identity: &Identity,
    args: &[String],
    tls_dir: Option<&Path>,
) -> Webhook {
    let mut webhook =
        Webhook::start_serving(&webhook_binary(), &identity.kubeconfig, args, tls_dir)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    webhook
        .wait_ready(Duration::from_secs(30))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    webhook
}

impl Env {
    /// A webhook with the default install's configuration and RBAC, `failurePolicy:
    /// Ignore`, without the namespace labeler.
    pub async fn start(id: &str) -> Env {
        Self::start_with(id, Options::default()).await
    }

    /// [`Env::start`] registered with the targeted variant's configuration (still without
    /// the labeler, with the default RBAC).
    pub async fn targeted(id: &str, failure_policy: &'static str) -> Env {
        Self::start_with(
            id,
            Options {
                failure_policy,
                variant: Variant::Targeted,
                ..Options::default()
            },
        )
        .await
    }

    /// The targeted variant as deployed: its configuration, its RBAC and the namespace
    /// labeler (`--label-namespaces=true`). Waits until no other test's labeling webhook
    /// runs.
    pub async fn labeling(id: &str) -> Env {
        Self::start_with(
            id,
            Options {
                variant: Variant::Targeted,
                rbac: Rbac::Targeted,
                label_namespaces: true,
                ..Options::default()
            },
        )
        .await
    }

    /// Starts `otel-injector serve` with the identity of `options.rbac` (waits for `/readyz`:
    /// caches synced) and registers it as `e2e-<id>-a-otel-injector`: every entry of the
    /// variant's manifest, each scoped to namespaces labeled with `id`.
    pub async fn start_with(id: &str, options: Options) -> Env {
        let cluster_wide = if options.exclusive {
            ClusterWide::Exclusive(CLUSTER_WIDE.write().await)
        } else {
            ClusterWide::Shared(CLUSTER_WIDE.read().await)
        };
        let labeling = if options.label_namespaces || options.exclusive_namespace_labels {
            Some(LABELING.lock().await)
        } else {
            None
        };
        let cp = cluster().await;
        let client = cp.client();
        let identity = identity(options.rbac).await;
        let mut args = vec![format!("--label-namespaces={}", options.label_namespaces)];
        args.extend(options.args);
        assert!(
            options.tls_dir.is_none() || !options.register_ca_bundle,
            "the harness's CA does not sign a certificate of tls_dir"
        );
        let webhook = ready_webhook(&identity, &args, options.tls_dir.as_deref()).await;
        let name = options
            .configuration_name
            .unwrap_or_else(|| format!("e2e-{id}-a-otel-injector"));
        let manifest = options.variant.manifest();
        let mut config = api::webhook_configuration(&Registration {
            manifest: &manifest,
            name: &name,
            url: &webhook.url(),
            ca_pem: if options.register_ca_bundle {
                &webhook.certs.ca_cert
            } else {
                ""
            },
            failure_policy: options.failure_policy,
            timeout_seconds: 5,
            scope: Some((SCOPE_LABEL, id)),
        })
        .unwrap_or_else(|e| panic!("{e}"));
        if !options.configuration_annotations.is_empty() {
            config["metadata"]["annotations"] = Value::Object(options.configuration_annotations);
        }
        api::replace_webhook_configuration(&client, &config)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        Env {
            id: id.to_owned(),
            client,
            webhook,
            args,
            variant: options.variant,
            identity,
            configuration: name,
            _labeling: labeling,
            _cluster_wide: cluster_wide,
        }
    }

    /// Stops the webhook process (SIGTERM, its drain), leaving the configuration pointed at
    /// it: the API server's calls are refused, and `failurePolicy: Ignore` admits pods without
    /// it, as when every replica is down. [`Env::restart_webhook`] brings it back.
    pub async fn stop_webhook(&mut self) {
        self.webhook
            .terminate(Duration::from_secs(10))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }

    /// Replaces the webhook process with a new one (same identity and flags, a new
    /// certificate and port), pointed at by this test's configuration: a restart, as a
    /// rolling update makes one. Returns once the new one is ready and registered.
    pub async fn restart_webhook(&mut self) {
        if !self.webhook.exited() {
            self.stop_webhook().await;
        }
        let webhook = ready_webhook(&self.identity, &self.args, None).await;
        let path = format!(
            "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{}",
            self.configuration
        );
        let r = api::send(&self.client, Method::GET, &path, None)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let mut config = r.body;
        for entry in config["webhooks"].as_array_mut().expect("webhooks") {
            entry["clientConfig"] = json!({
                "url": webhook.url(),
                "caBundle": api::base64_of(webhook.certs.ca_cert.as_bytes()),
            });
        }
        let r = api::send(&self.client, Method::PUT, &path, Some(&config))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.status, 200, "{}", r.body);
        self.webhook = webhook;
    }

    /// Asserts that this test's MutatingWebhookConfiguration, as stored, has every entry of
    /// its variant's manifest, each with its own name, rules, matchConditions, objectSelector
    /// and namespaceSelector expressions, plus the scope label, pointed at this test's
    /// webhook. Returns the entries' names.
    pub async fn assert_registered_as_the_manifest(&self) -> Vec<String> {
        let path = self.variant.manifest();
        let manifest = api::read_yaml_docs(&path)
            .unwrap_or_else(|e| panic!("{e}"))
            .into_iter()
            .find(|d| d["kind"] == "MutatingWebhookConfiguration")
            .expect("a MutatingWebhookConfiguration in the manifest");
        let name = &self.configuration;
        let r = api::send(
            &self.client,
            axum::http::Method::GET,
            &format!("/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{name}"),
            None,
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.status, 200, "GET {name}: {}", r.body);
        let want = manifest["webhooks"].as_array().expect("webhooks");
        let got = r.body["webhooks"].as_array().expect("webhooks");
        assert_eq!(got.len(), want.len(), "entries of {name}: {}", r.body);
        for (g, w) in got.iter().zip(want) {
            let entry = &w["name"];
            assert_eq!(g["name"], *entry);
            for field in [
                "rules",
                "matchConditions",
                "sideEffects",
                "reinvocationPolicy",
                "matchPolicy",
                "admissionReviewVersions",
            ] {
                assert_eq!(g[field], w[field], "{entry}: {field}");
            }
            // An absent objectSelector is stored as {} (everything).
            let object_selector = if w["objectSelector"].is_null() {
                json!({})
            } else {
                w["objectSelector"].clone()
            };
            assert_eq!(
                g["objectSelector"], object_selector,
                "{entry}: objectSelector"
            );
            assert_eq!(
                g["namespaceSelector"]["matchExpressions"],
                w["namespaceSelector"]["matchExpressions"],
                "{entry}: the manifest's namespaceSelector expressions"
            );
            assert_eq!(
                g["namespaceSelector"]["matchLabels"],
                json!({SCOPE_LABEL: self.id}),
                "{entry}: the test's scope"
            );
            assert_eq!(g["clientConfig"]["url"], self.webhook.url(), "{entry}");
        }
        got.iter()
            .map(|g| g["name"].as_str().unwrap_or("").to_owned())
            .collect()
    }
}

/// The `otel-injector` binary a measurement runs: `$E2E_WEBHOOK_BIN` (the recipes pass the
/// release build), else this build's.
pub fn webhook_binary() -> std::path::PathBuf {
    std::env::var_os("E2E_WEBHOOK_BIN")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from(env!("CARGO_BIN_EXE_e2e-otel-injector")))
}

/// This build's `otel-injector` with `args` against `kubeconfig`, once `/readyz` answers (at
/// most 30 s): the webhook of a test with a control plane of its own. Panics on a failure.
pub async fn webhook_ready(kubeconfig: &std::path::Path, args: &[String]) -> Webhook {
    let binary = std::path::Path::new(env!("CARGO_BIN_EXE_e2e-otel-injector"));
    let mut w = Webhook::start_with(binary, kubeconfig, args)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    w.wait_ready(Duration::from_secs(30))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    w
}
