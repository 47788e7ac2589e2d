//! A second mutating webhook inside the test process: HTTPS (tokio-rustls, HTTP/1.1 via
//! hyper and axum) on 127.0.0.1, answering every AdmissionReview with a patch that adds one
//! label. Used to make the apiserver reinvoke otel-injector (`reinvocationPolicy: IfNeeded`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::body::Bytes;
use axum::http::{StatusCode, header};
use axum::routing::post;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use otel_injector::certs::DevCerts;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use super::api::base64_of;

/// The running server; it stops when dropped (its task is aborted).
pub struct Labeler {
    pub addr: SocketAddr,
    pub certs: DevCerts,
    calls: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Labeler {
    /// Serves on a free port; every reviewed object gets `label_key: label_value`.
    pub async fn start(label_key: &str, label_value: &str) -> Labeler {
        let certs = otel_injector::certs::generate(
            "e2e labeler CA",
            &["127.0.0.1".to_owned(), "localhost".to_owned()],
        )
        .expect("labeler certificates");
        let chain: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(certs.cert.as_bytes())
                .collect::<Result<_, _>>()
                .expect("labeler cert PEM");
        let key = PrivateKeyDer::from_pem_slice(certs.key.as_bytes()).expect("labeler key PEM");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut tls = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .expect("labeler TLS config");
        tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        let acceptor = TlsAcceptor::from(Arc::new(tls));
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind labeler");
        let addr = listener.local_addr().expect("labeler address");

        let calls = Arc::new(AtomicUsize::new(0));
        let (key, value) = (label_key.to_owned(), label_value.to_owned());
        let counter = calls.clone();
        let router = Router::new().route(
            "/label",
            post(move |body: Bytes| {
                counter.fetch_add(1, Ordering::SeqCst);
                let reply = match serde_json::from_slice::<Value>(&body) {
                    Ok(review) => (StatusCode::OK, answer(&review, &key, &value).to_string()),
                    Err(e) => (StatusCode::BAD_REQUEST, e.to_string()),
                };
                async move {
                    (
                        reply.0,
                        [(header::CONTENT_TYPE, "application/json")],
                        reply.1,
                    )
                }
            }),
        );
        let task = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                let acceptor = acceptor.clone();
                let router = router.clone();
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tls), TowerToHyperService::new(router))
                        .await;
                });
            }
        });
        Labeler {
            addr,
            certs,
            calls,
            task,
        }
    }

    pub fn url(&self) -> String {
        format!("https://{}/label", self.addr)
    }

    /// Reviews answered so far.
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    /// Its MutatingWebhookConfiguration: every pod CREATE in namespaces labeled `scope`,
    /// `reinvocationPolicy: IfNeeded`, failing closed (a broken labeler must not go unseen).
    pub fn configuration(&self, name: &str, scope: (&str, &str)) -> Value {
        json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": name},
            "webhooks": [{
                "name": "labeler.e2e.otel-injector.io",
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": "Fail",
                "timeoutSeconds": 5,
                "reinvocationPolicy": "IfNeeded",
                "clientConfig": {"url": self.url(), "caBundle": base64_of(self.certs.ca_cert.as_bytes())},
                "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                           "resources": ["pods"], "scope": "Namespaced"}],
                "namespaceSelector": {"matchLabels": {scope.0: scope.1}},
            }]
        })
    }
}

impl Drop for Labeler {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Allowed, with a JSON patch adding the label (creating `/metadata/labels` if needed).
fn answer(review: &Value, key: &str, value: &str) -> Value {
    let req = &review["request"];
    let labels = &req["object"]["metadata"]["labels"];
    let patch = if labels.is_object() {
        let escaped = key.replace('~', "~0").replace('/', "~1");
        json!([{"op": "add", "path": format!("/metadata/labels/{escaped}"), "value": value}])
    } else {
        json!([{"op": "add", "path": "/metadata/labels", "value": {key: value}}])
    };
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {
            "uid": req["uid"],
            "allowed": true,
            "patchType": "JSONPatch",
            "patch": base64_of(patch.to_string().as_bytes()),
        }
    })
}
