//! A shared base: the spec an Instrumentation gets when it names another one as its base
//! (`otel-injector/base`), laid over that one's. The rule, per field, in one place:
//! - an object (exporter, resource, a language's section, …) merges field by field, so a
//!   field the nearer one leaves out comes from the base;
//! - a list of named entries (`env`, a language's `env`) merges by name: the base's entries
//!   in their order, each replaced whole by the nearer one's of the same name, then the
//!   nearer one's other entries in theirs;
//! - a map (`resource.resourceAttributes`, a container's `resources.limits`) merges by key;
//! - anything else (a scalar, an image, a list of unnamed entries such as `propagators` or
//!   Java's `extensions`) and the [`WHOLE`] objects: the nearer one's when it sets it, else
//!   the base's, whole;
//! - the v1beta1 fields a stored object carries (its declarative configuration and metadata
//!   switches): the nearer one's when it carries any, else the base's, whole.
//!
//! Every value taken from the base is recorded by its path (`java.image`, `env[OTEL_X]`),
//! so `explain` can say where it came from.

use serde_json::{Map, Value};

use super::spec::InstrumentationSpec;

/// Objects taken whole from the nearer one that sets them: their fields mean something
/// only together (a sampler's argument is read by its type; TLS files go by one CA).
pub const WHOLE: [&str; 2] = ["sampler", "exporter.tls"];

/// A spec laid over a base's, and what it took from the base.
#[derive(Clone, Debug, PartialEq)]
pub struct Merged {
    pub spec: InstrumentationSpec,
    /// The paths (relative to `spec`) whose value came from the base, in the spec's order.
    pub inherited: Vec<String>,
}

/// Lays `near` over `base` by the rule of this module.
pub fn merge_spec(
    near: &InstrumentationSpec,
    base: &InstrumentationSpec,
) -> Result<Merged, String> {
    let to_json = |s: &InstrumentationSpec| serde_json::to_value(s).map_err(|e| e.to_string());
    let mut inherited = Vec::new();
    let value = merge(to_json(near)?, to_json(base)?, "", &mut inherited);
    let mut spec: InstrumentationSpec =
        serde_json::from_value(value).map_err(|e| format!("the merge cannot be read: {e}"))?;
    spec.v1beta1 = match (&near.v1beta1, &base.v1beta1) {
        (Some(own), _) => Some(own.clone()),
        (None, Some(theirs)) => {
            inherited.push("v1beta1".to_owned());
            Some(theirs.clone())
        }
        (None, None) => None,
    };
    Ok(Merged { spec, inherited })
}

fn child(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

fn merge(near: Value, base: Value, path: &str, inherited: &mut Vec<String>) -> Value {
    match (near, base) {
        (Value::Object(near), Value::Object(base)) if !WHOLE.contains(&path) => {
            Value::Object(merge_objects(near, base, path, inherited))
        }
        (Value::Array(near), Value::Array(base)) if named(&near) && named(&base) => {
            Value::Array(merge_named(near, base, path, inherited))
        }
        (near, _) => near,
    }
}

fn merge_objects(
    mut near: Map<String, Value>,
    base: Map<String, Value>,
    path: &str,
    inherited: &mut Vec<String>,
) -> Map<String, Value> {
    let mut out = Map::new();
    for (key, theirs) in base {
        let here = child(path, &key);
        match near.remove(&key) {
            Some(own) => {
                out.insert(key, merge(own, theirs, &here, inherited));
            }
            None => {
                inherited.push(here);
                out.insert(key, theirs);
            }
        }
    }
    out.extend(near);
    out
}

/// Whether every entry of a list is an object with a string `name` (a list merged by name).
fn named(list: &[Value]) -> bool {
    list.iter().all(|v| name_of(v).is_some())
}

fn name_of(v: &Value) -> Option<&str> {
    v.get("name")?.as_str()
}

fn merge_named(
    near: Vec<Value>,
    base: Vec<Value>,
    path: &str,
    inherited: &mut Vec<String>,
) -> Vec<Value> {
    let mut near: Vec<Option<Value>> = near.into_iter().map(Some).collect();
    let mut out = Vec::with_capacity(base.len() + near.len());
    for theirs in base {
        let name = name_of(&theirs).unwrap_or_default().to_owned();
        let own = near
            .iter_mut()
            .find(|v| v.as_ref().and_then(name_of) == Some(name.as_str()))
            .and_then(Option::take);
        match own {
            Some(own) => out.push(own),
            None => {
                inherited.push(format!("{path}[{name}]"));
                out.push(theirs);
            }
        }
    }
    out.extend(near.into_iter().flatten());
    out
}

/// RFC 1123 subdomain characters (what Kubernetes accepts as a namespace or object name).
pub fn is_object_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-' || c == b'.')
}

