//! The install paths through real API servers: the Helm chart's rendering and the README's
//! `helm install` / `helm uninstall`, and the kustomize overlays with `kubectl apply -k` and
//! the two-step uninstall.
//!
//! The chart's RBAC and webhook configuration run a real webhook process on the shared
//! control plane (scoped like every other test's). Everything that installs objects with the
//! product's own cluster-wide names (ClusterRoles, the `otel-injector` webhook configuration,
//! namespace `otel-injector` which the shared plane's identities live in) runs on a control
//! plane of its own, one test at a time ([`INSTALL`]), with stand-ins for cert-manager's and
//! the Prometheus Operator's CRDs.

mod literal;
mod real;
mod switch;
mod uninstall;

use std::time::{Duration, Instant};

use kube::Client;
use serde_json::json;
use tokio::sync::OnceCell;

use crate::harness::*;
use crate::support::api::{self, Access};
use crate::support::chart::{self, Output, id};
use crate::support::controlplane::ControlPlane;
use crate::support::identity::{NAMESPACE, SERVICE_ACCOUNT};
use otel_injector::keys::{INJECT_JAVA, INJECTED_ANNOTATION};

#[tokio::test]
async fn the_charts_rbac_and_webhook_configuration_inject_a_pod_through_the_api_server() {
    let rendered = chart::render(&[]).unwrap_or_else(|e| panic!("{e}"));
    let deployment = rendered
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .expect("a Deployment");
    // The chart's flags, but those the harness sets itself (its own certificate, the
    // labeler off as rendered, its log level).
    let rendered_args: Vec<String> =
        deployment["spec"]["template"]["spec"]["containers"][0]["args"]
            .as_array()
            .expect("args")
            .iter()
            .map(|a| a.as_str().expect("a string").to_owned())
            .collect();
    assert!(rendered_args.contains(&"--label-namespaces=false".to_owned()));
    // The status controller is on as rendered; e2e/tests/status.rs runs it (here the
    // harness turns it off, as for every test that does not ask).
    assert!(rendered_args.contains(&"--status=true".to_owned()));
    assert!(rendered_args.contains(&"--lease-name=otel-injector".to_owned()));
    let args: Vec<String> = rendered_args
        .into_iter()
        .filter(|a| {
            a != "serve"
                && !a.starts_with("--tls-")
                && !a.starts_with("--label-namespaces=")
                && !a.starts_with("--log-level=")
                && !a.starts_with("--status=")
                && !a.starts_with("--lease-name=")
        })
        .collect();
    assert_eq!(
        args,
        [
            "--enabled-languages=java,nodejs,python,dotnet,apache-httpd,nginx,sdk",
            "--verify-exporter-tls=false",
            "--agent-delivery=init-container",
            "--events=true",
            "--log-format=json",
        ]
    );
    let env = Env::start_with(
        "chart",
        Options {
            variant: Variant::Chart,
            rbac: Rbac::Chart,
            args,
            ..Options::default()
        },
    )
    .await;
    assert_eq!(
        env.assert_registered_as_the_manifest().await,
        ["pods.otel-injector.opentelemetry.io"]
    );
    // Its identity has the chart's read-only rules, the events permission (on by default),
    // and nothing of the opt-in modes.
    for (a, want) in [
        (
            access("create", "events.k8s.io", "events", "default", ""),
            true,
        ),
        (
            access("patch", "events.k8s.io", "events", "default", ""),
            true,
        ),
        (
            access("get", "events.k8s.io", "events", "default", ""),
            false,
        ),
        (
            access("watch", "opentelemetry.io", "instrumentations", "", ""),
            true,
        ),
        (access("watch", "", "namespaces", "", ""), true),
        (access("patch", "", "namespaces", "", "default"), false),
        (
            access("get", "", "secrets", NAMESPACE, "otel-injector-tls"),
            false,
        ),
    ] {
        let allowed = api::may(&env.client, &env.identity.user, &env.identity.groups, a)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(allowed, want, "{a}");
    }

    let ns = env.namespace("shop", &[]).await;
    env.await_webhook(&ns).await;
    env.instrumentation(
        &ns,
        "java-inst",
        json!({"exporter": {"endpoint": "http://otel-collector.observability:4318"}}),
    )
    .await;
    let p = pod("checkout", &[(INJECT_JAVA, "true")]);
    env.until_dry_run(&ns, &p, "injection", |r| is_injected(&r.body))
        .await;
    let created = env.create(&ns, &p).await;
    assert!(created.warnings.is_empty(), "{:?}", created.warnings);
    let stored = env.stored(&ns, "checkout").await;
    assert_eq!(
        annotations_less_status(&stored, "java=injected ", "true"),
        json!({INJECT_JAVA: "true", INJECTED_ANNOTATION: "java"})
    );
    assert_eq!(stored["spec"]["initContainers"][0]["name"], JAVA_INIT);
    let requests = env.requests().await;
    assert!(requests.patched >= 1.0, "{requests:?}");
}

