//! The e2e test harness.
//!
//! One control plane (etcd + kube-apiserver) is shared by all tests of this process; it is
//! started by the first test that needs it, with `manifests/crd.yaml` installed and its
//! conversion webhook served by one shared `otel-injector serve` process. Each test
//! gets its own [`Env`]: its own `otel-injector serve` process, run as a ServiceAccount
//! with the RBAC of the shipped manifests ([`Rbac`]), and its own
//! MutatingWebhookConfiguration (built from `manifests/base/webhook.yaml` or, for the targeted
//! variant, `manifests/components/targeted/webhook-targeted.yaml`), whose `namespaceSelector` only matches
//! namespaces labeled `e2e.otel-injector.io/env=<id>`, and the test creates its namespaces
//! with that label. So tests running side by side never see each other's webhooks, pods or
//! counters. The shared servers die with the test process (see `support/process.rs`), also
//! when it is killed.

use otel_injector::keys::{
    INJECT_JAVA, INJECTED_ANNOTATION, INJECTED_LABEL, OPT_OUT_LABEL, STATUS_ANNOTATION,
};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use axum::http::Method;
use kube::Client;
use serde_json::{Value, json};
use tokio::sync::OnceCell;

use clap::Parser as _;
use k8s_openapi::api::core::v1::Pod;
use otel_injector::admission::mutate;
use otel_injector::cli::{Cli, Command};
use otel_injector::cluster::StaticCatalog;
use otel_injector::engine::{EngineConfig, Report, Snapshot};

use crate::support::api::{self, Registration, Response};
use crate::support::chart;
use crate::support::controlplane::ControlPlane;
use crate::support::identity::{self, Identity};
use crate::support::tools::root;
use crate::support::webhook::{Requests, Webhook};

pub const SCOPE_LABEL: &str = "e2e.otel-injector.io/env";

/// The stored pod's annotations less `otel-injector/status`, after checking that the status
/// starts with `status_prefix` and the `otel-injector/injected` label is `label`.
pub fn annotations_less_status(stored: &Value, status_prefix: &str, label: &str) -> Value {
    let mut annotations = stored["metadata"]["annotations"].clone();
    let status = annotations
        .as_object_mut()
        .and_then(|a| a.remove(STATUS_ANNOTATION))
        .unwrap_or_default();
    assert!(
        status
            .as_str()
            .is_some_and(|s| s.starts_with(status_prefix)),
        "{STATUS_ANNOTATION}: {status}"
    );
    assert_eq!(stored["metadata"]["labels"][INJECTED_LABEL], label);
    annotations
}
pub const JAVA_INIT: &str = "opentelemetry-auto-instrumentation-java";

static SHARED: OnceCell<Result<ControlPlane, String>> = OnceCell::const_new();

/// The webhook process that converts Instrumentations for the shared control plane, as an
/// install's replicas do (its CRD's conversion points at it): v1beta1 reads and writes of
/// any test, and the controllers' discovery-driven lists, need it.
static CONVERTER: std::sync::OnceLock<std::sync::Mutex<Webhook>> = std::sync::OnceLock::new();

async fn serve_conversion(cp: &ControlPlane) -> Result<(), String> {
    let mut w = Webhook::start_with(
        Path::new(env!("CARGO_BIN_EXE_e2e-otel-injector")),
        &cp.kubeconfig,
        &["--events=false".to_owned()],
    )
    .await?;
    w.wait_ready(Duration::from_secs(30)).await?;
    api::point_conversion(&cp.client(), &w.conversion_url(), Some(&w.certs.ca_cert)).await?;
    let _ = CONVERTER.set(std::sync::Mutex::new(w));
    Ok(())
}

