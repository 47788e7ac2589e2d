//! Writing CEL: string literals, the typed object literals a `JSONPatch` value needs (the
//! API server's CEL has no heterogeneous maps: `{"name": "x", "image": {...}}` is not an
//! expression, `Object.spec.volumes{name: "x", image: Object.spec.volumes.image{...}}` is),
//! and strings that hold a container's name.

use serde_json::Value;

/// A CEL string literal of `s`: double-quoted, with `\`, `"` and control characters escaped.
pub fn string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for ch in s.chars() {
        match ch {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A CEL list literal of strings.
pub fn strings<'a>(items: impl IntoIterator<Item = &'a str>) -> String {
    let items: Vec<String> = items.into_iter().map(string).collect();
    format!("[{}]", items.join(", "))
}

/// A string expression for `s` where every occurrence of `marker` stands for the CEL string
/// expression `name`: `"prefix" + name + "suffix"`.
pub fn with_name(s: &str, marker: &str, name: &str) -> String {
    with_names(s, &[(marker, name)])
}

/// A string expression for `s` where every occurrence of each marker stands for its CEL
/// string expression.
pub fn with_names(s: &str, marks: &[(&str, &str)]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut rest = s;
    loop {
        let next = marks
            .iter()
            .filter_map(|(m, e)| rest.find(m).map(|at| (at, *m, *e)))
            .min_by_key(|(at, ..)| *at);
        let Some((at, marker, expr)) = next else {
            break;
        };
        if at > 0 {
            parts.push(string(&rest[..at]));
        }
        parts.push(expr.to_owned());
        rest = &rest[at + marker.len()..];
    }
    if !rest.is_empty() || parts.is_empty() {
        parts.push(string(rest));
    }
    parts.join(" + ")
}

/// Fields of the pod's schema that are maps (string keys), not objects: a map literal.
const MAPS: [&str; 6] = [
    ".limits",
    ".requests",
    ".labels",
    ".annotations",
    ".matchLabels",
    ".volumeAttributes",
];

/// The typed CEL literal of a JSON object that is a `type_path` (`Object.spec.volumes`): its
/// objects become `Type{field: ...}` with the field's path as type (its maps, [`MAPS`], map
/// literals), its strings pass through
/// `with_name` (so `marker` stands for the CEL expression `name`). `None` for what the API
/// server's CEL could not express as this shape (a null, a float).
pub fn object(v: &Value, type_path: &str, marker: &str, name: &str) -> Option<String> {
    object_with(v, type_path, &[(marker, name)])
}

/// [`object`] with several markers, each standing for its CEL string expression.
pub fn object_with(v: &Value, type_path: &str, marks: &[(&str, &str)]) -> Option<String> {
    Some(match v {
        Value::String(s) => with_names(s, marks),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.as_i64()?.to_string(),
        Value::Array(items) => {
            let items: Option<Vec<String>> = items
                .iter()
                .map(|i| object_with(i, type_path, marks))
                .collect();
            format!("[{}]", items?.join(", "))
        }
        Value::Object(entries) if MAPS.iter().any(|m| type_path.ends_with(m)) => {
            let entries: Option<Vec<String>> = entries
                .iter()
                .map(|(k, v)| {
                    Some(format!(
                        "{}: {}",
                        string(k),
                        object_with(v, type_path, marks)?
                    ))
                })
                .collect();
            format!("{{{}}}", entries?.join(", "))
        }
        Value::Object(fields) => {
            let fields: Option<Vec<String>> = fields
                .iter()
                .map(|(k, v)| {
                    let identifier = k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
                    let value = object_with(v, &format!("{type_path}.{k}"), marks)?;
                    identifier.then(|| format!("{k}: {value}"))
                })
                .collect();
            format!("{type_path}{{{}}}", fields?.join(", "))
        }
        Value::Null => return None,
    })
}

/// `~` and `/` escaped for a JSON pointer segment.
pub fn pointer_segment(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn strings_are_escaped() {
        assert_eq!(string(r#"a"b\c"#), r#""a\"b\\c""#);
        assert_eq!(string("x\ny\u{1}"), r#""x\ny\u0001""#);
        assert_eq!(strings(["a", "b"]), r#"["a", "b"]"#);
    }

    #[test]
    fn a_marker_becomes_the_name_expression() {
        assert_eq!(with_name("plain", "@", "c.name"), r#""plain""#);
        assert_eq!(
            with_name("/x-@/y", "@", "c.name"),
            r#""/x-" + c.name + "/y""#
        );
        assert_eq!(with_name("@", "@", "c.name"), "c.name");
        assert_eq!(with_name("@-@", "@", "n"), r#"n + "-" + n"#);
        assert_eq!(
            with_names("a@b%c@", &[("@", "n"), ("%", "m")]),
            r#""a" + n + "b" + m + "c" + n"#
        );
        assert_eq!(with_names("", &[("@", "n")]), r#""""#);
    }

    #[test]
    fn objects_are_typed_by_their_path() {
        let v = json!({"name": "v", "image": {"reference": "r:1"}, "readOnly": true});
        assert_eq!(
            object(&v, "Object.spec.volumes", "@", "n").unwrap(),
            r#"Object.spec.volumes{image: Object.spec.volumes.image{reference: "r:1"}, name: "v", readOnly: true}"#
        );
        let init = json!({"name": "i", "resources": {"limits": {"cpu": "500m"}}});
        assert_eq!(
            object(&init, "Object.spec.initContainers", "@", "n").unwrap(),
            r#"Object.spec.initContainers{name: "i", resources: Object.spec.initContainers.resources{limits: {"cpu": "500m"}}}"#
        );
        assert!(object(&json!({"a": null}), "T", "@", "n").is_none());
        assert!(object(&json!({"a-b": "x"}), "T", "@", "n").is_none());
        assert_eq!(
            pointer_segment("otel-injector/status"),
            "otel-injector~1status"
        );
        assert_eq!(pointer_segment("a~b"), "a~0b");
    }
}
