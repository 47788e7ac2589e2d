//! The AdmissionReview envelope ([`Review`], [`RequestIn`]), read in one pass with the pod
//! decoded where it stands, or plainly.
//!
//! The plain read (serde's, of the same types) keeps `request.object` raw, which scans the
//! object once to find where it ends, and [`super::decode::decode_pod`] then scans it again. For a Pod
//! CREATE that may ask for injection, this reader decodes the pod as the envelope is read,
//! once, and finds the object's text (its size bounds the patch) from where its key and the
//! next key stand in the body. It reads only the shape the API server writes (`kind`,
//! `namespace` and `operation` before `object`); anything else, and any error, is left to the
//! plain read, so both always give the same answer.

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess};
use serde_json::value::RawValue;

use super::{Gvk, INJECT_PREFIX, PodIn, find_inject_prefix};

mod seed;

use seed::{KeySeed, MapRead, OptionSeed, Read, Seed, set};

/// A review: the envelope's fields and the object, raw or (read in one pass) the pod decoded.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Review<'a> {
    pub api_version: Option<&'a str>,
    pub kind: Option<&'a str>,
    #[serde(borrow)]
    pub request: Option<RequestIn<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct RequestIn<'a> {
    pub uid: String,
    #[serde(default)]
    pub kind: Gvk,
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub operation: String,
    #[serde(default)]
    pub dry_run: Option<bool>,
    /// Read plainly, the object is kept raw.
    #[serde(borrow, default, deserialize_with = "raw_object")]
    pub object: Object<'a>,
}

#[derive(Default)]
pub(super) enum Object<'a> {
    #[default]
    Absent,
    Raw(&'a RawValue),
    /// A Pod CREATE decoded as it was read, its JSON text (UTF-8), and whether that text
    /// holds an `inject-` annotation key's prefix (found by the read's search of the body).
    Pod {
        pod: Box<PodIn>,
        text: &'a [u8],
        prefixed: bool,
    },
}

/// The object of a plain read: kept raw (`null` is absent).
fn raw_object<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Object<'de>, D::Error> {
    Option::<&'de RawValue>::deserialize(d).map(|o| o.map_or(Object::Absent, Object::Raw))
}

/// Reads `body` in one pass; `namespace_asks` says whether a namespace's annotations ask for
/// injection. `None` when the plain read must be used (see the module's documentation).
pub(super) fn read<'a>(
    body: &'a [u8],
    namespace_asks: &dyn Fn(&str) -> bool,
) -> Option<Review<'a>> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let review = Seed::<ReviewMap>::new(Read {
        body,
        namespace_asks,
    })
    .deserialize(&mut de)
    .ok()?;
    de.end().ok()?;
    Some(review)
}

/// The review: `apiVersion`, `kind`, `request`.
enum ReviewMap {}

impl<'de> MapRead<'de> for ReviewMap {
    type Value = Review<'de>;
    const EXPECTING: &'static str = "an AdmissionReview";

