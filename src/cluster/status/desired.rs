//! What an Instrumentation's status should be (pure): its counts from the census, its
//! workloads, reasons and conditions, times carried over from what was written.

use std::collections::BTreeSet;
use std::time::{SystemTime, UNIX_EPOCH};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

use super::{
    CONFIG_MAP_MISSING, DEGRADED, FAILING, MAX_REASONS, MAX_WORKLOADS, READY, REGISTERED,
    SECRET_MISSING, UNREADABLE, WORKLOADS_FAILING,
};
use crate::agents::exporter_tls::ExporterTlsFiles;
use crate::census::{Tally, Workload};
use crate::cluster::registration::Aspect;
use crate::crd::{
    Instrumentation, InstrumentationStatus, RolledBackWorkload, SkippedReason, SpecHash,
    WorkloadStatus,
};
use crate::engine::{IndexEntry, ObjectKind, ObjectLookup, SkipReason};

/// Secrets and ConfigMaps named by the exporter TLS section that do not exist in the
/// Instrumentation's namespace or in the namespace of a workload it counts
/// (`Kind ns/name`), sorted.
pub(super) fn missing_references(
    inst: &Instrumentation,
    tally: Option<&Tally>,
    lookup: &dyn ObjectLookup,
) -> Vec<(ObjectKind, String)> {
    let Some(tls) = ExporterTlsFiles::of(&inst.spec) else {
        return Vec::new();
    };
    let mut namespaces: BTreeSet<&str> = BTreeSet::new();
    namespaces.insert(inst.metadata.namespace.as_deref().unwrap_or_default());
    namespaces.extend(
        tally
            .into_iter()
            .flat_map(|t| t.workloads.keys())
            .map(|w| w.namespace.as_str()),
    );
    let refs = [
        (ObjectKind::Secret, tls.secret()),
        (ObjectKind::ConfigMap, tls.config_map()),
    ];
    let mut out = Vec::new();
    for (kind, name) in refs {
        let Some(name) = name else { continue };
        for ns in &namespaces {
            if !lookup.exists(kind, ns, name) {
                out.push((kind, format!("{ns}/{name}")));
            }
        }
    }
    out
}

/// What [`desired`] reads.
pub struct Inputs<'a> {
    /// The Instrumentation, or why it cannot be read.
    pub entry: &'a IndexEntry,
    pub spec_hash: Option<SpecHash>,
    /// Its pods (`None`: none asked for it).
    pub tally: Option<&'a Tally>,
    /// Referenced objects found missing (kind, `ns/name`).
    pub missing: &'a [(ObjectKind, String)],
    /// Whether references were checked at all (`--verify-exporter-tls`).
    pub verified: bool,
    /// Whether failing pods are detected (`--detect-failures`): then `failing` and the
    /// `Failing` condition are written.
    pub detect_failures: bool,
    /// Workloads rolled back in this pass ([`super::rollback`]).
    pub rolled_back: &'a [RolledBackWorkload],
    /// What differs in the registered webhook configuration ([`crate::cluster::registration`]);
    /// `None`: not checked (no `Registered` condition).
    pub registration: Option<&'a [Aspect]>,
    /// The status as last written, for the times of what did not change.
    pub previous: Option<&'a InstrumentationStatus>,
    /// Now, in whole seconds (as the API server stores it).
    pub now: Time,
}

/// The part of a status this controller owns (and so compares).
pub fn owned(status: &InstrumentationStatus) -> InstrumentationStatus {
    InstrumentationStatus {
        injected: status.injected,
        outdated: status.outdated,
        skipped: status.skipped,
        missed: status.missed,
        failing: status.failing,
        rolled_back: status.rolled_back.clone(),
        skipped_reasons: status.skipped_reasons.clone(),
        workloads: status.workloads.clone(),
        workloads_omitted: status.workloads_omitted,
        spec_hash: status.spec_hash.clone(),
        observed_generation: status.observed_generation,
        last_change_time: status.last_change_time.clone(),
        conditions: status.conditions.clone(),
        ..InstrumentationStatus::default()
    }
}

fn count(n: u32) -> i64 {
    i64::from(n)
}

