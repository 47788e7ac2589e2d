//! Kubernetes manifests as the offline commands read them: files, directories or stdin,
//! split into documents (`---`-separated YAML, or a stream of JSON objects), each kept with
//! its original text so that a document nothing changes is written back byte for byte.

use std::io::Read as _;
use std::path::{Path, PathBuf};

use serde_json::Value;

/// How a source was written; the output of an untouched YAML document is its own text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Yaml,
    Json,
}

/// One input: a file or stdin, split into documents.
#[derive(Debug)]
pub struct Source {
    /// The path as given (`-` reads as `<stdin>`).
    pub name: String,
    pub format: Format,
    pub documents: Vec<SourceDocument>,
}

/// One document of a source.
#[derive(Debug)]
pub struct SourceDocument {
    /// 1-based position in its source.
    pub index: usize,
    /// 1-based line where it starts.
    pub line: usize,
    /// The original text (a YAML document includes its `---` line, if it had one).
    pub raw: String,
    /// The object; `None` for a document with nothing but comments.
    pub value: Option<Value>,
}

/// Input that cannot be read; the offline commands exit with 1.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: document {index} (line {line}): {message}")]
    SourceDocument {
        path: String,
        index: usize,
        line: usize,
        message: String,
    },
    #[error("{0}: no .yaml, .yml or .json file in this directory")]
    EmptyDirectory(String),
    #[error(
        "no Pod or workload (Deployment, ReplicaSet, StatefulSet, DaemonSet, Job, CronJob, ReplicationController) in the input"
    )]
    NoWorkload,
    #[error("instrumentation file {path}: {message}")]
    Instrumentation { path: String, message: String },
    #[error("Instrumentation {0} is defined twice (again in {1})")]
    Duplicate(String, String),
}

impl InputError {
    pub(crate) fn document(
        source: &str,
        index: usize,
        line: usize,
        message: impl Into<String>,
    ) -> Self {
        InputError::SourceDocument {
            path: source.to_owned(),
            index,
            line,
            message: message.into(),
        }
    }
}

/// Reads every path: `-` is stdin, a directory contributes its `.yaml`, `.yml` and `.json`
/// files (not recursively) in name order.
pub fn read(paths: &[PathBuf]) -> Result<Vec<Source>, InputError> {
    let mut sources = Vec::new();
    for path in paths {
        if path.as_os_str() == "-" {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .map_err(|source| InputError::Read {
                    path: "<stdin>".into(),
                    source,
                })?;
            sources.push(parse("<stdin>", &text)?);
        } else if path.is_dir() {
            let files = manifest_files(path)?;
            if files.is_empty() {
                return Err(InputError::EmptyDirectory(path.display().to_string()));
            }
            for file in files {
                sources.push(read_file(&file)?);
            }
        } else {
            sources.push(read_file(path)?);
        }
    }
    Ok(sources)
}

fn read_file(path: &Path) -> Result<Source, InputError> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| InputError::Read {
        path: name.clone(),
        source,
    })?;
    parse(&name, &text)
}

fn manifest_files(dir: &Path) -> Result<Vec<PathBuf>, InputError> {
    let err = |source| InputError::Read {
        path: dir.display().to_string(),
        source,
    };
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(err)? {
        let path = entry.map_err(err)?.path();
        let manifest = path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| matches!(e, "yaml" | "yml" | "json"));
        if manifest && path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// Splits `text` into documents: JSON when it starts with `{`, YAML otherwise.
pub fn parse(name: &str, text: &str) -> Result<Source, InputError> {
    let json = text.trim_start().starts_with('{');
    let documents = if json {
        parse_json(name, text)?
    } else {
        parse_yaml(name, text)?
    };
    Ok(Source {
        name: name.to_owned(),
        format: if json { Format::Json } else { Format::Yaml },
        documents,
    })
}

fn line_at(text: &str, offset: usize) -> usize {
    text[..offset].bytes().filter(|b| *b == b'\n').count() + 1
}

fn parse_json(name: &str, text: &str) -> Result<Vec<SourceDocument>, InputError> {
    let mut documents = Vec::new();
    let mut stream = serde_json::Deserializer::from_str(text).into_iter::<Value>();
    let mut start = 0;
    loop {
        let index = documents.len() + 1;
        let next = stream.next();
        let end = stream.byte_offset();
        match next {
            None => break,
            Some(Err(e)) => {
                return Err(InputError::document(
                    name,
                    index,
                    e.line(),
                    format!("invalid JSON: {e}"),
                ));
            }
            Some(Ok(value)) => {
                let line = line_at(
                    text,
                    start + (text[start..end].len() - text[start..end].trim_start().len()),
                );
                check_object(name, index, line, &value)?;
                documents.push(SourceDocument {
                    index,
                    line,
                    raw: text[start..end].to_owned(),
                    value: Some(value),
                });
                start = end;
            }
        }
    }
    Ok(documents)
}

/// Whether a line starts a YAML document (`---` alone or followed by a space).
fn is_marker(line: &str) -> bool {
    line.strip_prefix("---")
        .is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '\t', '\r', '\n']))
}

