use std::time::{Duration, SystemTime};

use ring::rand::SystemRandom;
use ring::signature::{self, EcdsaKeyPair, KeyPair as _, RsaKeyPair};
use serde_json::{Value, json};

use super::*;

const ISSUER: &str = "https://kubernetes.default.svc.cluster.local";
const AUDIENCE: &str = "https://otel-injector.otel-injector.svc:443/mutate-v1-pod";
const NOW: u64 = 1_800_000_000;

fn now() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(NOW)
}

fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// A signer and its published form.
enum Signer {
    Ec(EcdsaKeyPair),
    Rsa(RsaKeyPair),
}

impl Signer {
    fn ec() -> Signer {
        let rng = SystemRandom::new();
        let alg = &signature::ECDSA_P256_SHA256_FIXED_SIGNING;
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(alg, &rng).unwrap();
        Signer::Ec(EcdsaKeyPair::from_pkcs8(alg, pkcs8.as_ref(), &rng).unwrap())
    }

    /// A 2048-bit RSA key (ring cannot generate one), as kubeadm's `sa.key` is.
    fn rsa() -> Signer {
        Signer::Rsa(RsaKeyPair::from_pkcs8(include_bytes!("rsa-test-key.pk8")).unwrap())
    }

    fn jwk(&self, kid: &str) -> Value {
        match self {
            Signer::Ec(k) => {
                let p = k.public_key().as_ref();
                json!({"use": "sig", "kty": "EC", "kid": kid, "crv": "P-256", "alg": "ES256",
                    "x": b64(&p[1..33]), "y": b64(&p[33..])})
            }
            Signer::Rsa(k) => {
                let public = signature::RsaPublicKeyComponents::<Vec<u8>>::from(k.public());
                json!({"use": "sig", "kty": "RSA", "kid": kid, "alg": "RS256",
                    "n": b64(&public.n), "e": b64(&public.e)})
            }
        }
    }

    fn sign(&self, alg: &str, kid: &str, claims: &Value) -> String {
        let header = b64(json!({"alg": alg, "kid": kid}).to_string().as_bytes());
        let payload = b64(claims.to_string().as_bytes());
        let signed = format!("{header}.{payload}");
        let rng = SystemRandom::new();
        let sig = match self {
            Signer::Ec(k) => k.sign(&rng, signed.as_bytes()).unwrap().as_ref().to_vec(),
            Signer::Rsa(k) => {
                let mut sig = vec![0; k.public().modulus_len()];
                k.sign(
                    &signature::RSA_PKCS1_SHA256,
                    &rng,
                    signed.as_bytes(),
                    &mut sig,
                )
                .unwrap();
                sig
            }
        };
        format!("{signed}.{}", b64(&sig))
    }
}

/// The claims of a token the 1.37 API server issues for a TokenRequest bound to the
/// MutatingWebhookConfiguration `otel-injector` (its `pkg/serviceaccount/claims.go`).
fn claims() -> Value {
    json!({
        "aud": [AUDIENCE], "exp": NOW + 600, "iat": NOW - 10, "nbf": NOW - 10,
        "iss": ISSUER, "jti": "b1e2", "sub": "system:serviceaccount:kube-system:kube-apiserver",
        "kubernetes.io": {
            "namespace": "kube-system",
            "serviceaccount": {"name": "kube-apiserver", "uid": "9a4c"},
            "mutatingwebhookconfiguration": {"name": "otel-injector", "uid": "77f0"},
            "attestations": {ATTESTATION: [""]}
        }
    })
}

fn verifier(signers: &[(&str, &Signer)]) -> Arc<BoundTokens> {
    let v = BoundTokens::new(AUDIENCE, "otel-injector");
    let keys: Vec<Value> = signers.iter().map(|(kid, s)| s.jwk(kid)).collect();
    let jwks = json!({"keys": keys}).to_string();
    assert_eq!(v.set_keys(ISSUER, jwks.as_bytes()), Ok(signers.len()));
    v
}

fn with(mut claims: Value, pointer: &str, value: Value) -> Value {
    *claims.pointer_mut(pointer).unwrap() = value;
    claims
}

#[test]
fn a_token_bound_to_the_configuration_is_admitted_by_either_key_type() {
    let (ec, rsa) = (Signer::ec(), Signer::rsa());
    let v = verifier(&[("ec", &ec), ("rsa", &rsa)]);
    assert_eq!(v.verify(&ec.sign("ES256", "ec", &claims()), now()), Ok(()));
    assert_eq!(
        v.verify(&rsa.sign("RS256", "rsa", &claims()), now()),
        Ok(())
    );
    // One audience as a string, and `*` as the attested group.
    let single = with(claims(), "/aud", json!(AUDIENCE));
    let any = with(
        claims(),
        "/kubernetes.io/attestations",
        json!({ATTESTATION: ["*"]}),
    );
    for c in [single, any] {
        assert_eq!(v.verify(&ec.sign("ES256", "ec", &c), now()), Ok(()));
    }
}

