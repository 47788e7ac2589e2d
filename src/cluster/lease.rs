//! Leader election over a `coordination.k8s.io/v1` Lease, for the background writers that
//! must run on one replica at a time (the status controller, `rollout`'s automatic mode). The
//! webhook, the metrics and the health endpoints never look at it: every replica serves.
//!
//! The holder renews the Lease every `renew_every`; a replica takes it over once
//! `renewTime + leaseDurationSeconds` has passed (or at once when it was released). Every write
//! is an update carrying the `resourceVersion` that was read, so two replicas racing for an
//! expired Lease cannot both win. A holder that cannot renew stops calling itself leader
//! after the renew deadline (two thirds of the duration), before anyone else may take the
//! Lease; on a clean exit it clears the holder so that another replica takes over at its
//! next try instead of after the duration.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, PostParams};
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::metrics::registered;

/// The Lease's series.
#[derive(Debug)]
pub struct Metrics {
    /// 1 while this replica holds the Lease of the leader-only background writers.
    pub leader: Gauge,
}

impl Metrics {
    /// The series, registered into `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        Metrics {
            leader: registered(
                registry,
                "leader",
                "1 while this replica holds the Lease of the leader-only background writers \
                 (Instrumentation status, automatic rollout)",
            ),
        }
    }
}

/// The Lease's default name.
pub const DEFAULT_NAME: &str = "otel-injector";
/// How long a Lease stays held without a renewal, by default.
pub const DEFAULT_DURATION: Duration = Duration::from_secs(15);
/// How often the holder renews (and the others look), by default.
pub const DEFAULT_RENEW_EVERY: Duration = Duration::from_secs(5);
/// The environment variable (downward API) with the pod's namespace.
pub const POD_NAMESPACE_ENV: &str = "POD_NAMESPACE";
/// A release on the way out gives up after this.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(2);

/// Which Lease, who is asking, and its timing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseConfig {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    /// `leaseDurationSeconds` (whole seconds, at least 1).
    pub duration: std::time::Duration,
    /// How often the holder renews and the others try; below `duration`.
    pub renew_every: std::time::Duration,
}

impl LeaseConfig {
    /// How long after its last successful renewal the holder still calls itself leader:
    /// two thirds of the duration (10 s of 15 s), so it stops writing well before another
    /// replica may take the Lease over.
    pub fn renew_deadline(&self) -> Duration {
        (self.duration * 2 / 3).max(Duration::from_millis(1))
    }

    fn duration_seconds(&self) -> i32 {
        i32::try_from(self.duration.as_secs().max(1)).unwrap_or(i32::MAX)
    }
}

/// This replica's identity in the Lease: the pod name (`HOSTNAME`), or `otel-injector-` and a
/// random suffix when it is not set.
pub fn default_identity() -> String {
    identity_from(std::env::var("HOSTNAME").ok())
}

fn identity_from(hostname: Option<String>) -> String {
    match hostname.filter(|h| !h.trim().is_empty()) {
        Some(h) => h,
        None => format!("{DEFAULT_NAME}-{}", random_suffix()),
    }
}

fn random_suffix() -> String {
    use ring::rand::SecureRandom as _;
    let mut bytes = [0u8; 4];
    // The system's random source does not fail on Linux; the time is a fallback all the same.
    if ring::rand::SystemRandom::new().fill(&mut bytes).is_err() {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or_default();
        bytes = nanos.to_be_bytes();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The Lease's namespace: the flag's, else `POD_NAMESPACE`, else the client's default (the
/// service account's namespace in a pod, the kubeconfig context's outside).
pub fn namespace_of(flag: Option<&str>, client: &Client) -> String {
    flag.map(str::to_owned)
        .or_else(|| std::env::var(POD_NAMESPACE_ENV).ok())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| client.default_namespace().to_owned())
}

/// What this replica should do about the Lease as it was read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaseAction {
    /// There is none: create it, holding it.
    Create,
    /// We hold it: renew.
    Renew,
    /// Free (released, or expired): take it over.
    TakeOver,
    /// Another replica holds it until `until` (milliseconds since the epoch).
    Wait { holder: String, until_ms: i64 },
}

/// Decides from the Lease (`None`: it does not exist), the time `now` and our identity.
/// A Lease without a renew time counts as expired; one without a duration uses `fallback`.
pub fn decide(
    lease: Option<&Lease>,
    now: Timestamp,
    identity: &str,
    fallback: Duration,
) -> LeaseAction {
    let Some(lease) = lease else {
        return LeaseAction::Create;
    };
    let spec = lease.spec.as_ref();
    let holder = spec
        .and_then(|s| s.holder_identity.as_deref())
        .filter(|h| !h.is_empty());
    let Some(holder) = holder else {
        return LeaseAction::TakeOver;
    };
    if holder == identity {
        return LeaseAction::Renew;
    }
    let Some(renewed) = spec.and_then(|s| s.renew_time.as_ref().or(s.acquire_time.as_ref())) else {
        return LeaseAction::TakeOver;
    };
    let seconds = spec
        .and_then(|s| s.lease_duration_seconds)
        .filter(|s| *s > 0)
        .map(i64::from)
        .unwrap_or(i64::try_from(fallback.as_secs()).unwrap_or(i64::MAX));
    let until_ms = renewed
        .0
        .as_millisecond()
        .saturating_add(seconds.saturating_mul(1000));
    if now.as_millisecond() >= until_ms {
        LeaseAction::TakeOver
    } else {
        LeaseAction::Wait {
            holder: holder.to_owned(),
            until_ms,
        }
    }
}

