//! Which workloads a rollout restarts, decided from the census of an Instrumentation's pods,
//! the namespaces' labels and the workloads as read: pure, so the command, the automatic
//! mode and the tests agree.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::census::{Counts, Tally, Workload};
use crate::cluster::workloads::WorkloadObject;
use crate::engine::SkipReason;
use crate::keys::ROLLOUT_ANNOTATION;
use crate::keys::{OPT_OUT, OPT_OUT_LABEL};

/// Namespaces a rollout never touches: those the webhook's configuration excludes by name
/// (`kube-system`, its own) and those labeled `otel-injector/inject=disabled`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Exclusions {
    /// Excluded by name.
    pub names: BTreeSet<String>,
    /// Labeled `otel-injector/inject=disabled` (read from the cluster).
    pub disabled: BTreeSet<String>,
}

impl Exclusions {
    /// Why `namespace` is excluded, if it is.
    pub fn why(&self, namespace: &str) -> Option<String> {
        if self.names.contains(namespace) {
            return Some("namespace excluded".into());
        }
        self.disabled
            .contains(namespace)
            .then(|| format!("namespace labeled {OPT_OUT_LABEL}={OPT_OUT}"))
    }
}

/// A workload the rollout restarts, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Restart {
    pub workload: Workload,
    /// Pods injected with an earlier spec.
    pub outdated: u32,
    /// Pods admitted without the webhook.
    pub missed: u32,
    /// Pods skipped for want of the Instrumentation, by reason.
    pub skipped: BTreeMap<SkipReason, u32>,
}

impl Restart {
    /// `2 outdated, 1 skipped (instrumentation_not_found)`.
    pub fn why(&self) -> String {
        let mut parts = Vec::new();
        if self.outdated > 0 {
            parts.push(format!("{} outdated", self.outdated));
        }
        if self.missed > 0 {
            parts.push(format!("{} missed", self.missed));
        }
        for (reason, n) in &self.skipped {
            parts.push(format!("{n} skipped ({})", reason.as_str()));
        }
        parts.join(", ")
    }
}

impl fmt::Display for Restart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.workload, self.why())
    }
}

/// A workload with stale pods that the rollout leaves alone, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Left {
    pub workload: Workload,
    pub why: String,
}

impl fmt::Display for Left {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.workload, self.why)
    }
}

/// What a rollout does: the restarts in order, and the stale workloads it leaves.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    pub restarts: Vec<Restart>,
    pub left: Vec<Left>,
}

fn workloads(n: usize) -> &'static str {
    if n == 1 { "workload" } else { "workloads" }
}

/// The plan as the `rollout` command prints it: the Instrumentation's pods, then one line
/// per workload to restart and per stale workload left alone, with why.
pub fn describe(key: &str, tally: &Tally, plan: &Plan) -> String {
    let pods = &tally.pods;
    let mut out = format!(
        "Instrumentation {key}: {} pods current, {} outdated, {} missed, {} skipped for want of it\n",
        pods.current,
        pods.outdated,
        pods.missed,
        pods.skipped_for_want_of_it()
    );
    if plan.restarts.is_empty() {
        out.push_str("nothing to restart\n");
    } else {
        let n = plan.restarts.len();
        out.push_str(&format!("to restart ({n} {}):\n", workloads(n)));
        for r in &plan.restarts {
            out.push_str(&format!("  {r}\n"));
        }
    }
    if !plan.left.is_empty() {
        let n = plan.left.len();
        out.push_str(&format!("left alone ({n} {}):\n", workloads(n)));
        for l in &plan.left {
            out.push_str(&format!("  {l}\n"));
        }
    }
    out
}

/// The skip reasons a restart can cure: the Instrumentation exists now.
fn curable(counts: &Counts) -> BTreeMap<SkipReason, u32> {
    counts
        .skipped
        .iter()
        .filter(|(r, _)| {
            matches!(
                r,
                SkipReason::InstrumentationNotFound | SkipReason::NoInstrumentation
            )
        })
        .map(|(r, n)| (*r, *n))
        .collect()
}

/// Workloads with pods that a restart would bring to the current spec, in order.
fn stale(tally: &Tally) -> impl Iterator<Item = (&Workload, &Counts)> {
    tally.workloads.iter().filter(|(_, c)| c.stale())
}

/// The workloads whose objects [`plan`] needs: stale, restartable, in a namespace not
/// excluded.
pub fn to_read(tally: &Tally, exclusions: &Exclusions) -> Vec<Workload> {
    stale(tally)
        .filter(|(w, _)| w.restartable() && exclusions.why(&w.namespace).is_none())
        .map(|(w, _)| w.clone())
        .collect()
}

/// The plan for one Instrumentation's tally. `objects`: the workloads of [`to_read`] as read
/// (`None`: not found). Restarted, in (namespace, kind, name) order: every stale
/// restartable workload, unless its namespace is excluded, it opted out (pod template
/// labeled `otel-injector/inject=disabled`, or the workload annotated
/// `otel-injector/rollout: disabled`), it is gone, or a new template would not replace its
/// pods (a paused Deployment, an OnDelete or partitioned update).
pub fn plan(
    tally: &Tally,
    exclusions: &Exclusions,
    objects: &BTreeMap<Workload, Option<WorkloadObject>>,
) -> Plan {
    let mut out = Plan::default();
    for (w, counts) in stale(tally) {
        let leave = |why: String| Left {
            workload: w.clone(),
            why,
        };
        if !w.restartable() {
            out.left
                .push(leave(format!("a {} is not restarted by a rollout", w.kind)));
            continue;
        }
        if let Some(why) = exclusions.why(&w.namespace) {
            out.left.push(leave(why));
            continue;
        }
        let Some(Some(object)) = objects.get(w) else {
            out.left.push(leave("not found".into()));
            continue;
        };
        let opted_out_template = object
            .template_labels()
            .and_then(|l| l.get(OPT_OUT_LABEL))
            .is_some_and(|v| v == OPT_OUT);
        if opted_out_template {
            out.left.push(leave(format!(
                "pod template labeled {OPT_OUT_LABEL}={OPT_OUT}"
            )));
            continue;
        }
        let opted_out = object
            .meta()
            .annotations
            .as_ref()
            .and_then(|a| a.get(ROLLOUT_ANNOTATION))
            .is_some_and(|v| v == OPT_OUT);
        if opted_out {
            out.left
                .push(leave(format!("annotated {ROLLOUT_ANNOTATION}: {OPT_OUT}")));
            continue;
        }
        if let Some(why) = object.not_rolled() {
            out.left.push(leave(why));
            continue;
        }
        out.restarts.push(Restart {
            workload: w.clone(),
            outdated: counts.outdated,
            missed: counts.missed,
            skipped: curable(counts),
        });
    }
    out
}

#[cfg(test)]
mod tests;
