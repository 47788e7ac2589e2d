//! The rig of a rolling update: the replicas behind one Service, started, replaced and killed.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::harness::*;
use crate::support::api::{self, Registration};
use crate::support::service::Service;
use crate::support::webhook::Webhook;

use super::{Created, PROBE, replica};
use otel_injector::keys::INJECT_JAVA;

/// How the old replicas go.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Replace {
    /// SIGTERM: the drain (a Deployment's rolling update).
    Drain,
    /// SIGKILL: no drain (a node lost, an OOM kill); the endpoint leaves the Service at its
    /// next failed probe.
    Kill,
}

/// What a run came to.
pub(super) struct Run {
    pub(super) created: Vec<Created>,
    /// Reviews answered by each new replica in a window after the rollout.
    pub(super) window: Vec<f64>,
    pub(super) fail_open: f64,
    /// With [`Replace::Kill`]: the Instrumentation's `status.missed` once it settled.
    pub(super) found: Option<i64>,
}

impl Run {
    pub(super) fn failed(&self) -> Vec<&Created> {
        self.created.iter().filter(|c| c.status != 201).collect()
    }

    pub(super) fn uninjected(&self) -> Vec<&Created> {
        self.created
            .iter()
            .filter(|c| c.status == 201 && !c.injected)
            .collect()
    }
}

/// Two replicas of the webhook behind one [`Service`], registered for namespace `<id>-pods`,
/// which holds a Java Instrumentation; both caches hold it.
pub struct Rig {
    pub client: kube::Client,
    pub service: Service,
    pub replicas: Vec<(&'static str, Webhook)>,
    /// The namespace the configuration matches.
    pub ns: String,
    identity: crate::support::identity::Identity,
    tls: tempfile::TempDir,
    /// The MutatingWebhookConfiguration's name.
    configuration: String,
}

impl Rig {
    pub async fn start(id: &str) -> Rig {
        let cp = cluster().await;
        let client = cp.client();
        let identity = identity(Rbac::Default).await;
        // One serving certificate for every replica, as the Secret they all mount.
        let tls = tempfile::tempdir().unwrap();
        let certs = otel_injector::certs::generate(
            "otel-injector e2e rolling CA",
            &["127.0.0.1".to_owned(), "localhost".to_owned()],
        )
        .unwrap();
        certs.write_to(tls.path()).unwrap();

        let service = Service::start(PROBE).await.unwrap();
        let mut replicas = Vec::new();
        for name in ["a", "b"] {
            let w = replica(&identity, tls.path()).await;
            service.add(name, w.addr, w.admin);
            replicas.push((name, w));
        }
        for (name, _) in &replicas {
            service
                .wait_ready(name, Duration::from_secs(10))
                .await
                .unwrap();
        }
        let ns = format!("{id}-pods");
        api::create_namespace(&client, &ns, &[(SCOPE_LABEL, id)], &[])
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let inst = json!({
            "apiVersion": "opentelemetry.io/v1alpha1", "kind": "Instrumentation",
            "metadata": {"name": "java", "namespace": ns},
            "spec": {"exporter": {"endpoint": "http://collector.example:4318"}}
        });
        let r = api::create_instrumentation(&client, &ns, &inst)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.status, 201, "{}", r.body);
        let configuration = format!("e2e-{id}-a-otel-injector");
        let config = api::webhook_configuration(&Registration {
            manifest: &api::webhook_manifest_path(),
            name: &configuration,
            url: &format!("https://{}/mutate-v1-pod", service.addr),
            ca_pem: &certs.ca_cert,
            failure_policy: "Ignore",
            timeout_seconds: 5,
            scope: Some((SCOPE_LABEL, id)),
        })
        .unwrap_or_else(|e| panic!("{e}"));
        api::replace_webhook_configuration(&client, &config)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        // Until the configuration is live and both caches hold the Instrumentation.
        let marker = pod("marker", &[(INJECT_JAVA, "true")]);
        let t0 = Instant::now();
        let mut in_a_row = 0;
        while in_a_row < 10 {
            let r = api::create_pod(&client, &ns, &marker, true)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            in_a_row = if is_injected(&r.body) {
                in_a_row + 1
            } else {
                0
            };
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "never injected: {}",
                r.body
            );
        }
        Rig {
            client,
            service,
            replicas,
            ns,
            identity,
            tls,
            configuration,
        }
    }

    /// A new replica with the same flags and certificate.
    pub(super) async fn replica(&self) -> Webhook {
        replica(&self.identity, self.tls.path()).await
    }

    /// Deletes the configuration, the pods (waiting until they are gone) and the namespace.
    pub async fn delete(&self) {
        let r = api::send(
            &self.client,
            axum::http::Method::DELETE,
            &format!(
                "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{}",
                self.configuration
            ),
            None,
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.status, 200, "{}", r.body);
        // Thousands of injected pods: gone at once and waited for, before the test lets
        // others run (the status tests count every injected pod of the cluster).
        let pods = format!("/api/v1/namespaces/{}/pods", self.ns);
        let r = api::send(
            &self.client,
            axum::http::Method::DELETE,
            &format!("{pods}?gracePeriodSeconds=0"),
            None,
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.status, 200, "delete the pods: {}", r.body);
        let t0 = Instant::now();
        loop {
            let r = api::send(
                &self.client,
                axum::http::Method::GET,
                &format!("{pods}?limit=1"),
                None,
            )
            .await
            .unwrap_or_else(|e| panic!("{e}"));
            if r.body["items"].as_array().is_some_and(Vec::is_empty) {
                break;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(120),
                "pods of {} still there after 2 minutes",
                self.ns
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let _ = api::send(
            &self.client,
            axum::http::Method::DELETE,
            &format!("/api/v1/namespaces/{}", self.ns),
            None,
        )
        .await;
    }
}
