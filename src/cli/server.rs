//! Flags of the listeners and of the drain.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::{ArgAction, Args};
use tokio::net::TcpListener;

use std::sync::Arc;

use tokio::sync::mpsc::Receiver;

use super::cluster::ClusterArgs;
use super::duration;
use crate::certs::bound_tokens::BoundTokens;
use crate::certs::client_ca::ClientCa;
use crate::cluster::events::Metrics as EventMetrics;
use crate::cluster::events::{self, EventSink, Notice};
use crate::server::auth::{Auth, Tokens};
use crate::server::conns::{
    DEFAULT_ADMIN_MAX_CONNECTIONS, DEFAULT_MAX_CONNECTIONS, REQUEST_TIMEOUT,
};
use crate::server::{ConnLimits, Drain, Shutdown, shutdown};

/// The webhook's HTTPS listener and its connection limits.
#[derive(Debug, Args)]
#[command(next_help_heading = "Webhook listener")]
pub struct ServerArgs {
    /// Address of the HTTPS webhook listener (POST /mutate-v1-pod).
    #[arg(long, env = "OTEL_INJECTOR_WEBHOOK_ADDR", default_value = "0.0.0.0:9443")]
    pub webhook_addr: SocketAddr,

    /// A TLS handshake must complete within this.
    #[arg(long, env = "OTEL_INJECTOR_HANDSHAKE_TIMEOUT", default_value = "10s", value_parser = duration)]
    pub handshake_timeout: Duration,

    /// A request's headers must all arrive within this of their first byte, however they
    /// trickle in; the connection is closed otherwise. Both listeners.
    #[arg(long, env = "OTEL_INJECTOR_HEADER_TIMEOUT", default_value = "5s", value_parser = duration)]
    pub header_timeout: Duration,

    /// A connection may wait this long for the first byte of a request: a new one, or a
    /// keep-alive one between requests. Keep it above the API server's 90 s idle timeout,
    /// so the API server (not this server) closes idle connections. Both listeners.
    #[arg(long, env = "OTEL_INJECTOR_IDLE_TIMEOUT", default_value = "120s", value_parser = duration)]
    pub idle_timeout: Duration,

    /// Most webhook connections open at once. A new connection beyond it closes the oldest
    /// one without a request in progress (first those that have not completed a request
    /// head, then idle keep-alive ones); it waits only if every connection is in a request.
    /// Lowered at start if the open-file limit cannot hold it.
    #[arg(long, env = "OTEL_INJECTOR_MAX_CONNECTIONS", default_value_t = DEFAULT_MAX_CONNECTIONS)]
    pub max_connections: usize,

    /// A connection older than this (less up to a fifth, spread over connections) answers
    /// its next request with Connection: close, so the client reconnects and a Service
    /// spreads its connections over the replicas that serve (after a rolling update they
    /// all sit on the replica restarted first). 0s: keep connections for as long as the
    /// client does. Both listeners.
    #[arg(long, env = "OTEL_INJECTOR_MAX_CONNECTION_AGE", default_value = "60s", value_parser = duration)]
    pub max_connection_age: Duration,

    /// A pod that asks for an Instrumentation the cache does not hold (none in its
    /// namespace for "true", or not the one it names) waits up to this, within the API
    /// server's deadline, for the watch to bring it: an Instrumentation applied together
    /// with its workload, or a watch catching up, then injects the pod. It reads the
    /// cache's change notifications, never the API server; a pod that finds its
    /// Instrumentation never waits. 0s: skip at once. Cluster mode only (files are read
    /// once).
    #[arg(long, env = "OTEL_INJECTOR_INSTRUMENTATION_WAIT", default_value = "2s", value_parser = duration)]
    pub instrumentation_wait: Duration,

    /// Authenticate callers by client certificate: a PEM CA (bundle) that the API server's
    /// client certificate must chain to (its admission configuration's kubeconfig names the
    /// certificate). A caller that presents a certificate this CA did not sign is refused in
    /// the TLS handshake; one that presents none gets 401 unless its token is valid
    /// (--webhook-token-file). Reloaded when it changes on disk (--tls-reload-interval).
    /// Unset: no client certificate is asked for.
    #[arg(long, env = "OTEL_INJECTOR_WEBHOOK_CLIENT_CA_FILE")]
    pub webhook_client_ca_file: Option<PathBuf>,

    /// Authenticate callers by bearer token: a file of accepted tokens, one per line (the
    /// API server sends the one its admission configuration's kubeconfig names, as
    /// `Authorization: Bearer`). A caller without a valid token or client certificate gets
    /// 401 before its body is read. Reloaded when it changes on disk
    /// (--tls-reload-interval). Unset: no token is asked for.
    #[arg(long, env = "OTEL_INJECTOR_WEBHOOK_TOKEN_FILE")]
    pub webhook_token_file: Option<PathBuf>,