fn now() -> Timestamp {
    let micros = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
        .unwrap_or_default();
    Timestamp::from_microsecond(micros).unwrap_or(Timestamp::UNIX_EPOCH)
}

/// Whether this replica holds the Lease, as the election loop last found; cloneable, and
/// the loop ends once every clone is dropped (releasing the Lease) or [`Leadership::release`]
/// is called.
#[derive(Clone)]
pub struct Leadership {
    rx: watch::Receiver<bool>,
    control: Arc<Control>,
}

struct Control {
    stop: watch::Sender<bool>,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl Leadership {
    /// Whether this replica holds the Lease now.
    pub fn is_leader(&self) -> bool {
        *self.rx.borrow()
    }

    /// Waits for the next change and returns the new value; `false` for good once the
    /// election has ended.
    pub async fn changed(&mut self) -> bool {
        match self.rx.changed().await {
            Ok(()) => *self.rx.borrow_and_update(),
            Err(_) => {
                // The loop is gone: never leader again; wait forever like an unchanged value
                // would, unless the value just fell (reported once).
                if *self.rx.borrow_and_update() {
                    return false;
                }
                std::future::pending::<()>().await;
                false
            }
        }
    }

    /// A Leadership that never leads (no Lease, no loop): for a replica that runs no
    /// leader-only writer, and for tests.
    pub fn never() -> Leadership {
        let (tx, rx) = watch::channel(false);
        drop(tx);
        let (stop, _) = watch::channel(false);
        Leadership {
            rx,
            control: Arc::new(Control {
                stop,
                task: Mutex::new(None),
            }),
        }
    }

    /// Stops the election: this replica stops being leader at once, and the Lease is released
    /// if it held it (so another replica takes over without waiting for the duration). Waits
    /// for the release (at most a couple of seconds); later calls return at once.
    pub async fn release(&self) {
        let _ = self.control.stop.send(true);
        let task = self
            .control
            .task
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(task) = task {
            let _ = task.await;
        }
    }
}

impl Leadership {
    /// How a leader-only writer waits between two passes: `wait`, or less when the Lease
    /// changes hands or `changes` (the Instrumentation cache's) moves; a closed `changes`
    /// sleeps the whole `wait`.
    pub async fn next_pass(&mut self, changes: &mut watch::Receiver<u64>, wait: Duration) {
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            _ = self.changed() => {}
            changed = changes.changed() => if changed.is_err() {
                tokio::time::sleep(wait).await;
            },
        }
    }
}

/// Keeps the `otel_injector_leader` gauge at this replica's leadership until the election
/// ends.
pub async fn report(mut leadership: Leadership, metrics: Arc<Metrics>) {
    metrics.leader.set(i64::from(leadership.is_leader()));
    loop {
        let leader = leadership.changed().await;
        metrics.leader.set(i64::from(leader));
    }
}

/// Spawns the election loop on the current runtime; it ends when the returned Leadership and
/// all its clones are dropped or on shutdown.
pub fn elect(client: kube::Client, config: LeaseConfig) -> Leadership {
    let (tx, rx) = watch::channel(false);
    let (stop, stop_rx) = watch::channel(false);
    let api = Api::<Lease>::namespaced(client, &config.namespace);
    let task = tokio::spawn(run(api, config, tx, stop_rx));
    Leadership {
        rx,
        control: Arc::new(Control {
            stop,
            task: Mutex::new(Some(task)),
        }),
    }
}

