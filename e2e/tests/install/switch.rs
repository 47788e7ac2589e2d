//! docs/migration.md's switch from the OpenTelemetry Operator, its `sh` blocks read from the
//! guide and run as written (`real.rs`) against an Operator-shaped install (`e2e/operator/`: a
//! stand-in chart `opentelemetry-operator` with the Operator's values layout and names, its
//! v1alpha1-only CRD and a webhook that answers every pod without a patch):
//! - before the switch, an app's pod asking for Java by annotation is admitted by the
//!   Operator's webhook alone (the stand-in injects nothing);
//! - step 1 installs this webhook beside it, on the Operator's CRD: a new pod is injected
//!   exactly once, both webhooks called (the Operator's first: the API server's counters);
//! - step 2 (Helm) adds the five `--enable-*-instrumentation=false` flags to the manager
//!   and keeps the flag the release had; run again, it adds nothing twice; step 2 (plain
//!   manifests) appends them to a manager container's args;
//! - step 3 restarts the app that the Operator admitted: its new pod is injected.
//!
//! Replaced in the guide's text: the chart reference `open-telemetry/opentelemetry-operator`
//! by the stand-in's path. cert-manager, which this webhook's default install needs, is
//! installed first as in the README (its local manifest).

use std::time::{Duration, Instant};

use axum::http::Method;
use serde_json::{Value, json};

use super::real::{CERT_MANAGER_URL, RealCluster, block, image, sh_blocks};
use crate::support::api;
use crate::support::runner::Images;
use crate::support::tools::root;

const OPERATOR_NS: &str = "opentelemetry-operator-system";
const ENABLE_FLAGS: [&str; 5] = [
    "--enable-java-instrumentation=false",
    "--enable-nodejs-instrumentation=false",
    "--enable-python-instrumentation=false",
    "--enable-dotnet-instrumentation=false",
    "--enable-apache-httpd-instrumentation=false",
];

/// The args of the first container of Deployment `name` in the Operator's namespace.
async fn manager_args(cluster: &RealCluster, name: &str) -> Vec<String> {
    let d = cluster
        .get(&format!(
            "/apis/apps/v1/namespaces/{OPERATOR_NS}/deployments/{name}"
        ))
        .await
        .unwrap_or_else(|| panic!("no Deployment {name}"));
    serde_json::from_value(d["spec"]["template"]["spec"]["containers"][0]["args"].clone()).unwrap()
}

/// A Deployment `name` in `my-app` whose pod asks for Java by annotation.
fn app(name: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": "my-app"},
        "spec": {"selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name},
                    "annotations": {"instrumentation.opentelemetry.io/inject-java": "true"}},
                "spec": {"containers": [{"name": name, "image": "eclipse-temurin:21-jre"}]}}}})
}

