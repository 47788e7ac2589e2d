//! The metric names the dashboard and the rules select, checked against what the binary
//! exposes (and the checker itself against unknown names and unnamed selectors).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use super::{FROM_PROMETHEUS, dashboard, rules, run, scrape, text};

/// Every query of the dashboard: the panels' `targets[].expr` and the query variables.
pub(super) fn dashboard_queries(d: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for p in d["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().into_iter().flatten() {
            out.push(t["expr"].as_str().expect("expr").to_owned());
        }
    }
    out
}

/// The variables' queries `label_values(SELECTOR, label)`: their selectors.
pub(super) fn variable_selectors(d: &Value) -> Vec<String> {
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
pub(super) fn without_variables(q: &str) -> String {
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
pub(super) fn selected_names(exprs: &[String]) -> BTreeMap<String, Vec<String>> {
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
pub(super) fn exposed_names(exposition: &str) -> BTreeSet<String> {
    exposition
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| l[..l.find(['{', ' ']).unwrap_or(l.len())].to_owned())
        .collect()
}

/// The OpenMetrics exposition the admin port serves, in the Prometheus text format that
/// `promtool check metrics` reads: a counter family `foo` is named `foo_total` there, as its
/// samples are (and as Prometheus stores them), and there is no `# EOF`.
pub(super) fn as_text_format(openmetrics: &str) -> String {
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
pub(super) fn unknown_names(
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
