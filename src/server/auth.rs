//! Who may call the webhook's admission route, when authentication is on
//! (`--webhook-client-ca-file`, `--webhook-token-file`, `--webhook-bound-token-audience`; off
//! by default): a caller that presented a client certificate the CA signed (verified in the
//! handshake, [`Peer`]), a bearer token listed in the token file, or a KEP-6060 token bound to
//! this webhook's configuration ([`BoundTokens`]). Anyone else is answered 401 before its body is
//! read, and counted (`otel_injector_callers_refused_total{reason="unauthenticated"}`). Not
//! `/convert`: the API server calls conversion webhooks without credentials (see the
//! webhook router); nor the admin listener (`/livez`, `/readyz`, `/metrics`).

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::metrics::{Metrics, Refusal};
use crate::certs::bound_tokens::BoundTokens;
use crate::certs::reloading::Reloading;

/// What the listener learnt of a connection's caller in the handshake; set on each of its
/// requests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Peer {
    /// It presented a client certificate the client CA verified.
    pub client_cert: bool,
}

type Digest = [u8; 32];

fn digest(token: &[u8]) -> Digest {
    let d = ring::digest::digest(&ring::digest::SHA256, token);
    let mut out = [0; 32];
    out.copy_from_slice(d.as_ref());
    out
}

/// The digests of the tokens of a token file: one token per line, surrounding whitespace
/// and empty lines ignored.
fn parse_tokens(text: &[u8]) -> Result<HashSet<Digest>, String> {
    let text = std::str::from_utf8(text).map_err(|_| "not UTF-8".to_owned())?;
    let tokens: HashSet<Digest> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(|l| digest(l.as_bytes()))
        .collect();
    if tokens.is_empty() {
        return Err("no token in it".to_owned());
    }
    Ok(tokens)
}

/// The accepted bearer tokens, kept as SHA-256 digests (a comparison leaks nothing of a
/// token through its timing), re-read when the file changes; a bad file keeps the tokens
/// in force.
pub struct Tokens(Arc<Reloading<HashSet<Digest>>>);

impl Tokens {
    pub fn load(path: &Path) -> anyhow::Result<Arc<Self>> {
        let file = Reloading::load(path, "token file", |path, text| {
            parse_tokens(text).map_err(|e| format!("the token file {}: {e}", path.display()))
        })
        .map_err(anyhow::Error::msg)?;
        Ok(Arc::new(Tokens(Arc::new(file))))
    }

    /// Whether `token` is one of the file's.
    pub fn admits(&self, token: &str) -> bool {
        self.0.get().contains(&digest(token.as_bytes()))
    }

    /// Re-reads the file every `interval` until the task is dropped.
    pub async fn watch(self: Arc<Self>, interval: Duration) {
        self.0.clone().watch(interval).await;
    }

    #[cfg(test)]
    fn reload(&self) -> Option<Result<(), String>> {
        self.0.reload()
    }
}

/// The webhook listener's authentication.
#[derive(Clone, Default)]
pub struct Auth {
    /// A verified client certificate admits its caller (a client CA is configured).
    pub client_cert: bool,
    /// A bearer token of this file admits its caller.
    pub tokens: Option<Arc<Tokens>>,
    /// A bearer token bound to this webhook's configuration admits its caller.
    pub bound: Option<Arc<BoundTokens>>,
}

impl Auth {
    /// Whether any caller must authenticate.
    pub fn required(&self) -> bool {
        self.client_cert || self.tokens.is_some() || self.bound.is_some()
    }

    /// Whether the caller of a request with these headers, on a connection with this
    /// `peer`, is admitted.
    pub fn admits(&self, peer: Peer, headers: &HeaderMap) -> bool {
        if !self.required() || (self.client_cert && peer.client_cert) {
            return true;
        }
        let bearer = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim);
        let Some(token) = bearer else {
            return false;
        };
        if self.tokens.as_ref().is_some_and(|t| t.admits(token)) {
            return true;
        }
        match self
            .bound
            .as_ref()
            .map(|b| b.verify(token, SystemTime::now()))
        {
            Some(Ok(())) => true,
            Some(Err(why)) => {
                tracing::debug!(reason = %why, "bearer token refused");
                false
            }
            None => false,
        }
    }
}