/// The status an Instrumentation should have: its counts, reasons, workloads and conditions.
/// Times are carried over from `previous` for whatever did not change.
pub fn desired(inputs: &Inputs<'_>) -> InstrumentationStatus {
    let previous = inputs.previous;
    let now = &inputs.now;
    let (inst, error) = match inputs.entry {
        Ok(inst) => (Some(inst), None),
        Err(e) => (None, Some(e.as_str())),
    };
    let generation = inst.and_then(|i| i.metadata.generation);
    let mut status = InstrumentationStatus {
        observed_generation: generation,
        spec_hash: inputs.spec_hash.map(|h| h.to_string()),
        ..InstrumentationStatus::default()
    };
    if inst.is_some() {
        let empty = Tally::default();
        let tally = inputs.tally.unwrap_or(&empty);
        let pods = &tally.pods;
        status.injected = Some(count(pods.current));
        status.outdated = Some(count(pods.outdated));
        status.skipped = Some(count(pods.skipped_total()));
        status.missed = Some(count(pods.missed));
        status.failing = inputs.detect_failures.then(|| count(pods.failing));
        let mut reasons: Vec<SkippedReason> = pods
            .skipped
            .iter()
            .map(|(r, n)| SkippedReason {
                reason: r.as_str().to_owned(),
                pods: count(*n),
            })
            .collect();
        reasons.sort_by(|a, b| b.pods.cmp(&a.pods).then_with(|| a.reason.cmp(&b.reason)));
        reasons.truncate(MAX_REASONS);
        status.skipped_reasons = reasons;
        let same = previous.is_some_and(|p| {
            (p.injected, p.outdated, p.skipped, p.missed)
                == (
                    status.injected,
                    status.outdated,
                    status.skipped,
                    status.missed,
                )
        });
        status.last_change_time = match previous {
            Some(p) if same && p.last_change_time.is_some() => p.last_change_time.clone(),
            _ => Some(now.clone()),
        };
        let mut workloads: Vec<WorkloadStatus> = tally
            .workloads
            .iter()
            .map(|(w, c)| {
                let mut ws = WorkloadStatus {
                    kind: w.kind.clone(),
                    namespace: w.namespace.clone(),
                    name: w.name.clone(),
                    injected: count(c.current),
                    outdated: count(c.outdated),
                    skipped: count(c.skipped_total()),
                    missed: count(c.missed),
                    failing: count(c.failing),
                    selected: count(c.selected),
                    last_change_time: None,
                };
                let before = previous.and_then(|p| {
                    p.workloads.iter().find(|o| {
                        (&o.kind, &o.namespace, &o.name) == (&ws.kind, &ws.namespace, &ws.name)
                    })
                });
                ws.last_change_time = match before {
                    Some(o)
                        if (
                            o.injected, o.outdated, o.skipped, o.missed, o.failing, o.selected,
                        ) == (
                            ws.injected,
                            ws.outdated,
                            ws.skipped,
                            ws.missed,
                            ws.failing,
                            ws.selected,
                        ) =>
                    {
                        o.last_change_time.clone().or_else(|| Some(now.clone()))
                    }
                    _ => Some(now.clone()),
                };
                ws
            })
            .collect();
        // The failing first, then the most stale; the census's order (namespace, kind,
        // name) among equals.
        workloads
            .sort_by_key(|w| std::cmp::Reverse((w.failing, w.outdated + w.skipped + w.missed)));
        if workloads.len() > MAX_WORKLOADS {
            status.workloads_omitted = i64::try_from(workloads.len() - MAX_WORKLOADS).ok();
            workloads.truncate(MAX_WORKLOADS);
        }
        status.workloads = workloads;
        status.rolled_back = rolled_back(inputs, tally);
    }
    // Conditions: the first problem found is the reason.
    let problem: Option<(&str, String)> = match error {
        Some(e) => Some((
            UNREADABLE,
            format!("the object cannot be read: {}", truncate(e, 1024)),
        )),
        None => inputs.missing.first().map(|(kind, _)| {
            let reason = match kind {
                ObjectKind::Secret => SECRET_MISSING,
                ObjectKind::ConfigMap => CONFIG_MAP_MISSING,
            };
            let list: Vec<String> = inputs
                .missing
                .iter()
                .map(|(k, n)| format!("{} {n}", k.as_str()))
                .collect();
            (
                reason,
                format!(
                    "spec.exporter.tls names objects that do not exist: {}; pods there are not \
                     injected",
                    list.join(", ")
                ),
            )
        }),
    };
    let ready_message = if inputs.verified {
        "readable; the Secret and ConfigMap of spec.exporter.tls exist"
    } else {
        "readable (exporter TLS references are checked with --verify-exporter-tls)"
    };
    let (ready, degraded) = match &problem {
        None => (
            ("True", "Readable", ready_message.to_owned()),
            ("False", "AsExpected", "no problem found".to_owned()),
        ),
        Some((reason, message)) => (
            ("False", *reason, message.clone()),
            ("True", *reason, message.clone()),
        ),
    };
    status.conditions = vec![
        condition(READY, ready, generation, previous, now),
        condition(DEGRADED, degraded, generation, previous, now),
    ];
    if let Some(drift) = inputs.registration {
        let registered = registered_condition(drift);
        status
            .conditions
            .push(condition(REGISTERED, registered, generation, previous, now));
    }
    if inputs.detect_failures && inst.is_some() {
        let failing = failing_condition(inputs.tally);
        status
            .conditions
            .push(condition(FAILING, failing, generation, previous, now));
    }
    status
}

/// `status.rolledBack` holds at most this many workloads.
pub const MAX_ROLLED_BACK: usize = 50;
/// A rolled-back workload stays listed this long without pods that say so (its new pods
/// may not have been made yet).
const ROLLED_BACK_GRACE_SECS: i64 = 600;

