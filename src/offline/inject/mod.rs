//! `otel-injector inject`: manifests in, the same manifests out with every pod template
//! mutated as the webhook would mutate its pods; everything else unchanged, in order.

use serde_json::{Value, json};

use super::manifests::{Format, InputError, Source};
use super::workload::{self, ManifestWorkload};
use super::{Context, OutputFormat, items_mut};

/// What `inject` produced.
#[derive(Debug, Default)]
pub struct Injected {
    /// The manifests (or the diff) for stdout.
    pub output: String,
    /// The webhook's warnings, each prefixed with the file, document and object, for stderr.
    pub warnings: Vec<String>,
    /// Objects that asked for a language that was not injected.
    pub skipped: usize,
    /// Objects whose pod template changed.
    pub mutated: usize,
    /// Documents read (a list's items count once each).
    pub objects: usize,
}

/// How to write the result.
#[derive(Clone, Copy, Debug, Default)]
pub struct Options {
    pub output: OutputFormat,
    pub diff: bool,
}

/// Mutates every pod template of `sources` in place and renders them.
pub fn inject(
    ctx: &Context,
    mut sources: Vec<Source>,
    options: Options,
) -> Result<Injected, InputError> {
    let mut out = Injected::default();
    let originals: Vec<Vec<Option<Value>>> = if options.diff {
        sources
            .iter()
            .map(|s| s.documents.iter().map(|d| d.value.clone()).collect())
            .collect()
    } else {
        Vec::new()
    };
    let mut changed: Vec<Vec<bool>> = Vec::with_capacity(sources.len());
    for source in &mut sources {
        let mut flags = Vec::with_capacity(source.documents.len());
        for doc in &mut source.documents {
            let at = Location {
                source: &source.name,
                index: doc.index,
                line: doc.line,
            };
            let c = match &mut doc.value {
                Some(value) => inject_object(ctx, value, &at, &mut out)?,
                None => false,
            };
            flags.push(c);
        }
        changed.push(flags);
    }

    out.output = if options.diff {
        let mut diff = String::new();
        for (i, source) in sources.iter().enumerate() {
            let before = match options.output {
                OutputFormat::Yaml => source.documents.iter().map(|d| d.raw.as_str()).collect(),
                OutputFormat::Json => json_text(originals[i].iter().flatten()),
            };
            let after = render(
                options.output,
                std::slice::from_ref(source),
                &changed[i..=i],
            );
            if before != after {
                let name = &source.name;
                diff.push_str(
                    &similar::TextDiff::from_lines(&before, &after)
                        .unified_diff()
                        .header(&format!("a/{name}"), &format!("b/{name}"))
                        .to_string(),
                );
            }
        }
        diff
    } else {
        render(options.output, &sources, &changed)
    };
    Ok(out)
}

/// Where a document is, for messages.
struct Location<'a> {
    source: &'a str,
    index: usize,
    line: usize,
}

fn inject_object(
    ctx: &Context,
    value: &mut Value,
    at: &Location<'_>,
    out: &mut Injected,
) -> Result<bool, InputError> {
    if let Some(items) = items_mut(value) {
        let mut changed = false;
        for item in items {
            changed |= inject_object(ctx, item, at, out)?;
        }
        return Ok(changed);
    }
    out.objects += 1;
    let Some(workload) = ManifestWorkload::of(value, &ctx.default_namespace) else {
        return Ok(false);
    };
    let describe = workload.describe();
    let mutation = workload::mutate(&ctx.catalog, &ctx.config, workload, value)
        .map_err(|e| InputError::document(at.source, at.index, at.line, e))?;
    let Some(mutation) = mutation else {
        return Ok(false);
    };
    for w in &mutation.report.warnings {
        out.warnings.push(format!(
            "{}: document {}: {describe}: {w}",
            at.source, at.index
        ));
    }
    if !mutation.report.skipped.is_empty() {
        out.skipped += 1;
    }
    if !mutation.changed() {
        return Ok(false);
    }
    out.mutated += 1;
    workload::write_back(&mutation, value);
    Ok(true)
}

fn json_text<'a>(values: impl Iterator<Item = &'a Value>) -> String {
    let values: Vec<&Value> = values.collect();
    let doc = match values.as_slice() {
        [one] => (*one).clone(),
        many => json!({"apiVersion": "v1", "kind": "List", "items": many}),
    };
    let mut text = serde_json::to_string_pretty(&doc).unwrap_or_default();
    text.push('\n');
    text
}

fn yaml_text(value: &Value) -> String {
    // A JSON value always serializes; an error would leave the document out, visibly.
    serde_saphyr::to_string(value).unwrap_or_default()
}

/// The manifests as text: a YAML document nothing changed is its original text.
pub(super) fn render(format: OutputFormat, sources: &[Source], changed: &[Vec<bool>]) -> String {
    if format == OutputFormat::Json {
        return json_text(
            sources
                .iter()
                .flat_map(|s| &s.documents)
                .filter_map(|d| d.value.as_ref()),
        );
    }
    let mut out = String::new();
    for (source, changed) in sources.iter().zip(changed) {
        for (doc, &changed) in source.documents.iter().zip(changed) {
            let starts_with_marker = doc.raw.starts_with("---");
            if !out.is_empty() && !out.ends_with('\n') {
                out.push('\n');
            }
            let keep = !changed && source.format == Format::Yaml;
            if keep {
                if !out.is_empty() && !starts_with_marker {
                    out.push_str("---\n");
                }
                out.push_str(&doc.raw);
            } else if let Some(value) = &doc.value {
                if !out.is_empty() || starts_with_marker {
                    out.push_str("---\n");
                }
                out.push_str(&yaml_text(value));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests;
