//! Exact conversion between v1alpha1 (stored) and v1beta1 (served) Instrumentations, on the
//! objects' JSON as the API server sends them.
//!
//! A field both versions have moves to its place in the other ([`MOVES`]); whatever the
//! other version cannot hold rides in an annotation and comes back from it on the way back:
//! - on a v1beta1 object, the OpenTelemetry Operator's `v1alpha1-fields` annotation, with
//!   its keys for the fields upstream named (each language's `volumeLimitSize`, Apache's and
//!   nginx's `attrs`) and `spec` for any other v1alpha1 residue;
//! - on a stored v1alpha1 object, ours ([`V1BETA1_FIELDS`]): the v1beta1-only fields
//!   (`declarativeConfig`, `protocol`, `k8sMetadata.enabled`, ...) as a partial v1beta1 spec.
//!
//! Both carry `defaultImages`, the one bit of meaning the versions differ in: a language
//! without an image gets the default image in v1alpha1 and none in v1beta1. An object keeps
//! the meaning of the version it was written in, whichever version it is read in.
//!
//! The carrying annotation disappears on the way back, so `to_v1beta1(to_v1alpha1(b)) == b`
//! and `to_v1alpha1(to_v1beta1(a)) == a` for every object whose carrying annotations are the
//! ones these functions write (an empty `metadata.annotations` counts as none, as
//! Kubernetes' `ObjectMeta` has it). One edit can make a carried field redundant: an empty
//! `envConfig: {}` carried on a stored object whose v1alpha1 `exporter` was then set, or a
//! carried `useLabelsForResourceAttributes: false` after `serviceMetadata.enabled: true` was
//! written in v1beta1. The edit wins (a carried field never replaces one of the object's own
//! version), the first round trip drops the stale one, and from there on both round trips
//! are the identity again. A carrying annotation that cannot be read is kept as it
//! is and otherwise ignored, so that one hand-edited object never fails a whole LIST.

mod tree;

use serde_json::{Map, Value};
use tree::{Set, leaves, leaves_until, put, set};

use crate::keys::{V1ALPHA1_FIELDS, V1BETA1_FIELDS};

use super::spec::API_VERSION;
use super::v1beta1::API_VERSION_V1BETA1;

/// A field that has a place in both versions: its path in each spec, and whether only the
/// value `true` moves (`useLabelsForResourceAttributes` is `serviceMetadata.enabled: true`;
/// its `false` has no v1beta1 spelling and rides in the annotation).
struct Move {
    alpha: &'static str,
    beta: &'static str,
    only_true: bool,
}

const fn mv(alpha: &'static str, beta: &'static str) -> Move {
    Move {
        alpha,
        beta,
        only_true: false,
    }
}

/// Every field with a place in both versions (paths inside `spec`, `/`-separated).
const MOVES: &[Move] = &[
    mv("exporter/endpoint", "envConfig/exporter/endpoint"),
    mv("exporter/tls", "envConfig/exporter/tls"),
    mv("propagators", "envConfig/propagators"),
    mv("sampler", "envConfig/sampler"),
    mv("resource/resourceAttributes", "resource/attributes"),
    mv(
        "resource/addK8sUIDAttributes",
        "resource/k8sMetadata/includeUIDs",
    ),
    Move {
        alpha: "defaults/useLabelsForResourceAttributes",
        beta: "resource/serviceMetadata/enabled",
        only_true: true,
    },
    mv("env", "env"),
    mv("imagePullPolicy", "imagePullPolicy"),
    mv(
        "initContainerSecurityContext",
        "initContainerSecurityContext",
    ),
    mv("java/image", "java/image"),
    mv("java/env", "java/env"),
    mv("java/resources", "java/resources"),
    mv("java/volumeClaimTemplate", "java/volumeClaimTemplate"),
    mv("java/extensions", "java/extensions"),
    mv("nodejs/image", "nodejs/image"),
    mv("nodejs/env", "nodejs/env"),
    mv("nodejs/resourceRequirements", "nodejs/resources"),
    mv("nodejs/volumeClaimTemplate", "nodejs/volumeClaimTemplate"),
    mv("python/image", "python/image"),
    mv("python/env", "python/env"),
    mv("python/resourceRequirements", "python/resources"),
    mv("python/volumeClaimTemplate", "python/volumeClaimTemplate"),
    mv("dotnet/image", "dotnet/image"),
    mv("dotnet/env", "dotnet/env"),
    mv("dotnet/resourceRequirements", "dotnet/resources"),
    mv("dotnet/volumeClaimTemplate", "dotnet/volumeClaimTemplate"),
    mv("go/image", "go/image"),
    mv("go/env", "go/env"),
    mv("go/resourceRequirements", "go/resources"),
    mv("go/volumeClaimTemplate", "go/volumeClaimTemplate"),
    mv("go/securityContext", "go/securityContext"),
    mv("apacheHttpd/image", "apacheHttpd/image"),
    mv("apacheHttpd/env", "apacheHttpd/env"),
    mv("apacheHttpd/resourceRequirements", "apacheHttpd/resources"),
    mv(
        "apacheHttpd/volumeClaimTemplate",
        "apacheHttpd/volumeClaimTemplate",
    ),
    mv("apacheHttpd/version", "apacheHttpd/version"),
    mv("apacheHttpd/configPath", "apacheHttpd/configPath"),
    mv("nginx/image", "nginx/image"),
    mv("nginx/env", "nginx/env"),
    mv("nginx/resourceRequirements", "nginx/resources"),
    mv("nginx/volumeClaimTemplate", "nginx/volumeClaimTemplate"),
    mv("nginx/configFile", "nginx/configFile"),
];

