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

use crate::support;
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use crate::support::{Server, fixture, review_of};
use otel_injector::certs::{self, validity};
use serde_json::{Value, json};

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

/// Every query of the dashboard: the panels' `targets[].expr` and the query variables.
fn dashboard_queries(d: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for p in d["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().into_iter().flatten() {
            out.push(t["expr"].as_str().expect("expr").to_owned());
        }
    }
    out
}

/// The variables' queries `label_values(SELECTOR, label)`: their selectors.
fn variable_selectors(d: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for v in d["templating"]["list"].as_array().unwrap() {
        if v["type"] != "query" {
            continue;
        }
        let q = v["query"]["query"].as_str().expect("query variable");
        let inner = q
            .strip_prefix("label_values(")
            .and_then(|r| r.strip_suffix(')'))
            .and_then(|r| r.rsplit_once(','))
            .unwrap_or_else(|| panic!("not label_values(SELECTOR, LABEL): {q}"));
        out.push(inner.0.trim().to_owned());
    }
    out
}

/// A Grafana query made plain PromQL: `$__rate_interval`, `$__interval`, `$__range` become
/// `5m`, any other `$var` / `${var}` / `${var:format}` (used inside label matchers) `.*`.
fn without_variables(q: &str) -> String {
    let mut out = String::new();
    let mut rest = q;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        let (name, len) = if let Some(braced) = after.strip_prefix('{') {
            let end = braced.find('}').expect("closing }");
            let name = braced[..end].split(':').next().unwrap();
            (name, end + 2)
        } else {
            let end = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(after.len());
            (&after[..end], end)
        };
        assert!(!name.is_empty(), "a lone $ in {q}");
        out.push_str(if name.starts_with("__") { "5m" } else { ".*" });
        rest = &after[len..];
    }
    out.push_str(rest);
    out
}

/// The metric names each expression selects, from `promql-metrics`; panics with its error
/// output when one does not parse or selects names by a pattern.
fn selected_names(exprs: &[String]) -> BTreeMap<String, Vec<String>> {
    let out = run(
        "promql-metrics",
        &[],
        serde_json::to_string(exprs).unwrap().as_bytes(),
    );
    assert!(
        out.status.success(),
        "promql-metrics: {}",
        text(&out.stderr)
    );
    let parsed: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    parsed
        .into_iter()
        .map(|r| {
            let names = r["metrics"].as_array().unwrap();
            (
                r["expr"].as_str().unwrap().to_owned(),
                names
                    .iter()
                    .map(|n| n.as_str().unwrap().to_owned())
                    .collect(),
            )
        })
        .collect()
}

/// The sample names in an exposition (`name{labels} value` and `name value` lines).
fn exposed_names(exposition: &str) -> BTreeSet<String> {
    exposition
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| l[..l.find(['{', ' ']).unwrap_or(l.len())].to_owned())
        .collect()
}

/// The OpenMetrics exposition the admin port serves, in the Prometheus text format that
/// `promtool check metrics` reads: a counter family `foo` is named `foo_total` there, as its
/// samples are (and as Prometheus stores them), and there is no `# EOF`.
fn as_text_format(openmetrics: &str) -> String {
    let counters: BTreeSet<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter"))
        .collect();
    let mut out = String::new();
    for line in openmetrics.lines().filter(|l| *l != "# EOF") {
        let renamed = ["# HELP ", "# TYPE "].iter().find_map(|p| {
            let rest = line.strip_prefix(p)?;
            let (name, tail) = rest.split_once(' ')?;
            counters
                .contains(name)
                .then(|| format!("{p}{name}_total {tail}"))
        });
        out.push_str(renamed.as_deref().unwrap_or(line));
        out.push('\n');
    }
    out
}