/// The install tests' own control plane (with controllers: namespaces are really deleted).
static INSTALL_CLUSTER: OnceCell<Result<ControlPlane, String>> = OnceCell::const_new();
/// One install test at a time: they install and remove the same names.
static INSTALL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn install_cluster() -> &'static ControlPlane {
    let r = INSTALL_CLUSTER
        .get_or_init(|| async {
            let mut cp = ControlPlane::start().await?;
            cp.start_controllers().await?;
            let client = cp.client();
            for (group, kind, plural) in [
                ("cert-manager.io", "Issuer", "issuers"),
                ("cert-manager.io", "Certificate", "certificates"),
                ("monitoring.coreos.com", "ServiceMonitor", "servicemonitors"),
                ("monitoring.coreos.com", "PrometheusRule", "prometheusrules"),
            ] {
                api::install_stand_in_crd(&client, group, kind, plural).await?;
            }
            Ok(cp)
        })
        .await;
    match r {
        Ok(cp) => cp,
        Err(e) => panic!("the install tests' control plane could not start: {e}"),
    }
}

fn ok(what: &str, out: Result<Output, String>) -> String {
    let out = out.unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(out.ok, "{what}: {}{}", out.stdout, out.stderr);
    out.stdout
}

/// Whether the chart's ServiceAccount `otel-injector/otel-injector` may do this, once the
/// authorizer agrees with `want` (bounded: it reads bindings from its informers).
async fn settles_to(client: &Client, access: Access<'_>, want: bool) {
    let user = format!("system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNT}");
    let groups = [
        "system:serviceaccounts".to_owned(),
        format!("system:serviceaccounts:{NAMESPACE}"),
        "system:authenticated".to_owned(),
    ];
    let t0 = Instant::now();
    while api::may(client, &user, &groups, access)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        != want
    {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "{access}: not {} within 10 s",
            if want { "allowed" } else { "refused" }
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn access<'a>(
    verb: &'a str,
    group: &'a str,
    resource: &'a str,
    namespace: &'a str,
    name: &'a str,
) -> Access<'a> {
    Access {
        verb,
        group,
        resource,
        namespace,
        name,
    }
}

#[tokio::test]
async fn the_charts_rendering_applies_server_side_in_every_mode() {
    let _one = INSTALL.lock().await;
    let cp = install_cluster().await;
    let client = cp.client();
    api::create_namespace(&client, NAMESPACE, &[], &[])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let patch_namespaces = access("patch", "", "namespaces", "", "default");
    let own_secret = access("update", "", "secrets", NAMESPACE, "otel-injector-tls");
    let list_secrets = access("list", "", "secrets", "", "");
    let ca = otel_injector::certs::generate("chart e2e CA", &["localhost".to_owned()])
        .unwrap_or_else(|e| panic!("{e}"));
    let ca_bundle = format!(
        "certificates.existingSecret.caBundle={}",
        api::base64_of(ca.ca_cert.as_bytes())
    );
    for mode in ["certManager", "builtIn", "existingSecret"] {
        for targeting in ["all", "targeted"] {
            let what = format!("{mode}/{targeting}");
            let rendered = chart::render(&[
                &format!("certificates.mode={mode}"),
                &format!("webhook.targeting={targeting}"),
                "certificates.existingSecret.name=otel-injector-tls",
                &ca_bundle,
                "serviceMonitor.enabled=true",
                "prometheusRule.enabled=true",
                "networkPolicy.enabled=true",
                "autoscaling.enabled=true",
                "grafanaDashboard.enabled=true",
            ])
            .unwrap_or_else(|e| panic!("{e}"));
            let mut applied = Vec::new();
            for doc in &rendered {
                let dry_run = doc["kind"] == "Deployment";
                let stored = api::apply_doc(&client, "otel-injector-e2e-chart", doc, dry_run)
                    .await
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                // What the chart sets is stored as it is.
                for field in ["rules", "subjects", "roleRef", "webhooks", "data"] {
                    assert_eq!(stored[field], doc[field], "{what}: {} {field}", id(doc));
                }
                if !dry_run {
                    applied.push(doc.clone());
                }
            }
            assert!(
                applied.iter().any(|d| d["kind"] == "PrometheusRule")
                    && applied.iter().any(|d| d["kind"] == "ServiceMonitor")
                    && applied
                        .iter()
                        .any(|d| d["kind"] == "HorizontalPodAutoscaler"),
                "{what}: {:?}",
                applied.iter().map(id).collect::<Vec<_>>()
            );
            // Each optional permission exactly with its feature.
            settles_to(&client, patch_namespaces, targeting == "targeted").await;
            settles_to(&client, own_secret, mode == "builtIn").await;
            settles_to(&client, list_secrets, false).await;
            for doc in applied.iter().rev() {
                api::delete_doc(&client, doc)
                    .await
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
            }
            settles_to(&client, patch_namespaces, false).await;
            settles_to(&client, own_secret, false).await;
        }
    }
}