/// The v1alpha1-only fields upstream's annotation names, with upstream's keys.
const UPSTREAM_KEYS: &[(&str, &str)] = &[
    ("java/volumeLimitSize", "javaVolumeSizeLimit"),
    ("nodejs/volumeLimitSize", "nodejsVolumeSizeLimit"),
    ("python/volumeLimitSize", "pythonVolumeSizeLimit"),
    ("dotnet/volumeLimitSize", "dotnetVolumeSizeLimit"),
    ("go/volumeLimitSize", "goVolumeSizeLimit"),
    ("apacheHttpd/volumeLimitSize", "apacheHttpdVolumeSizeLimit"),
    ("apacheHttpd/attrs", "apacheHttpdAttrs"),
    ("nginx/volumeLimitSize", "nginxVolumeSizeLimit"),
    ("nginx/attrs", "nginxAttrs"),
];

/// In either annotation: whether languages without an image get the default image.
const DEFAULT_IMAGES: &str = "defaultImages";

/// A carrying annotation, as the conversion reads it: its key, the paths it holds under
/// keys of their own (the rest under [`SPEC`]), and whether a language without an image
/// gets the default image when the object has no such annotation (`absent`) and when the
/// annotation does not say (`unkeyed`).
struct CarrierAnnotation {
    key: &'static str,
    keyed: &'static [(&'static str, &'static str)],
    absent: bool,
    unkeyed: bool,
}

/// Ours, on a stored v1alpha1 object; none: the object was written in v1alpha1.
const OURS: CarrierAnnotation = CarrierAnnotation {
    key: V1BETA1_FIELDS,
    keyed: &[],
    absent: true,
    unkeyed: false,
};

/// Upstream's, on a v1beta1 object; none: the object was written in v1beta1.
const UPSTREAMS: CarrierAnnotation = CarrierAnnotation {
    key: V1ALPHA1_FIELDS,
    keyed: UPSTREAM_KEYS,
    absent: false,
    unkeyed: true,
};

impl CarrierAnnotation {
    /// Takes this annotation off `object` and restores into `spec` what it carries. Returns
    /// whether a language without an image gets the default image.
    fn restore(
        &self,
        object: &mut Map<String, Value>,
        spec: &mut Map<String, Value>,
    ) -> Result<bool, ConvertError> {
        let Some(carried) = take_carrier(object, self.key)? else {
            return Ok(self.absent);
        };
        restore(spec, &carried, self.keyed);
        Ok(carried
            .get(DEFAULT_IMAGES)
            .and_then(Value::as_bool)
            .unwrap_or(self.unkeyed))
    }
}
/// In either annotation: the rest of the other version's spec, as a partial spec.
const SPEC: &str = "spec";

/// Why an object cannot be converted.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConvertError {
    #[error("the object is not a JSON object")]
    NotAnObject,
    #[error("spec is not an object")]
    SpecNotAnObject,
    #[error("metadata is not an object")]
    MetadataNotAnObject,
    #[error("apiVersion {0:?} is not {API_VERSION} or {API_VERSION_V1BETA1}")]
    UnknownVersion(String),
}

/// Which way an object goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    V1alpha1,
    V1beta1,
}

impl Version {
    pub fn api_version(self) -> &'static str {
        match self {
            Version::V1alpha1 => API_VERSION,
            Version::V1beta1 => API_VERSION_V1BETA1,
        }
    }

    /// The version of an `apiVersion`, if it is one of the Instrumentation's.
    pub fn of(api_version: &str) -> Option<Version> {
        [Version::V1alpha1, Version::V1beta1]
            .into_iter()
            .find(|v| v.api_version() == api_version)
    }
}