/// The rolled-back workloads: those of the previous status still in force (the current
/// spec, and pods skipped `rolled_back`, or rolled back within the grace), then this pass's,
/// each workload once (the latest), the last [`MAX_ROLLED_BACK`].
fn rolled_back(inputs: &Inputs<'_>, tally: &Tally) -> Vec<RolledBackWorkload> {
    let spec = inputs.spec_hash.map(|h| h.to_string());
    let now = inputs.now.0.as_second();
    let in_force = |e: &RolledBackWorkload| {
        let workload = Workload {
            namespace: e.namespace.clone(),
            kind: e.kind.clone(),
            name: e.name.clone(),
        };
        let pods_say = tally
            .workloads
            .get(&workload)
            .and_then(|c| c.skipped.get(&SkipReason::RolledBack))
            .is_some_and(|n| *n > 0);
        spec.as_deref() == Some(e.spec_hash.as_str())
            && (pods_say || now - e.time.0.as_second() < ROLLED_BACK_GRACE_SECS)
    };
    let same = |a: &RolledBackWorkload, b: &RolledBackWorkload| {
        (&a.kind, &a.namespace, &a.name) == (&b.kind, &b.namespace, &b.name)
    };
    let mut out: Vec<RolledBackWorkload> = inputs
        .previous
        .map(|p| p.rolled_back.as_slice())
        .unwrap_or_default()
        .iter()
        .filter(|e| in_force(e) && !inputs.rolled_back.iter().any(|n| same(e, n)))
        .cloned()
        .collect();
    out.extend(inputs.rolled_back.iter().cloned());
    if out.len() > MAX_ROLLED_BACK {
        out.drain(..out.len() - MAX_ROLLED_BACK);
    }
    out
}

/// Workloads named in the `Failing` condition's message, at most.
const MAX_FAILING_NAMED: usize = 3;

/// The `Failing` condition: `True` while some workload's pods injected with the current
/// spec fail, naming the first of them and one failure each.
/// The `Registered` condition: whether the webhook configuration sends pods to the webhook as
/// the replicas expect.
fn registered_condition(drift: &[Aspect]) -> (&'static str, &'static str, String) {
    if drift.is_empty() {
        return (
            "True",
            "AsExpected",
            "the webhook configuration sends pods to the webhook as the replicas expect".into(),
        );
    }
    let what: Vec<&str> = drift
        .iter()
        .map(|a| match a {
            Aspect::Missing => "it does not exist",
            Aspect::Rules => "no entry sends pod CREATEs to /mutate-v1-pod",
            Aspect::CaBundle => "its caBundle does not verify the certificate served now",
            Aspect::FailurePolicy => "its failurePolicy is not the one expected",
        })
        .collect();
    (
        "False",
        "RegistrationDrift",
        format!(
            "the webhook configuration differs from what the replicas expect: {}; pods may be \
             admitted without injection",
            what.join("; ")
        ),
    )
}

fn failing_condition(tally: Option<&Tally>) -> (&'static str, &'static str, String) {
    let failures = tally.map(|t| &t.failures);
    let Some(failures) = failures.filter(|f| !f.is_empty()) else {
        let unowned = tally.map_or(0, |t| t.pods.failing);
        if unowned > 0 {
            return (
                "True",
                WORKLOADS_FAILING,
                format!("{unowned} injected pod(s) without a controller are failing"),
            );
        }
        return (
            "False",
            "Healthy",
            "no pod injected with the current spec is failing".to_owned(),
        );
    };
    let mut named: Vec<String> = failures
        .iter()
        .take(MAX_FAILING_NAMED)
        .map(|(w, f)| format!("{} {}/{}: {}", w.kind, w.namespace, w.name, f.failure))
        .collect();
    if failures.len() > MAX_FAILING_NAMED {
        named.push(format!("and {} more", failures.len() - MAX_FAILING_NAMED));
    }
    (
        "True",
        WORKLOADS_FAILING,
        format!(
            "pods injected with the current spec are failing: {}",
            named.join("; ")
        ),
    )
}

fn truncate(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// A condition; its transition time is the previous one's while the status stays.
fn condition(
    type_: &str,
    (status, reason, message): (&str, &str, String),
    generation: Option<i64>,
    previous: Option<&InstrumentationStatus>,
    now: &Time,
) -> Condition {
    let before = previous.and_then(|p| p.conditions.iter().find(|c| c.type_ == type_));
    let since = match before {
        Some(c) if c.status == status => c.last_transition_time.clone(),
        _ => now.clone(),
    };
    Condition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: reason.to_owned(),
        message,
        observed_generation: generation,
        last_transition_time: since,
    }
}

/// Now, in whole seconds: the API server keeps `metav1.Time` to the second, so a finer time
/// would never compare equal to what it stored.
pub(super) fn now() -> Time {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or_default();
    Time(Timestamp::from_second(secs).unwrap_or(Timestamp::UNIX_EPOCH))
}