/// The pods of Deployment `app` once one of them satisfies `done` (bounded).
async fn until_pod(cluster: &RealCluster, app: &str, done: impl Fn(&Value) -> bool) -> Value {
    let path = format!("/api/v1/namespaces/my-app/pods?labelSelector=app%3D{app}");
    let t0 = Instant::now();
    loop {
        let pods = cluster.get(&path).await.unwrap();
        if let Some(p) = pods["items"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["metadata"]["deletionTimestamp"].is_null() && done(p))
        {
            return p.clone();
        }
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "{app}: no such pod in 120 s: {pods}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Creates the Deployment `d` (in its `metadata.namespace`).
async fn create_deployment(client: &kube::Client, d: &Value) {
    let ns = d["metadata"]["namespace"].as_str().unwrap();
    let path = format!("/apis/apps/v1/namespaces/{ns}/deployments");
    let r = api::send(client, Method::POST, &path, Some(d))
        .await
        .unwrap();
    assert_eq!(r.status, 201, "{}", r.body);
}

fn outcome(pod: &Value) -> Option<&str> {
    pod["metadata"]["annotations"]["otel-injector/status"].as_str()
}

/// `apiserver_admission_webhook_request_total` of the webhook entry `name` that answered 200,
/// summed.
async fn calls(cluster: &RealCluster, name: &str) -> f64 {
    let request = axum::http::Request::get("/metrics")
        .body(Vec::new())
        .unwrap();
    let text = cluster.client().request_text(request).await.unwrap();
    text.lines()
        .filter(|l| {
            l.starts_with("apiserver_admission_webhook_request_total{")
                && l.contains(&format!("name=\"{name}\""))
                && l.contains("code=\"200\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test]
async fn the_switch_guide_as_written_moves_injection_from_the_operator() {
    let blocks = sh_blocks("docs/migration.md", "## From the OpenTelemetry Operator");
    let step1 = block(&blocks, "helm install otel-injector");
    let step2_helm = block(&blocks, "helm get values opentelemetry-operator");
    let step2_plain = block(
        &blocks,
        "patch deployment opentelemetry-operator-controller-manager",
    );
    let step3 = block(&blocks, "otel-injector rollout");
    let readme = sh_blocks("README.md", "## Install");
    let cert_manager = block(&readme, CERT_MANAGER_URL);

    let manager = Images(
        [(
            "ghcr.io/open-telemetry/opentelemetry-operator/opentelemetry-operator:e2e".to_owned(),
            image(root().join("e2e/operator"), &["python3", "/manager.py"]),
        )]
        .into(),
    );
    let cluster = RealCluster::start(&["otel-injector", OPERATOR_NS], manager).await;
    let client = cluster.client();

    // The Operator, with a flag of its own.
    cluster
        .sh(
            "the Operator",
            &format!(
                "helm install opentelemetry-operator e2e/operator/chart --namespace {OPERATOR_NS} \
                 --create-namespace --set-json 'manager.extraArgs=[\"--zap-log-level=debug\"]'"
            ),
        )
        .await;
    let local = cluster.cert_manager_manifest();
    cluster
        .sh(
            "cert-manager",
            &cert_manager
                .lines()
                .filter(|l| !l.starts_with("helm install"))
                .collect::<Vec<_>>()
                .join("\n")
                .replace(CERT_MANAGER_URL, local.to_str().unwrap()),
        )
        .await;
    api::create_namespace(&client, "my-app", &[], &[])
        .await
        .unwrap();
    let inst = json!({"apiVersion": "opentelemetry.io/v1alpha1", "kind": "Instrumentation",
        "metadata": {"name": "default", "namespace": "my-app"},
        "spec": {"exporter": {"endpoint": "http://otel-collector.observability:4318"}}});
    let r = api::create_instrumentation(&client, "my-app", &inst)
        .await
        .unwrap();
    assert_eq!(r.status, 201, "{}", r.body);
    // Before the switch: the Operator's webhook answers the app's pod (with no patch).
    let t0 = Instant::now();
    while cluster.agent.running(OPERATOR_NS).is_none() {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "{:?}",
            cluster.agent.error()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let before = calls(&cluster, "mpod.kb.io").await;
    create_deployment(&client, &app("shop")).await;
    let shop = until_pod(&cluster, "shop", |_| true).await;
    assert_eq!(outcome(&shop), None, "{}", shop["metadata"]);
    assert!(
        calls(&cluster, "mpod.kb.io").await > before,
        "the Operator's webhook answered"
    );

    // Step 1: this webhook beside the Operator, on the Operator's CRD.
    cluster.sh("step 1", step1).await;
    cluster.until_served("step 1", false).await;
    create_deployment(&client, &app("cart")).await;
    let cart = until_pod(&cluster, "cart", |p| outcome(p).is_some()).await;
    assert!(
        outcome(&cart).is_some_and(|o| o.starts_with("java=injected my-app/default ")),
        "{}",
        cart["metadata"]
    );
    let inits: Vec<&str> = cart["spec"]["initContainers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(
        inits,
        ["opentelemetry-auto-instrumentation-java"],
        "injected once"
    );
    assert!(calls(&cluster, "pods.otel-injector.opentelemetry.io").await > 0.0);

    // Step 2, Helm: the flags added, the release's own kept; again: nothing added twice.
    let helm = step2_helm.replace(
        "open-telemetry/opentelemetry-operator ",
        "e2e/operator/chart ",
    );
    assert_ne!(helm, step2_helm, "the guide upgrades the Operator's chart");
    let want: Vec<String> = ["--webhook-port=9444", "--zap-log-level=debug"]
        .into_iter()
        .chain(ENABLE_FLAGS)
        .map(str::to_owned)
        .collect();
    for run in ["step 2 (Helm)", "step 2 (Helm), again"] {
        cluster.sh(run, &helm).await;
        assert_eq!(
            manager_args(&cluster, "opentelemetry-operator").await,
            want,
            "{run}"
        );
    }

    // Step 2, plain manifests: appended to the manager container's args.
    let plain = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "opentelemetry-operator-controller-manager", "namespace": OPERATOR_NS},
        "spec": {"selector": {"matchLabels": {"control-plane": "controller-manager"}},
            "template": {"metadata": {"labels": {"control-plane": "controller-manager"}},
                "spec": {"containers": [{"name": "manager",
                    "image": "ghcr.io/open-telemetry/opentelemetry-operator/opentelemetry-operator:v0",
                    "args": ["--metrics-addr=127.0.0.1:8080"]}]}}}});
    create_deployment(&client, &plain).await;
    cluster.sh("step 2 (plain manifests)", step2_plain).await;
    let want: Vec<String> = ["--metrics-addr=127.0.0.1:8080"]
        .into_iter()
        .chain(ENABLE_FLAGS)
        .map(str::to_owned)
        .collect();
    assert_eq!(
        manager_args(&cluster, "opentelemetry-operator-controller-manager").await,
        want
    );

    // Step 3: the app the Operator admitted is restarted, and injected.
    let out = cluster.sh("step 3", step3).await;
    let shop_uid = shop["metadata"]["uid"].clone();
    let restarted = until_pod(&cluster, "shop", |p| {
        p["metadata"]["uid"] != shop_uid && outcome(p).is_some()
    })
    .await;
    assert!(
        outcome(&restarted).is_some_and(|o| o.starts_with("java=injected my-app/default ")),
        "{}\n{out}",
        restarted["metadata"]
    );
}
