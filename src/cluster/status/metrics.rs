//! The status controller's series: its writes, the pods its watch holds, those its finder
//! finds missed, and the safety net's (the failing workloads it tells, the rollbacks).

use std::sync::Arc;

use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::cluster::missed;
use crate::metrics::{Counted, label_enum, registered};

label_enum! {
    /// How a status write ended.
    WriteResult {
        Success => "success",
        Error => "error",
    }
}

/// The status controller's series.
#[derive(Debug)]
pub struct Metrics {
    status_writes: Counted<WriteResult>,
    pub status_pods: Gauge,
    /// The finder of the pods admitted without the webhook.
    pub missed: Arc<missed::Metrics>,
    /// Workloads (per Instrumentation) whose pods injected with the current spec are failing.
    pub failing_workloads: Gauge,
    rollbacks: Counted<WriteResult>,
}

impl Metrics {
    /// The series, registered into `registry` (the `status` prefix's), every write result
    /// created at zero.
    pub fn register(registry: &mut Registry) -> Self {
        let status_writes = Counted::register(
            registry,
            "writes",
            "Instrumentation status writes by result",
            "result",
        );
        let status_pods = registered(
            registry,
            "pods_watched",
            "Pods that asked for injection, held by the status controller's pod watch",
        );
        let missed = Arc::new(missed::Metrics::register(registry));
        let failing_workloads = registered(
            registry,
            "failing_workloads",
            "Workloads, per Instrumentation, whose pods injected with its current spec are \
             failing (crash-looping, OOM-killed, restarted 3 times or more), as the status \
             controller last computed them (--detect-failures)",
        );
        let rollbacks = Counted::register(
            registry,
            "rollbacks",
            "Workloads rolled back (the otel-injector/rolled-back marker set on their pod \
             template) after their pods failed with an Instrumentation's current spec, by \
             result (--rollback)",
            "result",
        );
        Metrics {
            status_writes,
            status_pods,
            missed,
            failing_workloads,
            rollbacks,
        }
    }

    pub fn status_write(&self, result: WriteResult) {
        self.status_writes.inc(result);
    }

    pub fn rollback(&self, result: WriteResult) {
        self.rollbacks.inc(result);
    }
}
