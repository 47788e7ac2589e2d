//! The real OpenTelemetry Collector (`scripts/e2e-build.sh otelcol`, module `e2e/otelcol/`):
//! the OTLP receiver on gRPC and HTTP on free 127.0.0.1 ports (optionally with TLS) and the
//! file exporter, which writes every batch it received as one JSON line (OTLP/JSON) to
//! `traces.jsonl` and `metrics.jsonl` in its temp dir. The tests read those files: what a
//! span looks like there is what the agent sent. Runs under the watchdog of `process.rs`.

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::process::{Supervised, free_port};
use super::tools::tool_dir;

/// A running collector.
pub struct Collector {
    proc: Mutex<Supervised>,
    pub grpc: SocketAddr,
    pub http: SocketAddr,
    /// `https` when started with TLS.
    pub scheme: &'static str,
    pub dir: PathBuf,
    _tmp: tempfile::TempDir,
}

/// Server certificate and key files for the OTLP receiver's TLS.
pub struct Tls<'a> {
    pub cert: &'a Path,
    pub key: &'a Path,
}

impl Collector {
    /// Starts it (its temp dir inside `parent`, e.g. the control plane's dir whose janitor
    /// removes it however the test process ends; else in the system's temp dir) and waits
    /// (at most 30 s) until both receivers accept connections. Retries twice on a port
    /// clash.
    pub async fn start(tls: Option<Tls<'_>>, parent: Option<&Path>) -> Result<Collector, String> {
        let bin = tool_dir("otelcol")?.join("otelcol");
        let mut attempt = 0;
        loop {
            attempt += 1;
            match Self::start_once(&bin, tls.as_ref(), parent).await {
                Err(e) if e.contains("address already in use") && attempt < 3 => continue,
                r => return r,
            }
        }
    }

