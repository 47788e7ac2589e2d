//! Reading the injection annotations: namespace-vs-pod precedence, instance selection and
//! container targeting, as the OpenTelemetry Operator does.

use std::collections::{BTreeMap, HashMap, HashSet};

use k8s_openapi::api::core::v1::Pod;

use super::plan::Slot;

/// What an effective `inject-<lang>` value asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request<'v> {
    /// Absent, empty or `false`: nothing.
    No,
    /// `true`: the single Instrumentation of the pod's namespace.
    Default,
    /// `name`: that Instrumentation in the pod's namespace.
    Named(&'v str),
    /// `ns/name`: that Instrumentation in namespace `ns`.
    Qualified { namespace: &'v str, name: &'v str },
}

impl<'v> Request<'v> {
    pub fn parse(value: Option<&'v str>) -> Self {
        let v = value.map(str::trim).unwrap_or("");
        if v.is_empty() || v.eq_ignore_ascii_case("false") {
            Request::No
        } else if v.eq_ignore_ascii_case("true") {
            Request::Default
        } else if let Some((namespace, name)) = v.split_once('/') {
            Request::Qualified { namespace, name }
        } else {
            Request::Named(v)
        }
    }
}

fn is_empty(v: Option<&str>) -> bool {
    v.is_none_or(|v| v.trim().is_empty())
}

fn is_true(v: &str) -> bool {
    v.trim().eq_ignore_ascii_case("true")
}

fn is_false(v: &str) -> bool {
    v.trim().eq_ignore_ascii_case("false")
}

/// The effective value of an annotation given the namespace's and the pod's values:
///
/// | namespace            | pod                 | effective       |
/// |----------------------|---------------------|-----------------|
/// | empty                | anything            | pod             |
/// | anything             | empty               | namespace       |
/// | anything             | `false` or a name   | pod             |
/// | `false`              | `true`              | `true`          |
/// | `true` or a name     | `true`              | namespace       |
pub fn effective<'v>(namespace: Option<&'v str>, pod: Option<&'v str>) -> Option<&'v str> {
    if is_empty(namespace) {
        return pod;
    }
    let Some(p) = pod.filter(|p| !p.trim().is_empty()) else {
        return namespace;
    };
    if !is_true(p) {
        return Some(p);
    }
    match namespace {
        Some(ns) if is_false(ns) => Some(p),
        ns => ns,
    }
}

/// The injection keys of one object: its labels and annotations. A label wins over an
/// annotation with the same key (the OpenTelemetry Operator's v1beta1 design), so the API
/// server can select pods by them.
#[derive(Clone, Copy, Default)]
pub struct Keys<'a> {
    pub labels: Option<&'a BTreeMap<String, String>>,
    pub annotations: Option<&'a BTreeMap<String, String>>,
}

impl<'a> Keys<'a> {
    pub fn get(&self, key: &str) -> Option<&'a str> {
        let label = self.labels.and_then(|m| m.get(key));
        label
            .or_else(|| self.annotations.and_then(|m| m.get(key)))
            .map(String::as_str)
    }
}

/// Looks up injection keys on the pod and its namespace with precedence applied: label over
/// annotation on each object, then the namespace-vs-pod rule of [`effective`].
pub struct Annotations<'a> {
    pod: Keys<'a>,
    namespace: Keys<'a>,
}

impl<'a> Annotations<'a> {
    pub fn new(pod: &'a Pod, namespace: Keys<'a>) -> Self {
        let pod = Keys {
            labels: pod.metadata.labels.as_ref(),
            annotations: pod.metadata.annotations.as_ref(),
        };
        Annotations { pod, namespace }
    }

    pub fn pod(&self, key: &str) -> Option<&'a str> {
        self.pod.get(key)
    }

    pub fn namespace(&self, key: &str) -> Option<&'a str> {
        self.namespace.get(key)
    }

    pub fn get(&self, key: &str) -> Option<&'a str> {
        effective(self.namespace(key), self.pod(key))
    }
}

/// Why a container list cannot be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TargetError {
    Unknown(String),
    Duplicate(String),
    Empty,
}

impl std::fmt::Display for TargetError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TargetError::Unknown(n) => write!(f, "no container {n:?} in this pod"),
            TargetError::Duplicate(n) => write!(f, "container {n:?} listed twice"),
            TargetError::Empty => f.write_str("empty container name in list"),
        }
    }
}

/// Splits a comma-separated container list. Whitespace around names is tolerated (the
/// Operator rejects it; the names themselves can never contain it).
pub fn split_names(value: Option<&str>) -> Vec<&str> {
    value
        .map(|v| v.split(',').map(str::trim).collect::<Vec<_>>())
        .filter(|v| !(v.len() == 1 && v[0].is_empty()))
        .unwrap_or_default()
}