/// The election loop: one try every `renew_every`; leadership lapses at the renew deadline
/// even while a call hangs.
async fn run(
    api: Api<Lease>,
    config: LeaseConfig,
    tx: watch::Sender<bool>,
    mut stop: watch::Receiver<bool>,
) {
    let deadline = config.renew_deadline();
    // When the leadership lapses unless renewed (meaningful while leader).
    let mut lapse = Instant::now();
    let mut last_wait: Option<String> = None;
    let mut failures = 0u32;
    loop {
        let started = Instant::now();
        let leader = *tx.borrow();
        let call_deadline = if leader {
            (started + config.renew_every).min(lapse)
        } else {
            started + config.renew_every
        };
        let attempt = tokio::select! {
            r = tokio::time::timeout_at(call_deadline, try_once(&api, &config)) => Some(r),
            _ = tx.closed() => None,
            _ = stop.wait_for(|s| *s) => None,
        };
        let Some(attempt) = attempt else { break };
        match attempt {
            Ok(Ok(Held::Yes)) => {
                failures = 0;
                lapse = started + deadline;
                last_wait = None;
                if !leader {
                    tracing::info!(lease = %config.name, namespace = %config.namespace, identity = %config.identity, "became leader");
                    tx.send_replace(true);
                }
            }
            Ok(Ok(Held::No { holder })) => {
                failures = 0;
                if leader {
                    tracing::warn!(lease = %config.name, holder = %holder, "lost the Lease to another replica");
                    tx.send_replace(false);
                }
                if last_wait.as_deref() != Some(holder.as_str()) {
                    tracing::info!(lease = %config.name, namespace = %config.namespace, holder = %holder, "another replica holds the Lease");
                    last_wait = Some(holder);
                }
            }
            Ok(Err(e)) => {
                failures += 1;
                // Logged on the first failure and then every tenth: the loop tries every few
                // seconds for as long as the cause lasts.
                if failures % 10 == 1 {
                    let hint = match &e {
                        kube::Error::Api(s) if s.code == 403 => {
                            " (the Role in manifests/components/status grants the Lease)"
                        }
                        _ => "",
                    };
                    tracing::warn!(lease = %config.name, namespace = %config.namespace, error = %e, failures, "cannot read or write the Lease; retrying{hint}");
                }
            }
            Err(_elapsed) => {
                failures += 1;
                if failures % 10 == 1 {
                    tracing::warn!(lease = %config.name, "the Lease call timed out; retrying");
                }
            }
        }
        if *tx.borrow() && Instant::now() >= lapse {
            tracing::warn!(lease = %config.name, "could not renew the Lease in time; no longer leader");
            tx.send_replace(false);
        }
        let mut next = started + config.renew_every;
        if *tx.borrow() {
            next = next.min(lapse);
        }
        tokio::select! {
            _ = tokio::time::sleep_until(next) => {}
            _ = tx.closed() => break,
            _ = stop.wait_for(|s| *s) => break,
        }
    }
    // Stop writing first, then free the Lease for the others.
    let was_leader = tx.send_replace(false);
    if was_leader {
        match tokio::time::timeout(RELEASE_TIMEOUT, release(&api, &config)).await {
            Ok(Ok(true)) => tracing::info!(lease = %config.name, "released the Lease"),
            Ok(Ok(false)) => {}
            Ok(Err(e)) => {
                tracing::warn!(lease = %config.name, error = %e, "could not release the Lease")
            }
            Err(_) => tracing::warn!(lease = %config.name, "releasing the Lease timed out"),
        }
    }
}

enum Held {
    Yes,
    No { holder: String },
}

/// One read and, if the decision says so, one write. A conflict (another replica wrote
/// between the read and the write) is a plain "not held".
async fn try_once(api: &Api<Lease>, config: &LeaseConfig) -> Result<Held, kube::Error> {
    let current = api.get_opt(&config.name).await?;
    let time = now();
    let decision = decide(current.as_ref(), time, &config.identity, config.duration);
    let written = match (decision, current) {
        (LeaseAction::Wait { holder, .. }, _) => return Ok(Held::No { holder }),
        (LeaseAction::Create, _) => {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(config.name.clone()),
                    namespace: Some(config.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(config.identity.clone()),
                    lease_duration_seconds: Some(config.duration_seconds()),
                    acquire_time: Some(MicroTime(time)),
                    renew_time: Some(MicroTime(time)),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            api.create(&PostParams::default(), &lease).await
        }
        (LeaseAction::Renew, Some(mut lease)) => {
            let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
            spec.renew_time = Some(MicroTime(time));
            spec.lease_duration_seconds = Some(config.duration_seconds());
            api.replace(&config.name, &PostParams::default(), &lease)
                .await
        }
        (LeaseAction::TakeOver, Some(mut lease)) => {
            let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
            spec.holder_identity = Some(config.identity.clone());
            spec.acquire_time = Some(MicroTime(time));
            spec.renew_time = Some(MicroTime(time));
            spec.lease_duration_seconds = Some(config.duration_seconds());
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
            api.replace(&config.name, &PostParams::default(), &lease)
                .await
        }
        // `decide` returns these only for an existing Lease.
        (LeaseAction::Renew | LeaseAction::TakeOver, None) => {
            return Ok(Held::No {
                holder: String::new(),
            });
        }
    };
    match written {
        Ok(_) => Ok(Held::Yes),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(Held::No {
            holder: "(another replica, racing)".to_owned(),
        }),
        Err(e) => Err(e),
    }
}

/// Clears the holder if it is still us; `Ok(false)` when there was nothing to release.
async fn release(api: &Api<Lease>, config: &LeaseConfig) -> Result<bool, kube::Error> {
    let Some(mut lease) = api.get_opt(&config.name).await? else {
        return Ok(false);
    };
    let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
    if spec.holder_identity.as_deref() != Some(config.identity.as_str()) {
        return Ok(false);
    }
    spec.holder_identity = None;
    spec.renew_time = Some(MicroTime(now()));
    api.replace(&config.name, &PostParams::default(), &lease)
        .await?;
    Ok(true)
}

#[cfg(test)]
mod tests;
