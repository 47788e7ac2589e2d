//! What image volumes buy (issue 11, item 5): for a Java and a Python Deployment, the pod
//! runner's time from the pod's start (`runner::run` called, before any volume or init
//! container) to the app's first served request, and the bytes written under the pod's
//! volumes (the emptyDir the init container copies the agent into; nothing for an image
//! volume), in copy mode (`--agent-delivery=init-container`) and image-volume mode.
//!
//! A measurement, not a check of a threshold: `#[ignore]`d, run by hand, prints a table
//! (docs/performance.md has the figures and the command):
//!
//! ```sh
//! cargo test -p otel-injector-e2e --test e2e -- --ignored --nocapture delivery_cost
//! ```
//!
//! Each run still asserts what it measured: the app answered, the agent was delivered as
//! the mode says (stored pod and disk, [`Delivery::assert_delivered`]) and its server span
//! arrived at the collector. The modes alternate run by run, after one warm-up round that
//! is not counted; `E2E_COST_RUNS` sets the counted runs per language and mode (default 5).

use otel_injector::keys::INJECT_PREFIX;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::process::free_port;
use crate::support::runner;
use crate::telemetry::{Delivery, app, collector, deploy_in, first_answer, server_spans, spec};

const MODES: [Delivery; 2] = [Delivery::Copy, Delivery::ImageVolume];

fn median(v: &[Duration]) -> Duration {
    let mut v = v.to_vec();
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{}", d.as_millis())
}

#[tokio::test]
#[ignore = "a measurement (minutes): prints the table of docs/performance.md"]
async fn delivery_cost_start_to_first_request_and_bytes_written() {
    let runs: usize = std::env::var("E2E_COST_RUNS")
        .ok()
        .map(|v| v.parse().expect("E2E_COST_RUNS: a number"))
        .unwrap_or(5);
    assert!(runs >= 1);
    let c = collector().await;
    let mut envs = Vec::new();
    for d in MODES {
        envs.push(d.env("cost").await);
    }
    let cases: [(&str, &str, Value, &str); 2] = [
        ("java", runner::JAVA_APP, json!([]), "java /hello"),
        (
            "python",
            runner::PYTHON_APP,
            json!([{"name": "PYTHONPATH", "value": "/app/lib"}]),
            "python /hello",
        ),
    ];
    let mut table = vec![
        "| language | delivery | runs | start → first request, median (ms) | min–max (ms) | \
         median / copy | bytes written to the pod's volumes |"
            .to_owned(),
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |".to_owned(),
    ];
    for (lang, image, extra_env, answer) in &cases {
        // [mode] → (times, bytes written)
        let mut measured: Vec<(Vec<Duration>, Vec<u64>)> = vec![Default::default(); MODES.len()];
        for round in 0..=runs {
            for (m, (delivery, env)) in MODES.iter().zip(&envs).enumerate() {
                let ns = env.namespace(&format!("{lang}-{round}"), &[]).await;
                let port = free_port();
                let mut container = app("app", image, port);
                for e in extra_env.as_array().into_iter().flatten() {
                    container["env"].as_array_mut().unwrap().push(e.clone());
                }
                let mut r = deploy_in(
                    env,
                    ns,
                    "checkout",
                    spec(&c.http_endpoint()),
                    &[(&format!("{INJECT_PREFIX}{lang}"), "true")],
                    json!([container]),
                )
                .await;
                let (status, body, took) = first_answer(&mut r, port, "/hello").await;
                assert_eq!((status, body.as_str()), (200, *answer));
                let written = delivery.assert_delivered(&r, lang, "app");
                let what = format!("the server span of {}", r.ns);
                c.await_spans(&what, Duration::from_secs(60), |s| {
                    !server_spans(s, &r.ns, "checkout").is_empty()
                })
                .await
                .unwrap_or_else(|e| panic!("{e}\n{}", r.run.logs()));
                eprintln!(
                    "[cost] {lang} {} round {round}: {took:?}, {written} bytes written",
                    delivery.flag()
                );
                if round > 0 {
                    measured[m].0.push(took);
                    measured[m].1.push(written);
                }
                drop(r);
            }
        }
        let copy = median(&measured[0].0);
        for (delivery, (times, bytes)) in MODES.iter().zip(&measured) {
            let mut sorted = bytes.clone();
            sorted.sort();
            assert_eq!(sorted.first(), sorted.last(), "the same bytes every run");
            let med = median(times);
            table.push(format!(
                "| {lang} | `{}` | {} | {} | {}–{} | {:.2} | {} |",
                delivery.flag(),
                times.len(),
                ms(med),
                ms(*times.iter().min().unwrap()),
                ms(*times.iter().max().unwrap()),
                med.as_secs_f64() / copy.as_secs_f64(),
                sorted[0],
            ));
        }
    }
    println!("\n{}", table.join("\n"));
}
