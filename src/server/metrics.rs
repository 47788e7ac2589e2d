//! The servers' series: admission requests, their duration and what became of each
//! language, and each listener's connections.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::agents::Language;
use crate::engine::SkipReason;
use crate::metrics::{Counted, label_enum, registered};

label_enum! {
    /// How an admission request ended (also the `outcome` field of the request's span).
    RequestOutcome {
        /// Allowed with a patch.
        Patched => "patched",
        /// Allowed without a patch.
        Unchanged => "unchanged",
        /// A body that is not an AdmissionReview (HTTP 400).
        Invalid => "invalid",
        /// A body over the size limit (HTTP 413).
        TooLarge => "too_large",
        /// The body did not arrive before the deadline (HTTP 408).
        Deadline => "deadline",
    }
}

label_enum! {
    /// How a ConversionReview ended.
    ConversionOutcome {
        /// Every object converted.
        Success => "success",
        /// A Failure result (unreadable review, or an object that cannot be converted).
        Failure => "failure",
        /// A body over the size limit (HTTP 413).
        TooLarge => "too_large",
        /// The body did not arrive before the deadline (HTTP 408).
        Deadline => "deadline",
    }
}

label_enum! {
    /// Why a caller of the webhook listener was refused (with authentication on).
    Refusal {
        /// Neither a verified client certificate nor a valid bearer token (HTTP 401).
        Unauthenticated => "unauthenticated",
        /// A client certificate the client CA did not sign (the TLS handshake fails).
        BadCertificate => "bad_certificate",
    }
}

label_enum! {
    /// How a review's wait for an Instrumentation its cache did not hold ended
    /// (`--instrumentation-wait`, [`super::late`]).
    Waited {
        /// The cache came to hold what the pod asked for; the review then decided as usual.
        Found => "found",
        /// The wait ended (its length, or the caller's deadline) with the skip unchanged.
        Expired => "expired",
    }
}

label_enum! {
    /// What became of one language a pod asked for.
    InjectionOutcome {
        Injected => "injected",
        Skipped => "skipped",
    }
}

label_enum! {
    /// Why the server closed a connection before the client did.
    ConnClose {
        /// The listener was full and this connection had no request in progress.
        Shed => "shed",
        /// The TLS handshake did not finish in time.
        HandshakeTimeout => "handshake_timeout",
        /// A request head did not complete in time after its first byte.
        HeaderTimeout => "header_timeout",
        /// No request started in time on a new or keep-alive connection.
        IdleTimeout => "idle_timeout",
        /// A request's answer was not written out in time.
        RequestTimeout => "request_timeout",
    }
}

label_enum! {
    /// Why an answer told the client to close its connection (`Connection: close`).
    ConnRetire {
        /// The drain had begun.
        Draining => "draining",
        /// The connection was past `--max-connection-age`.
        MaxAge => "max_age",
    }
}

/// The listeners, as the `listener` label spells them.
pub const LISTENERS: [&str; 2] = ["webhook", "admin"];

// Label sets hold the values as `&'static str`: bounded by construction, and written as
// they are (the derive would spell an enum variant's name).

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct InjectionLabels {
    language: &'static str,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ListenerLabels {
    listener: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    listener: &'static str,
    reason: &'static str,
}

/// Request duration buckets: mutation itself takes tens of microseconds; the top ones put
/// bounds at the latency alert's thresholds, half (2.5 s) and 80 % (4 s) of the webhook
/// configuration's 5 s `timeoutSeconds`, so the p99 is over a threshold exactly when more
/// than 1 % of the reviews took longer (not by interpolation across a wide bucket).
const DURATION_BUCKETS: [f64; 17] = [
    0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1,
    0.5, 1.0, 2.5, 4.0, 5.0,
];

/// One route's `requests` (by outcome) and `duration_seconds`, in `registry`.
fn requests_and_duration<T: crate::metrics::LabelValue>(
    registry: &mut Registry,
    requests_help: &str,
    duration_help: &str,
) -> (Counted<T>, Histogram) {
    let requests = Counted::register(registry, "requests", requests_help, "outcome");
    let duration = Histogram::new(DURATION_BUCKETS);
    registry.register("duration_seconds", duration_help, duration.clone());
    (requests, duration)
}

/// The servers' series.
#[derive(Debug)]
pub struct Metrics {
    requests: Counted<RequestOutcome>,
    pub duration: Histogram,
    conversions: Counted<ConversionOutcome>,
    pub conversion_duration: Histogram,
    pub converted_objects: Counter,
    injections: Family<InjectionLabels, Counter>,
    not_injected: Counted<SkipReason>,
    instrumentation_waits: Counted<Waited>,
    refused: Counted<Refusal>,
    connections_open: Family<ListenerLabels, Gauge>,
    connections_dropped: Family<ReasonLabels, Counter>,
    connections_retired: Family<ReasonLabels, Counter>,
}