/// The control plane shared by this test process (started on first use).
pub async fn cluster() -> &'static ControlPlane {
    let r = SHARED
        .get_or_init(|| async {
            let t0 = Instant::now();
            let mut cp = ControlPlane::start().await?;
            cp.start_controllers().await?;
            let client = cp.client();
            api::install_crds(&client, &root().join("manifests/crd.yaml")).await?;
            serve_conversion(&cp).await?;
            // The apiserver's first write to a new CRD takes about 2 s, once: pay it here,
            // not inside whichever test comes first.
            let warm = json!({
                "apiVersion": "opentelemetry.io/v1alpha1", "kind": "Instrumentation",
                "metadata": {"name": "warm-up", "namespace": "default"}, "spec": {}
            });
            let t1 = Instant::now();
            let r = api::send(
                &client,
                axum::http::Method::POST,
                "/apis/opentelemetry.io/v1alpha1/namespaces/default/instrumentations?dryRun=All",
                Some(&warm),
            )
            .await?;
            if r.status != 201 {
                return Err(format!(
                    "warm-up Instrumentation: HTTP {}: {}",
                    r.status, r.body
                ));
            }
            eprintln!(
                "[e2e] first Instrumentation write (dry run) took {:?}",
                t1.elapsed()
            );
            eprintln!(
                "[e2e] control plane at {} ready in {:?} (binaries found in {:?}), \
                 controllers and node ready in {:?}, setup done after {:?}; dir {}",
                cp.url,
                cp.timings.ready,
                cp.timings.binaries,
                cp.controllers.as_ref().map(|c| c.ready).unwrap_or_default(),
                t0.elapsed(),
                cp.dir.display()
            );
            Ok(cp)
        })
        .await;
    match r {
        Ok(cp) => {
            if let Err(e) = cp.check_alive() {
                panic!("the shared control plane died: {e}");
            }
            cp
        }
        Err(e) => panic!("the e2e control plane could not start: {e}"),
    }
}

/// The tests whose webhook runs the namespace labeler hold this while their webhook runs:
/// every labeler writes the label on every namespace of the cluster, so with one at a time
/// the label a test waits for on its namespace was written by its own webhook. A test that
/// asserts that nobody labels its namespace holds it too.
static LABELING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Every [`Env`] holds this shared while it runs; a test that changes what other tests'
/// webhooks and pods meet cluster-wide holds it exclusively: a real webhook configuration
/// of the shipped manifests (it would send every test's pods to a Service that does not
/// run) or an opt-in binding to the manifests' own ServiceAccount (the default identity
/// would no longer have exactly the default RBAC). Take it before [`LABELING`].
pub static CLUSTER_WIDE: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// Which shipped webhook configuration a test's webhook is registered with.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Variant {
    /// `manifests/base/webhook.yaml`: every pod but the excluded ones.
    Default,
    /// `manifests/components/targeted/webhook-targeted.yaml`: pods that ask, and pods of labeled namespaces.
    Targeted,
    /// The Helm chart's default rendering (`support/chart.rs`).
    Chart,
}

impl Variant {
    pub fn manifest(self) -> std::path::PathBuf {
        match self {
            Variant::Default => api::webhook_manifest_path(),
            Variant::Targeted => api::targeted_webhook_manifest_path(),
            Variant::Chart => chart::default_rendering_file().unwrap_or_else(|e| panic!("{e}")),
        }
    }
}

/// The RBAC a test's webhook runs with: the shipped manifests' roles bound to a
/// ServiceAccount whose token the webhook uses (never the admin kubeconfig).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Rbac {
    /// `base/otel-injector.yaml` and `components/events/rbac.yaml` (in every overlay) as
    /// shipped, for its own ServiceAccount `otel-injector`.
    Default,
    /// Plus `components/targeted/rbac.yaml` (patch on namespaces), for `e2e-targeted`.
    Targeted,
    /// Plus `components/built-in/rbac.yaml` (the built-in certificate's Secret and caBundle), for
    /// `e2e-self-signed`.
    SelfSigned,
    /// Plus `components/verify-exporter-tls/rbac.yaml` (list/watch Secrets and ConfigMaps), for
    /// `e2e-verify-exporter-tls`.
    VerifyExporterTls,
    /// The Roles, ClusterRoles and bindings of the Helm chart's default rendering, for
    /// `e2e-chart`.
    Chart,
    /// Plus `components/agent-delivery-auto` (get on `/metrics`, to read the `ImageVolume` gate),
    /// for `e2e-agent-delivery-auto`.
    AgentDeliveryAuto,
    /// Plus `components/status/rbac.yaml` (the pod watch, the status patch, the Lease) and
    /// `components/verify-exporter-tls/rbac.yaml` (for the Degraded condition of a missing
    /// Secret), for `e2e-status`.
    Status,
    /// Plus `components/rollout/rbac.yaml` (restart workloads, status.rollout, Events, the
    /// Lease), for `e2e-rollout`.
    Rollout,
    /// Plus `components/status/rbac.yaml`, `components/rollout/rbac.yaml` and
    /// `components/events/rbac.yaml`: the status controller finding missed pods, announcing
    /// them and the automatic rollout restarting them, for `e2e-missed`.
    Missed,
    /// Plus `components/status/rbac.yaml`, `components/rollback/rbac.yaml` and
    /// `components/rollout/rbac.yaml`: the safety net detecting failing workloads, rolling
    /// them back and announcing both, and the automatic rollout with its canary, for
    /// `e2e-safety`.
    SafetyNet,
}