    /// Authenticate callers by KEP-6060 webhook-bound token (Kubernetes 1.37, alpha gate
    /// APIServerWebhookAuthenticationToken): accept a bearer ServiceAccount token that the
    /// TokenRequest API bound to the MutatingWebhookConfiguration --webhook-configuration,
    /// attesting pods' API group (admissionReviewAPIGroups `*`: 1.37 refuses the core group
    /// `""`), for this audience: the webhook's URL, or https://SERVICE.NAMESPACE.svc:PORT/PATH
    /// of its service (e.g. https://otel-injector.otel-injector.svc:443/mutate-v1-pod).
    /// Verified against the API server's published keys (/openid/v1/jwks, read at start and
    /// every 10 minutes; every ServiceAccount may read them by default), never by an API call
    /// per request. Cluster mode only. Unset: no such token is accepted.
    #[arg(long, env = "OTEL_INJECTOR_WEBHOOK_BOUND_TOKEN_AUDIENCE")]
    pub webhook_bound_token_audience: Option<String>,

    /// Check every --registration-check-interval that the MutatingWebhookConfiguration --webhook-configuration still
    /// sends pods to this webhook as expected: it exists, an entry sends pod CREATEs to
    /// /mutate-v1-pod, its caBundle verifies the certificate served now for its host, its
    /// failurePolicy is --registration-failure-policy. What differs is the gauge
    /// otel_injector_registration_drift{aspect} and, with --status, the Instrumentations'
    /// Registered condition. Needs get on that configuration (manifests/components/
    /// registration-check; built-in certificates have it). Cluster mode only.
    #[arg(long, env = "OTEL_INJECTOR_CHECK_REGISTRATION")]
    #[arg(default_value_t = false, action = ArgAction::Set)]
    pub check_registration: bool,

    /// With --check-registration: the failurePolicy the configuration's entries must have.
    /// Unset: any.
    #[arg(long, env = "OTEL_INJECTOR_REGISTRATION_FAILURE_POLICY", value_parser = ["Ignore", "Fail"])]
    pub registration_failure_policy: Option<String>,

    /// With --check-registration: how often the configuration is read.
    #[arg(long, env = "OTEL_INJECTOR_REGISTRATION_CHECK_INTERVAL", default_value = "30s", value_parser = duration)]
    pub registration_check_interval: Duration,
}

impl ServerArgs {
    /// The webhook listener's connection limits.
    pub fn limits(&self) -> ConnLimits {
        ConnLimits {
            handshake: self.handshake_timeout,
            header: self.header_timeout,
            idle: self.idle_timeout,
            request: REQUEST_TIMEOUT,
            max_connections: self.max_connections,
            max_age: self.max_connection_age,
        }
    }

    /// The webhook listener's authentication, and the client CA its handshake verifies
    /// against (both read now: a file that cannot be used fails the start); bound tokens
    /// must name the MutatingWebhookConfiguration `configuration`.
    pub fn auth(&self, configuration: &str) -> anyhow::Result<(Auth, Option<Arc<ClientCa>>)> {
        let ca = match &self.webhook_client_ca_file {
            Some(path) => Some(
                ClientCa::load(path)
                    .map_err(anyhow::Error::msg)
                    .context("--webhook-client-ca-file")?,
            ),
            None => None,
        };
        let tokens = match &self.webhook_token_file {
            Some(path) => Some(Tokens::load(path).context("--webhook-token-file")?),
            None => None,
        };
        let bound = match &self.webhook_bound_token_audience {
            Some(_) if configuration.is_empty() => anyhow::bail!(
                "--webhook-bound-token-audience needs --webhook-configuration: the \
                 configuration the tokens are bound to"
            ),
            Some(audience) if audience.is_empty() => {
                anyhow::bail!("--webhook-bound-token-audience is empty")
            }
            Some(audience) => Some(BoundTokens::new(audience, configuration)),
            None => None,
        };
        let auth = Auth {
            client_cert: ca.is_some(),
            tokens,
            bound,
        };
        Ok((auth, ca))
    }

    /// Binds the webhook listener.
    pub async fn bind(&self) -> anyhow::Result<TcpListener> {
        crate::server::listener::bind(self.webhook_addr).with_context(|| {
            format!(
                "failed to bind the webhook listener on {}",
                self.webhook_addr
            )
        })
    }
}

/// The plain-HTTP admin listener.
#[derive(Debug, Args)]
#[command(next_help_heading = "Admin listener")]
pub struct AdminArgs {
    /// Address of the plain-HTTP admin listener (/metrics, /livez, /readyz).
    #[arg(long, env = "OTEL_INJECTOR_ADMIN_ADDR", default_value = "0.0.0.0:8080")]
    pub admin_addr: SocketAddr,

