//! KEP-6060's webhook-bound tokens (Kubernetes 1.37, alpha gate
//! `APIServerWebhookAuthenticationToken`), accepted as a caller's credential with
//! `--webhook-bound-token-audience`: a ServiceAccount token that the TokenRequest API bound to
//! a MutatingWebhookConfiguration (`kubernetes.io.mutatingwebhookconfiguration`) with the
//! attestation `admissionReviewAPIGroups`, and whose audience is one of that configuration's
//! webhooks (its URL, or `https://SERVICE.NAMESPACE.svc:PORT/PATH`). The API server issues
//! such a token only to an identity allowed to `attest` the group and only for an audience its
//! configuration names.
//!
//! Verified here with no API call per request: the signature against the issuer's published
//! keys (the API server's `/openid/v1/jwks` and the issuer of
//! `/.well-known/openid-configuration`, which every ServiceAccount may read by default), read
//! in the background at start, every [`KEYS_EVERY`], and again (at most every
//! [`REFRESH_AT_MOST_EVERY`]) when a token names a key not held; then the issuer, the
//! audience (pinned by the flag), the expiry, the bound configuration's name (our
//! `--webhook-configuration`) and the attested group (pods are the core group `""`, or `*`).
//! Until the keys are read, such tokens are refused; the other credentials are not affected.
//!
//! Not checked: whether the bound configuration still exists with the UID the token names
//! (the API server's own TokenReview checks it); a webhook token lives at most 10 minutes.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use kube::Client;
use serde::Deserialize;
use tokio::sync::Notify;

/// How often the issuer's keys are read again.
pub const KEYS_EVERY: Duration = Duration::from_secs(600);
/// The keys are read again at most this often, whatever asks for it.
pub const REFRESH_AT_MOST_EVERY: Duration = Duration::from_secs(10);
/// The largest token looked at (a ServiceAccount token is about 1 KiB).
const MAX_TOKEN: usize = 16 * 1024;
/// Clock skew allowed on `nbf` and `exp` (the API server's own leeway).
const LEEWAY: u64 = 60;
/// The attestation that names the API groups a token may ask a webhook about.
pub const ATTESTATION: &str = "admissionReviewAPIGroups";

/// Why a bound token was refused (logged at debug; the caller only sees 401).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Rejected {
    #[error("not a signed JWT")]
    Malformed,
    #[error("the issuer's keys have not been read yet")]
    NoKeys,
    #[error("signed with key {0:?}, which the issuer does not publish")]
    UnknownKey(String),
    #[error("algorithm {0:?} is not RS256 or ES256 for its key")]
    Algorithm(String),
    #[error("the signature does not verify")]
    Signature,
    #[error("issued by {0:?}, not by the API server")]
    Issuer(String),
    #[error("not for the audience this webhook was given")]
    Audience,
    #[error("expired")]
    Expired,
    #[error("not valid yet")]
    NotYet,
    #[error("not bound to the MutatingWebhookConfiguration {0:?}")]
    NotBound(String),
    #[error("no attestation of the core API group ({ATTESTATION})")]
    Attestation,
}

/// A published verification key.
enum PublicKey {
    /// RSA modulus and exponent (big-endian).
    Rsa { n: Vec<u8>, e: Vec<u8> },
    /// A P-256 point, uncompressed (`04 || x || y`).
    P256(Vec<u8>),
}

/// The issuer and its keys, by `kid`.
struct IssuerKeys {
    issuer: String,
    by_id: HashMap<String, PublicKey>,
}

#[derive(Deserialize)]
struct Jwks {
    keys: Vec<Jwk>,
}

#[derive(Deserialize)]
struct Jwk {
    kty: String,
    #[serde(default)]
    kid: String,
    #[serde(default)]
    crv: String,
    #[serde(default)]
    n: String,
    #[serde(default)]
    e: String,
    #[serde(default)]
    x: String,
    #[serde(default)]
    y: String,
}

