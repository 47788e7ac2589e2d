//! The conversion webhook's protocol: a `ConversionReview` (`apiextensions.k8s.io/v1`) read,
//! each object converted by `convert`, and the answer written. Every input gets a
//! ConversionReview back: a review that cannot be read, or an object that cannot be
//! converted, gets a `Failure` result whose message says why (the API server shows it to
//! the client whose read or write needed the conversion).
//!
//! Memory: a review of thousands of objects (a LIST in the other version) is converted
//! object by object. The objects stay borrowed, unparsed, in the body until their turn; each
//! is parsed, converted and written into the answer before the next is read, so a review
//! holds its body, its answer (about the body's size) and one object as a tree.

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use super::convert::{ConvertError, Version, convert_owned};

/// `apiVersion` of the reviews this webhook reads and writes.
pub const REVIEW_API_VERSION: &str = "apiextensions.k8s.io/v1";

/// A review as read: only what conversion needs; objects stay unparsed text of the body.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ConversionReview<'b> {
    api_version: String,
    kind: String,
    #[serde(borrow)]
    request: Option<ConversionRequest<'b>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ConversionRequest<'b> {
    uid: String,
    #[serde(rename = "desiredAPIVersion")]
    desired_api_version: String,
    #[serde(default, borrow)]
    objects: Vec<&'b RawValue>,
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
enum ConversionFailure {
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
    let review: ConversionReview<'_> = match serde_json::from_slice(body) {
        Ok(r) => r,
        Err(e) => return failed(String::new(), None, ConversionFailure::Unreadable(e)),
    };
    if review.api_version != REVIEW_API_VERSION || review.kind != "ConversionReview" {
        return failed(
            String::new(),
            None,
            ConversionFailure::WrongKind(review.api_version, review.kind),
        );
    }
    let Some(request) = review.request else {
        return failed(String::new(), None, ConversionFailure::NoRequest);
    };
    let Some(desired) = Version::of(&request.desired_api_version) else {
        return failed(
            request.uid,
            None,
            ConversionFailure::UnknownVersion(request.desired_api_version),
        );
    };
    // The answer, written as it is made: the head, each converted object, the tail (the
    // keys in the order serde_json writes a map's: sorted).
    let mut answer = Vec::with_capacity(bytes_hint(body.len()));
    answer.extend_from_slice(
        format!(
            "{{\"apiVersion\":\"{REVIEW_API_VERSION}\",\"kind\":\"ConversionReview\",\"response\":{{\"convertedObjects\":["
        )
        .as_bytes(),
    );
    let count = request.objects.len();
    for (index, raw) in request.objects.into_iter().enumerate() {
        let object: Value = match serde_json::from_str(raw.get()) {
            Ok(o) => o,
            Err(e) => {
                return failed(request.uid, Some(desired), ConversionFailure::Unreadable(e));
            }
        };
        let kind = object
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if kind != super::spec::KIND {
            let kind = kind.to_owned();
            return failed(
                request.uid,
                Some(desired),
                ConversionFailure::WrongObjectKind { index, kind },
            );
        }
        match convert_owned(object, desired) {
            Ok(o) => {
                if index > 0 {
                    answer.push(b',');
                }
                serde_json::to_writer(&mut answer, &o).expect("a JSON value writes to memory");
            }
            Err(source) => {
                return failed(
                    request.uid,
                    Some(desired),
                    ConversionFailure::Object { index, source },
                );
            }
        }
    }
    answer.extend_from_slice(b"],\"result\":{\"status\":\"Success\"},\"uid\":");
    serde_json::to_writer(&mut answer, &request.uid).expect("a string writes to memory");
    answer.extend_from_slice(b"}}");
    Converted {
        body: answer,
        uid: request.uid,
        desired: Some(desired),
        objects: count,
        failure: None,
    }
}

/// The answer's first allocation for a body of `len` bytes: a converted object is about as
/// long as the object sent, and the rest of the review is short.
fn bytes_hint(len: usize) -> usize {
    len + len / 8 + 256
}

fn failed(uid: String, desired: Option<Version>, why: ConversionFailure) -> Converted {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn review_of(objects: &str, to: &str) -> Vec<u8> {
        format!(
            r#"{{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{{"uid":"u-1","desiredAPIVersion":"{to}","objects":{objects}}}}}"#
        )
        .into_bytes()
    }

    /// The answer is written object by object: exactly the review a whole-tree writer made.
    #[test]
    fn the_answer_is_the_converted_objects_in_order() {
        let objects = r#"[{"apiVersion":"opentelemetry.io/v1alpha1","kind":"Instrumentation","metadata":{"name":"a"},"spec":{"exporter":{"endpoint":"http://c:4318"}}},
            {"apiVersion":"opentelemetry.io/v1beta1","kind":"Instrumentation","metadata":{"name":"b"}}]"#;
        let done = review(&review_of(objects, "opentelemetry.io/v1beta1"));
        assert_eq!(done.failure, None);
        assert_eq!(done.objects, 2);
        let first = convert_owned(
            serde_json::from_str::<Vec<Value>>(objects).unwrap()[0].clone(),
            Version::V1beta1,
        )
        .unwrap();
        let expected = json!({
            "apiVersion": REVIEW_API_VERSION, "kind": "ConversionReview",
            "response": {
                "uid": "u-1",
                "convertedObjects": [first,
                    {"apiVersion": "opentelemetry.io/v1beta1", "kind": "Instrumentation", "metadata": {"name": "b"}}],
                "result": {"status": "Success"},
            },
        });
        assert_eq!(String::from_utf8(done.body).unwrap(), expected.to_string());
        // No objects: an empty list.
        let done = review(&review_of("[]", "opentelemetry.io/v1alpha1"));
        assert_eq!(
            String::from_utf8(done.body).unwrap(),
            r#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","response":{"convertedObjects":[],"result":{"status":"Success"},"uid":"u-1"}}"#
        );
    }

    /// An object that cannot be converted fails the whole review, with nothing of the
    /// objects before it in the answer.
    #[test]
    fn a_bad_object_fails_the_review_whole() {
        let objects = r#"[{"apiVersion":"opentelemetry.io/v1alpha1","kind":"Instrumentation"},{"kind":"Pod"}]"#;
        let done = review(&review_of(objects, "opentelemetry.io/v1beta1"));
        assert_eq!(
            done.failure.as_deref(),
            Some(r#"object 1: kind "Pod" is not Instrumentation"#)
        );
        let answer: Value = serde_json::from_slice(&done.body).unwrap();
        assert_eq!(answer["response"]["convertedObjects"], json!([]));
        assert_eq!(answer["response"]["uid"], "u-1");
        assert_eq!(done.objects, 0);
    }
}