impl Rbac {
    /// The ServiceAccount and the manifests whose RBAC it gets.
    fn account(self) -> (&'static str, &'static [&'static str]) {
        match self {
            Rbac::Default => (
                identity::SERVICE_ACCOUNT,
                &["base/otel-injector.yaml", "components/events/rbac.yaml"],
            ),
            Rbac::Targeted => (
                "e2e-targeted",
                &["base/otel-injector.yaml", "components/targeted/rbac.yaml"],
            ),
            Rbac::SelfSigned => (
                "e2e-self-signed",
                &["base/otel-injector.yaml", "components/built-in/rbac.yaml"],
            ),
            Rbac::VerifyExporterTls => (
                "e2e-verify-exporter-tls",
                &[
                    "base/otel-injector.yaml",
                    "components/verify-exporter-tls/rbac.yaml",
                ],
            ),
            Rbac::Chart => ("e2e-chart", &[]),
            Rbac::Status => (
                "e2e-status",
                &[
                    "base/otel-injector.yaml",
                    "components/status/rbac.yaml",
                    "components/verify-exporter-tls/rbac.yaml",
                ],
            ),
            Rbac::Rollout => (
                "e2e-rollout",
                &["base/otel-injector.yaml", "components/rollout/rbac.yaml"],
            ),
            Rbac::Missed => (
                "e2e-missed",
                &[
                    "base/otel-injector.yaml",
                    "components/status/rbac.yaml",
                    "components/rollout/rbac.yaml",
                    "components/events/rbac.yaml",
                ],
            ),
            Rbac::SafetyNet => (
                "e2e-safety",
                &[
                    "base/otel-injector.yaml",
                    "components/status/rbac.yaml",
                    "components/rollback/rbac.yaml",
                    "components/rollout/rbac.yaml",
                ],
            ),
            Rbac::AgentDeliveryAuto => (
                "e2e-agent-delivery-auto",
                &[
                    "base/otel-injector.yaml",
                    "components/agent-delivery-auto/rbac.yaml",
                ],
            ),
        }
    }
}

static IDENTITIES: tokio::sync::Mutex<BTreeMap<Rbac, Identity>> =
    tokio::sync::Mutex::const_new(BTreeMap::new());

/// The identity with this RBAC (made once per test process; see `support/identity.rs`).
pub async fn identity(rbac: Rbac) -> Identity {
    let cp = cluster().await;
    let mut made = IDENTITIES.lock().await;
    if let Some(id) = made.get(&rbac) {
        return id.clone();
    }
    let (sa, manifests) = rbac.account();
    let dir = cp.dir.join("identities");
    let id = if rbac == Rbac::Chart {
        let path = chart::default_rendering_file().unwrap_or_else(|e| panic!("{e}"));
        let docs = api::read_yaml_docs(&path).unwrap_or_else(|e| panic!("{e}"));
        identity::issue_from(cp, sa, &docs, &dir).await
    } else {
        identity::issue(cp, sa, manifests, &dir).await
    }
    .unwrap_or_else(|e| panic!("identity {rbac:?}: {e}"));
    made.insert(rbac, id.clone());
    id
}

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

/// One test's webhook process, its webhook configuration and its namespaces.
pub struct Env {
    pub id: String,
    pub client: Client,
    pub webhook: Webhook,
    /// The `serve` flags the webhook got beyond the harness's own (see [`Env::engine_config`]).
    pub args: Vec<String>,
    pub variant: Variant,
    /// Who the webhook is to the API server.
    pub identity: Identity,
    /// The name of the registered MutatingWebhookConfiguration.
    pub configuration: String,
    /// Declared after `webhook`: the webhook is killed before the locks are released.
    _labeling: Option<tokio::sync::MutexGuard<'static, ()>>,
    _cluster_wide: ClusterWide,
}

/// The e2e binary's `serve` as `identity` with `args` (serving `tls_dir`'s certificate, or
/// the harness's), once ready.
async fn ready_webhook(identity: &Identity, args: &[String], tls_dir: Option<&Path>) -> Webhook {
    let mut webhook = Webhook::start_serving(
        Path::new(env!("CARGO_BIN_EXE_e2e-otel-injector")),
        &identity.kubeconfig,
        args,
        tls_dir,
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    webhook
        .wait_ready(Duration::from_secs(30))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    webhook
}

/// [`CLUSTER_WIDE`], shared or exclusive.
enum ClusterWide {
    Shared(#[allow(dead_code)] tokio::sync::RwLockReadGuard<'static, ()>),
    Exclusive(#[allow(dead_code)] tokio::sync::RwLockWriteGuard<'static, ()>),
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

    /// Replaces the webhook process with a new one (same identity and flags, a new
    /// certificate and port), pointed at by this test's configuration: a restart, as a
    /// rolling update makes one. Returns once the new one is ready and registered.
    pub async fn restart_webhook(&mut self) {
        self.webhook
            .terminate(Duration::from_secs(10))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
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

    /// The engine settings this test's webhook runs with: its flags read by the real
    /// command-line parser, turned into an [`EngineConfig`] by the same `EngineArgs::build`
    /// as `otel_injector::serve` uses.
    /// (The parser also reads `OTEL_INJECTOR_*` variables, which the webhook process does
    /// not get: keep them out of the test's environment.)
    pub fn engine_config(&self) -> EngineConfig {
        let argv = ["otel-injector", "serve"]
            .into_iter()
            .map(String::from)
            .chain(self.args.iter().cloned());
        let cli = Cli::try_parse_from(argv).unwrap_or_else(|e| panic!("serve flags: {e}"));
        let Command::Serve(a) = cli.command else {
            unreachable!("parsed as serve")
        };
        a.engine.build()
    }

    /// The namespace as stored (must exist).
    pub async fn stored_namespace(&self, ns: &str) -> Value {
        api::get_namespace(&self.client, ns)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .unwrap_or_else(|| panic!("namespace {ns} is not stored"))
    }

    /// Polls the namespace (every 20 ms, at most 10 s) until the webhook's namespace label
    /// `otel-injector/inject=true` is `present` (or gone); returns how long that took.
    pub async fn await_namespace_label(&self, ns: &str, present: bool) -> Duration {
        let t0 = Instant::now();
        loop {
            let stored = self.stored_namespace(ns).await;
            if (stored["metadata"]["labels"][OPT_OUT_LABEL] == "true") == present {
                eprintln!(
                    "[e2e] {}: label {OPT_OUT_LABEL} {} on {ns} after {:?}",
                    self.id,
                    if present { "set" } else { "removed" },
                    t0.elapsed()
                );
                return t0.elapsed();
            }
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "the webhook did not {} the label {OPT_OUT_LABEL}=true on namespace {ns} \
                 within 10 s (started with {:?}); namespace metadata: {}",
                if present { "set" } else { "remove" },
                self.args,
                stored["metadata"]
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Sets (`Some`) or removes (`None`) one annotation of a namespace (merge patch).
    pub async fn annotate_namespace(&self, ns: &str, key: &str, value: Option<&str>) {
        let patch = json!({"metadata": {"annotations": {key: value}}});
        let r = api::merge_patch(&self.client, &format!("/api/v1/namespaces/{ns}"), &patch)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.status, 200, "patch namespace {ns}: {}", r.body);
    }

    /// Creates namespace `<id>-<suffix>` in this test's scope.
    pub async fn namespace(&self, suffix: &str, annotations: &[(&str, &str)]) -> String {
        self.namespace_labeled(suffix, &[], annotations).await
    }

    /// [`Env::namespace`] with further labels.
    pub async fn namespace_labeled(
        &self,
        suffix: &str,
        labels: &[(&str, &str)],
        annotations: &[(&str, &str)],
    ) -> String {
        let name = format!("{}-{suffix}", self.id);
        let mut all = vec![(SCOPE_LABEL, self.id.as_str())];
        all.extend_from_slice(labels);
        api::create_namespace(&self.client, &name, &all, annotations)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        name
    }

    /// Webhook configurations take effect asynchronously: creates (dry run) a marker pod
    /// that asks for injection until the webhook's request counter moves.
    pub async fn await_webhook(&self, ns: &str) {
        let before = self.webhook.requests().await.total();
        let marker = pod("marker", &[(INJECT_JAVA, "e2e-marker")]);
        let t0 = Instant::now();
        loop {
            let r = api::create_pod(&self.client, ns, &marker, true)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(r.status, 201, "marker pod: {}", r.body);
            if self.webhook.requests().await.total() > before {
                return;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "the webhook configuration for {ns} did not take effect within 30 s"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Creates an Instrumentation (must succeed); returns the object as sent.
    pub async fn instrumentation(&self, ns: &str, name: &str, spec: Value) -> Value {
        let inst = json!({
            "apiVersion": "opentelemetry.io/v1alpha1", "kind": "Instrumentation",
            "metadata": {"name": name, "namespace": ns}, "spec": spec
        });
        let r = api::create_instrumentation(&self.client, ns, &inst)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            r.status, 201,
            "create Instrumentation {ns}/{name}: {}",
            r.body
        );
        inst
    }

    /// Creates a pod for real; it must be accepted.
    pub async fn create(&self, ns: &str, pod: &Value) -> Response {
        let r = api::create_pod(&self.client, ns, pod, false)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.status, 201, "create pod in {ns}: {}", r.body);
        r
    }

    /// Creates a pod with `dryRun=All`; it must be accepted.
    pub async fn dry_run(&self, ns: &str, pod: &Value) -> Response {
        let r = api::create_pod(&self.client, ns, pod, true)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.status, 201, "dry-run pod in {ns}: {}", r.body);
        r
    }

    /// The pod as stored (GET); it must exist.
    pub async fn stored(&self, ns: &str, name: &str) -> Value {
        api::get_pod(&self.client, ns, name)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .unwrap_or_else(|| panic!("pod {ns}/{name} is not stored"))
    }

    /// The webhook's caches fill from watches: dry-runs `pod` until `ready` holds for the
    /// answer (bounded), so that the real case that follows sees a settled cache.
    pub async fn until_dry_run(
        &self,
        ns: &str,
        pod: &Value,
        what: &str,
        ready: impl Fn(&Response) -> bool,
    ) -> Response {
        let t0 = Instant::now();
        let calls_before = self.webhook.requests().await.total();
        loop {
            let r = self.dry_run(ns, pod).await;
            if ready(&r) {
                return r;
            }
            // The configuration is live for this namespace (`await_webhook`): a pod that is
            // not sent at all within a few seconds is filtered out by the configuration, and
            // waiting longer will not change that.
            let never_sent = t0.elapsed() > Duration::from_secs(3)
                && self.webhook.requests().await.total() == calls_before;
            if never_sent || t0.elapsed() > Duration::from_secs(20) {
                let calls = self.webhook.requests().await.total() - calls_before;
                let manifest_path = self.variant.manifest();
                let manifest = std::fs::read_to_string(&manifest_path);
                let mut hint = if manifest.is_ok_and(|m| m.contains("namespaceObject")) {
                    " The manifest's matchConditions use namespaceObject, which kube-apiserver \
                     binds only for admission policies: in webhook matchConditions it is \
                     always null, so a namespace's annotations cannot be seen there."
                        .to_owned()
                } else {
                    String::new()
                };
                if calls == 0.0 && self.variant == Variant::Targeted {
                    let labels = api::get_namespace(&self.client, ns)
                        .await
                        .ok()
                        .flatten()
                        .map(|n| n["metadata"]["labels"].clone());
                    hint.push_str(&format!(
                        " In the targeted variant a pod without inject-* annotations is sent \
                         only for a namespace labeled {OPT_OUT_LABEL}=true (by the webhook's \
                         labeler, which this test's webhook runs: {}); the namespace's labels: \
                         {labels:?}.",
                        self.args.contains(&"--label-namespaces=true".to_owned())
                    ));
                }
                panic!(
                    "{what}: not seen within {:?} in namespace {ns}; the webhook was called \
                     {calls} times for these dry-runs (0 means the apiserver never sent the \
                     pod: check the namespaceSelector and matchConditions of {}). Last \
                     answer: warnings {:?}, annotations {}, init containers {}.{hint}",
                    t0.elapsed(),
                    manifest_path.display(),
                    r.warnings,
                    r.body["metadata"]["annotations"],
                    r.body["spec"]["initContainers"],
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub async fn requests(&self) -> Requests {
        self.webhook.requests().await
    }
}

/// The `otel-injector` binary a measurement runs: `$E2E_WEBHOOK_BIN` (the recipes pass the
/// release build), else this build's.
pub fn webhook_binary() -> std::path::PathBuf {
    std::env::var_os("E2E_WEBHOOK_BIN")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from(env!("CARGO_BIN_EXE_e2e-otel-injector")))
}

/// The `p`th percentile of `sorted`, in milliseconds.
pub fn percentile(sorted: &[Duration], p: usize) -> f64 {
    sorted[(sorted.len() * p / 100).min(sorted.len() - 1)].as_secs_f64() * 1e3
}

/// A one-container pod (`app`, image `shop/checkout:1.4.2`, env `PORT=8080`) with these
/// annotations (none: no `annotations` key at all).
pub fn pod(name: &str, annotations: &[(&str, &str)]) -> Value {
    let mut p = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "app", "image": "shop/checkout:1.4.2",
                                 "env": [{"name": "PORT", "value": "8080"}]}]}
    });
    if !annotations.is_empty() {
        p["metadata"]["annotations"] = annotations
            .iter()
            .map(|(k, v)| (k.to_string(), json!(v)))
            .collect::<serde_json::Map<_, _>>()
            .into();
    }
    p
}

/// [`pod`] with these labels.
pub fn pod_labeled(name: &str, annotations: &[(&str, &str)], labels: &[(&str, &str)]) -> Value {
    let mut p = pod(name, annotations);
    p["metadata"]["labels"] = labels
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect::<serde_json::Map<_, _>>()
        .into();
    p
}

/// The lines of the decision counters (`otel_injector_injections_total`,
/// `otel_injector_not_injected_total`) in a `/metrics` text.
pub fn decision_counters(metrics: &str) -> Vec<String> {
    metrics
        .lines()
        .filter(|l| {
            l.starts_with("otel_injector_injections_total")
                || l.starts_with("otel_injector_not_injected_total")
        })
        .map(str::to_owned)
        .collect()
}

/// True when the returned or stored pod carries the injection marker.
pub fn is_injected(pod: &Value) -> bool {
    pod["metadata"]["annotations"][INJECTED_ANNOTATION].is_string()
}

/// Asserts that `stored` is `sent` as far as injection goes: same annotations (but the
/// `otel-injector/status` of a skipped pod), no init containers or volumes added, each
/// container's env and mounts as sent.
pub fn assert_unchanged(stored: &Value, sent: &Value) {
    let norm = |v: &Value| if v.is_null() { json!({}) } else { v.clone() };
    // A pod that asked and was skipped carries its outcome (e2e/tests/outcome.rs checks it).
    let mut stored_annotations = norm(&stored["metadata"]["annotations"]);
    if let Some(a) = stored_annotations.as_object_mut() {
        a.remove(STATUS_ANNOTATION);
    }
    assert_eq!(
        stored_annotations,
        norm(&sent["metadata"]["annotations"]),
        "annotations changed: {stored}"
    );
    assert!(
        stored["spec"]["initContainers"].is_null(),
        "init containers added: {stored}"
    );
    assert!(
        stored["spec"]["volumes"].is_null(),
        "volumes added: {stored}"
    );
    let sent_cs = sent["spec"]["containers"].as_array().unwrap();
    let stored_cs = stored["spec"]["containers"].as_array().unwrap();
    assert_eq!(stored_cs.len(), sent_cs.len());
    for (s, o) in stored_cs.iter().zip(sent_cs) {
        assert_eq!(s["env"], o["env"], "env of {} changed", o["name"]);
        assert_eq!(
            s["volumeMounts"], o["volumeMounts"],
            "mounts of {} changed",
            o["name"]
        );
    }
}

/// Asserts `actual` equals `expected` except for keys listed in `defaults` that only
/// `actual` has (fields the apiserver defaults on storage, e.g. `imagePullPolicy`).
pub fn assert_eq_but_defaults(actual: &Value, expected: &Value, defaults: &[&str], what: &str) {
    let (Some(a), Some(e)) = (actual.as_object(), expected.as_object()) else {
        panic!("{what}: not objects: {actual} vs {expected}");
    };
    for (k, v) in e {
        assert_eq!(a.get(k), Some(v), "{what}: field {k}");
    }
    for k in a.keys() {
        assert!(
            e.contains_key(k) || defaults.contains(&k.as_str()),
            "{what}: unexpected field {k}: {}",
            a[k]
        );
    }
}

/// The env entries of container `i` with this name.
pub fn env_named<'a>(pod: &'a Value, i: usize, name: &str) -> Vec<&'a Value> {
    pod["spec"]["containers"][i]["env"]
        .as_array()
        .map(|env| env.iter().filter(|e| e["name"] == name).collect())
        .unwrap_or_default()
}

/// The value of env var `name` of container `i` (must be present exactly once).
pub fn env_value<'a>(pod: &'a Value, i: usize, name: &str) -> &'a str {
    let found = env_named(pod, i, name);
    assert_eq!(found.len(), 1, "{name} in {}", pod["spec"]["containers"][i]);
    found[0]["value"].as_str().unwrap_or("")
}