impl Metrics {
    /// The series, registered into `registry`, every bounded one created at zero so that
    /// dashboards see zeros, not gaps.
    pub fn register(registry: &mut Registry) -> Self {
        let (requests, duration) = requests_and_duration(
            registry.sub_registry_with_prefix("admission"),
            "Admission requests by outcome",
            "Time from a complete request body to the response, in seconds",
        );
        let conversion = registry.sub_registry_with_prefix("conversion");
        let (conversions, conversion_duration) = requests_and_duration(
            conversion,
            "ConversionReviews (Instrumentation v1alpha1 <-> v1beta1) by outcome",
            "Time from a complete ConversionReview body to the response, in seconds",
        );
        let converted_objects = Counter::default();
        conversion.register(
            "objects",
            "Instrumentations converted",
            converted_objects.clone(),
        );
        let injections = registered(
            registry,
            "injections",
            "Languages requested by pods, by language and outcome",
        );
        let not_injected = Counted::register(
            registry,
            "not_injected",
            "Pods or languages that asked for injection and did not get it, by reason",
            "reason",
        );
        let instrumentation_waits = Counted::register(
            registry,
            "instrumentation_waits",
            "Reviews that waited for an Instrumentation the cache did not hold yet \
             (--instrumentation-wait), by outcome: found, or expired with the skip",
            "outcome",
        );
        let refused = Counted::register(
            registry,
            "callers_refused",
            "Callers of the webhook listener refused by its authentication \
             (--webhook-client-ca-file, --webhook-token-file), by reason",
            "reason",
        );
        let conns = registry.sub_registry_with_prefix("connections");
        let m = Metrics {
            requests,
            duration,
            conversions,
            conversion_duration,
            converted_objects,
            injections,
            not_injected,
            instrumentation_waits,
            refused,
            connections_open: registered(conns, "open", "Connections open on each listener"),
            connections_dropped: registered(
                conns,
                "dropped",
                "Connections the server closed before the client did, by listener and reason",
            ),
            connections_retired: registered(
                conns,
                "retired",
                "Answers that told the client to close its connection (Connection: close), by \
                 listener and reason: draining (after SIGTERM) or max_age",
            ),
        };
        for listener in LISTENERS {
            let _ = m.connections(listener);
        }
        m
    }

    pub fn request(&self, outcome: RequestOutcome) {
        self.requests.inc(outcome);
    }

    pub fn conversion(&self, outcome: ConversionOutcome) {
        self.conversions.inc(outcome);
    }

    pub fn injection(&self, language: Language, outcome: InjectionOutcome) {
        self.injections
            .get_or_create(&InjectionLabels {
                language: language.as_str(),
                outcome: outcome.as_str(),
            })
            .inc();
    }

    pub fn instrumentation_wait(&self, outcome: Waited) {
        self.instrumentation_waits.inc(outcome);
    }

    pub fn refused(&self, reason: Refusal) {
        self.refused.inc(reason);
    }

    pub fn skipped(&self, reason: SkipReason) {
        self.not_injected.inc(reason);
    }

    /// One listener's connection series, as handles that update without a lookup.
    pub fn connections(&self, listener: &'static str) -> ConnMetrics {
        let labels = |reason: &'static str| ReasonLabels { listener, reason };
        ConnMetrics {
            open: self
                .connections_open
                .get_or_create(&ListenerLabels { listener })
                .clone(),
            dropped: ConnClose::ALL.map(|r| {
                self.connections_dropped
                    .get_or_create(&labels(r.as_str()))
                    .clone()
            }),
            retired: ConnRetire::ALL.map(|r| {
                self.connections_retired
                    .get_or_create(&labels(r.as_str()))
                    .clone()
            }),
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_servers_series_with_their_fixed_values() {
        for (i, reason) in ConnClose::ALL.into_iter().enumerate() {
            assert_eq!(reason as usize, i, "ConnClose::ALL is in declaration order");
        }
        // `Counted` finds a value's counter by its index.
        for (i, reason) in SkipReason::ALL.into_iter().enumerate() {
            assert_eq!(
                crate::metrics::LabelValue::index(reason),
                i,
                "SkipReason::ALL is in declaration order"
            );
        }
        let exercise = |m: &Metrics| {
            m.request(RequestOutcome::Patched);
            m.skipped(SkipReason::PodTooLarge);
            m.refused(Refusal::Unauthenticated);
            m.duration.observe(0.00004);
            m.injection(Language::Java, InjectionOutcome::Injected);
            m.duration.observe(4.2);
            let conns = m.connections("admin");
            conns.open.inc();
            conns.dropped(ConnClose::HeaderTimeout);
        };
        crate::metrics::exposes(
            Metrics::register,
            exercise,
            &[
                "otel_injector_admission_requests_total{outcome=\"patched\"} 1",
                "otel_injector_admission_requests_total{outcome=\"too_large\"} 0",
                "otel_injector_admission_duration_seconds_bucket{le=\"0.00005\"} 1",
                "otel_injector_admission_duration_seconds_bucket{le=\"2.5\"} 1",
                "otel_injector_admission_duration_seconds_bucket{le=\"4.0\"} 1",
                "otel_injector_admission_duration_seconds_bucket{le=\"5.0\"} 2",
                "otel_injector_admission_duration_seconds_count 2",
                "otel_injector_injections_total{language=\"java\",outcome=\"injected\"} 1",
                "otel_injector_not_injected_total{reason=\"cache_not_ready\"} 0",
                "otel_injector_not_injected_total{reason=\"pod_too_large\"} 1",
                "otel_injector_callers_refused_total{reason=\"unauthenticated\"} 1",
                "otel_injector_callers_refused_total{reason=\"bad_certificate\"} 0",
                "otel_injector_connections_open{listener=\"admin\"} 1",
                "otel_injector_connections_open{listener=\"webhook\"} 0",
                "otel_injector_connections_dropped_total{listener=\"admin\",reason=\"header_timeout\"} 1",
                "otel_injector_connections_dropped_total{listener=\"webhook\",reason=\"shed\"} 0",
                "otel_injector_connections_retired_total{listener=\"webhook\",reason=\"max_age\"} 0",
                "# TYPE otel_injector_build_info gauge",
                "# EOF",
            ],
        );
    }
}