/// The Instrumentation a base reference names: `name` (in `home`, the namespace of the one
/// that names it) or `namespace/name`, when both are object names.
pub fn parse_ref<'a>(home: &'a str, reference: &'a str) -> Option<(&'a str, &'a str)> {
    let (ns, name) = reference.split_once('/').unwrap_or((home, reference));
    (is_object_name(ns) && is_object_name(name)).then_some((ns, name))
}

/// Whether `path` is `ancestor` or lies inside it (`java.env[X]` inside `java`).
pub fn path_within(path: &str, ancestor: &str) -> bool {
    path.strip_prefix(ancestor)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('.') || rest.starts_with('['))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(yaml: &str) -> InstrumentationSpec {
        serde_saphyr::from_str(yaml).unwrap()
    }

    #[test]
    fn the_nearer_one_wins_field_by_field_and_env_merges_by_name() {
        let base = spec(
            "exporter: {endpoint: http://platform:4318}\n\
             propagators: [tracecontext, baggage]\n\
             sampler: {type: parentbased_traceidratio, argument: '0.25'}\n\
             resource: {resourceAttributes: {team: platform, tier: shared}}\n\
             env: [{name: A, value: base-a}, {name: B, value: base-b}]\n\
             java:\n  image: ghcr.io/java:2.0\n  env: [{name: J, value: base-j}]\n  \
               resources: {limits: {cpu: 500m, memory: 64Mi}}\n",
        );
        let near = spec(
            "exporter: {endpoint: http://team:4318}\n\
             sampler: {type: always_on}\n\
             resource: {resourceAttributes: {team: checkout}}\n\
             env: [{name: C, value: own-c}, {name: A, valueFrom: {fieldRef: {fieldPath: metadata.name}}}]\n\
             java:\n  resources: {limits: {memory: 128Mi}}\n",
        );
        let m = merge_spec(&near, &base).unwrap();
        let want = spec(
            "exporter: {endpoint: http://team:4318}\n\
             propagators: [tracecontext, baggage]\n\
             sampler: {type: always_on}\n\
             resource: {resourceAttributes: {team: checkout, tier: shared}}\n\
             env: [{name: A, valueFrom: {fieldRef: {fieldPath: metadata.name}}}, {name: B, value: base-b}, {name: C, value: own-c}]\n\
             java:\n  image: ghcr.io/java:2.0\n  env: [{name: J, value: base-j}]\n  \
               resources: {limits: {cpu: 500m, memory: 128Mi}}\n",
        );
        assert_eq!(m.spec, want);
        assert_eq!(
            m.inherited,
            [
                "env[B]",
                "java.env",
                "java.image",
                "java.resources.limits.cpu",
                "propagators",
                "resource.resourceAttributes.tier",
            ]
        );
    }

    #[test]
    fn an_unset_section_comes_whole_and_an_empty_list_is_unset() {
        let base = spec("python: {image: py:1}\npropagators: [b3]\n");
        let near = spec("propagators: []\njava: {image: j:1}\n");
        let m = merge_spec(&near, &base).unwrap();
        assert_eq!(
            m.spec,
            spec("python: {image: py:1}\npropagators: [b3]\njava: {image: j:1}\n")
        );
        assert_eq!(m.inherited, ["propagators", "python"]);
    }

    #[test]
    fn paths_nest_by_dot_and_bracket_only() {
        assert!(path_within("java.env[X]", "java"));
        assert!(path_within("java", "java"));
        assert!(!path_within("javascript", "java"));
        assert!(path_within("env[A]", "env"));
    }
}