    /// Most admin connections open at once; beyond it, as for --max-connections, a new
    /// connection closes the oldest one without a request in progress. The header and
    /// idle timeouts are the webhook listener's.
    #[arg(long, env = "OTEL_INJECTOR_ADMIN_MAX_CONNECTIONS", default_value_t = DEFAULT_ADMIN_MAX_CONNECTIONS)]
    pub admin_max_connections: usize,
}

impl AdminArgs {
    /// The admin listener's connection limits: the webhook listener's timeouts, its own
    /// cap.
    pub fn limits(&self, webhook: &ConnLimits) -> ConnLimits {
        ConnLimits {
            max_connections: self.admin_max_connections,
            ..*webhook
        }
    }

    /// Binds the admin listener.
    pub async fn bind(&self) -> anyhow::Result<TcpListener> {
        crate::server::listener::bind(self.admin_addr)
            .with_context(|| format!("failed to bind the admin listener on {}", self.admin_addr))
    }
}

/// The Kubernetes Events about skipped injections.
#[derive(Debug, Args)]
#[command(next_help_heading = "Events")]
pub struct EventArgs {
    /// Record a Kubernetes Event (Warning, reason InstrumentationSkipped, the warning as its
    /// message) for each language a pod asked for and did not get, about the pod's
    /// controller (its ownerReferences entry with controller: true: a ReplicaSet,
    /// StatefulSet, Job…), else the Instrumentation the skip names when it exists, else the
    /// pod's Namespace. The review only queues it (never waits); a background worker
    /// deduplicates (the same message about the same object within 5 minutes), rate-limits
    /// (10 per object, then 1 a minute; 25, then 5 a second in all) and publishes it. Needs
    /// create and patch on events.k8s.io events (manifests/components/events); without them
    /// publishing fails, is counted and logged, and admission is unaffected. Needs a client:
    /// with --instrumentation-file and no --kubeconfig there is none, and no Events.
    #[arg(long, env = "OTEL_INJECTOR_EVENTS")]
    #[arg(default_value_t = true, action = ArgAction::Set)]
    pub events: bool,

    /// Most Events waiting to be published (1–65536). When the queue is full (the API
    /// server slow or unreachable), new ones are dropped and counted in
    /// otel_injector_events_total{result="dropped"}.
    #[arg(
        long,
        env = "OTEL_INJECTOR_EVENT_QUEUE_SIZE",
        default_value_t = events::DEFAULT_QUEUE_SIZE,
        value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=events::MAX_QUEUE_SIZE as u64)
    )]
    pub event_queue_size: usize,
}

impl EventArgs {
    /// The sink the webhook queues into, and the queue's other end for the worker (`None`
    /// when Events are off, or there is no cluster to send them to).
    pub fn build(
        &self,
        cluster: &ClusterArgs,
        metrics: Arc<EventMetrics>,
    ) -> (EventSink, Option<Receiver<Notice>>) {
        let has_client = cluster.instrumentation_file.is_empty() || cluster.kubeconfig.is_some();
        if !self.events || !has_client {
            return (EventSink::disabled(metrics), None);
        }
        let (sink, rx) = events::queue(self.event_queue_size, metrics);
        (sink, Some(rx))
    }
}

/// The drain on SIGTERM/SIGINT.
#[derive(Debug, Args)]
#[command(next_help_heading = "Shutdown")]
pub struct ShutdownArgs {
    /// On SIGTERM, keep serving this long with /readyz failing, so endpoints drop the
    /// replica before it stops accepting connections. From the signal on, every answer
    /// carries Connection: close, so the clients' pools give up their connections to this
    /// replica as they use them.
    #[arg(long, env = "OTEL_INJECTOR_SHUTDOWN_DELAY", default_value = "5s", value_parser = duration)]
    pub shutdown_delay: Duration,

    /// After that, the longest wait for the webhook's connections to end before the
    /// process exits and cuts the rest: each ends when its client closes it or with its
    /// next answer. The drain closes no idle webhook connection itself (the API server may
    /// be writing a request onto it, and would admit that pod without the agent). Keep it
    /// above the API server's 90 s idle timeout, and terminationGracePeriodSeconds above
    /// the delay plus this. Admin connections close at once when the listener stops.
    #[arg(long, env = "OTEL_INJECTOR_SHUTDOWN_TIMEOUT", default_value = "100s", value_parser = duration)]
    pub shutdown_timeout: Duration,
}

impl ShutdownArgs {
    /// Installs the signal handlers: the [`Shutdown`] to wait on and the [`Drain`] the
    /// listeners follow.
    pub fn build(&self) -> std::io::Result<(Shutdown, Drain)> {
        shutdown::sigint_or_sigterm(self.shutdown_delay, self.shutdown_timeout)
    }
}