#[test]
fn every_claim_is_checked() {
    let ec = Signer::ec();
    let v = verifier(&[("ec", &ec)]);
    let refused = |c: Value| v.verify(&ec.sign("ES256", "ec", &c), now()).unwrap_err();
    assert_eq!(
        refused(with(claims(), "/iss", json!("https://elsewhere"))),
        Rejected::Issuer("https://elsewhere".to_owned())
    );
    assert_eq!(
        refused(with(claims(), "/aud", json!(["https://other.svc:443/"]))),
        Rejected::Audience
    );
    assert_eq!(
        refused(with(claims(), "/exp", json!(NOW - LEEWAY))),
        Rejected::Expired
    );
    assert_eq!(
        refused(with(claims(), "/nbf", json!(NOW + LEEWAY + 1))),
        Rejected::NotYet
    );
    let not_bound = Rejected::NotBound("otel-injector".to_owned());
    let other = with(
        claims(),
        "/kubernetes.io/mutatingwebhookconfiguration/name",
        json!("other"),
    );
    assert_eq!(refused(other), not_bound);
    // A plain ServiceAccount token (bound to nothing, or to a pod) with the same audience.
    let mut plain = claims();
    plain["kubernetes.io"]
        .as_object_mut()
        .unwrap()
        .remove("mutatingwebhookconfiguration");
    plain["kubernetes.io"]["pod"] = json!({"name": "p", "uid": "1"});
    assert_eq!(refused(plain), not_bound);
    // Bound to a validating configuration of that name.
    let mut validating = claims();
    let kube = validating["kubernetes.io"].as_object_mut().unwrap();
    let bound = kube.remove("mutatingwebhookconfiguration").unwrap();
    kube.insert("validatingwebhookconfiguration".to_owned(), bound);
    assert_eq!(refused(validating), not_bound);
    for groups in [json!({ATTESTATION: ["apps"]}), json!({})] {
        let c = with(claims(), "/kubernetes.io/attestations", groups);
        assert_eq!(refused(c), Rejected::Attestation);
    }
}

#[test]
fn forged_and_malformed_tokens_are_refused() {
    let (ec, stranger) = (Signer::ec(), Signer::ec());
    let v = verifier(&[("ec", &ec)]);
    // Another key under the published kid; a claim changed after signing.
    assert_eq!(
        v.verify(&stranger.sign("ES256", "ec", &claims()), now()),
        Err(Rejected::Signature)
    );
    let token = ec.sign("ES256", "ec", &claims());
    let parts: Vec<&str> = token.split('.').collect();
    let edited = with(
        claims(),
        "/kubernetes.io/mutatingwebhookconfiguration/name",
        json!("x"),
    );
    let tampered = format!(
        "{}.{}.{}",
        parts[0],
        b64(edited.to_string().as_bytes()),
        parts[2]
    );
    assert_eq!(v.verify(&tampered, now()), Err(Rejected::Signature));
    // `none`, an algorithm that does not fit the key, an unknown kid (which asks for the keys).
    let unsigned = format!("{}.{}.", b64(br#"{"alg":"none","kid":"ec"}"#), parts[1]);
    assert_eq!(
        v.verify(&unsigned, now()),
        Err(Rejected::Algorithm("none".to_owned()))
    );
    assert_eq!(
        v.verify(&ec.sign("RS256", "ec", &claims()), now()),
        Err(Rejected::Algorithm("RS256".to_owned()))
    );
    assert_eq!(
        v.verify(&ec.sign("ES256", "new", &claims()), now()),
        Err(Rejected::UnknownKey("new".to_owned()))
    );
    for bad in ["", "a.b", "a.b.c.d", "!!.??.**", &"x".repeat(MAX_TOKEN + 1)] {
        assert_eq!(v.verify(bad, now()), Err(Rejected::Malformed), "{bad:.20}");
    }
    // Before any key is read, nothing is admitted.
    let empty = BoundTokens::new(AUDIENCE, "otel-injector");
    assert_eq!(empty.verify(&token, now()), Err(Rejected::NoKeys));
}

#[test]
fn a_bad_key_document_keeps_the_keys_held() {
    let ec = Signer::ec();
    let v = verifier(&[("ec", &ec)]);
    assert!(v.set_keys(ISSUER, b"{").is_err());
    assert_eq!(
        v.set_keys(ISSUER, br#"{"keys":[{"kty":"OKP","kid":"ed"}]}"#),
        Err("the JWKS has no RSA or P-256 key with a kid".to_owned())
    );
    assert_eq!(v.verify(&ec.sign("ES256", "ec", &claims()), now()), Ok(()));
}
