//! The Instrumentation CRD's two versions through a real API server: a v1beta1 object written
//! with `kubectl` is stored as v1alpha1 (the webhook's `/convert` converts it), read back in
//! both versions exactly; with the webhook gone, v1beta1 reads fail and v1alpha1 reads keep
//! working. Its own control plane: stopping its conversion webhook must not touch the shared
//! one. Also the cost of a LIST of 1,000 Instrumentations in each version; `list.rs`: a LIST
//! of 10,000 in v1beta1 against the chart's memory limit.

mod list;

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::harness::CLUSTER_WIDE;
use crate::support::api;
use crate::support::chart::kubectl;
use crate::support::controlplane::ControlPlane;
use crate::support::tools::root;
use crate::support::webhook::{Webhook, metric};

const BETA: &str = r#"apiVersion: opentelemetry.io/v1beta1
kind: Instrumentation
metadata:
  name: beta
  namespace: shop
spec:
  declarativeConfig:
    file_format: "1.0"
    resource:
      attributes:
      - name: only.in.the.file
        value: "yes"
    tracer_provider:
      processors:
      - batch:
          exporter:
            otlp_http:
              endpoint: http://collector:4318/v1/traces
      sampler:
        parent_based:
          root:
            trace_id_ratio_based:
              ratio: 0.5
    instrumentation/development:
      java:
        methods:
          include: []
  resource:
    attributes:
      team: payments
    k8sMetadata:
      enabled: false
      includeUIDs: true
  java:
    image: example/java:2.33.1
    resources:
      limits:
        cpu: 500m
"#;

fn get(cp: &ControlPlane, version: &str) -> Result<Value, String> {
    let out = kubectl(
        cp,
        &[
            "get",
            &format!("instrumentations.{version}.opentelemetry.io"),
            "beta",
            "-n",
            "shop",
            "-o",
            "json",
        ],
    )?;
    if !out.ok {
        return Err(out.stderr);
    }
    serde_json::from_str(&out.stdout).map_err(|e| e.to_string())
}

/// The object less what the API server adds.
fn as_written(mut v: Value) -> Value {
    let meta = v["metadata"].as_object_mut().unwrap();
    for key in [
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "managedFields",
    ] {
        meta.remove(key);
    }
    v
}

