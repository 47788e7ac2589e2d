//! A soak: pods created at a steady rate (default 20/s) for a long time (default 30 minutes)
//! through two webhook replicas behind one address (the rig of `rolling.rs`), while the
//! Instrumentation changes every 30 s (its `spec.env` carries a generation number). Every pod
//! must be stored injected with the generation current when it was created (or, within
//! [`LAG`] of a change, the one before: the caches follow the change by watch), no create may
//! fail, and after a warm-up the replicas' resident memory and open file descriptors stay
//! flat (growth at most 1 MiB, and 4 descriptors). A measurement of half an hour, so
//! `#[ignore]`d:
//!
//! ```sh
//! scripts/just soak               # E2E_SOAK_MINUTES=30 E2E_SOAK_RATE=20, release binary
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::harness::*;
use crate::rolling::{Rig, create};
use crate::support::api;
use crate::support::process::{Usage, mib, usage};

/// How long after a change a pod may still get the previous generation.
const LAG: Duration = Duration::from_secs(2);
/// Every this long the Instrumentation changes.
const CHANGE_EVERY: Duration = Duration::from_secs(30);
/// Most creates in flight at once.
const IN_FLIGHT: usize = 64;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The generation the pod's first container got, if any.
fn generation(pod: &Value) -> Option<u64> {
    pod["spec"]["containers"][0]["env"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == "SOAK_GENERATION")?["value"]
        .as_str()?
        .parse()
        .ok()
}

async fn set_generation(client: &kube::Client, ns: &str, g: u64) {
    let r = api::merge_patch(
        client,
        &format!("/apis/opentelemetry.io/v1alpha1/namespaces/{ns}/instrumentations/java"),
        &json!({"spec": {"env": [{"name": "SOAK_GENERATION", "value": g.to_string()}]}}),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 200, "{}", r.body);
}

/// One create: when it was sent, the generation then and when that generation began.
struct Sent {
    at: Instant,
    generation: u64,
    since: Instant,
}

#[tokio::test]
#[ignore = "a measurement of half an hour: scripts/just soak"]
async fn a_half_hour_soak_injects_every_pod_with_the_current_spec_and_stays_flat() {
    let minutes = env_u64("E2E_SOAK_MINUTES", 30);
    let rate = env_u64("E2E_SOAK_RATE", 20).max(1);
    let duration = Duration::from_secs(minutes * 60);
    let warm_up = (duration / 5).min(Duration::from_secs(300));
    let _alone = CLUSTER_WIDE.write().await;
    let rig = Rig::start("soak").await;
    let client = rig.client.clone();
    set_generation(&client, &rig.ns, 0).await;
    tokio::time::sleep(LAG).await;

    let pids: Vec<u32> = rig
        .replicas
        .iter()
        .map(|(_, w)| w.pid().expect("running"))
        .collect();
    let slots = Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT));
    let mut tasks = Vec::new();
    let mut samples: Vec<(Duration, Vec<Usage>)> = Vec::new();
    let started = Instant::now();
    let (mut generation, mut since) = (0u64, started);
    let mut next_change = started + CHANGE_EVERY;
    let mut next_sample = started;
    let mut tick = tokio::time::interval(Duration::from_secs(1) / u32::try_from(rate).unwrap());
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut i = 0u64;
    while started.elapsed() < duration {
        tick.tick().await;
        let now = Instant::now();
        if now >= next_change {
            generation += 1;
            set_generation(&client, &rig.ns, generation).await;
            since = Instant::now();
            next_change += CHANGE_EVERY;
        }
        if now >= next_sample {
            samples.push((started.elapsed(), pids.iter().map(|p| usage(*p)).collect()));
            next_sample += Duration::from_secs(10);
        }
        let permit = slots.clone().acquire_owned().await.unwrap();
        let sent = Sent {
            at: Instant::now(),
            generation,
            since,
        };
        let (client, ns, name) = (client.clone(), rig.ns.clone(), format!("s-{i:06}"));
        tasks.push(tokio::spawn(async move {
            let created = create(&client, &ns, &name).await;
            drop(permit);
            (sent, created)
        }));
        i += 1;
    }
    samples.push((started.elapsed(), pids.iter().map(|p| usage(*p)).collect()));

    let (mut failed, mut uninjected, mut wrong, mut lagged) = (0, 0, 0, 0);
    let mut first_failure = None;
    for t in tasks {
        let (sent, c) = t.await.unwrap();
        if c.status != 201 {
            failed += 1;
            first_failure.get_or_insert(c.body.clone());
            continue;
        }
        if !c.injected {
            uninjected += 1;
            first_failure.get_or_insert(c.body.clone());
            continue;
        }
        match generation_ok(&c.body, &sent) {
            Some(true) => {}
            Some(false) => lagged += 1,
            None => {
                wrong += 1;
                first_failure.get_or_insert(c.body["spec"]["containers"][0]["env"].clone());
            }
        }
    }
    // Flat after the warm-up: the last sample against the first one past it.
    let after: Vec<&(Duration, Vec<Usage>)> =
        samples.iter().filter(|(t, _)| *t >= warm_up).collect();
    let (first, last) = (after[0], after[after.len() - 1]);
    for (k, pid) in pids.iter().enumerate() {
        let (u0, u1) = (first.1[k], last.1[k]);
        let peak = after.iter().map(|s| s.1[k].rss).max().unwrap_or(0);
        eprintln!(
            "[soak] replica {k} (pid {pid}): VmRSS {:.2} MiB at {:.0?} -> {:.2} MiB at {:.0?} \
             (highest sample {:.2}), growth {:+.3} MiB; open fds {} -> {}",
            mib(u0.rss),
            first.0,
            mib(u1.rss),
            last.0,
            mib(peak),
            mib(u1.rss) - mib(u0.rss),
            u0.fds,
            u1.fds,
        );
    }
    eprintln!(
        "[soak] {i} pods in {:.1?} ({:.1}/s), {} Instrumentation changes; failed {failed}, \
         without the agent {uninjected}, with an unexpected generation {wrong}, with the \
         previous generation within {LAG:?} of a change {lagged}",
        started.elapsed(),
        i as f64 / started.elapsed().as_secs_f64(),
        generation
    );
    assert_eq!(
        (failed, uninjected, wrong),
        (0, 0, 0),
        "e.g. {first_failure:?}"
    );
    for k in 0..pids.len() {
        let growth = last.1[k].rss.saturating_sub(first.1[k].rss);
        assert!(
            growth <= 1024 * 1024,
            "replica {k}: RSS grew {growth} B after the warm-up"
        );
        let fds = last.1[k].fds.abs_diff(first.1[k].fds);
        assert!(
            fds <= 4,
            "replica {k}: open fds moved by {fds} after the warm-up"
        );
    }
    rig.delete().await;
}

/// `Some(true)`: the pod got the generation current when it was sent; `Some(false)`: the
/// previous one, sent within [`LAG`] of the change; `None`: anything else.
fn generation_ok(pod: &Value, sent: &Sent) -> Option<bool> {
    let got = generation(pod)?;
    if got == sent.generation {
        return Some(true);
    }
    let lagging = sent.generation > 0
        && got == sent.generation - 1
        && sent.at.duration_since(sent.since) <= LAG;
    lagging.then_some(false)
}