    fn visit<M: MapAccess<'de>>(read: Read<'_, 'de>, mut map: M) -> Result<Review<'de>, M::Error> {
        let (mut api_version, mut kind, mut request) = (None, None, None);
        while let Some(key) = map.next_key_seed(KeySeed)? {
            match key.text {
                "apiVersion" => set(&mut api_version, map.next_value::<Option<&str>>()?)?,
                "kind" => set(&mut kind, map.next_value::<Option<&str>>()?)?,
                "request" => {
                    let seed = Seed::<RequestMap>::new(read);
                    set(&mut request, map.next_value_seed(OptionSeed(seed))?)?;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Review {
            api_version: api_version.flatten(),
            kind: kind.flatten(),
            request: request.flatten(),
        })
    }
}

/// The request: the envelope's fields, and the object (the pod decoded where it stands).
enum RequestMap {}

impl<'de> MapRead<'de> for RequestMap {
    type Value = RequestIn<'de>;
    const EXPECTING: &'static str = "an AdmissionReview request";

    fn visit<M: MapAccess<'de>>(
        read: Read<'_, 'de>,
        mut map: M,
    ) -> Result<RequestIn<'de>, M::Error> {
        let body = read.body;
        let (mut uid, mut kind, mut namespace, mut name) = (None, None, None, None);
        let (mut operation, mut dry_run, mut object) = (None, None, None);
        // Where the decoded pod's text starts; the key after it says where it ends.
        let mut pod_start: Option<usize> = None;
        let mut pod_end: Option<usize> = None;
        let mut after_pod = false;
        // Where the body first holds an `inject-` key's prefix, once searched.
        let mut prefix_at: Option<usize> = None;
        while let Some(key) = map.next_key_seed(KeySeed)? {
            if std::mem::take(&mut after_pod) {
                pod_end = key.offset(body).and_then(|k| value_end(body, k));
            }
            match key.text {
                "uid" => set(&mut uid, map.next_value::<String>()?)?,
                "kind" => set(&mut kind, map.next_value::<Gvk>()?)?,
                "namespace" => set(&mut namespace, map.next_value::<Option<String>>()?)?,
                "name" => set(&mut name, map.next_value::<Option<String>>()?)?,
                "operation" => set(&mut operation, map.next_value::<String>()?)?,
                "dryRun" => set(&mut dry_run, map.next_value::<Option<bool>>()?)?,
                "object" => {
                    let is_pod = kind.as_ref().is_some_and(|k: &Gvk| {
                        k.kind == "Pod" && k.group.is_empty() && k.version == "v1"
                    });
                    // A Pod CREATE whose namespace came first may ask for injection: by a
                    // key in the body (searched once, the answer reuses where it stands), or
                    // by its namespace's annotations.
                    let create_in = namespace
                        .as_ref()
                        .filter(|_| is_pod && operation.as_deref() == Some("CREATE"));
                    if create_in.is_some() {
                        prefix_at = find_inject_prefix(body);
                    }
                    let in_place = create_in.is_some_and(|ns: &Option<String>| {
                        prefix_at.is_some() || (read.namespace_asks)(ns.as_deref().unwrap_or(""))
                    });
                    let start = key
                        .offset(body)
                        .and_then(|k| value_start(body, k + key.text.len()));
                    match start.filter(|_| in_place && object.is_none()) {
                        Some(start) => {
                            let pod: PodIn = map.next_value()?;
                            object = Some(Object::Pod {
                                pod: Box::new(pod),
                                text: &[],
                                prefixed: false,
                            });
                            pod_start = Some(start);
                            after_pod = true;
                        }
                        None => {
                            let raw = map.next_value::<Option<&RawValue>>()?;
                            set(&mut object, raw.map_or(Object::Absent, Object::Raw))?;
                        }
                    }
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        let object = match (object, pod_start) {
            (Some(Object::Pod { pod, .. }), Some(start)) => {
                // The object was the last key, or its end was not where expected: its text
                // is read again from where it starts.
                let text = pod_end
                    .and_then(|end| body.get(start..end))
                    .or_else(|| rescan(body, start).map(str::as_bytes))
                    .ok_or_else(|| de::Error::custom("the pod's text was not found"))?;
                // What the pod's decode skipped was not checked to be UTF-8; the plain read
                // refuses a body where it is not.
                if !text.is_ascii() && std::str::from_utf8(text).is_err() {
                    return Err(de::Error::custom("the pod is not UTF-8"));
                }
                // The body's first prefix tells whether the text holds one, unless it stands
                // before the text (in the request's other fields): then the text is searched.
                let prefixed = match prefix_at {
                    Some(at) if at >= start => at + INJECT_PREFIX.len() <= start + text.len(),
                    Some(_) => find_inject_prefix(text).is_some(),
                    None => false,
                };
                Object::Pod {
                    pod,
                    text,
                    prefixed,
                }
            }
            (other, _) => other.unwrap_or(Object::Absent),
        };
        Ok(RequestIn {
            uid: uid.ok_or_else(|| de::Error::missing_field("uid"))?,
            kind: kind.unwrap_or_default(),
            namespace: namespace.flatten(),
            name: name.flatten(),
            operation: operation.unwrap_or_default(),
            dry_run: dry_run.flatten(),
            object,
        })
    }
}

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

/// Where the value of the key whose text ends at `key_end` starts, when it is an object:
/// past the closing quote, blanks, the colon and blanks.
fn value_start(body: &[u8], key_end: usize) -> Option<usize> {
    let mut i = key_end;
    (body.get(i)? == &b'"').then_some(())?;
    i += 1;
    while is_space(*body.get(i)?) {
        i += 1;
    }
    (body.get(i)? == &b':').then_some(())?;
    i += 1;
    while is_space(*body.get(i)?) {
        i += 1;
    }
    (body.get(i)? == &b'{').then_some(i)
}

/// Where the object before the key whose text starts at `key` ends: before the opening
/// quote, blanks, the comma and blanks.
fn value_end(body: &[u8], key: usize) -> Option<usize> {
    let mut i = key.checked_sub(1)?;
    (body.get(i)? == &b'"').then_some(())?;
    while is_space(*body.get(i.checked_sub(1)?)?) {
        i -= 1;
    }
    i = i.checked_sub(1)?;
    (body.get(i)? == &b',').then_some(())?;
    while is_space(*body.get(i.checked_sub(1)?)?) {
        i -= 1;
    }
    (body.get(i.checked_sub(1)?)? == &b'}').then_some(i)
}

/// The JSON value that starts at `start`, read again.
fn rescan(body: &[u8], start: usize) -> Option<&str> {
    let mut de = serde_json::Deserializer::from_slice(body.get(start..)?);
    <&RawValue>::deserialize(&mut de).ok().map(RawValue::get)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod_text(body: &str) -> Option<String> {
        let review = read(body.as_bytes(), &|_| false)?;
        match review.request?.object {
            Object::Pod { text, prefixed, .. } => {
                // The carried search agrees with a search of the text itself.
                assert_eq!(prefixed, find_inject_prefix(text).is_some());
                Some(String::from_utf8(text.to_vec()).unwrap())
            }
            _ => None,
        }
    }

    const POD: &str = r#"{"metadata":{"annotations":{"instrumentation.opentelemetry.io/inject-java":"true"}},"spec":{"containers":[{"name":"a"}]}}"#;

    #[test]
    fn the_pods_text_is_found_wherever_it_ends() {
        let head = r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"group":"","version":"v1","kind":"Pod"},"namespace":"shop","operation":"CREATE","object":"#;
        // Followed by a key, with and without blanks; the last key; pretty-printed.
        for tail in [
            r#","oldObject":null}}"#,
            " ,\n \"dryRun\": false}}",
            "}}",
            " \n}\n}\n",
        ] {
            let body = format!("{head}{POD}{tail}");
            assert_eq!(pod_text(&body).as_deref(), Some(POD), "{tail:?}");
        }
        let spaced = format!(
            "{}{POD}}}}}",
            head.replace(r#""object":"#, "\"object\" :\n  ")
        );
        assert_eq!(pod_text(&spaced).as_deref(), Some(POD));
    }

    #[test]
    fn whether_the_pod_holds_an_inject_key_is_told_by_the_bodys_first_one() {
        let prefixed = |body: &str| match read(body.as_bytes(), &|_| true)?.request?.object {
            Object::Pod { prefixed, .. } => Some(prefixed),
            _ => None,
        };
        let key = format!("{INJECT_PREFIX}java");
        let plain = r#"{"metadata":{"annotations":{"a":"b"}}}"#;
        let asking = format!(r#"{{"metadata":{{"annotations":{{"{key}":"true"}}}}}}"#);
        let body = |before: &str, pod: &str, after: &str| {
            format!(
                r#"{{"request":{{"uid":"u","userInfo":{{"extra":{{"x":["{before}"]}}}},"kind":{{"group":"","version":"v1","kind":"Pod"}},"namespace":"shop","operation":"CREATE","object":{pod},"oldObject":{{"n":"{after}"}}}}}}"#
            )
        };
        // The first one in the pod; only before it (the pod is searched); only after it;
        // before it and in it; none (the namespace asks).
        assert_eq!(prefixed(&body("", &asking, "")), Some(true));
        assert_eq!(prefixed(&body(&key, plain, "")), Some(false));
        assert_eq!(prefixed(&body("", plain, &key)), Some(false));
        assert_eq!(prefixed(&body(&key, &asking, &key)), Some(true));
        assert_eq!(prefixed(&body("", plain, "")), Some(false));
    }

    #[test]
    fn the_api_servers_review_is_read_in_one_pass() {
        let body = include_str!("../../tests/data/pod-create-inject-java.json");
        let plain: serde_json::Value = serde_json::from_str(body).unwrap();
        let text = pod_text(body).expect("read in one pass");
        let parsed: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(parsed, plain["request"]["object"]);
        assert!(text.starts_with('{') && text.ends_with('}'));
    }

    #[test]
    fn other_shapes_are_left_to_the_plain_read() {
        let review = |request: &str| {
            format!(
                r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{request}}}"#
            )
        };
        // The object before the kind, the operation or the namespace: kept raw.
        let late = review(&format!(
            r#"{{"uid":"u","object":{POD},"kind":{{"group":"","version":"v1","kind":"Pod"}},"namespace":"shop","operation":"CREATE"}}"#
        ));
        let read_late = read(late.as_bytes(), &|_| false).unwrap();
        assert!(matches!(read_late.request.unwrap().object, Object::Raw(_)));
        // An UPDATE, and a pod that asks for nothing in a namespace that asks for nothing.
        for (op, pod) in [("UPDATE", POD), ("CREATE", r#"{"metadata":{}}"#)] {
            let body = review(&format!(
                r#"{{"uid":"u","kind":{{"group":"","version":"v1","kind":"Pod"}},"namespace":"shop","operation":"{op}","object":{pod}}}"#
            ));
            let r = read(body.as_bytes(), &|_| false).unwrap();
            assert!(
                matches!(r.request.unwrap().object, Object::Raw(_)),
                "{op} {pod}"
            );
        }
        // A pod that asks for nothing, in a namespace that asks: decoded.
        let body = review(
            r#"{"uid":"u","kind":{"group":"","version":"v1","kind":"Pod"},"namespace":"shop","operation":"CREATE","object":{"metadata":{}}}"#,
        );
        let r = read(body.as_bytes(), &|ns| ns == "shop").unwrap();
        assert!(matches!(r.request.unwrap().object, Object::Pod { .. }));
        // Escaped keys, duplicate fields, a pod that does not decode, trailing text: no
        // one-pass read.
        // Text the pod's decode skips must still be UTF-8, as the plain read requires.
        let mut latin1 = review(
            r#"{"uid":"u","kind":{"group":"","version":"v1","kind":"Pod"},"namespace":"shop","operation":"CREATE","object":{"x":"?","metadata":{}},"dryRun":false}"#,
        )
        .into_bytes();
        let at = latin1.iter().position(|&b| b == b'?').unwrap();
        latin1[at] = 0xe9;
        assert!(read(&latin1, &|_| true).is_none());
        for bad in [
            review(r#"{"u\u0069d":"u"}"#),
            review(r#"{"uid":"u","uid":"v"}"#),
            review(
                r#"{"uid":"u","kind":{"group":"","version":"v1","kind":"Pod"},"namespace":"shop","operation":"CREATE","object":{"spec":{"containers":"no"},"metadata":{"annotations":{"instrumentation.opentelemetry.io/inject-java":"true"}}}}"#,
            ),
            review(r#"{"uid":"u"}"#) + "x",
        ] {
            assert!(read(bad.as_bytes(), &|_| true).is_none(), "{bad}");
        }
    }
}
