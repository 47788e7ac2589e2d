//! Kubernetes Events for skipped injections: a Warning `InstrumentationSkipped` per skipped
//! language, about the pod's controller (a ReplicaSet, StatefulSet, Job…), else the
//! Instrumentation the skip names, else the pod's Namespace; and, from the status
//! controller, a Warning `InjectionMissed` per workload whose pods asked and were admitted
//! without the webhook. The admission path only hands
//! each event to a bounded queue ([`EventSink::record`]: `try_send`, never waits); one worker
//! deduplicates, rate-limits and publishes through kube-runtime's [`Recorder`] (which turns
//! repeats within its cache into a series). Nothing here runs on the request path but the
//! `try_send`.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Client;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use prometheus_client::registry::Registry;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::agents::Language;
use crate::crd::API_VERSION as INSTRUMENTATION_API_VERSION;
use crate::engine::Catalog;
use crate::metrics::{Counted, label_enum};

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

/// The Events' series.
#[derive(Debug)]
pub struct Metrics {
    pub events: Counted<EventResult>,
}

impl Metrics {
    /// The series, registered into `registry`, every result created at zero.
    pub fn register(registry: &mut Registry) -> Self {
        Metrics {
            events: Counted::register(
                registry,
                "events",
                "Kubernetes Events about skipped injections, by result: recorded, \
                 deduplicated, rate_limited, dropped (queue full), failed (refused by the API \
                 server or timed out)",
                "result",
            ),
        }
    }

    /// The series counted into no registry, for a sink that never counts
    /// ([`EventSink::disabled`] before Events are switched on).
    pub fn unregistered() -> Self {
        Self::register(&mut Registry::default())
    }

    /// Counts what became of one Event.
    pub fn event(&self, result: EventResult) {
        self.events.inc(result);
    }
}

/// The Events' `reason`: a skip at admission, or pods admitted without the webhook.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    Skipped,
    Missed,
    Failing,
    RolledBack,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Skipped => "InstrumentationSkipped",
            Reason::Missed => "InjectionMissed",
            Reason::Failing => "InstrumentedPodsFailing",
            Reason::RolledBack => "InstrumentationRolledBack",
        }
    }
}
/// The Events' `reportingController`.
pub const CONTROLLER: &str = "otel-injector";
/// The default queue size (`--event-queue-size`).
pub const DEFAULT_QUEUE_SIZE: usize = 1024;
/// The largest queue size accepted.
pub const MAX_QUEUE_SIZE: usize = 65_536;
/// At most one log line about failed publishing per this interval.
const FAILURE_LOG_INTERVAL: Duration = Duration::from_secs(60);

/// One Warning Event to publish: a skipped language (or pod), as the admission path knows it
/// (no API call needed), or a workload's missed pods, from the status controller.
#[derive(Clone, Debug, PartialEq)]
pub struct Notice {
    pub reason: Reason,
    /// The pod's namespace (the request's).
    pub namespace: String,
    /// The pod's controller, from its `ownerReferences`.
    pub owner: Option<OwnerReference>,
    /// The Instrumentation the skip names (`ns/name`; `ns/*` and `None` name none).
    pub instrumentation: Option<String>,
    /// The language skipped; `None`: the whole pod.
    pub language: Option<Language>,
    /// The warning text.
    pub note: String,
}

/// The admission path's end of the queue. Cloned freely; `disabled()` records nothing.
#[derive(Clone, Debug)]
pub struct EventSink {
    tx: Option<mpsc::Sender<Notice>>,
    metrics: Arc<Metrics>,
}

impl EventSink {
    /// A sink that records nothing (events off, or no cluster).
    pub fn disabled(metrics: Arc<Metrics>) -> Self {
        EventSink { tx: None, metrics }
    }

    /// Queues `event` if there is room; counts it `dropped` otherwise. Never waits.
    pub fn record(&self, event: Notice) {
        let Some(tx) = &self.tx else {
            return;
        };
        if tx.try_send(event).is_err() {
            self.metrics.event(EventResult::Dropped);
        }
    }

    pub fn is_enabled(&self) -> bool {
        self.tx.is_some()
    }
}

/// A queue of at most `capacity` events: the sink for the admission path and the receiver
/// for [`run`].
pub fn queue(capacity: usize, metrics: Arc<Metrics>) -> (EventSink, mpsc::Receiver<Notice>) {
    let (tx, rx) = mpsc::channel(capacity.clamp(1, MAX_QUEUE_SIZE));
    (
        EventSink {
            tx: Some(tx),
            metrics,
        },
        rx,
    )
}