/// Every container's slot by name: the first app container of that name, else the first init
/// container.
fn slots_by_name(pod: &Pod) -> HashMap<&str, Slot> {
    let mut map = HashMap::new();
    if let Some(spec) = pod.spec.as_ref() {
        let apps = spec
            .containers
            .iter()
            .enumerate()
            .map(|(i, c)| (c, Slot::App(i)));
        let inits = spec.init_containers.iter().flatten().enumerate();
        for (c, slot) in apps.chain(inits.map(|(i, c)| (c, Slot::Init(i)))) {
            map.entry(c.name.as_str()).or_insert(slot);
        }
    }
    map
}

/// Resolves names to slots: init containers first (in pod order), then app containers (in
/// list order), with the first app container as the default target.
pub fn resolve_targets(pod: &Pod, names: &[&str]) -> Result<Vec<Slot>, TargetError> {
    if names.is_empty() {
        let has_app = pod.spec.as_ref().is_some_and(|s| !s.containers.is_empty());
        return Ok(if has_app { vec![Slot::App(0)] } else { vec![] });
    }
    // Hashed, so a pod listing thousands of containers costs linear time.
    let mut seen: HashSet<&str> = HashSet::with_capacity(names.len());
    let slots = slots_by_name(pod);
    let mut inits = Vec::new();
    let mut apps = Vec::new();
    for &n in names {
        if n.is_empty() {
            return Err(TargetError::Empty);
        }
        if !seen.insert(n) {
            return Err(TargetError::Duplicate(n.to_owned()));
        }
        match slots.get(n).copied() {
            Some(s @ Slot::Init(_)) => inits.push(s),
            Some(s @ Slot::App(_)) => apps.push(s),
            None => return Err(TargetError::Unknown(n.to_owned())),
        }
    }
    inits.sort();
    inits.extend(apps);
    Ok(inits)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every row of the precedence table in DESIGN §4.
    #[test]
    fn precedence_table() {
        let rows: &[(Option<&str>, Option<&str>, Option<&str>)] = &[
            // namespace empty → pod value
            (None, Some("true"), Some("true")),
            (Some(""), Some("my-inst"), Some("my-inst")),
            (None, Some("false"), Some("false")),
            (None, None, None),
            // pod empty → namespace value
            (Some("true"), None, Some("true")),
            (Some("ns-inst"), Some(""), Some("ns-inst")),
            (Some("false"), None, Some("false")),
            // pod false or a name → pod value
            (Some("true"), Some("false"), Some("false")),
            (Some("ns-inst"), Some("FALSE"), Some("FALSE")),
            (Some("true"), Some("pod-inst"), Some("pod-inst")),
            (
                Some("ns-inst"),
                Some("other/pod-inst"),
                Some("other/pod-inst"),
            ),
            (Some("false"), Some("pod-inst"), Some("pod-inst")),
            // namespace false, pod true → true
            (Some("false"), Some("true"), Some("true")),
            (Some("False"), Some("TRUE"), Some("TRUE")),
            // namespace true or a name, pod true → namespace value
            (Some("true"), Some("true"), Some("true")),
            (Some("ns-inst"), Some("true"), Some("ns-inst")),
            (Some("other/ns-inst"), Some("True"), Some("other/ns-inst")),
        ];
        for (ns, pod, want) in rows {
            assert_eq!(effective(*ns, *pod), *want, "namespace {ns:?}, pod {pod:?}");
        }
    }

    #[test]
    fn request_values() {
        assert_eq!(Request::parse(None), Request::No);
        assert_eq!(Request::parse(Some("")), Request::No);
        assert_eq!(Request::parse(Some("False")), Request::No);
        assert_eq!(Request::parse(Some("TRUE")), Request::Default);
        assert_eq!(Request::parse(Some("inst")), Request::Named("inst"));
        assert_eq!(
            Request::parse(Some("obs/inst")),
            Request::Qualified {
                namespace: "obs",
                name: "inst"
            }
        );
    }

    #[test]
    fn targets() {
        let pod: Pod = serde_json::from_value(serde_json::json!({"spec": {
            "initContainers": [{"name": "i0"}, {"name": "i1"}],
            "containers": [{"name": "a"}, {"name": "b"}]}}))
        .unwrap();
        assert_eq!(resolve_targets(&pod, &[]).unwrap(), [Slot::App(0)]);
        assert_eq!(
            resolve_targets(&pod, &["b", "i1", "a", "i0"]).unwrap(),
            [Slot::Init(0), Slot::Init(1), Slot::App(1), Slot::App(0)]
        );
        assert_eq!(
            resolve_targets(&pod, &["a", "a"]),
            Err(TargetError::Duplicate("a".into()))
        );
        assert_eq!(
            resolve_targets(&pod, &["x"]),
            Err(TargetError::Unknown("x".into()))
        );
        assert_eq!(split_names(Some("a, b,c")), ["a", "b", "c"]);
        assert!(split_names(Some("")).is_empty());
        assert_eq!(split_names(Some("a,,b")), ["a", "", "b"]);
    }
}
