//! The AdmissionReview response, written as bytes.

use super::base64;

/// The response body: `{"apiVersion","kind","response":{"uid","allowed","patchType",
/// "patch","warnings"}}`, the patch base64-encoded straight into the body.
pub(super) fn response(uid: &str, patch: Option<&[u8]>, warnings: &[String]) -> Vec<u8> {
    let patch_len = patch.map_or(0, |p| base64::encoded_len(p.len()));
    let mut out = Vec::with_capacity(160 + uid.len() + patch_len);
    out.extend_from_slice(
        br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"#,
    );
    // Strings and string lists always serialize.
    let _ = serde_json::to_writer(&mut out, uid);
    out.extend_from_slice(br#","allowed":true"#);
    if let Some(p) = patch {
        out.extend_from_slice(br#","patchType":"JSONPatch","patch":""#);
        base64::encode_into(p, &mut out);
        out.push(b'"');
    }
    if !warnings.is_empty() {
        out.extend_from_slice(br#","warnings":"#);
        let _ = serde_json::to_writer(&mut out, warnings);
    }
    out.extend_from_slice(b"}}");
    out
}