/// `object` in `to`'s version (unchanged when it already is).
pub fn convert(object: &Value, to: Version) -> Result<Value, ConvertError> {
    convert_owned(object.clone(), to)
}

/// [`convert`], taking the object (no copy of its metadata and status: what the webhook
/// does with the objects of a review).
pub fn convert_owned(object: Value, to: Version) -> Result<Value, ConvertError> {
    let from = object
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    match (Version::of(from), to) {
        (None, _) => Err(ConvertError::UnknownVersion(from.to_owned())),
        (Some(from), to) if from == to => Ok(object),
        (Some(_), Version::V1beta1) => beta_of(object),
        (Some(_), Version::V1alpha1) => alpha_of(object),
    }
}

fn into_map(object: Value) -> Result<Map<String, Value>, ConvertError> {
    match object {
        Value::Object(map) => Ok(map),
        _ => Err(ConvertError::NotAnObject),
    }
}

/// A v1alpha1 object as v1beta1.
pub fn to_v1beta1(alpha: &Value) -> Result<Value, ConvertError> {
    beta_of(alpha.clone())
}

/// A v1beta1 object as v1alpha1 (the stored version).
pub fn to_v1alpha1(beta: &Value) -> Result<Value, ConvertError> {
    alpha_of(beta.clone())
}

fn beta_of(alpha: Value) -> Result<Value, ConvertError> {
    let mut out = into_map(alpha)?;
    let spec = take_spec(&mut out)?;
    let (mut beta_spec, residue) = moved(spec.as_ref(), Side::Alpha);

    // Our annotation: the v1beta1-only fields, and the meaning the object was written with.
    let default_images = OURS.restore(&mut out, &mut beta_spec)?;

    // Upstream's annotation: what v1beta1 cannot hold, with upstream's keys where it has them.
    let mut fields = carrier(residue, UPSTREAM_KEYS);
    if default_images || !fields.is_empty() {
        if !default_images {
            fields.insert(DEFAULT_IMAGES.to_owned(), Value::Bool(false));
        }
        put_carrier(&mut out, V1ALPHA1_FIELDS, fields, UPSTREAM_KEYS)?;
    }
    let keep = spec.is_some() || !beta_spec.is_empty();
    finish(out, keep.then_some(beta_spec), Version::V1beta1)
}

fn alpha_of(beta: Value) -> Result<Value, ConvertError> {
    let mut out = into_map(beta)?;
    let spec = take_spec(&mut out)?;
    let (mut alpha_spec, residue) = moved(spec.as_ref(), Side::Beta);

    // Upstream's annotation: the v1alpha1-only fields, and the meaning.
    let default_images = UPSTREAMS.restore(&mut out, &mut alpha_spec)?;

    // Our annotation: what v1alpha1 cannot hold.
    let mut fields = carrier(residue, &[]);
    if !default_images || !fields.is_empty() {
        fields.insert(DEFAULT_IMAGES.to_owned(), Value::Bool(default_images));
        put_carrier(&mut out, V1BETA1_FIELDS, fields, &[])?;
    }
    let keep = spec.is_some() || !alpha_spec.is_empty();
    finish(out, keep.then_some(alpha_spec), Version::V1alpha1)
}

/// A carrying annotation's fields for `residue`: the paths `keyed` names under their keys,
/// the rest as a partial spec under [`SPEC`].
fn carrier(residue: Vec<(String, Value)>, keyed: &[(&str, &str)]) -> Map<String, Value> {
    let mut fields = Map::new();
    let mut rest = Map::new();
    for (path, value) in residue {
        match keyed.iter().find(|(p, _)| *p == path) {
            Some((_, key)) => {
                fields.insert((*key).to_owned(), value);
            }
            None => set(&mut rest, &path, value),
        }
    }
    if !rest.is_empty() {
        fields.insert(SPEC.to_owned(), Value::Object(rest));
    }
    fields
}

