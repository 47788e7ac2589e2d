//! otel-injector: an OpenTelemetry auto-instrumentation admission webhook for Kubernetes.
//!
//! `serve` binds the admin and webhook listeners first, on every replica, then starts the
//! watches that fill the Instrumentation and Namespace caches; requests are answered from
//! those caches only.
#![forbid(unsafe_code)]

pub mod admission;
pub mod agents;
pub mod certs;
pub mod cli;
pub mod cluster;
pub mod crd;
pub mod engine;
pub mod metrics;
pub mod pod;
pub mod server;
pub mod telemetry;
pub mod warnings;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use anyhow::Context as _;
use tokio::net::TcpListener;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;

use crate::agents::DefaultImages;
use crate::cli::ServeArgs;
use crate::engine::{Catalog, EngineConfig};
use crate::metrics::Metrics;

/// Runs `otel-injector serve` until SIGTERM/SIGINT and a completed drain.
pub async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    telemetry::init(args.log_format, &args.log_level);
    // The kube client's rustls needs a process-wide provider; ours is passed explicitly.
    let _ = rustls::crypto::ring::default_provider().install_default();

    // 1. Everything that can be checked locally fails fast, before binding.
    // Built-in certificate mode serves a throwaway pair until the Secret's is read.
    let self_cert =
        args.certificate_secret
            .clone()
            .map(|(namespace, name)| certs::builtin::Config {
                namespace,
                name,
                webhook_configuration: args.webhook_configuration.clone(),
                hosts: args.certificate_hosts.clone(),
            });
    let cert = match &self_cert {
        None => certs::files::ReloadingCert::load(&args.tls_cert_file, &args.tls_key_file)?,
        Some(c) => {
            let (crt, key) = certs::builtin::throwaway(&c.hosts)
                .context("cannot make the start-up certificate (check --certificate-host)")?;
            let label = format!("Secret {}/{}", c.namespace, c.name);
            certs::files::ReloadingCert::from_pem(crt.as_bytes(), key.as_bytes(), &label)?
        }
    };
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cert.server_config()?));
    let metrics = Arc::new(Metrics::new());
    let (catalog, writers): (Arc<dyn Catalog + Send + Sync>, _) =
        if args.instrumentation_file.is_empty() {
            let (c, w) = cluster::KubeCatalog::new(args.verify_exporter_tls);
            (Arc::new(c), Some(w))
        } else {
            let c = cluster::StaticCatalog::load(&args.instrumentation_file)?;
            tracing::info!(
                instrumentations = c.len(),
                files = args.instrumentation_file.len(),
                "Instrumentations loaded from files; not watching the cluster"
            );
            metrics.store("instrumentations", c.len(), true);
            (Arc::new(c), None)
        };
    let mut images = DefaultImages::default();
    for (lang, image) in &args.agent_images {
        images.set(*lang, image.clone());
    }
    let config = EngineConfig {
        enabled: args.enabled_languages,
        images,
        max_pod_bytes: args.max_pod_bytes,
    };

    // 2. Bind both listeners before anything waits on the API server.
    let admin_listener = TcpListener::bind(args.admin_addr)
        .await
        .with_context(|| format!("failed to bind the admin listener on {}", args.admin_addr))?;
    let webhook_listener = TcpListener::bind(args.webhook_addr)
        .await
        .with_context(|| {
            format!(
                "failed to bind the webhook listener on {}",
                args.webhook_addr
            )
        })?;
    tracing::info!(
        webhook = %webhook_listener.local_addr()?,
        admin = %admin_listener.local_addr()?,
        "listening"
    );

    let health = server::admin::Health::new(catalog.clone(), metrics.clone());
    if self_cert.is_some() {
        // Not ready until the served certificate is the Secret's.
        health.certificate_ready.store(false, Ordering::Release);
    }
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut admin_stop = stop_rx.clone();
    let app = server::admin::router(health.clone());
    let admin = tokio::spawn(async move {
        let served = axum::serve(admin_listener, app)
            .with_graceful_shutdown(async move {
                let _ = admin_stop.wait_for(|s| *s).await;
            })
            .await;
        if let Err(e) = served {
            tracing::error!(error = %e, "admin listener failed");
        }
    });
    let webhook_router = server::router(Arc::new(server::Webhook {
        catalog: catalog.clone(),
        config,
        metrics: metrics.clone(),
    }));
    let limits = server::ConnLimits {
        handshake: args.handshake_timeout,
        idle: args.idle_timeout,
        max_connections: args.max_connections,
    };
    let webhook = tokio::spawn(server::serve_tls(
        webhook_listener,
        acceptor,
        webhook_router,
        limits,
        stop_rx.clone(),
        args.shutdown_timeout,
    ));
    let reload = match self_cert {
        None => tokio::spawn(cert.watch(args.tls_reload_interval, metrics.clone())),
        Some(c) => {
            let kubeconfig = args.kubeconfig.clone();
            let (cert, ready, metrics) = (
                cert.clone(),
                health.certificate_ready.clone(),
                metrics.clone(),
            );
            tokio::spawn(async move {
                let client = cluster::connect(kubeconfig).await;
                certs::builtin::run(client, c, cert, ready, metrics).await;
            })
        }
    };

    // 3. Then the watches, in the background; readiness follows their sync.
    let watches = writers.map(|w| {
        let kubeconfig = args.kubeconfig.clone();
        let metrics = metrics.clone();
        let label_namespaces = args.label_namespaces.then_some(args.enabled_languages);
        tokio::spawn(async move {
            let client = cluster::connect(kubeconfig).await;
            w.watch(client, metrics, label_namespaces).await;
        })
    });

    // 4. Drain on SIGTERM/SIGINT; a second signal aborts.
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    tracing::info!(delay = ?args.shutdown_delay, "shutdown requested; /readyz now fails");
    health.begin_shutdown();
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        tracing::warn!("second signal; aborting without drain");
        std::process::exit(130);
    });
    tokio::time::sleep(args.shutdown_delay).await;
    let _ = stop_tx.send(true);
    let _ = webhook.await;
    reload.abort();
    if let Some(w) = watches {
        w.abort();
    }
    // The admin listener has served /readyz through the drain; give its open requests a
    // moment, then stop regardless (a stalled scrape must not hold the exit).
    if tokio::time::timeout(std::time::Duration::from_secs(1), admin)
        .await
        .is_err()
    {
        tracing::warn!("admin connections still open at exit; closing them");
    }
    tracing::info!("drained; exiting");
    Ok(())
}
