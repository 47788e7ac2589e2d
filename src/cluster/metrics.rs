//! The cluster part's series, each owned by its component and registered by it into the
//! registry (or prefixed sub-registry) it is handed: the watched stores and what `auto`
//! delivery decided (`watch`), the Events (`events`), the Lease (`lease`), and the status
//! controller with its finder of missed pods and the safety net (`status`). `app` builds it
//! from the root and hands each component its own part.

use std::sync::Arc;

use prometheus_client::registry::Registry;

use super::{events, lease, registration, status, watch};

/// The cluster components' series.
#[derive(Debug)]
pub struct Metrics {
    pub watch: Arc<watch::metrics::Metrics>,
    pub events: Arc<events::Metrics>,
    pub lease: Arc<lease::Metrics>,
    pub status: Arc<status::metrics::Metrics>,
    pub registration: Arc<registration::Metrics>,
}

impl Metrics {
    /// Each component's series, registered into `registry`, every bounded one created at
    /// zero.
    pub fn register(registry: &mut Registry) -> Self {
        let watch = watch::metrics::Metrics::register(registry);
        let status =
            status::metrics::Metrics::register(registry.sub_registry_with_prefix("status"));
        Metrics {
            watch: Arc::new(watch),
            events: Arc::new(events::Metrics::register(registry)),
            lease: Arc::new(lease::Metrics::register(registry)),
            status: Arc::new(status),
            registration: Arc::new(registration::Metrics::register(registry)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cluster_series_with_their_fixed_values() {
        let exercise = |m: &Metrics| {
            m.watch.store("instrumentations", 3, true);
            m.watch.apiserver.auto_delivery("version", true);
            m.watch.apiserver.auto_delivery("feature_gate", false);
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
                "otel_injector_registration_drift{aspect=\"ca_bundle\"} 0",
            ],
        );
        assert!(!text.contains("source=\"version\""), "{text}");
    }
}