/// Puts back into `spec` what a carrying annotation holds ([`carrier`]'s inverse); a field
/// the object's own version already has wins.
fn restore(spec: &mut Map<String, Value>, carried: &Map<String, Value>, keyed: &[(&str, &str)]) {
    for (path, key) in keyed {
        if let Some(value) = carried.get(*key) {
            put(spec, path, value.clone(), Set::Carried);
        }
    }
    if let Some(Value::Object(rest)) = carried.get(SPEC) {
        for (path, value) in leaves(rest) {
            put(spec, &path, value.clone(), Set::Carried);
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    Alpha,
    Beta,
}

impl Move {
    fn paths(&self, from: Side) -> (&'static str, &'static str) {
        match from {
            Side::Alpha => (self.alpha, self.beta),
            Side::Beta => (self.beta, self.alpha),
        }
    }
}

/// The other version's spec made of the fields in [`MOVES`], and the residue: every other
/// leaf of `spec` (a scalar, an array, or an empty object) with its path.
fn moved(
    spec: Option<&Map<String, Value>>,
    from: Side,
) -> (Map<String, Value>, Vec<(String, Value)>) {
    let mut out = Map::new();
    let mut residue = Vec::new();
    let Some(spec) = spec else {
        return (out, residue);
    };
    for (path, value) in leaves_until(spec, &|path| MOVES.iter().any(|m| m.paths(from).0 == path)) {
        let target = MOVES
            .iter()
            .find(|m| m.paths(from).0 == path)
            .filter(|m| !m.only_true || value == &Value::Bool(true));
        match target {
            Some(m) => set(&mut out, m.paths(from).1, value.clone()),
            None => residue.push((path, value.clone())),
        }
    }
    (out, residue)
}

fn take_spec(object: &mut Map<String, Value>) -> Result<Option<Map<String, Value>>, ConvertError> {
    match object.remove("spec") {
        None => Ok(None),
        Some(Value::Object(spec)) => Ok(Some(spec)),
        Some(_) => Err(ConvertError::SpecNotAnObject),
    }
}

fn annotations(
    object: &mut Map<String, Value>,
) -> Result<Option<&mut Map<String, Value>>, ConvertError> {
    match object.get_mut("metadata") {
        None => Ok(None),
        Some(Value::Object(metadata)) => Ok(match metadata.get_mut("annotations") {
            Some(Value::Object(annotations)) => Some(annotations),
            _ => None,
        }),
        Some(_) => Err(ConvertError::MetadataNotAnObject),
    }
}

/// Removes and reads the carrying annotation `key`; one that cannot be read stays.
fn take_carrier(
    object: &mut Map<String, Value>,
    key: &str,
) -> Result<Option<Map<String, Value>>, ConvertError> {
    let Some(annotations) = annotations(object)? else {
        return Ok(None);
    };
    let parsed = match annotations.get(key).and_then(Value::as_str) {
        Some(text) => match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(map)) => map,
            _ => return Ok(None),
        },
        None => return Ok(None),
    };
    annotations.remove(key);
    Ok(Some(parsed))
}

/// The text of a carrying annotation: the `keyed` fields first, in `keyed`'s order (upstream's
/// `v1alpha1Fields` struct's, so that the annotation reads as upstream's conversion writes it),
/// then the others (`defaultImages`, `spec`).
fn carrier_text(fields: &Map<String, Value>, keyed: &[(&str, &str)]) -> String {
    let first = keyed.iter().map(|(_, key)| *key);
    let rest = fields
        .keys()
        .map(String::as_str)
        .filter(|k| !keyed.iter().any(|(_, key)| key == k));
    let entries: Vec<String> = first
        .chain(rest)
        .filter_map(|k| Some(format!("{}:{}", Value::from(k), fields.get(k)?)))
        .collect();
    format!("{{{}}}", entries.join(","))
}

fn put_carrier(
    object: &mut Map<String, Value>,
    key: &str,
    fields: Map<String, Value>,
    keyed: &[(&str, &str)],
) -> Result<(), ConvertError> {
    let metadata = object
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    let Value::Object(metadata) = metadata else {
        return Err(ConvertError::MetadataNotAnObject);
    };
    let annotations = metadata
        .entry("annotations")
        .or_insert_with(|| Value::Object(Map::new()));
    if !annotations.is_object() {
        *annotations = Value::Object(Map::new());
    }
    if let Value::Object(annotations) = annotations {
        annotations.insert(key.to_owned(), Value::String(carrier_text(&fields, keyed)));
    }
    Ok(())
}

/// The converted object: its spec, its apiVersion, and no empty annotations map.
fn finish(
    mut out: Map<String, Value>,
    spec: Option<Map<String, Value>>,
    to: Version,
) -> Result<Value, ConvertError> {
    if let Some(spec) = spec {
        out.insert("spec".to_owned(), Value::Object(spec));
    }
    out.insert(
        "apiVersion".to_owned(),
        Value::String(to.api_version().to_owned()),
    );
    if let Some(Value::Object(metadata)) = out.get_mut("metadata")
        && metadata
            .get("annotations")
            .is_some_and(|a| a.as_object().is_some_and(Map::is_empty))
    {
        metadata.remove("annotations");
    }
    Ok(Value::Object(out))
}

#[cfg(test)]
mod tests;
