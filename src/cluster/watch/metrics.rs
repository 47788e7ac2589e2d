//! The watched caches' series: the objects each store holds and whether it has synced, and
//! what `auto` agent delivery decided from the API server's readings.

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::cluster::apiserver;
use crate::metrics::registered;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StoreLabels {
    store: &'static str,
}

/// The watches' series.
#[derive(Debug)]
pub struct Metrics {
    store_objects: Family<StoreLabels, Gauge>,
    store_synced: Family<StoreLabels, Gauge>,
    /// The API server's readings, re-read as the watches reconnect.
    pub apiserver: Arc<apiserver::Metrics>,
}

impl Metrics {
    /// The series, registered into `registry` under the `store` and `apiserver` prefixes.
    pub fn register(registry: &mut Registry) -> Self {
        let store = registry.sub_registry_with_prefix("store");
        let store_objects = registered(store, "objects", "Objects held in each watched store");
        let store_synced = registered(
            store,
            "synced",
            "1 once the store has completed its initial list",
        );
        let apiserver =
            apiserver::Metrics::register(registry.sub_registry_with_prefix("apiserver"));
        Metrics {
            store_objects,
            store_synced,
            apiserver: Arc::new(apiserver),
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
}
