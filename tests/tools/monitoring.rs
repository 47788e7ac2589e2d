//! The alerts (`charts/otel-injector/files/prometheus-rules.yaml`) and the Grafana dashboard
//! (`charts/otel-injector/files/dashboard.json`) against the real binary. promtool and
//! `promql-metrics` (Prometheus's own PromQL parser, `tools/promtool/main.go`) are built from
//! their pinned Go module by `scripts/e2e-build.sh promtool` (cached; minutes the first time).
//!
//! - `promtool check rules` on the rules, and `promtool test rules` on
//!   `tests/monitoring/prometheus-rules.test.yaml`, which must also fail when any alert's
//!   `for` is shortened (its "not before" case bites);
//! - every dashboard query parsed by promtool (as recording rules) and by the parser;
//! - every metric name a rule or a query selects is in a scrape of a running
//!   `otel-injector serve`, which `promtool check metrics` also lints;
//! - every alert has a severity, a summary, a description and a runbook section.

mod names;

use std::collections::BTreeSet;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use names::dashboard_queries;
use otel_injector::certs::{self, validity};
use serde_json::{Value, json};

use crate::support;
use crate::support::{Server, fixture, review_of};

const RULES: &str = "charts/otel-injector/files/prometheus-rules.yaml";
const RULE_TESTS: &str = "tests/monitoring/prometheus-rules.test.yaml";
const DASHBOARD: &str = "charts/otel-injector/files/dashboard.json";
const RUNBOOK: &str = "docs/runbook.md";
const RUNBOOK_URL: &str = "https://github.com/example/otel-injector/blob/main/docs/runbook.md#";
/// Series Prometheus makes itself for every target, which no exporter exposes.
const FROM_PROMETHEUS: [&str; 1] = ["up"];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The directory holding `promtool` and `promql-metrics`: the last line
/// `scripts/e2e-build.sh promtool` prints (it builds them on first use).
fn tools() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let script = root().join("scripts/e2e-build.sh");
        let out = Command::new(&script)
            .arg("promtool")
            .stdin(Stdio::null())
            .stderr(Stdio::inherit())
            .output()
            .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
        assert!(out.status.success(), "{} promtool failed", script.display());
        let stdout = String::from_utf8(out.stdout).unwrap();
        let dir = PathBuf::from(stdout.lines().last().expect("a directory").trim());
        for tool in ["promtool", "promql-metrics"] {
            assert!(dir.join(tool).is_file(), "no {tool} in {}", dir.display());
        }
        dir
    })
}