/// Where Events go: the API server ([`KubePublisher`]), or a test's list.
pub trait Publish: Send + Sync {
    fn publish(
        &self,
        event: &Event,
        regarding: &ObjectReference,
    ) -> impl Future<Output = Result<(), String>> + Send;
}

/// Publishes through kube-runtime's [`Recorder`] (`events.k8s.io/v1`; needs create and
/// patch on `events`).
pub struct KubePublisher(Recorder);

impl KubePublisher {
    /// `instance`: this replica's name (`reportingInstance`).
    pub fn new(client: Client, instance: Option<String>) -> Self {
        KubePublisher(Recorder::new(
            client,
            Reporter {
                controller: CONTROLLER.to_owned(),
                instance,
            },
        ))
    }
}

impl Publish for KubePublisher {
    async fn publish(&self, event: &Event, regarding: &ObjectReference) -> Result<(), String> {
        self.0
            .publish(event, regarding)
            .await
            .map_err(|e| e.to_string())
    }
}

/// How much the worker lets through.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Limits {
    /// The same event (object, reason, message) again within this is counted, not sent.
    pub dedup_window: Duration,
    /// All objects together: a burst, then one Event per `global_every`.
    pub global_burst: u32,
    pub global_every: Duration,
    /// Each object: a burst, then one Event per `object_every`.
    pub object_burst: u32,
    pub object_every: Duration,
    /// Most events and objects remembered; beyond it, new ones are rate-limited.
    pub max_tracked: usize,
    /// Longest wait for the API server on one Event (counted failed after it); the queue
    /// fills, and drops, meanwhile.
    pub publish_timeout: Duration,
}

impl Default for Limits {
    /// One object: 10 at once, then one a minute (a crash-looping workload whose pods are
    /// recreated keeps one series going, and a few languages of one pod all get through);
    /// everything: 25 at once, then 5 a second; a repeat within 5 minutes (the Recorder
    /// keeps a series for 6) only counts.
    fn default() -> Self {
        Limits {
            dedup_window: Duration::from_secs(300),
            global_burst: 25,
            global_every: Duration::from_millis(200),
            object_burst: 10,
            object_every: Duration::from_secs(60),
            max_tracked: 4096,
            publish_timeout: Duration::from_secs(10),
        }
    }
}

