//! Flags of the listeners and of the drain.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use tokio::net::TcpListener;

use super::duration;
use crate::server::listener::{
    DEFAULT_ADMIN_MAX_CONNECTIONS, DEFAULT_MAX_CONNECTIONS, REQUEST_TIMEOUT,
};
use crate::server::{ConnLimits, Drain, Shutdown, shutdown};

/// The webhook's HTTPS listener and its connection limits.
#[derive(Debug, Args)]
#[command(next_help_heading = "Webhook listener")]
pub struct ServerArgs {
    /// Address of the HTTPS webhook listener (POST /mutate-v1-pod).
    #[arg(
        long,
        env = "OTEL_INJECTOR_WEBHOOK_ADDR",
        default_value = "0.0.0.0:9443"
    )]
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
        }
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

/// The drain on SIGTERM/SIGINT.
#[derive(Debug, Args)]
#[command(next_help_heading = "Shutdown")]
pub struct ShutdownArgs {
    /// On SIGTERM, keep serving this long with /readyz failing, so endpoints drop the
    /// replica before it stops accepting connections.
    #[arg(long, env = "OTEL_INJECTOR_SHUTDOWN_DELAY", default_value = "5s", value_parser = duration)]
    pub shutdown_delay: Duration,

    /// After that, the longest time given to in-flight requests before the process exits.
    #[arg(long, env = "OTEL_INJECTOR_SHUTDOWN_TIMEOUT", default_value = "20s", value_parser = duration)]
    pub shutdown_timeout: Duration,
}

impl ShutdownArgs {
    /// Installs the signal handlers: the [`Shutdown`] to wait on and the [`Drain`] the
    /// listeners follow.
    pub fn build(&self) -> std::io::Result<(Shutdown, Drain)> {
        shutdown::sigint_or_sigterm(self.shutdown_delay, self.shutdown_timeout)
    }
}
