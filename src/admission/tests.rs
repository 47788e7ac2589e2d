//! Tests of `admission`.

use super::*;
use ::base64::Engine as _;
use serde_json::json;

#[test]
fn the_response_is_written_as_the_api_server_reads_it() {
    let patch = br#"[{"op":"add","path":"/metadata/annotations","value":{"a":"b"}}]"#;
    let body = response(r#"u"1\"#, Some(patch), &["w \"1\"".to_owned()]);
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let encoded = ::base64::engine::general_purpose::STANDARD.encode(patch);
    assert_eq!(
        v,
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "response": {"uid": "u\"1\\", "allowed": true, "patchType": "JSONPatch",
                "patch": encoded, "warnings": ["w \"1\""]}})
    );
    assert_eq!(
        String::from_utf8(response("u", None, &[])).unwrap(),
        r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"u","allowed":true}}"#
    );
    // Every patch length, padded or not.
    for n in 0..5 {
        let p = vec![b'x'; n];
        let v: serde_json::Value = serde_json::from_slice(&response("u", Some(&p), &[])).unwrap();
        assert_eq!(
            v["response"]["patch"],
            ::base64::engine::general_purpose::STANDARD.encode(&p)
        );
    }
}