#[derive(Deserialize)]
struct JoseHeader {
    alg: String,
    #[serde(default)]
    kid: String,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Audience {
    One(String),
    Many(Vec<String>),
}

#[derive(Deserialize)]
struct Claims {
    iss: String,
    aud: Audience,
    exp: u64,
    #[serde(default)]
    nbf: Option<u64>,
    #[serde(rename = "kubernetes.io", default)]
    kubernetes: Bindings,
}

#[derive(Default, Deserialize)]
struct Bindings {
    #[serde(default)]
    mutatingwebhookconfiguration: Option<Bound>,
    #[serde(default)]
    attestations: HashMap<String, Vec<String>>,
}

#[derive(Deserialize)]
struct Bound {
    name: String,
}

fn decode(part: &str) -> Result<Vec<u8>, Rejected> {
    URL_SAFE_NO_PAD
        .decode(part)
        .map_err(|_| Rejected::Malformed)
}

/// Reads a JWKS document: the RSA and P-256 keys with a `kid` (others are skipped).
fn parse_keys(issuer: &str, jwks: &[u8]) -> Result<IssuerKeys, String> {
    let doc: Jwks = serde_json::from_slice(jwks).map_err(|e| format!("the JWKS: {e}"))?;
    let mut by_id = HashMap::new();
    for k in doc.keys {
        let b = |s: &str| {
            URL_SAFE_NO_PAD
                .decode(s)
                .map_err(|e| format!("key {}: {e}", k.kid))
        };
        let key = match (k.kty.as_str(), k.crv.as_str()) {
            ("RSA", _) => PublicKey::Rsa {
                n: b(&k.n)?,
                e: b(&k.e)?,
            },
            ("EC", "P-256") => {
                let mut point = vec![4];
                point.extend(b(&k.x)?);
                point.extend(b(&k.y)?);
                PublicKey::P256(point)
            }
            _ => continue,
        };
        if !k.kid.is_empty() {
            by_id.insert(k.kid, key);
        }
    }
    if by_id.is_empty() {
        return Err("the JWKS has no RSA or P-256 key with a kid".to_owned());
    }
    Ok(IssuerKeys {
        issuer: issuer.to_owned(),
        by_id,
    })
}

/// The verifier of bound tokens for one audience and one webhook configuration.
pub struct BoundTokens {
    audience: String,
    configuration: String,
    keys: RwLock<Option<Arc<IssuerKeys>>>,
    /// Woken when a token names a key not held.
    wanted: Notify,
}

impl BoundTokens {
    pub fn new(audience: &str, configuration: &str) -> Arc<Self> {
        Arc::new(BoundTokens {
            audience: audience.to_owned(),
            configuration: configuration.to_owned(),
            keys: RwLock::new(None),
            wanted: Notify::new(),
        })
    }

    /// Takes the issuer and its JWKS document; how many keys it holds now. A document that
    /// cannot be read keeps the keys held.
    pub fn set_keys(&self, issuer: &str, jwks: &[u8]) -> Result<usize, String> {
        let keys = parse_keys(issuer, jwks)?;
        let n = keys.by_id.len();
        *self.keys.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(keys));
        Ok(n)
    }