/// A control plane of the test's own with the CRD, `namespaces`, and one webhook started
/// with `args` that the CRD's conversion points at (trusting the harness's CA, unless the
/// webhook makes its own: `built_in`).
async fn own_cluster(
    namespaces: &[&str],
    args: &[&str],
    built_in: bool,
) -> (ControlPlane, Webhook) {
    let cp = ControlPlane::start()
        .await
        .unwrap_or_else(|e| panic!("control plane: {e}"));
    let client = cp.client();
    api::install_crds(&client, &root().join("manifests/crd.yaml"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    for ns in namespaces {
        api::create_namespace(&client, ns, &[], &[])
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let mut args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    args.push("--events=false".to_owned());
    let mut w = Webhook::start_with(
        Path::new(env!("CARGO_BIN_EXE_e2e-otel-injector")),
        &cp.kubeconfig,
        &args,
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    w.wait_ready(Duration::from_secs(30))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let ca = (!built_in).then_some(w.certs.ca_cert.as_str());
    api::point_conversion(&client, &w.conversion_url(), ca)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    (cp, w)
}

#[tokio::test]
async fn v1beta1_is_served_by_conversion_and_stored_as_v1alpha1() {
    let _shared = CLUSTER_WIDE.read().await;
    let (cp, mut w) = own_cluster(&["shop"], &[], false).await;
    let client = cp.client();

    // Written as v1beta1 with kubectl (the API server converts it to the stored version).
    let file = cp.dir.join("beta.yaml");
    std::fs::write(&file, BETA).unwrap();
    let created = kubectl(&cp, &["create", "-f", file.to_str().unwrap()]).unwrap();
    assert!(created.ok, "{}", created.stderr);
    assert!(created.stderr.is_empty(), "no warnings: {}", created.stderr);

    // Read back as v1beta1: exactly as written.
    let written: Value = serde_saphyr::from_str(BETA).unwrap();
    let beta = as_written(get(&cp, "v1beta1").unwrap());
    assert_eq!(beta, written);

    // Read back as v1alpha1: the v1alpha1 fields in place, the rest carried.
    let alpha = as_written(get(&cp, "v1alpha1").unwrap());
    assert_eq!(
        alpha["spec"],
        json!({
            "resource": {"resourceAttributes": {"team": "payments"}, "addK8sUIDAttributes": true},
            "java": {"image": "example/java:2.33.1", "resources": {"limits": {"cpu": "500m"}}}
        })
    );
    let carried: Value = serde_json::from_str(
        alpha["metadata"]["annotations"]["otel-injector/v1beta1-fields"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(carried["defaultImages"], false);
    assert_eq!(
        carried["spec"]["declarativeConfig"],
        written["spec"]["declarativeConfig"]
    );
    assert_eq!(
        carried["spec"]["resource"],
        json!({"k8sMetadata": {"enabled": false}})
    );
    // The stored version is v1alpha1.
    let crd = kubectl(
        &cp,
        &[
            "get",
            "crd",
            "instrumentations.opentelemetry.io",
            "-o",
            "jsonpath={.status.storedVersions}",
        ],
    )
    .unwrap();
    assert_eq!(crd.stdout, r#"["v1alpha1"]"#);
    let converted = metric(&w.metrics().await, "otel_injector_conversion_objects_total")
        .expect("the conversion series");
    assert!(converted >= 2.0, "the webhook converted: {converted}");

    // An edit through v1alpha1 keeps what it carries.
    let patched = kubectl(
        &cp,
        &[
            "patch",
            "instrumentations.v1alpha1.opentelemetry.io",
            "beta",
            "-n",
            "shop",
            "--type=merge",
            "-p",
            r#"{"spec":{"java":{"image":"example/java:2.33.2"}}}"#,
        ],
    )
    .unwrap();
    assert!(patched.ok, "{}", patched.stderr);
    let beta = as_written(get(&cp, "v1beta1").unwrap());
    let mut expected = written.clone();
    expected["spec"]["java"]["image"] = json!("example/java:2.33.2");
    assert_eq!(beta, expected);

    // The cost of a LIST in each version, with 1,000 Instrumentations.
    let spec = written["spec"].clone();
    for i in 0..1000 {
        let inst = json!({"apiVersion": "opentelemetry.io/v1beta1", "kind": "Instrumentation",
            "metadata": {"name": format!("i-{i}"), "namespace": "shop"}, "spec": spec});
        let r = api::send(
            &client,
            axum::http::Method::POST,
            "/apis/opentelemetry.io/v1beta1/namespaces/shop/instrumentations",
            Some(&inst),
        )
        .await
        .unwrap();
        assert_eq!(r.status, 201, "{}", r.body);
    }
    let mut timings = Vec::new();
    for version in [
        "v1alpha1", "v1beta1", "v1alpha1", "v1beta1", "v1alpha1", "v1beta1",
    ] {
        let t0 = Instant::now();
        let r = api::send(
            &client,
            axum::http::Method::GET,
            &format!("/apis/opentelemetry.io/{version}/namespaces/shop/instrumentations"),
            None,
        )
        .await
        .unwrap();
        let took = t0.elapsed();
        assert_eq!(r.status, 200);
        assert_eq!(r.body["items"].as_array().unwrap().len(), 1001);
        timings.push((version, took));
    }
    let median = |v: &str| {
        let mut t: Vec<Duration> = timings
            .iter()
            .filter(|(x, _)| *x == v)
            .map(|(_, d)| *d)
            .collect();
        t.sort();
        t[t.len() / 2]
    };
    eprintln!(
        "[e2e] LIST of 1001 Instrumentations: v1alpha1 (stored) {:?}, v1beta1 (converted) {:?} (median of 3)",
        median("v1alpha1"),
        median("v1beta1")
    );

    // Without the webhook: v1beta1 cannot be served, v1alpha1 can.
    w.stop();
    let err = get(&cp, "v1beta1").unwrap_err();
    assert!(err.contains("conversion webhook"), "{err}");
    let alpha = get(&cp, "v1alpha1").unwrap();
    assert_eq!(alpha["spec"]["java"]["image"], "example/java:2.33.2");
}

/// The built-in certificate mode writes its CA into the CRD's conversion webhook: the API
/// server then trusts the certificate the webhook makes itself, and v1beta1 is served.
#[tokio::test]
async fn the_built_in_certificate_mode_keeps_the_conversion_ca_bundle() {
    let _shared = CLUSTER_WIDE.read().await;
    // Pointed at this process (an install's Service); the caBundle is the webhook's to write.
    let (cp, w) = own_cluster(
        &["otel-injector", "shop"],
        &[
            "--certificate-secret=otel-injector/otel-injector-tls",
            "--certificate-host=127.0.0.1",
        ],
        true,
    )
    .await;
    let client = cp.client();
    let secret = api::send(
        &client,
        axum::http::Method::GET,
        "/api/v1/namespaces/otel-injector/secrets/otel-injector-tls",
        None,
    )
    .await
    .unwrap();
    assert_eq!(secret.status, 200, "{}", secret.body);
    let ca = secret.body["data"]["ca.crt"].as_str().unwrap().to_owned();
    let t0 = Instant::now();
    loop {
        let crd = api::send(
            &client,
            axum::http::Method::GET,
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/instrumentations.opentelemetry.io",
            None,
        )
        .await
        .unwrap();
        if crd.body["spec"]["conversion"]["webhook"]["clientConfig"]["caBundle"] == ca.as_str() {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(90),
            "caBundle not written: {}\n{}",
            crd.body["spec"]["conversion"],
            w.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!("[e2e] conversion caBundle written after {:?}", t0.elapsed());
    let file = cp.dir.join("beta.yaml");
    std::fs::write(&file, BETA).unwrap();
    let created = kubectl(&cp, &["create", "-f", file.to_str().unwrap()]).unwrap();
    assert!(created.ok, "{}", created.stderr);
    let written: Value = serde_saphyr::from_str(BETA).unwrap();
    assert_eq!(as_written(get(&cp, "v1beta1").unwrap()), written);
}