/// A token bucket on tokio's clock.
#[derive(Clone, Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn full(burst: u32, now: Instant) -> Self {
        Bucket {
            tokens: f64::from(burst),
            at: now,
        }
    }

    fn refill(&mut self, burst: u32, every: Duration, now: Instant) {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        let rate = 1.0 / every.as_secs_f64().max(f64::MIN_POSITIVE);
        self.tokens = (self.tokens + elapsed * rate).min(f64::from(burst));
        self.at = now;
    }

    fn take(&mut self) -> bool {
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// The object an Event is about, as a hashable key.
type ObjectKey = (String, String, String, String);

fn object_key(r: &ObjectReference) -> ObjectKey {
    (
        r.kind.clone().unwrap_or_default(),
        r.namespace.clone().unwrap_or_default(),
        r.name.clone().unwrap_or_default(),
        r.uid.clone().unwrap_or_default(),
    )
}

/// Deduplication and rate limits (pure: the clock is passed in).
#[derive(Debug)]
struct Limiter {
    limits: Limits,
    recent: HashMap<(ObjectKey, String), Instant>,
    global: Bucket,
    objects: HashMap<ObjectKey, Bucket>,
}

impl Limiter {
    fn new(limits: Limits, now: Instant) -> Self {
        Limiter {
            limits,
            recent: HashMap::new(),
            global: Bucket::full(limits.global_burst, now),
            objects: HashMap::new(),
        }
    }

    /// Whether to publish `note` about `regarding` now; what to count otherwise.
    fn check(
        &mut self,
        regarding: &ObjectReference,
        note: &str,
        now: Instant,
    ) -> Option<EventResult> {
        let l = self.limits;
        let object = object_key(regarding);
        let key = (object.clone(), note.to_owned());
        if self
            .recent
            .get(&key)
            .is_some_and(|at| now.saturating_duration_since(*at) < l.dedup_window)
        {
            return Some(EventResult::Deduplicated);
        }
        // Forget what no longer matters before remembering more.
        if self.recent.len() >= l.max_tracked {
            self.recent
                .retain(|_, at| now.saturating_duration_since(*at) < l.dedup_window);
        }
        if self.objects.len() >= l.max_tracked {
            for b in self.objects.values_mut() {
                b.refill(l.object_burst, l.object_every, now);
            }
            self.objects
                .retain(|_, b| b.tokens < f64::from(l.object_burst));
        }
        let tracked = |n: usize| n < l.max_tracked;
        if !self.objects.contains_key(&object) && !tracked(self.objects.len())
            || !tracked(self.recent.len())
        {
            return Some(EventResult::RateLimited);
        }
        self.global.refill(l.global_burst, l.global_every, now);
        let bucket = self
            .objects
            .entry(object)
            .or_insert_with(|| Bucket::full(l.object_burst, now));
        bucket.refill(l.object_burst, l.object_every, now);
        if bucket.tokens < 1.0 || self.global.tokens < 1.0 {
            return Some(EventResult::RateLimited);
        }
        bucket.take();
        self.global.take();
        self.recent.insert(key, now);
        None
    }
}

/// What an Event is about: the pod's controller; else the Instrumentation the skip names,
/// when the cache holds it (its UID from there); else the pod's Namespace (in the pod's
/// namespace, where `kubectl get events -n` shows it).
pub fn regarding(event: &Notice, catalog: &dyn Catalog) -> ObjectReference {
    if let Some(o) = &event.owner {
        return ObjectReference {
            api_version: Some(o.api_version.clone()),
            kind: Some(o.kind.clone()),
            name: Some(o.name.clone()),
            namespace: Some(event.namespace.clone()),
            uid: Some(o.uid.clone()).filter(|u| !u.is_empty()),
            ..ObjectReference::default()
        };
    }
    let named = event
        .instrumentation
        .as_deref()
        .and_then(|i| i.split_once('/'))
        .filter(|(_, name)| *name != "*");
    if let Some((ns, name)) = named
        && let Some(Ok(inst)) = catalog.instrumentations().get(ns, name)
    {
        return ObjectReference {
            api_version: Some(INSTRUMENTATION_API_VERSION.to_owned()),
            kind: Some("Instrumentation".to_owned()),
            name: Some(name.to_owned()),
            namespace: Some(ns.to_owned()),
            uid: inst.metadata.uid.clone(),
            ..ObjectReference::default()
        };
    }
    ObjectReference {
        api_version: Some("v1".to_owned()),
        kind: Some("Namespace".to_owned()),
        name: Some(event.namespace.clone()),
        namespace: Some(event.namespace.clone()),
        ..ObjectReference::default()
    }
}

/// The Event for one skip. `action` names the language (`InjectJava`; `Inject` for the
/// whole pod): the Recorder's series key holds the action, not the note, so skips of
/// different languages on one object stay apart.
fn event(skip: &Notice) -> Event {
    let action = match skip.language {
        None => "Inject".to_owned(),
        Some(l) => {
            let mut a = String::from("Inject");
            for part in l.as_str().split('-') {
                let mut chars = part.chars();
                if let Some(first) = chars.next() {
                    a.extend(first.to_uppercase());
                    a.push_str(chars.as_str());
                }
            }
            a
        }
    };
    Event {
        type_: EventType::Warning,
        reason: skip.reason.as_str().to_owned(),
        note: Some(skip.note.clone()),
        action,
        secondary: None,
    }
}

/// The worker: takes queued events until the queue closes, and publishes those the limits
/// let through, one at a time (each bounded by a timeout).
pub async fn run<P: Publish>(
    mut rx: mpsc::Receiver<Notice>,
    publisher: P,
    catalog: Arc<dyn Catalog + Send + Sync>,
    limits: Limits,
    metrics: Arc<Metrics>,
) {
    let mut limiter = Limiter::new(limits, Instant::now());
    let mut failures = 0u64;
    let mut logged_at: Option<Instant> = None;
    while let Some(skip) = rx.recv().await {
        let regarding = regarding(&skip, catalog.as_ref());
        if let Some(result) = limiter.check(&regarding, &skip.note, Instant::now()) {
            metrics.event(result);
            continue;
        }
        let wait = limits.publish_timeout;
        let published = tokio::time::timeout(wait, publisher.publish(&event(&skip), &regarding))
            .await
            .unwrap_or_else(|_| Err(format!("no answer within {wait:?}")));
        match published {
            Ok(()) => metrics.event(EventResult::Recorded),
            Err(e) => {
                metrics.event(EventResult::Failed);
                failures += 1;
                let now = Instant::now();
                if logged_at.is_none_or(|at| now.duration_since(at) >= FAILURE_LOG_INTERVAL) {
                    tracing::warn!(
                        error = %e,
                        failures,
                        "cannot publish an Event (needs create and patch on events.k8s.io \
                         events); admission is not affected"
                    );
                    logged_at = Some(now);
                    failures = 0;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
