//! What the injected env configures on the way out: the sampler, the propagators on the app's
//! outgoing call.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::harness::{Env, env_value};
use crate::support::process::free_port;
use crate::support::runner;

use super::{app, collector, deploy, request, spec, the_server_span};
use otel_injector::keys::INJECT_PREFIX;

/// A plain HTTP/1.1 GET with extra headers (`Connection: close`): (status, body).
pub async fn get_with_headers(port: u16, path: &str, headers: &[(&str, &str)]) -> (u16, String) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap_or_else(|e| panic!("connect {port}: {e}"));
    let extra: String = headers
        .iter()
        .map(|(k, v)| format!("{k}: {v}\r\n"))
        .collect();
    s.write_all(
        format!(
            "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{extra}Connection: close\r\n\r\n"
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), s.read_to_end(&mut buf))
        .await
        .expect("an answer within 30 s")
        .unwrap();
    let text = String::from_utf8_lossy(&buf).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, body.to_owned())
}

/// A downstream "app" in the test: accepts one HTTP request on 127.0.0.1, answers 200 and
/// hands over the request's headers (lower-case names).
pub async fn downstream() -> (
    u16,
    tokio::sync::oneshot::Receiver<BTreeMap<String, String>>,
) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", free_port()))
        .await
        .expect("bind the downstream");
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let Ok((mut s, _)) = listener.accept().await else {
            return;
        };
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
            match s.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        let text = String::from_utf8_lossy(&buf).into_owned();
        let headers = text
            .lines()
            .skip(1)
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        let _ = s
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")
            .await;
        let _ = tx.send(headers);
    });
    (port, rx)
}

#[tokio::test]
async fn sampler_ratio_zero_sends_no_span_while_the_agent_reports_the_request() {
    let c = collector().await;
    let env = Env::start("sampler").await;
    let port = free_port();
    let mut s = spec(&c.http_endpoint());
    s["sampler"] = json!({"type": "parentbased_traceidratio", "argument": "0"});
    // Metrics on, every 500 ms: they prove the agent ran and saw the request.
    s["env"] = json!([
        {"name": "OTEL_BSP_SCHEDULE_DELAY", "value": "100"},
        {"name": "OTEL_METRIC_EXPORT_INTERVAL", "value": "500"},
        {"name": "OTEL_LOGS_EXPORTER", "value": "none"}
    ]);
    let mut r = deploy(
        &env,
        "checkout",
        s,
        &[(&format!("{INJECT_PREFIX}java"), "true")],
        json!([app("app", runner::JAVA_APP, port)]),
    )
    .await;
    assert_eq!(
        env_value(&r.pod, 0, "OTEL_TRACES_SAMPLER"),
        "parentbased_traceidratio"
    );
    assert_eq!(env_value(&r.pod, 0, "OTEL_TRACES_SAMPLER_ARG"), "0");
    let (status, _) = request(&mut r, port, "/hello").await;
    assert_eq!(status, 200);
    let t0 = Instant::now();
    let ns = r.ns.clone();
    let counted = |m: &crate::support::collector::Metric| {
        m.name == "http.server.request.duration"
            && m.resource.get("k8s.namespace.name") == Some(&json!(ns))
            && m.data.to_string().contains("\"count\":\"1\"")
    };
    loop {
        if c.metrics().iter().any(counted) {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "no http.server.request.duration of {ns} counting the request:\n{}",
            r.run.logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let metric = c.metrics().into_iter().find(counted).unwrap();
    assert_eq!(metric.resource["service.name"], "checkout");
    // The request was handled inside the agent: its span, had it been sampled, left with
    // the metrics' export (100 ms batches). None arrived.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let spans = c.spans();
    let of_ns: Vec<_> = spans
        .iter()
        .filter(|s| s.res("k8s.namespace.name") == r.ns)
        .collect();
    assert!(of_ns.is_empty(), "no sampled span: {of_ns:#?}");
}

#[tokio::test]
async fn b3_propagator_puts_a_b3_header_on_the_apps_outgoing_call() {
    let c = collector().await;
    let env = Env::start("b3").await;
    let port = free_port();
    let (down, headers) = downstream().await;
    let mut s = spec(&c.http_endpoint());
    s["propagators"] = json!(["b3"]);
    let mut container = app("app", runner::JAVA_APP, port);
    container["env"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "DOWNSTREAM_URL", "value": format!("http://127.0.0.1:{down}/stock")}));
    let mut r = deploy(
        &env,
        "checkout",
        s,
        &[(&format!("{INJECT_PREFIX}java"), "true")],
        json!([container]),
    )
    .await;
    assert_eq!(env_value(&r.pod, 0, "OTEL_PROPAGATORS"), "b3");
    let (status, body) = request(&mut r, port, "/call").await;
    assert_eq!((status, body.as_str()), (200, "java /call downstream 200"));
    let headers = tokio::time::timeout(Duration::from_secs(10), headers)
        .await
        .expect("the downstream was called")
        .expect("headers");
    let server = the_server_span(c, &r, "checkout").await;
    let spans = c.spans();
    let clients: Vec<_> = spans
        .iter()
        .filter(|s| s.kind == 3 && s.res("k8s.namespace.name") == r.ns)
        .collect();
    assert_eq!(clients.len(), 1, "{clients:#?}");
    let client = clients[0];
    assert_eq!(client.trace_id, server.trace_id);
    assert_eq!(client.parent_span_id, server.span_id);
    // Single-header B3: {trace id}-{span id}-{sampled}; no W3C header.
    assert_eq!(
        headers.get("b3"),
        Some(&format!("{}-{}-1", client.trace_id, client.span_id)),
        "{headers:?}"
    );
    assert!(!headers.contains_key("traceparent"), "{headers:?}");
}