/// An Instrumentation spec with just an exporter endpoint.
pub fn endpoint_spec(endpoint: &str) -> Value {
    json!({"exporter": {"endpoint": endpoint}})
}

/// The label is the webhook's, by server-side apply: the managed fields show field manager
/// `otel-injector` (operation `Apply`) owning it.
pub fn assert_label_applied_by_the_webhook(namespace: &Value) {
    let key = format!("f:{}", OPT_OUT_LABEL);
    let owners: Vec<&Value> = namespace["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["fieldsV1"]["f:metadata"]["f:labels"].get(&key).is_some())
        .collect();
    assert_eq!(owners.len(), 1, "owners of {key}: {owners:?}");
    assert_eq!(owners[0]["manager"], "otel-injector", "{:?}", owners[0]);
    assert_eq!(owners[0]["operation"], "Apply", "{:?}", owners[0]);
}

/// The e2e API server's version (scripts/e2e-build.sh builds Kubernetes v1.37.2).
pub const APISERVER_VERSION: (u32, u32) = (1, 37);

/// What the engine itself makes of `pod` created in `ns`, given the Instrumentations
/// `insts` (as sent to the apiserver) and the test webhook's flags: `decide` on a
/// [`StaticCatalog`] of them, its JSON patch applied to the pod as the test sends it.
pub fn engine_result(env: &Env, ns: &str, insts: &[Value], pod: &Value) -> (Value, Report) {
    // JSON is YAML: one document per Instrumentation.
    let yaml = insts
        .iter()
        .map(Value::to_string)
        .collect::<Vec<_>>()
        .join("\n---\n");
    let catalog = StaticCatalog::from_yaml(&yaml)
        .unwrap_or_else(|e| panic!("Instrumentations for the engine: {e}"))
        .with_namespace(ns, &[]);
    let typed: Pod = serde_json::from_value(pod.clone()).expect("a valid Pod");
    let config = env.engine_config();
    let mut snapshot = Snapshot::take(&catalog, ns, &config);
    // What the webhook reads from the real API server (`auto` modes depend on it).
    snapshot.server_version = Some(APISERVER_VERSION);
    let (patch, report) = mutate(&snapshot, &typed);
    let mut out = pod.clone();
    json_patch::patch(&mut out, &json_patch::Patch(patch))
        .unwrap_or_else(|e| panic!("the engine's patch does not apply: {e}"));
    (out, report)
}

/// Fields the apiserver writes into a stored pod that neither the test nor the webhook
/// wrote, with the value it writes (JSON; `None`: generated, any value). Paths are object
/// keys from the pod's root, `[]` standing for every element of a list. Nothing else may
/// differ between the stored pod and the engine's result.
pub const APISERVER_DEFAULTS: &[(&str, Option<&str>)] = &[
    // Set on every object.
    ("metadata.namespace", None),
    ("metadata.uid", None),
    ("metadata.resourceVersion", None),
    ("metadata.creationTimestamp", None),
    ("metadata.generation", Some("1")),
    ("metadata.managedFields", None),
    ("status", None),
    // Pod defaults (SetDefaults_PodSpec) and the DefaultTolerationSeconds admission plugin.
    ("spec.dnsPolicy", Some(r#""ClusterFirst""#)),
    ("spec.restartPolicy", Some(r#""Always""#)),
    ("spec.schedulerName", Some(r#""default-scheduler""#)),
    ("spec.securityContext", Some("{}")),
    ("spec.terminationGracePeriodSeconds", Some("30")),
    ("spec.enableServiceLinks", Some("true")),
    ("spec.priority", Some("0")),
    ("spec.preemptionPolicy", Some(r#""PreemptLowerPriority""#)),
    ("spec.tolerations", Some(DEFAULT_TOLERATIONS)),
    // Container defaults, for app containers, init containers and the Go sidecar alike.
    (
        "spec.containers[].imagePullPolicy",
        Some(r#""IfNotPresent""#),
    ),
    (
        "spec.containers[].terminationMessagePath",
        Some(r#""/dev/termination-log""#),
    ),
    (
        "spec.containers[].terminationMessagePolicy",
        Some(r#""File""#),
    ),
    ("spec.containers[].resources", Some("{}")),
    (
        "spec.initContainers[].imagePullPolicy",
        Some(r#""IfNotPresent""#),
    ),
    (
        "spec.initContainers[].terminationMessagePath",
        Some(r#""/dev/termination-log""#),
    ),
    (
        "spec.initContainers[].terminationMessagePolicy",
        Some(r#""File""#),
    ),
    (
        "spec.containers[].env[].valueFrom.fieldRef.apiVersion",
        Some(r#""v1""#),
    ),
    (
        "spec.initContainers[].env[].valueFrom.fieldRef.apiVersion",
        Some(r#""v1""#),
    ),
    // Probe and volume source defaults.
    ("spec.containers[].readinessProbe.timeoutSeconds", Some("1")),
    ("spec.containers[].readinessProbe.periodSeconds", Some("10")),
    (
        "spec.containers[].readinessProbe.successThreshold",
        Some("1"),
    ),
    (
        "spec.containers[].readinessProbe.failureThreshold",
        Some("3"),
    ),
    (
        "spec.containers[].readinessProbe.httpGet.scheme",
        Some(r#""HTTP""#),
    ),
    ("spec.volumes[].configMap.defaultMode", Some("420")),
    ("spec.volumes[].hostPath.type", Some(r#""""#)),
    // Image volumes (agent delivery `image-volume`): pulled like a container's image.
    ("spec.volumes[].image.pullPolicy", Some(r#""IfNotPresent""#)),
];

/// What the DefaultTolerationSeconds admission plugin adds to a pod without tolerations.
const DEFAULT_TOLERATIONS: &str = r#"[
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
]"#;

/// Asserts that the stored pod is `expected` (the engine's result) field by field: every
/// field of `expected` with the same value, lists with the same length and order, and no
/// other field but those of [`APISERVER_DEFAULTS`] with their value. Returns the defaults
/// that were met (as paths).
pub fn assert_stored_as_expected(stored: &Value, expected: &Value) -> BTreeSet<String> {
    let mut diffs = Vec::new();
    let mut met = BTreeSet::new();
    compare("", "", stored, expected, &mut diffs, &mut met);
    assert!(
        diffs.is_empty(),
        "the stored pod differs from the engine's result:\n  {}\nstored: {stored}\nexpected: {expected}",
        diffs.join("\n  ")
    );
    met
}

fn compare(
    pattern: &str,
    at: &str,
    stored: &Value,
    expected: &Value,
    diffs: &mut Vec<String>,
    met: &mut BTreeSet<String>,
) {
    let join = |base: &str, key: &str| {
        if base.is_empty() {
            key.to_owned()
        } else {
            format!("{base}.{key}")
        }
    };
    match (stored, expected) {
        (Value::Object(s), Value::Object(e)) => {
            for (k, ev) in e {
                match s.get(k) {
                    Some(sv) => compare(&join(pattern, k), &join(at, k), sv, ev, diffs, met),
                    None => diffs.push(format!("{}: missing (expected {ev})", join(at, k))),
                }
            }
            for (k, sv) in s.iter().filter(|(k, _)| !e.contains_key(*k)) {
                let p = join(pattern, k);
                match APISERVER_DEFAULTS.iter().find(|(d, _)| *d == p) {
                    Some((_, None)) => {
                        met.insert(p);
                    }
                    Some((_, Some(v))) if serde_json::from_str::<Value>(v).unwrap() == *sv => {
                        met.insert(p);
                    }
                    Some((_, Some(v))) => diffs.push(format!(
                        "{}: {sv}, not the apiserver default {v}",
                        join(at, k)
                    )),
                    None => diffs.push(format!("{}: unexpected {sv}", join(at, k))),
                }
            }
        }
        (Value::Array(s), Value::Array(e)) if s.len() == e.len() => {
            for (i, (sv, ev)) in s.iter().zip(e).enumerate() {
                compare(
                    &format!("{pattern}[]"),
                    &format!("{at}[{i}]"),
                    sv,
                    ev,
                    diffs,
                    met,
                );
            }
        }
        (Value::Array(s), Value::Array(e)) => diffs.push(format!(
            "{at}: {} elements stored, {} expected: {stored} vs {expected}",
            s.len(),
            e.len()
        )),
        _ if stored == expected => {}
        _ => diffs.push(format!("{at}: {stored}, expected {expected}")),
    }
}
