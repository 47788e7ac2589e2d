//! One prometheus-client registry for the process, with bounded label values only (never a
//! pod name or an error string).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::agents::Language;
use crate::engine::SkipReason;

mod labels;

pub use labels::{
    ConnClose, ConnRetire, EventResult, InjectionOutcome, ReloadResult, RequestOutcome, WriteResult,
};

/// The listeners, as the `listener` label spells them.
pub const LISTENERS: [&str; 2] = ["webhook", "admin"];

// Label sets hold the values as `&'static str`: bounded by construction, and written as
// they are (the derive would spell an enum variant's name).

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct InjectionLabels {
    pub language: &'static str,
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SkipLabels {
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StoreLabels {
    pub store: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ListenerLabels {
    pub listener: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DroppedLabels {
    pub listener: &'static str,
    pub reason: &'static str,
}

/// The `otel_injector_build_info` series: what this binary was built from.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BuildLabels {
    pub version: &'static str,
    pub commit: &'static str,
    pub rustc: &'static str,
    pub target: &'static str,
}

impl BuildLabels {
    /// This binary's build facts ([`crate::build_info`]).
    pub const fn current() -> Self {
        BuildLabels {
            version: crate::build_info::VERSION,
            commit: crate::build_info::COMMIT,
            rustc: crate::build_info::RUSTC_VERSION,
            target: crate::build_info::TARGET,
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SourceLabels {
    pub source: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReloadLabels {
    pub result: &'static str,
}

/// One listener's connection series (see [`Metrics::connections`]).
#[derive(Clone, Debug)]
pub struct ConnMetrics {
    pub open: Gauge,
    dropped: [Counter; ConnClose::ALL.len()],
    retired: [Counter; ConnRetire::ALL.len()],
}

impl ConnMetrics {
    pub fn dropped(&self, reason: ConnClose) {
        self.dropped[reason as usize].inc();
    }

    pub fn retired(&self, reason: ConnRetire) {
        self.retired[reason as usize].inc();
    }

    /// Connections closed for `reason` so far.
    pub fn dropped_count(&self, reason: ConnClose) -> u64 {
        self.dropped[reason as usize].get()
    }

    /// Answers that retired their connection for `reason` so far.
    pub fn retired_count(&self, reason: ConnRetire) -> u64 {
        self.retired[reason as usize].get()
    }
}

/// Every metric the webhook exports.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    pub requests: Family<OutcomeLabels, Counter>,
    pub duration: Histogram,
    pub injections: Family<InjectionLabels, Counter>,
    pub not_injected: Family<SkipLabels, Counter>,
    pub store_objects: Family<StoreLabels, Gauge>,
    pub store_synced: Family<StoreLabels, Gauge>,
    pub cert_reloads: Family<ReloadLabels, Counter>,
    pub cert_expiry: Gauge,
    pub connections_open: Family<ListenerLabels, Gauge>,
    pub connections_dropped: Family<DroppedLabels, Counter>,
    pub connections_retired: Family<DroppedLabels, Counter>,
    pub image_volumes: Family<SourceLabels, Gauge>,
    pub events: Family<ReloadLabels, Counter>,
    /// 1 while this replica holds the Lease of the leader-only background writers.
    pub leader: Gauge,
    pub status_writes: Family<ResultLabels, Counter>,
    pub status_pods: Gauge,
    /// Pods found asking for injection without an outcome (admitted without the webhook).
    pub missed_pods: Gauge,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub result: &'static str,
}

/// Request duration buckets: mutation itself takes tens of microseconds; the top ones put
/// bounds at the latency alert's thresholds, half (2.5 s) and 80 % (4 s) of the webhook
/// configuration's 5 s `timeoutSeconds`, so the p99 is over a threshold exactly when more
/// than 1 % of the reviews took longer (not by interpolation across a wide bucket).
const DURATION_BUCKETS: [f64; 17] = [
    0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1,
    0.5, 1.0, 2.5, 4.0, 5.0,
];

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("otel_injector");
        let m = Metrics {
            requests: Family::default(),
            duration: Histogram::new(DURATION_BUCKETS),
            injections: Family::default(),
            not_injected: Family::default(),
            store_objects: Family::default(),
            store_synced: Family::default(),
            cert_reloads: Family::default(),
            cert_expiry: Gauge::default(),
            connections_open: Family::default(),
            connections_dropped: Family::default(),
            connections_retired: Family::default(),
            image_volumes: Family::default(),
            events: Family::default(),
            leader: Gauge::default(),
            status_writes: Family::default(),
            status_pods: Gauge::default(),
            missed_pods: Gauge::default(),
            registry: Registry::default(),
        };
        {
            let admission = registry.sub_registry_with_prefix("admission");
            admission.register(
                "requests",
                "Admission requests by outcome",
                m.requests.clone(),
            );
            admission.register(
                "duration_seconds",
                "Time from a complete request body to the response, in seconds",
                m.duration.clone(),
            );
        }
        registry.register(
            "injections",
            "Languages requested by pods, by language and outcome",
            m.injections.clone(),
        );
        registry.register(
            "not_injected",
            "Pods or languages that asked for injection and did not get it, by reason",
            m.not_injected.clone(),
        );
        {
            let store = registry.sub_registry_with_prefix("store");
            store.register(
                "objects",
                "Objects held in each watched store",
                m.store_objects.clone(),
            );
            store.register(
                "synced",
                "1 once the store has completed its initial list",
                m.store_synced.clone(),
            );
        }
        registry.register(
            "certificate_reloads",
            "Serving certificate reloads by result",
            m.cert_reloads.clone(),
        );
        registry.register(
            "certificate_expiry_timestamp_seconds",
            "End of the validity (notAfter) of the serving certificate served now, in unix seconds",
            m.cert_expiry.clone(),
        );
        {
            let conns = registry.sub_registry_with_prefix("connections");
            conns.register(
                "open",
                "Connections open on each listener",
                m.connections_open.clone(),
            );
            conns.register(
                "dropped",
                "Connections the server closed before the client did, by listener and reason",
                m.connections_dropped.clone(),
            );
            conns.register(
                "retired",
                "Answers that told the client to close its connection (Connection: close), by \
                 listener and reason: draining (after SIGTERM) or max_age",
                m.connections_retired.clone(),
            );
        }
        registry.register(
            "apiserver_image_volumes",
            "1 when `auto` agent delivery uses image volumes, 0 when init containers; source: \
             feature_gate (read from the API server's /metrics) or version (the gate could not \
             be read)",
            m.image_volumes.clone(),
        );
        registry.register(
            "events",
            "Kubernetes Events about skipped injections, by result: recorded, deduplicated, \
             rate_limited, dropped (queue full), failed (refused by the API server or timed out)",
            m.events.clone(),
        );
        for result in EventResult::ALL {
            let _ = m.events.get_or_create(&ReloadLabels {
                result: result.as_str(),
            });
        }
        registry.register(
            "leader",
            "1 while this replica holds the Lease of the leader-only background writers \
             (Instrumentation status, automatic rollout)",
            m.leader.clone(),
        );
        {
            let status = registry.sub_registry_with_prefix("status");
            status.register(
                "writes",
                "Instrumentation status writes by result",
                m.status_writes.clone(),
            );
            status.register(
                "pods_watched",
                "Pods that asked for injection, held by the status controller's pod watch",
                m.status_pods.clone(),
            );
            status.register(
                "pods_missed",
                "Pods that asked for injection and were admitted without an outcome (the webhook \
                 unreachable or not registered when they were created), as the status \
                 controller's watches find them",
                m.missed_pods.clone(),
            );
        }
        let build_info = Family::<BuildLabels, Gauge>::default();
        build_info.get_or_create(&BuildLabels::current()).set(1);
        registry.register(
            "build_info",
            "Always 1; the labels say what this binary was built from",
            build_info,
        );
        // Pre-create every bounded series so dashboards see zeros, not gaps.
        for outcome in RequestOutcome::ALL {
            let _ = m.requests.get_or_create(&OutcomeLabels {
                outcome: outcome.as_str(),
            });
        }
        for reason in SkipReason::ALL {
            let _ = m.not_injected.get_or_create(&SkipLabels {
                reason: reason.as_str(),
            });
        }
        for result in ReloadResult::ALL {
            let _ = m.cert_reloads.get_or_create(&ReloadLabels {
                result: result.as_str(),
            });
        }
        for result in WriteResult::ALL {
            let _ = m.status_writes.get_or_create(&ResultLabels {
                result: result.as_str(),
            });
        }
        for listener in LISTENERS {
            let _ = m
                .connections_open
                .get_or_create(&ListenerLabels { listener });
            for reason in ConnClose::ALL {
                let _ = m.connections_dropped.get_or_create(&DroppedLabels {
                    listener,
                    reason: reason.as_str(),
                });
            }
            for reason in ConnRetire::ALL {
                let _ = m.connections_retired.get_or_create(&DroppedLabels {
                    listener,
                    reason: reason.as_str(),
                });
            }
        }
        Metrics { registry, ..m }
    }

    pub fn request(&self, outcome: RequestOutcome) {
        self.requests
            .get_or_create(&OutcomeLabels {
                outcome: outcome.as_str(),
            })
            .inc();
    }

    pub fn injection(&self, language: Language, outcome: InjectionOutcome) {
        self.injections
            .get_or_create(&InjectionLabels {
                language: language.as_str(),
                outcome: outcome.as_str(),
            })
            .inc();
    }

    pub fn skipped(&self, reason: SkipReason) {
        self.not_injected
            .get_or_create(&SkipLabels {
                reason: reason.as_str(),
            })
            .inc();
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

    /// Counts what became of one skip Event.
    pub fn event(&self, result: EventResult) {
        self.events
            .get_or_create(&ReloadLabels {
                result: result.as_str(),
            })
            .inc();
    }

    pub fn cert_reload(&self, result: ReloadResult) {
        self.cert_reloads
            .get_or_create(&ReloadLabels {
                result: result.as_str(),
            })
            .inc();
    }

    pub fn status_write(&self, result: WriteResult) {
        self.status_writes
            .get_or_create(&ResultLabels {
                result: result.as_str(),
            })
            .inc();
    }

    /// The serving certificate now served ends its validity at `not_after` (unix seconds).
    pub fn certificate_served(&self, not_after: i64) {
        self.cert_expiry.set(not_after);
    }

    /// One listener's connection series, as handles that update without a lookup.
    pub fn connections(&self, listener: &'static str) -> ConnMetrics {
        ConnMetrics {
            open: self
                .connections_open
                .get_or_create(&ListenerLabels { listener })
                .clone(),
            dropped: ConnClose::ALL.map(|reason| {
                self.connections_dropped
                    .get_or_create(&DroppedLabels {
                        listener,
                        reason: reason.as_str(),
                    })
                    .clone()
            }),
            retired: ConnRetire::ALL.map(|reason| {
                self.connections_retired
                    .get_or_create(&DroppedLabels {
                        listener,
                        reason: reason.as_str(),
                    })
                    .clone()
            }),
        }
    }

    /// The OpenMetrics text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests;