    async fn start_once(
        bin: &Path,
        tls: Option<&Tls<'_>>,
        parent: Option<&Path>,
    ) -> Result<Collector, String> {
        let mut b = tempfile::Builder::new();
        b.prefix("otel-injector-e2e-collector.");
        let tmp = match parent {
            Some(p) => b.tempdir_in(p),
            None => b.tempdir(),
        }
        .map_err(|e| format!("temp dir: {e}"))?;
        let dir = tmp.path().to_owned();
        let grpc: SocketAddr = ([127, 0, 0, 1], free_port()).into();
        let http: SocketAddr = ([127, 0, 0, 1], free_port()).into();
        let tls_block = match tls {
            Some(t) => format!(
                "\n        tls:\n          cert_file: {}\n          key_file: {}",
                t.cert.display(),
                t.key.display()
            ),
            None => String::new(),
        };
        let config = format!(
            "receivers:
  otlp:
    protocols:
      grpc:
        endpoint: {grpc}{tls_block}
      http:
        endpoint: {http}{tls_block}
exporters:
  file/traces:
    path: {traces}
    flush_interval: 50ms
  file/metrics:
    path: {metrics}
    flush_interval: 50ms
service:
  telemetry:
    metrics:
      level: none
    logs:
      level: info
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [file/traces]
    metrics:
      receivers: [otlp]
      exporters: [file/metrics]
",
            traces = dir.join("traces.jsonl").display(),
            metrics = dir.join("metrics.jsonl").display(),
        );
        let config_path = dir.join("config.yaml");
        std::fs::write(&config_path, config).map_err(|e| e.to_string())?;
        let mut proc = Supervised::spawn(
            "otelcol",
            bin,
            [format!("--config={}", config_path.display())],
            &dir.join("otelcol.log"),
            |_| {},
        )
        .map_err(|e| format!("spawn otelcol: {e}"))?;
        let t0 = Instant::now();
        loop {
            if let Some(st) = proc.exited() {
                return Err(format!("otelcol exited ({st}):\n{}", proc.log_tail(30)));
            }
            let up = |a: SocketAddr| TcpStream::connect_timeout(&a, Duration::from_millis(200));
            if up(grpc).is_ok() && up(http).is_ok() {
                break;
            }
            if t0.elapsed() > Duration::from_secs(30) {
                return Err(format!(
                    "otelcol did not listen within 30 s:\n{}",
                    proc.log_tail(30)
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(Collector {
            proc: Mutex::new(proc),
            grpc,
            http,
            scheme: if tls.is_some() { "https" } else { "http" },
            dir,
            _tmp: tmp,
        })
    }

    /// The OTLP/HTTP endpoint, `http(s)://127.0.0.1:PORT`.
    pub fn http_endpoint(&self) -> String {
        format!("{}://{}", self.scheme, self.http)
    }

    /// The OTLP/gRPC endpoint, `http(s)://127.0.0.1:PORT`.
    pub fn grpc_endpoint(&self) -> String {
        format!("{}://{}", self.scheme, self.grpc)
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<Span> {
        read_lines(&self.dir.join("traces.jsonl"))
            .iter()
            .flat_map(spans_of)
            .collect()
    }

    /// Every metric data point's resource and metric name received so far.
    pub fn metrics(&self) -> Vec<Metric> {
        read_lines(&self.dir.join("metrics.jsonl"))
            .iter()
            .flat_map(metrics_of)
            .collect()
    }

    /// Waits (at most `limit`) until `want` holds for the spans received; returns them all.
    pub async fn await_spans(
        &self,
        what: &str,
        limit: Duration,
        want: impl Fn(&[Span]) -> bool,
    ) -> Result<Vec<Span>, String> {
        let t0 = Instant::now();
        loop {
            let spans = self.spans();
            if want(&spans) {
                return Ok(spans);
            }
            if let Some(st) = self.proc_exited() {
                return Err(format!("otelcol exited ({st}):\n{}", self.log_tail(30)));
            }
            if t0.elapsed() > limit {
                return Err(format!(
                    "{what}: not received within {limit:?}; {} span(s) received: {}",
                    spans.len(),
                    spans
                        .iter()
                        .map(|s| format!(
                            "{} {:?} ({:?})",
                            s.name,
                            s.resource.get("service.name"),
                            s.resource.get("k8s.namespace.name")
                        ))
                        .collect::<Vec<_>>()
                        .join("; ")
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn proc_exited(&self) -> Option<std::process::ExitStatus> {
        self.proc.lock().unwrap_or_else(|e| e.into_inner()).exited()
    }

    pub fn log_tail(&self, lines: usize) -> String {
        self.proc
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .log_tail(lines)
    }

    pub fn stop(&self) {
        self.proc.lock().unwrap_or_else(|e| e.into_inner()).stop();
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "----- otelcol log ({}) -----\n{}",
                self.dir.join("otelcol.log").display(),
                self.log_tail(30)
            );
        }
        self.stop();
    }
}

/// One span as the collector received it, attributes flattened to JSON values
/// (`stringValue` → string, `intValue` → string of digits as OTLP/JSON writes it, ...).
#[derive(Clone, Debug)]
pub struct Span {
    pub resource: BTreeMap<String, Value>,
    pub scope: String,
    pub name: String,
    /// 1 internal, 2 server, 3 client, 4 producer, 5 consumer.
    pub kind: i64,
    pub trace_id: String,
    pub span_id: String,
    pub parent_span_id: String,
    pub attributes: BTreeMap<String, Value>,
}

impl Span {
    /// A resource attribute as a string ("" when absent or not a string).
    pub fn res(&self, key: &str) -> &str {
        self.resource.get(key).and_then(Value::as_str).unwrap_or("")
    }

    /// A span attribute as a string ("" when absent or not a string).
    pub fn attr(&self, key: &str) -> &str {
        self.attributes
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or("")
    }
}

/// One metric (name and resource) as the collector received it.
#[derive(Clone, Debug)]
pub struct Metric {
    pub resource: BTreeMap<String, Value>,
    pub name: String,
    pub data: Value,
}

fn read_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        // The exporter may be in the middle of a line: a line that does not parse yet is
        // read again next time.
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// OTLP/JSON `KeyValue` list → map of flattened values.
pub fn attributes(list: &Value) -> BTreeMap<String, Value> {
    list.as_array()
        .into_iter()
        .flatten()
        .filter_map(|kv| Some((kv["key"].as_str()?.to_owned(), flatten(&kv["value"]))))
        .collect()
}

fn flatten(v: &Value) -> Value {
    let Some(obj) = v.as_object() else {
        return Value::Null;
    };
    match obj.iter().next() {
        Some((k, inner)) if k == "arrayValue" => Value::Array(
            inner["values"]
                .as_array()
                .into_iter()
                .flatten()
                .map(flatten)
                .collect(),
        ),
        Some((_, inner)) => inner.clone(),
        None => Value::Null,
    }
}

fn spans_of(batch: &Value) -> Vec<Span> {
    let mut out = Vec::new();
    for rs in batch["resourceSpans"].as_array().into_iter().flatten() {
        let resource = attributes(&rs["resource"]["attributes"]);
        for ss in rs["scopeSpans"].as_array().into_iter().flatten() {
            let scope = ss["scope"]["name"].as_str().unwrap_or("").to_owned();
            for s in ss["spans"].as_array().into_iter().flatten() {
                out.push(Span {
                    resource: resource.clone(),
                    scope: scope.clone(),
                    name: s["name"].as_str().unwrap_or("").to_owned(),
                    kind: s["kind"].as_i64().unwrap_or(0),
                    trace_id: s["traceId"].as_str().unwrap_or("").to_owned(),
                    span_id: s["spanId"].as_str().unwrap_or("").to_owned(),
                    parent_span_id: s["parentSpanId"].as_str().unwrap_or("").to_owned(),
                    attributes: attributes(&s["attributes"]),
                });
            }
        }
    }
    out
}

fn metrics_of(batch: &Value) -> Vec<Metric> {
    let mut out = Vec::new();
    for rm in batch["resourceMetrics"].as_array().into_iter().flatten() {
        let resource = attributes(&rm["resource"]["attributes"]);
        for sm in rm["scopeMetrics"].as_array().into_iter().flatten() {
            for m in sm["metrics"].as_array().into_iter().flatten() {
                out.push(Metric {
                    resource: resource.clone(),
                    name: m["name"].as_str().unwrap_or("").to_owned(),
                    data: m.clone(),
                });
            }
        }
    }
    out
}
