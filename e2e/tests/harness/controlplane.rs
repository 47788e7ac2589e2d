//! The control plane shared by this test process: started by the first test that needs it,
//! with the CRD installed and its conversion served by one shared webhook process; and the
//! lock of the tests that change what the others meet cluster-wide.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::sync::OnceCell;

use crate::support::api;
use crate::support::controlplane::ControlPlane;
use crate::support::tools::root;
use crate::support::webhook::Webhook;

pub(super) static SHARED: OnceCell<Result<ControlPlane, String>> = OnceCell::const_new();

/// The webhook process that converts Instrumentations for the shared control plane, as an
/// install's replicas do (its CRD's conversion points at it): v1beta1 reads and writes of
/// any test, and the controllers' discovery-driven lists, need it.
pub(super) static CONVERTER: std::sync::OnceLock<std::sync::Mutex<Webhook>> =
    std::sync::OnceLock::new();

pub(super) async fn serve_conversion(cp: &ControlPlane) -> Result<(), String> {
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

/// Every [`Env`] holds this shared while it runs; a test that changes what other tests'
/// webhooks and pods meet cluster-wide holds it exclusively: a real webhook configuration
/// of the shipped manifests (it would send every test's pods to a Service that does not
/// run) or an opt-in binding to the manifests' own ServiceAccount (the default identity
/// would no longer have exactly the default RBAC). Take it before [`LABELING`].
pub static CLUSTER_WIDE: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());