/// The documents' texts with their first lines: each starts at a `---` line, except the
/// first one when the text does not begin with a marker.
fn split_yaml(text: &str) -> Vec<(usize, &str)> {
    let mut chunks = Vec::new();
    let (mut start, mut start_line, mut offset) = (0, 1, 0);
    for (n, line) in text.split_inclusive('\n').enumerate() {
        if is_marker(line) && offset > start {
            chunks.push((start_line, &text[start..offset]));
            (start, start_line) = (offset, n + 1);
        } else if is_marker(line) {
            start_line = n + 1;
        }
        offset += line.len();
    }
    if offset > start {
        chunks.push((start_line, &text[start..]));
    }
    chunks
}

fn parse_yaml(name: &str, text: &str) -> Result<Vec<SourceDocument>, InputError> {
    let mut documents = Vec::new();
    for (line, raw) in split_yaml(text) {
        let index = documents.len() + 1;
        let value: Option<Value> = serde_saphyr::from_str(raw).map_err(|_| {
            // Parsed again after as many empty lines as precede it, so that the parser's
            // message points at the line of the file, not of the document.
            let padded = format!("{}{raw}", "\n".repeat(line - 1));
            let e = serde_saphyr::from_str::<Option<Value>>(&padded)
                .err()
                .map_or_else(String::new, |e| e.to_string());
            InputError::document(name, index, line, format!("invalid YAML: {e}"))
        })?;
        let value = value.filter(|v| !v.is_null());
        if let Some(v) = &value {
            check_object(name, index, line, v)?;
        }
        documents.push(SourceDocument {
            index,
            line,
            raw: raw.to_owned(),
            value,
        });
    }
    Ok(documents)
}

/// Every document must be a Kubernetes object: a mapping with a `kind`.
fn check_object(name: &str, index: usize, line: usize, value: &Value) -> Result<(), InputError> {
    let Some(object) = value.as_object() else {
        return Err(InputError::document(
            name,
            index,
            line,
            "not a Kubernetes object (expected a mapping with apiVersion and kind)",
        ));
    };
    if object
        .get("kind")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        return Err(InputError::document(name, index, line, "has no kind"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_documents_keep_their_text_and_lines() {
        let text = "# leading comment\n---\nkind: A\n---  # two\nkind: B\n--- \n# only a comment\n";
        let s = parse("f.yaml", text).unwrap();
        assert_eq!(s.format, Format::Yaml);
        let raws: Vec<_> = s.documents.iter().map(|d| d.raw.as_str()).collect();
        assert_eq!(
            raws,
            [
                "# leading comment\n",
                "---\nkind: A\n",
                "---  # two\nkind: B\n",
                "--- \n# only a comment\n"
            ]
        );
        assert_eq!(raws.concat(), text);
        let lines: Vec<_> = s.documents.iter().map(|d| d.line).collect();
        assert_eq!(lines, [1, 2, 4, 6]);
        assert!(s.documents[0].value.is_none());
        assert_eq!(s.documents[2].value.as_ref().unwrap()["kind"], "B");
        assert!(s.documents[3].value.is_none());
    }

    #[test]
    fn a_marker_needs_a_line_of_its_own() {
        assert!(is_marker("---\n") && is_marker("--- # x\n") && is_marker("---"));
        assert!(!is_marker("----\n") && !is_marker(" ---\n") && !is_marker("---x\n"));
    }

    #[test]
    fn json_streams_and_errors_name_the_document() {
        let s = parse("f.json", "{\"kind\": \"A\"}\n{\"kind\": \"B\"}\n").unwrap();
        assert_eq!(s.format, Format::Json);
        assert_eq!(s.documents.len(), 2);
        assert_eq!(s.documents[1].value.as_ref().unwrap()["kind"], "B");
        assert_eq!(s.documents[1].line, 2);
        let e = parse("f.json", "{\"kind\": \"A\"}\n{\"kind\": ").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("f.json: document 2 (line 2): invalid JSON"),
            "{e}"
        );
    }

    #[test]
    fn bad_documents_are_named() {
        let e = parse("x.yaml", "kind: A\n---\nkind: [\n").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("x.yaml: document 2 (line 2): invalid YAML"),
            "{e}"
        );
        let e = parse("x.yaml", "kind: A\n---\n- 1\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "x.yaml: document 2 (line 2): not a Kubernetes object (expected a mapping with apiVersion and kind)"
        );
        let e = parse("x.yaml", "apiVersion: v1\n").unwrap_err();
        assert_eq!(e.to_string(), "x.yaml: document 1 (line 1): has no kind");
    }
}
