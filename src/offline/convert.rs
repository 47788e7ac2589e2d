//! `otel-injector convert`: manifests in, the same manifests out with every Instrumentation
//! in the version asked for (as the API server's conversion webhook would serve it: exact,
//! the other version's fields in the carrying annotation); everything else unchanged, in
//! order.

use serde_json::Value;

use super::inject::render;
use super::manifests::{InputError, Source};
use super::{OutputFormat, items_mut};
use crate::crd::KIND;
use crate::crd::convert::{Version, convert};

/// What `convert` produced.
#[derive(Debug, Default)]
pub struct ConvertedManifests {
    /// The manifests, for stdout.
    pub output: String,
    /// Instrumentations rewritten.
    pub converted: usize,
    /// Instrumentations already in that version.
    pub unchanged: usize,
}

/// Rewrites every Instrumentation of `sources` into `to`.
pub fn convert_all(
    mut sources: Vec<Source>,
    to: Version,
    format: OutputFormat,
) -> Result<ConvertedManifests, InputError> {
    let mut out = ConvertedManifests::default();
    let mut changed = Vec::with_capacity(sources.len());
    for source in &mut sources {
        let mut flags = Vec::with_capacity(source.documents.len());
        for doc in &mut source.documents {
            let c = match &mut doc.value {
                Some(value) => convert_object(value, to, &mut out).map_err(|e| {
                    InputError::document(&source.name, doc.index, doc.line, e.to_string())
                })?,
                None => false,
            };
            flags.push(c);
        }
        changed.push(flags);
    }
    out.output = render(format, &sources, &changed);
    Ok(out)
}

fn convert_object(
    value: &mut Value,
    to: Version,
    out: &mut ConvertedManifests,
) -> Result<bool, crate::crd::convert::ConvertError> {
    if let Some(items) = items_mut(value) {
        let mut changed = false;
        for item in items {
            changed |= convert_object(item, to, out)?;
        }
        return Ok(changed);
    }
    let version = value
        .get("apiVersion")
        .and_then(Value::as_str)
        .and_then(Version::of);
    let is_instrumentation = value.get("kind").and_then(Value::as_str) == Some(KIND);
    match version.filter(|_| is_instrumentation) {
        None => Ok(false),
        Some(v) if v == to => {
            out.unchanged += 1;
            Ok(false)
        }
        Some(_) => {
            *value = convert(value, to)?;
            out.converted += 1;
            Ok(true)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::offline::manifests::parse;

    #[test]
    fn only_instrumentations_change_and_the_rest_is_kept_as_written() {
        let text = "\
# a comment that stays
apiVersion: v1
kind: ConfigMap
metadata: {name: c}   # kept byte for byte
---
apiVersion: opentelemetry.io/v1alpha1
kind: Instrumentation
metadata: {name: i, namespace: apps}
spec:
  exporter: {endpoint: http://collector:4318}
  java: {image: example/java:1, volumeLimitSize: 300Mi}
---
apiVersion: opentelemetry.io/v1beta1
kind: Instrumentation
metadata: {name: b}
spec: {}
";
        let source = parse("m.yaml", text).unwrap();
        let done = convert_all(vec![source], Version::V1beta1, OutputFormat::Yaml).unwrap();
        assert_eq!((done.converted, done.unchanged), (1, 1));
        assert_eq!(
            done.output,
            "\
# a comment that stays
apiVersion: v1
kind: ConfigMap
metadata: {name: c}   # kept byte for byte
---
apiVersion: opentelemetry.io/v1beta1
kind: Instrumentation
metadata:
  annotations:
    instrumentation.opentelemetry.io/v1alpha1-fields: \"{\\\"javaVolumeSizeLimit\\\":\\\"300Mi\\\"}\"
  name: i
  namespace: apps
spec:
  envConfig:
    exporter:
      endpoint: http://collector:4318
  java:
    image: example/java:1
---
apiVersion: opentelemetry.io/v1beta1
kind: Instrumentation
metadata: {name: b}
spec: {}
"
        );
        // And back: exactly the v1alpha1 object again.
        let back = convert_all(
            vec![parse("m.yaml", &done.output).unwrap()],
            Version::V1alpha1,
            OutputFormat::Yaml,
        )
        .unwrap();
        let second = parse("back.yaml", &back.output).unwrap();
        let original = parse("m.yaml", text).unwrap();
        assert_eq!(second.documents[1].value, original.documents[1].value);
    }
}
