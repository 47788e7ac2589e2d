//! The cluster part's series: the watched stores, what `auto` delivery decided, Events,
//! the Lease, and the status controller's writes and pods.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::metrics::{Counted, label_enum, registered};

label_enum! {
    /// What became of a Kubernetes Event about a skipped injection or missed pods.
    EventResult {
        /// Published (created, or a repeat added to its series).
        Recorded => "recorded",
        /// The same event (object, reason, message) was published within the window.
        Deduplicated => "deduplicated",
        /// Over the global or the per-object rate.
        RateLimited => "rate_limited",
        /// The queue was full (or closed): never reached the publisher.
        Dropped => "dropped",
        /// The API server refused it or did not answer in time.
        Failed => "failed",
    }
}

label_enum! {
    /// How a status write ended.
    WriteResult {
        Success => "success",
        Error => "error",
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StoreLabels {
    store: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SourceLabels {
    source: &'static str,
}

/// The cluster part's series.
#[derive(Debug)]
pub struct Metrics {
    store_objects: Family<StoreLabels, Gauge>,
    store_synced: Family<StoreLabels, Gauge>,
    image_volumes: Family<SourceLabels, Gauge>,
    pub events: Counted<EventResult>,
    /// 1 while this replica holds the Lease of the leader-only background writers.
    pub leader: Gauge,
    status_writes: Counted<WriteResult>,
    pub status_pods: Gauge,
    /// Pods found asking for injection without an outcome (admitted without the webhook).
    pub missed_pods: Gauge,
    /// Workloads (per Instrumentation) whose pods injected with the current spec are failing.
    pub failing_workloads: Gauge,
    rollbacks: Counted<WriteResult>,
}

impl Metrics {
    /// The series, registered into `registry`, every bounded one created at zero.
    pub fn register(registry: &mut Registry) -> Self {
        let store = registry.sub_registry_with_prefix("store");
        let store_objects = registered(store, "objects", "Objects held in each watched store");
        let store_synced = registered(
            store,
            "synced",
            "1 once the store has completed its initial list",
        );
        let status = registry.sub_registry_with_prefix("status");
        let status_writes = Counted::register(
            status,
            "writes",
            "Instrumentation status writes by result",
            "result",
        );
        let status_pods = registered(
            status,
            "pods_watched",
            "Pods that asked for injection, held by the status controller's pod watch",
        );
        let missed_pods = registered(
            status,
            "pods_missed",
            "Pods that asked for injection and were admitted without an outcome (the webhook \
             unreachable or not registered when they were created), as the status \
             controller's watches find them",
        );
        let failing_workloads = registered(
            status,
            "failing_workloads",
            "Workloads, per Instrumentation, whose pods injected with its current spec are \
             failing (crash-looping, OOM-killed, restarted 3 times or more), as the status \
             controller last computed them (--detect-failures)",
        );
        let rollbacks = Counted::register(
            status,
            "rollbacks",
            "Workloads rolled back (the otel-injector/rolled-back marker set on their pod \
             template) after their pods failed with an Instrumentation's current spec, by \
             result (--rollback)",
            "result",
        );
        Metrics {
            store_objects,
            store_synced,
            image_volumes: registered(
                registry,
                "apiserver_image_volumes",
                "1 when `auto` agent delivery uses image volumes, 0 when init containers; \
                 source: feature_gate (read from the API server's /metrics) or version (the \
                 gate could not be read)",
            ),
            events: Counted::register(
                registry,
                "events",
                "Kubernetes Events about skipped injections, by result: recorded, \
                 deduplicated, rate_limited, dropped (queue full), failed (refused by the API \
                 server or timed out)",
                "result",
            ),
            leader: registered(
                registry,
                "leader",
                "1 while this replica holds the Lease of the leader-only background writers \
                 (Instrumentation status, automatic rollout)",
            ),
            status_writes,
            status_pods,
            missed_pods,
            failing_workloads,
            rollbacks,
        }
    }

    pub fn store(&self, store: &'static str, objects: usize, synced: bool) {
        self.store_objects
            .get_or_create(&StoreLabels { store })
            .set(i64::try_from(objects).unwrap_or(i64::MAX));
        self.store_synced
            .get_or_create(&StoreLabels { store })
            .set(i64::from(synced));
    }

    /// What `auto` agent delivery decides now, and from which signal (`feature_gate` or
    /// `version`); only that signal's series is kept.
    pub fn auto_delivery(&self, source: &'static str, image_volumes: bool) {
        self.image_volumes.clear();
        self.image_volumes
            .get_or_create(&SourceLabels { source })
            .set(i64::from(image_volumes));
    }

    /// Counts what became of one Event.
    pub fn event(&self, result: EventResult) {
        self.events.inc(result);
    }

    pub fn status_write(&self, result: WriteResult) {
        self.status_writes.inc(result);
    }

    pub fn rollback(&self, result: WriteResult) {
        self.rollbacks.inc(result);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cluster_series_with_their_fixed_values() {
        let exercise = |m: &Metrics| {
            m.store("instrumentations", 3, true);
            m.auto_delivery("version", true);
            m.auto_delivery("feature_gate", false);
        };
        let text = crate::metrics::exposes(
            Metrics::register,
            exercise,
            &[
                "otel_injector_store_objects{store=\"instrumentations\"} 3",
                "otel_injector_store_synced{store=\"instrumentations\"} 1",
                "otel_injector_apiserver_image_volumes{source=\"feature_gate\"} 0",
                "otel_injector_events_total{result=\"dropped\"} 0",
                "otel_injector_status_writes_total{result=\"error\"} 0",
                "otel_injector_leader 0",
            ],
        );
        assert!(!text.contains("source=\"version\""), "{text}");
    }
}
