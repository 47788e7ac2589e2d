//! Tests of `registration`.

use super::*;
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    RuleWithOperations, ServiceReference, WebhookClientConfig,
};

/// A serving chain for `host` and its CA's PEM (rcgen, as the certificates module makes
/// them).
fn served_for(host: &str) -> (Vec<CertificateDer<'static>>, String) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca, &ca_key);
    let key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec![host.to_owned()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    (vec![leaf.der().clone()], ca_cert.pem())
}

/// A serving chain for the default Service host, and its CA's PEM.
fn served() -> (Vec<CertificateDer<'static>>, String) {
    served_for("otel-injector.otel-injector.svc")
}

fn entry(ca: &str) -> MutatingWebhook {
    MutatingWebhook {
        name: "pods.otel-injector.opentelemetry.io".into(),
        failure_policy: Some("Ignore".into()),
        client_config: WebhookClientConfig {
            service: Some(ServiceReference {
                name: "otel-injector".into(),
                namespace: "otel-injector".into(),
                path: Some("/mutate-v1-pod".into()),
                port: Some(443),
            }),
            ca_bundle: Some(ByteString(ca.as_bytes().to_vec())),
            url: None,
        },
        rules: Some(vec![RuleWithOperations {
            api_groups: Some(vec![String::new()]),
            api_versions: Some(vec!["v1".into()]),
            operations: Some(vec!["CREATE".into()]),
            resources: Some(vec!["pods".into()]),
            scope: Some("Namespaced".into()),
        }]),
        ..Default::default()
    }
}

fn config(webhooks: Vec<MutatingWebhook>) -> MutatingWebhookConfiguration {
    MutatingWebhookConfiguration {
        webhooks: Some(webhooks),
        ..Default::default()
    }
}

fn expected(policy: Option<&str>) -> Expected {
    Expected {
        name: "otel-injector".into(),
        failure_policy: policy.map(Into::into),
        every: std::time::Duration::from_secs(30),
    }
}

#[test]
fn the_installed_configuration_is_as_expected() {
    let (chain, ca) = served();
    let c = config(vec![entry(&ca)]);
    assert_eq!(drift(Some(&c), &expected(Some("Ignore")), &chain), []);
    assert_eq!(drift(Some(&c), &expected(None), &chain), []);
}

#[test]
fn each_difference_is_named() {
    let (chain, ca) = served();
    assert_eq!(drift(None, &expected(None), &chain), [Aspect::Missing]);
    // Another CA (a CA rotated without the caBundle, or a bundle emptied).
    let (_, other) = served();
    let c = config(vec![entry(&other)]);
    assert_eq!(drift(Some(&c), &expected(None), &chain), [Aspect::CaBundle]);
    let mut no_bundle = entry(&ca);
    no_bundle.client_config.ca_bundle = None;
    assert_eq!(
        drift(Some(&config(vec![no_bundle])), &expected(None), &chain),
        [Aspect::CaBundle]
    );
    // A host the certificate does not name.
    let mut elsewhere = entry(&ca);
    elsewhere.client_config.service.as_mut().unwrap().name = "other".into();
    assert_eq!(
        drift(Some(&config(vec![elsewhere])), &expected(None), &chain),
        [Aspect::CaBundle]
    );
    // Rules that no longer send pod CREATEs.
    let mut updates = entry(&ca);
    updates.rules.as_mut().unwrap()[0].operations = Some(vec!["UPDATE".into()]);
    assert_eq!(
        drift(Some(&config(vec![updates])), &expected(None), &chain),
        [Aspect::Rules]
    );
    // Another path: no entry calls this webhook at all.
    let mut other_path = entry(&ca);
    other_path.client_config.service.as_mut().unwrap().path = Some("/validate".into());
    assert_eq!(
        drift(Some(&config(vec![other_path])), &expected(None), &chain),
        [Aspect::Rules, Aspect::CaBundle]
    );
    // The failure policy changed from the one expected.
    let mut failing = entry(&ca);
    failing.failure_policy = Some("Fail".into());
    let c = config(vec![failing]);
    assert_eq!(
        drift(Some(&c), &expected(Some("Ignore")), &chain),
        [Aspect::FailurePolicy]
    );
    assert_eq!(drift(Some(&c), &expected(None), &chain), []);
}

#[test]
fn an_entry_by_url_is_checked_against_its_host() {
    let (chain, ca) = served_for("10.96.0.20");
    let mut by_url = entry(&ca);
    by_url.client_config.service = None;
    by_url.client_config.url = Some("https://10.96.0.20:443/mutate-v1-pod?x=1".into());
    assert_eq!(
        drift(Some(&config(vec![by_url.clone()])), &expected(None), &chain),
        []
    );
    by_url.client_config.url = Some("https://10.96.0.21/mutate-v1-pod".into());
    assert_eq!(
        drift(Some(&config(vec![by_url])), &expected(None), &chain),
        [Aspect::CaBundle]
    );
}
