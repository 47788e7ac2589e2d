//! SubjectAccessReviews: may this identity do this (to this resource, at this URL)?

use axum::http::Method;
use kube::Client;
use serde_json::json;

use super::send;

/// What a SubjectAccessReview asks: may this user do `verb` on `resource`?
#[derive(Clone, Copy, Debug)]
pub struct Access<'a> {
    pub verb: &'a str,
    pub group: &'a str,
    pub resource: &'a str,
    /// Empty: every namespace (or a cluster-scoped resource).
    pub namespace: &'a str,
    /// Empty: any name.
    pub name: &'a str,
}

impl std::fmt::Display for Access<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let group = if self.group.is_empty() {
            "core"
        } else {
            self.group
        };
        write!(f, "{} {group}/{}", self.verb, self.resource)?;
        if !self.name.is_empty() {
            write!(f, "/{}", self.name)?;
        }
        if !self.namespace.is_empty() {
            write!(f, " in {}", self.namespace)?;
        }
        Ok(())
    }
}

/// Whether the API server's authorizer allows `access` to `user` with `groups` (a
/// SubjectAccessReview, sent with `client`'s own rights).
pub async fn may(
    client: &Client,
    user: &str,
    groups: &[String],
    access: Access<'_>,
) -> Result<bool, String> {
    let review = json!({
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {
            "user": user, "groups": groups,
            "resourceAttributes": {
                "verb": access.verb, "group": access.group, "resource": access.resource,
                "namespace": access.namespace, "name": access.name,
            }
        }
    });
    let r = send(
        client,
        Method::POST,
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        Some(&review),
    )
    .await?;
    if r.status != 201 {
        return Err(format!(
            "SubjectAccessReview ({access}): HTTP {}: {}",
            r.status, r.body
        ));
    }
    Ok(r.body["status"]["allowed"] == true)
}

/// Whether `user` (with `groups`) may `verb` the non-resource URL `path` (`/metrics`), as the
/// authorizer answers a SubjectAccessReview.
pub async fn may_url(
    client: &Client,
    user: &str,
    groups: &[String],
    verb: &str,
    path: &str,
) -> Result<bool, String> {
    let review = json!({
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": user, "groups": groups,
                 "nonResourceAttributes": {"verb": verb, "path": path}}
    });
    let r = send(
        client,
        Method::POST,
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        Some(&review),
    )
    .await?;
    if r.status != 201 {
        return Err(format!(
            "SubjectAccessReview ({verb} {path}): HTTP {}: {}",
            r.status, r.body
        ));
    }
    Ok(r.body["status"]["allowed"] == true)
}
