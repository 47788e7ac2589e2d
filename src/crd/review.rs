//! The conversion webhook's protocol: a `ConversionReview` (`apiextensions.k8s.io/v1`) read,
//! each object converted by `convert`, and the answer written. Every input gets a
//! ConversionReview back: a review that cannot be read, or an object that cannot be
//! converted, gets a `Failure` result whose message says why (the API server shows it to
//! the client whose read or write needed the conversion).

use serde::Deserialize;
use serde_json::{Value, json};

use super::convert::{ConvertError, Version, convert_owned};

/// `apiVersion` of the reviews this webhook reads and writes.
pub const REVIEW_API_VERSION: &str = "apiextensions.k8s.io/v1";

/// A review as read: only what conversion needs; objects stay JSON.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Review {
    api_version: String,
    kind: String,
    request: Option<Request>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Request {
    uid: String,
    #[serde(rename = "desiredAPIVersion")]
    desired_api_version: String,
    #[serde(default)]
    objects: Vec<Value>,
}

/// What became of one review.
#[derive(Debug)]
pub struct Converted {
    /// The answer's bytes (a ConversionReview, always).
    pub body: Vec<u8>,
    /// The request's uid ("" when unreadable).
    pub uid: String,
    /// The version asked for, when readable.
    pub desired: Option<Version>,
    /// How many objects were converted.
    pub objects: usize,
    /// Why the review failed, when it did.
    pub failure: Option<String>,
}

/// Why a review fails.
#[derive(Debug, thiserror::Error)]
enum Failure {
    #[error("the body is not a ConversionReview: {0}")]
    Unreadable(serde_json::Error),
    #[error("apiVersion {0:?} and kind {1:?}: send apiextensions.k8s.io/v1 ConversionReview")]
    WrongKind(String, String),
    #[error("the ConversionReview has no request")]
    NoRequest,
    #[error("desiredAPIVersion {0:?} is not opentelemetry.io/v1alpha1 or opentelemetry.io/v1beta1")]
    UnknownVersion(String),
    #[error("object {index}: kind {kind:?} is not Instrumentation")]
    WrongObjectKind { index: usize, kind: String },
    #[error("object {index}: {source}")]
    Object {
        index: usize,
        #[source]
        source: ConvertError,
    },
}

/// Converts the objects of one review body.
pub fn review(body: &[u8]) -> Converted {
    let review: Review = match serde_json::from_slice(body) {
        Ok(r) => r,
        Err(e) => return failed(String::new(), None, Failure::Unreadable(e)),
    };
    if review.api_version != REVIEW_API_VERSION || review.kind != "ConversionReview" {
        return failed(
            String::new(),
            None,
            Failure::WrongKind(review.api_version, review.kind),
        );
    }
    let Some(request) = review.request else {
        return failed(String::new(), None, Failure::NoRequest);
    };
    let Some(desired) = Version::of(&request.desired_api_version) else {
        return failed(
            request.uid,
            None,
            Failure::UnknownVersion(request.desired_api_version),
        );
    };
    let mut converted = Vec::with_capacity(request.objects.len());
    for (index, object) in request.objects.into_iter().enumerate() {
        let kind = object
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if kind != super::spec::KIND {
            let kind = kind.to_owned();
            return failed(
                request.uid,
                Some(desired),
                Failure::WrongObjectKind { index, kind },
            );
        }
        match convert_owned(object, desired) {
            Ok(o) => converted.push(o),
            Err(source) => {
                return failed(
                    request.uid,
                    Some(desired),
                    Failure::Object { index, source },
                );
            }
        }
    }
    let answer = json!({
        "apiVersion": REVIEW_API_VERSION,
        "kind": "ConversionReview",
        "response": {
            "uid": request.uid,
            "convertedObjects": converted,
            "result": { "status": "Success" },
        },
    });
    Converted {
        body: answer.to_string().into_bytes(),
        uid: request.uid,
        desired: Some(desired),
        objects: converted.len(),
        failure: None,
    }
}

fn failed(uid: String, desired: Option<Version>, why: Failure) -> Converted {
    let message = why.to_string();
    let answer = json!({
        "apiVersion": REVIEW_API_VERSION,
        "kind": "ConversionReview",
        "response": {
            "uid": uid,
            "convertedObjects": [],
            "result": { "status": "Failure", "message": message },
        },
    });
    Converted {
        body: answer.to_string().into_bytes(),
        uid,
        desired,
        objects: 0,
        failure: Some(message),
    }
}