/// Runs a tool from [`tools`] in the repository root, `stdin` as its input.
fn run(tool: &str, args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(tools().join(tool))
        .args(args)
        .current_dir(root())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {tool}: {e}"));
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    child.wait_with_output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn yaml(path: &str) -> Value {
    let s = std::fs::read_to_string(root().join(path)).unwrap();
    serde_saphyr::from_str(&s).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn rules() -> Vec<Value> {
    yaml(RULES)["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .flat_map(|g| g["rules"].as_array().expect("rules").clone())
        .collect()
}

fn dashboard() -> Value {
    serde_json::from_str(&std::fs::read_to_string(root().join(DASHBOARD)).unwrap()).unwrap()
}

/// A scrape of a running `otel-injector serve` (file mode) after one injected pod, so every
/// family has samples.
async fn scrape() -> String {
    let server = Server::start().await;
    let r = review_of(&server.review(&fixture("pod-create-inject-java.json")).await);
    assert!(r.patch.is_some(), "the pod was injected");
    server.metrics().await
}

#[test]
fn promtool_checks_the_rules() {
    let out = run("promtool", &["check", "rules", RULES], b"");
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert_eq!(
        text(&out.stdout),
        format!(
            "Checking {RULES}\n  SUCCESS: {} rules found\n\n",
            rules().len()
        )
    );
}

#[test]
fn promtool_rule_tests_pass_and_pin_when_each_alert_fires() {
    let out = run("promtool", &["test", "rules", RULE_TESTS], b"");
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert_eq!(
        text(&out.stdout),
        format!("Processing test file: {RULE_TESTS}\n  SUCCESS\n\n")
    );

    // Every alert is seen firing, and seen silent at an earlier time of the same test.
    let tests = yaml(RULE_TESTS);
    let alerts: BTreeSet<String> = rules()
        .iter()
        .filter_map(|r| r["alert"].as_str().map(String::from))
        .collect();
    for alert in &alerts {
        let covered = tests["tests"].as_array().unwrap().iter().any(|t| {
            let cases: Vec<(u64, bool)> = t["alert_rule_test"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|c| c["alertname"] == alert.as_str())
                .map(|c| {
                    let at = c["eval_time"].as_str().unwrap();
                    let minutes = at.strip_suffix('m').unwrap().parse().unwrap();
                    (minutes, c["exp_alerts"].as_array().unwrap().is_empty())
                })
                .collect();
            cases
                .iter()
                .any(|&(fires, silent)| !silent && cases.iter().any(|&(t, s)| s && t < fires))
        });
        assert!(covered, "{alert}: no test sees it silent, then firing");
    }

    // Each alert's test bites: with its `for` one minute shorter, promtool's tests fail.
    let dir = tempfile::tempdir().unwrap();
    let original = yaml(RULES);
    let mut mutants = 0;
    for (g, group) in original["groups"].as_array().unwrap().iter().enumerate() {
        for (r, rule) in group["rules"].as_array().unwrap().iter().enumerate() {
            let Some(minutes) = rule["for"].as_str() else {
                continue;
            };
            let minutes: u64 = minutes.strip_suffix('m').unwrap().parse().unwrap();
            let mut mutant = original.clone();
            mutant["groups"][g]["rules"][r]["for"] = json!(format!("{}m", minutes - 1));
            // JSON is YAML: both files are written as JSON.
            let rules_path = dir.path().join(format!("rules-{g}-{r}.yaml"));
            std::fs::write(&rules_path, mutant.to_string()).unwrap();
            let mut t = yaml(RULE_TESTS);
            t["rule_files"] = json!([rules_path.display().to_string()]);
            let test_path = dir.path().join(format!("test-{g}-{r}.yaml"));
            std::fs::write(&test_path, t.to_string()).unwrap();
            let out = run(
                "promtool",
                &["test", "rules", test_path.to_str().unwrap()],
                b"",
            );
            assert!(
                !out.status.success(),
                "{} {} with `for: {}m` still passes the tests",
                rule["alert"],
                rule["labels"]["severity"],
                minutes - 1
            );
            mutants += 1;
        }
    }
    assert_eq!(
        mutants,
        rules().iter().filter(|r| r["alert"].is_string()).count()
    );
}

#[test]
fn every_alert_has_a_severity_a_summary_a_description_and_a_runbook_section() {
    let runbook = std::fs::read_to_string(root().join(RUNBOOK)).unwrap();
    // GitHub's anchors: the heading in lower case, spaces as `-`, other punctuation dropped.
    let anchors: BTreeSet<String> = runbook
        .lines()
        .filter_map(|l| l.strip_prefix("## "))
        .map(|h| {
            h.to_lowercase()
                .chars()
                .filter_map(|c| match c {
                    ' ' => Some('-'),
                    c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                    _ => None,
                })
                .collect()
        })
        .collect();
    let mut alerts = 0;
    for rule in rules().iter().filter(|r| r["alert"].is_string()) {
        let name = rule["alert"].as_str().unwrap();
        assert!(name.starts_with("OtelInjector"), "{name}");
        let severity = rule["labels"]["severity"].as_str().unwrap_or_default();
        assert!(
            ["warning", "critical"].contains(&severity),
            "{name}: severity {severity:?}"
        );
        for key in ["summary", "description"] {
            assert!(
                rule["annotations"][key]
                    .as_str()
                    .is_some_and(|s| s.len() > 20),
                "{name}: {key}"
            );
        }
        let url = rule["annotations"]["runbook_url"].as_str().unwrap();
        let anchor = url
            .strip_prefix(RUNBOOK_URL)
            .unwrap_or_else(|| panic!("{name}: {url} is not in {RUNBOOK}"));
        assert_eq!(
            anchor,
            name.to_lowercase(),
            "{name}: the section is its name"
        );
        assert!(anchors.contains(anchor), "{RUNBOOK} has no `## {name}`");
        alerts += 1;
    }
    assert_eq!(alerts, 12);
}

#[test]
fn the_dashboard_is_a_grafana_model_with_a_datasource_variable() {
    let d = dashboard();
    assert_eq!(d["uid"], "otel-injector");
    assert!(d["schemaVersion"].as_u64().unwrap() >= 36);
    let vars = d["templating"]["list"].as_array().unwrap();
    assert_eq!(vars[0]["name"], "datasource");
    assert_eq!(vars[0]["type"], "datasource");
    assert_eq!(vars[0]["query"], "prometheus");
    let ds = json!({"type": "prometheus", "uid": "${datasource}"});
    for v in &vars[1..] {
        assert_eq!(v["datasource"], ds, "variable {}", v["name"]);
    }
    let mut ids = BTreeSet::new();
    let mut titles = BTreeSet::new();
    // Rows of 24 columns: no panel sticks out or overlaps another.
    let mut cells = BTreeSet::new();
    for p in d["panels"].as_array().unwrap() {
        let title = p["title"].as_str().unwrap();
        assert!(
            ids.insert(p["id"].as_u64().unwrap()),
            "duplicate id: {title}"
        );
        assert!(titles.insert(title.to_owned()), "duplicate title: {title}");
        let g = &p["gridPos"];
        let (x, y, w, h) = ["x", "y", "w", "h"].map(|k| g[k].as_u64().unwrap()).into();
        assert!(x + w <= 24 && w > 0 && h > 0, "{title}: {g}");
        for cx in x..x + w {
            for cy in y..y + h {
                assert!(cells.insert((cx, cy)), "{title} overlaps another panel");
            }
        }
        if p["type"] == "row" {
            continue;
        }
        assert_eq!(p["datasource"], ds, "{title}");
        let targets = p["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "{title}");
        let mut refs = BTreeSet::new();
        for t in targets {
            assert_eq!(t["datasource"], ds, "{title}");
            assert!(refs.insert(t["refId"].as_str().unwrap()), "{title}");
        }
    }
    // The panels: requests, latency histogram, injections and skips, certificate
    // expiry, caches, connections.
    let queries = dashboard_queries(&d).join("\n");
    for metric in [
        "otel_injector_admission_requests_total",
        "otel_injector_admission_duration_seconds_bucket",
        "otel_injector_injections_total",
        "otel_injector_not_injected_total",
        "otel_injector_certificate_expiry_timestamp_seconds",
        "otel_injector_certificate_reloads_total",
        "otel_injector_store_synced",
        "otel_injector_store_objects",
        "otel_injector_connections_open",
        "otel_injector_connections_dropped_total",
    ] {
        assert!(queries.contains(metric), "no panel shows {metric}");
    }
}

/// The expiry gauge is the served certificate's notAfter, at start and after a reload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_certificate_expiry_gauge_follows_the_served_certificate() {
    const GAUGE: &str = "otel_injector_certificate_expiry_timestamp_seconds";
    let server = Server::builder()
        .args(["--tls-reload-interval", "100ms"])
        .start()
        .await;
    let served = support::cert_der(&server.certs.cert);
    let first = validity::not_after(&served).unwrap();
    assert_eq!(server.metric(GAUGE).await, first as f64);

    // A new pair from the same CA, valid until 2031-01-01T00:00:00Z.
    let ca_key = rcgen::KeyPair::from_pem(&server.certs.ca_key).unwrap();
    let issuer = rcgen::Issuer::new(
        certs::generate::ca_params(&server.certs.ca_name, None).unwrap(),
        ca_key,
    );
    let (crt, key) = certs::generate::serving(
        &issuer,
        &support::hosts(),
        Some((1_700_000_000, 1_924_992_000)),
    )
    .unwrap();
    std::fs::write(server.tls_dir.join("tls.key.new"), &key).unwrap();
    std::fs::write(server.tls_dir.join("tls.crt.new"), &crt).unwrap();
    std::fs::rename(
        server.tls_dir.join("tls.key.new"),
        server.tls_dir.join("tls.key"),
    )
    .unwrap();
    std::fs::rename(
        server.tls_dir.join("tls.crt.new"),
        server.tls_dir.join("tls.crt"),
    )
    .unwrap();
    server
        .wait_metric(GAUGE, 1_924_992_000.0, Duration::from_secs(10))
        .await;
    assert_ne!(first, 1_924_992_000);
}