    /// Whether `token` is a bound token for this webhook, at `now`.
    pub fn verify(&self, token: &str, now: SystemTime) -> Result<(), Rejected> {
        if token.len() > MAX_TOKEN {
            return Err(Rejected::Malformed);
        }
        let mut parts = token.split('.');
        let (Some(h), Some(p), Some(s), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(Rejected::Malformed);
        };
        let header: JoseHeader =
            serde_json::from_slice(&decode(h)?).map_err(|_| Rejected::Malformed)?;
        let signature = decode(s)?;
        let keys = self
            .keys
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .ok_or(Rejected::NoKeys)?;
        let Some(key) = keys.by_id.get(&header.kid) else {
            self.wanted.notify_one();
            return Err(Rejected::UnknownKey(header.kid));
        };
        let signed = &token.as_bytes()[..h.len() + 1 + p.len()];
        let verified = match (key, header.alg.as_str()) {
            (PublicKey::Rsa { n, e }, "RS256") => ring::signature::RsaPublicKeyComponents { n, e }
                .verify(
                    &ring::signature::RSA_PKCS1_2048_8192_SHA256,
                    signed,
                    &signature,
                ),
            (PublicKey::P256(point), "ES256") => ring::signature::UnparsedPublicKey::new(
                &ring::signature::ECDSA_P256_SHA256_FIXED,
                point,
            )
            .verify(signed, &signature),
            _ => return Err(Rejected::Algorithm(header.alg)),
        };
        verified.map_err(|_| Rejected::Signature)?;
        // Only a token whose signature verified is read further.
        let claims: Claims =
            serde_json::from_slice(&decode(p)?).map_err(|_| Rejected::Malformed)?;
        if claims.iss != keys.issuer {
            return Err(Rejected::Issuer(claims.iss));
        }
        let for_us = match &claims.aud {
            Audience::One(a) => *a == self.audience,
            Audience::Many(all) => all.contains(&self.audience),
        };
        if !for_us {
            return Err(Rejected::Audience);
        }
        let now = now.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
        if claims.exp.saturating_add(LEEWAY) <= now {
            return Err(Rejected::Expired);
        }
        if claims
            .nbf
            .is_some_and(|nbf| nbf > now.saturating_add(LEEWAY))
        {
            return Err(Rejected::NotYet);
        }
        let bound = claims.kubernetes.mutatingwebhookconfiguration;
        if bound.is_none_or(|b| b.name != self.configuration) {
            return Err(Rejected::NotBound(self.configuration.clone()));
        }
        let groups = claims.kubernetes.attestations.get(ATTESTATION);
        if !groups.is_some_and(|g| g.iter().any(|g| g.is_empty() || g == "*")) {
            return Err(Rejected::Attestation);
        }
        Ok(())
    }

    /// Reads the issuer's keys from the API server at start, every `every`, and when a token
    /// names a key not held (never more often than [`REFRESH_AT_MOST_EVERY`]), until dropped.
    pub async fn follow(self: Arc<Self>, client: impl Future<Output = Client>, every: Duration) {
        let client = client.await;
        loop {
            let read = Instant::now();
            let wait = match fetch(&client).await {
                Ok((issuer, jwks)) => match self.set_keys(&issuer, jwks.as_bytes()) {
                    Ok(n) => {
                        tracing::debug!(%issuer, keys = n, "read the issuer's keys for bound tokens");
                        every
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "the API server's /openid/v1/jwks cannot be used; bound tokens are checked against the keys held");
                        REFRESH_AT_MOST_EVERY
                    }
                },
                Err(e) => {
                    tracing::warn!(error = %e, "the issuer's keys for bound tokens cannot be read (needs get on /.well-known/openid-configuration and /openid/v1/jwks: the default ClusterRole system:service-account-issuer-discovery)");
                    REFRESH_AT_MOST_EVERY
                }
            };
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = self.wanted.notified() => {}
            }
            tokio::time::sleep_until((read + REFRESH_AT_MOST_EVERY).into()).await;
        }
    }
}

/// The issuer (OIDC discovery) and the JWKS document of the API server.
async fn fetch(client: &Client) -> Result<(String, String), String> {
    let get = |path: &'static str| async move {
        let request = axum::http::Request::get(path)
            .body(Vec::new())
            .map_err(|e| format!("GET {path}: {e}"))?;
        client
            .request_text(request)
            .await
            .map_err(|e| format!("GET {path}: {e}"))
    };
    #[derive(Deserialize)]
    struct Discovery {
        issuer: String,
    }
    let discovery: Discovery =
        serde_json::from_str(&get("/.well-known/openid-configuration").await?)
            .map_err(|e| format!("/.well-known/openid-configuration: {e}"))?;
    Ok((discovery.issuer, get("/openid/v1/jwks").await?))
}

#[cfg(test)]
mod tests;