/// The middleware of the webhook's routes: 401 (before the body is read) for a caller
/// [`Auth::admits`] refuses.
pub async fn require(
    State((auth, metrics)): State<(Arc<Auth>, Arc<Metrics>)>,
    req: Request,
    next: Next,
) -> Response {
    let peer = req.extensions().get::<Peer>().copied().unwrap_or_default();
    if auth.admits(peer, req.headers()) {
        return next.run(req).await;
    }
    metrics.refused(Refusal::Unauthenticated);
    tracing::debug!(
        path = req.uri().path(),
        "caller refused: no valid client certificate or token"
    );
    (
        StatusCode::UNAUTHORIZED,
        [
            (header::WWW_AUTHENTICATE, "Bearer"),
            (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            // The body is not read: the connection cannot carry another request.
            (header::CONNECTION, "close"),
        ],
        "unauthenticated: this webhook answers only callers with the client certificate or \
         bearer token it was configured with\n",
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn bearer(token: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_str(&format!("Bearer {token}")).unwrap(),
        );
        h
    }

    /// A token file holding `content`, loaded (the folder lives as long as the guard).
    fn token_file(content: &str) -> (tempfile::TempDir, std::path::PathBuf, Arc<Tokens>) {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("tokens");
        std::fs::write(&file, content).unwrap();
        let tokens = Tokens::load(&file).unwrap();
        (dir, file, tokens)
    }

    #[test]
    fn callers_are_admitted_by_a_verified_certificate_or_a_listed_token() {
        let (_dir, _, tokens) = token_file("\n  first-token \nsecond-token\n");
        let cert = Peer { client_cert: true };
        let none = Peer::default();
        let off = Auth::default();
        assert!(!off.required() && off.admits(none, &HeaderMap::new()));
        let by_cert = Auth {
            client_cert: true,
            ..Auth::default()
        };
        assert!(by_cert.admits(cert, &HeaderMap::new()));
        assert!(!by_cert.admits(none, &HeaderMap::new()));
        assert!(
            !by_cert.admits(none, &bearer("first-token")),
            "no token file"
        );
        let by_token = Auth {
            tokens: Some(tokens.clone()),
            ..Auth::default()
        };
        assert!(by_token.admits(none, &bearer("first-token")));
        assert!(by_token.admits(none, &bearer("second-token")));
        assert!(!by_token.admits(none, &bearer("first")));
        assert!(!by_token.admits(none, &bearer("")));
        assert!(!by_token.admits(cert, &HeaderMap::new()), "no client CA");
        let mut basic = HeaderMap::new();
        basic.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Basic Zmlyc3Q="),
        );
        assert!(!by_token.admits(none, &basic));
        let both = Auth {
            client_cert: true,
            tokens: Some(tokens),
            ..Auth::default()
        };
        assert!(both.admits(cert, &HeaderMap::new()) && both.admits(none, &bearer("second-token")));
    }

    #[test]
    fn the_token_file_is_reloaded_and_a_bad_one_keeps_the_tokens() {
        let (_dir, file, tokens) = token_file("old\n");
        assert_eq!(tokens.reload(), None, "unchanged");
        std::fs::write(&file, "new\n").unwrap();
        assert_eq!(tokens.reload(), Some(Ok(())));
        assert!(tokens.admits("new") && !tokens.admits("old"));
        std::fs::write(&file, "\n\n").unwrap();
        assert_eq!(
            tokens.reload(),
            Some(Err(format!(
                "the token file {}: no token in it",
                file.display()
            )))
        );
        assert!(tokens.admits("new"), "kept");
        std::fs::write(&file, "").unwrap();
        assert!(Tokens::load(&file).is_err());
    }
}