/// `(expression, name)` for every selected name that is neither exposed, recorded by a
/// rule, nor made by Prometheus.
fn unknown_names(
    selected: &BTreeMap<String, Vec<String>>,
    exposed: &BTreeSet<String>,
    recorded: &BTreeSet<String>,
) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (expr, names) in selected {
        for n in names {
            if !exposed.contains(n) && !recorded.contains(n) && !FROM_PROMETHEUS.contains(&&**n) {
                out.push((expr.clone(), n.clone()));
            }
        }
    }
    out
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
    // The issue's panels: requests, latency histogram, injections and skips, certificate
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_and_rules_select_only_metrics_the_binary_exposes() {
    let d = dashboard();
    let queries: Vec<String> = dashboard_queries(&d)
        .iter()
        .chain(&variable_selectors(&d))
        .map(|q| without_variables(q))
        .collect();

    // promtool itself parses every query, as recording rules of a scratch file.
    let scratch: Vec<Value> = queries
        .iter()
        .enumerate()
        .map(|(i, q)| json!({"record": format!("dashboard:query_{i}"), "expr": q}))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dashboard-queries.yaml");
    std::fs::write(
        &path,
        json!({"groups": [{"name": "dashboard", "rules": scratch}]}).to_string(),
    )
    .unwrap();
    let out = run("promtool", &["check", "rules", path.to_str().unwrap()], b"");
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert!(
        text(&out.stdout).contains(&format!("SUCCESS: {} rules found", queries.len())),
        "{}",
        text(&out.stdout)
    );

    let rules = rules();
    let recorded: BTreeSet<String> = rules
        .iter()
        .filter_map(|r| r["record"].as_str().map(String::from))
        .collect();
    let rule_exprs: Vec<String> = rules
        .iter()
        .map(|r| r["expr"].as_str().unwrap().to_owned())
        .collect();
    let selected = selected_names(&[queries.clone(), rule_exprs].concat());

    let exposition = scrape().await;
    let exposed = exposed_names(&exposition);
    let unknown = unknown_names(&selected, &exposed, &recorded);
    assert!(
        unknown.is_empty(),
        "selected but not exposed by otel-injector serve: {unknown:#?}\nexposed: {exposed:#?}"
    );
    // Every recording rule is used by an alert, and the dashboard reads raw metrics only
    // (it works without the rules).
    for r in &recorded {
        assert!(
            selected.values().flatten().any(|n| n == r),
            "{r} is recorded and never used"
        );
    }
    for q in &queries {
        assert!(
            selected[q].iter().all(|n| !recorded.contains(n)),
            "the dashboard reads a recording rule: {q}"
        );
    }

    // promtool's linter has nothing to say about the exposition (in the text format it
    // reads; see `as_text_format`).
    let out = run(
        "promtool",
        &["check", "metrics"],
        as_text_format(&exposition).as_bytes(),
    );
    assert!(
        out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
        "promtool check metrics: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

#[test]
fn the_name_check_catches_unknown_names_and_unnamed_selectors() {
    let exprs = vec![
        "sum by (le) (rate(otel_injector_admission_duration_seconds_bucket[5m]))".to_owned(),
        "rate(otel_injector_admision_requests_total[5m]) / on() group_left up".to_owned(),
        "otel_injector:admission_errors:ratio_rate5m > 0.01".to_owned(),
        r#"{__name__="otel_injector_store_synced", store="namespaces"} == 0"#.to_owned(),
    ];
    let selected = selected_names(&exprs);
    assert_eq!(
        selected.values().cloned().collect::<Vec<_>>(),
        [
            vec!["otel_injector:admission_errors:ratio_rate5m"],
            vec!["otel_injector_admision_requests_total", "up"],
            vec!["otel_injector_admission_duration_seconds_bucket"],
            vec!["otel_injector_store_synced"],
        ]
    );
    let exposed = exposed_names(
        "# TYPE otel_injector_admission_duration_seconds histogram\n\
         otel_injector_admission_duration_seconds_bucket{le=\"0.001\"} 1\n\
         otel_injector_store_synced{store=\"namespaces\"} 1\n# EOF\n",
    );
    let recorded = BTreeSet::from(["otel_injector:admission_errors:ratio_rate5m".to_owned()]);
    assert_eq!(
        unknown_names(&selected, &exposed, &recorded),
        [(
            exprs[1].clone(),
            "otel_injector_admision_requests_total".to_owned()
        )]
    );

    for bad in [
        r#"{__name__=~"otel_injector_.*"}"#,
        r#"sum(rate(otel_injector_admission_requests_total[5m])"#,
    ] {
        let out = run(
            "promql-metrics",
            &[],
            serde_json::to_string(&[bad]).unwrap().as_bytes(),
        );
        assert_eq!(out.status.code(), Some(1), "{bad}");
        assert!(text(&out.stderr).contains(bad), "{}", text(&out.stderr));
    }
    assert_eq!(
        as_text_format(
            "# HELP a_requests Requests.\n# TYPE a_requests counter\n\
             a_requests_total{x=\"y\"} 1\n# HELP a_open Open.\n# TYPE a_open gauge\n\
             a_open 2\n# EOF\n"
        ),
        "# HELP a_requests_total Requests.\n# TYPE a_requests_total counter\n\
         a_requests_total{x=\"y\"} 1\n# HELP a_open Open.\n# TYPE a_open gauge\na_open 2\n"
    );
    assert_eq!(
        without_variables(
            r#"sum(rate(m{namespace=~"$namespace", job=~"${job}", x="${x:regex}"}[$__rate_interval]))"#
        ),
        r#"sum(rate(m{namespace=~".*", job=~".*", x=".*"}[5m]))"#
    );
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
