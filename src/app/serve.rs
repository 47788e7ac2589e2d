//! `otel-injector serve`: the parts built from their flag groups and started in the design's
//! order (the admin listener bound first, then the webhook's, then the watches), then the drain.

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt as _;
use tokio::task::JoinSet;

use crate::cli::ServeArgs;
use crate::cluster::events::{self, KubePublisher};
use crate::cluster::{self, Caches, Labeler};
use crate::metrics;
use crate::server::{self, admin};

use super::Failure;

/// How long the admin listener's open requests (a stalled scrape, say) may hold the exit
/// once the webhook has drained.
pub(super) const ADMIN_GRACE: Duration = Duration::from_secs(1);

/// Runs `otel-injector serve` until a signal and a completed drain;
/// [`Failure::Aborted`] when a second signal cut the drain short.
pub async fn serve(args: ServeArgs) -> Result<(), Failure> {
    args.log.init();
    // The kube client's rustls needs a process-wide provider; ours is passed explicitly.
    let _ = rustls::crypto::ring::default_provider().install_default();

    // 1. Everything that can be checked locally fails fast, before binding; nothing here
    // reads more than the certificate files.
    // Each part registers its series into the one registry that /metrics serves.
    let mut registry = metrics::root();
    let server_metrics = Arc::new(server::Metrics::register(&mut registry));
    let metrics = Arc::new(cluster::Metrics::register(&mut registry));
    // Every mode has the Instrumentation store: not synced until its list or file is read,
    // and so from the first scrape, which may come before that starts.
    metrics.watch.store("instrumentations", 0, false);
    let cert_metrics = Arc::new(crate::certs::Metrics::register(&mut registry));
    let exposition = Arc::new(metrics::Exposition::new(registry));
    let cert = args.tls.build()?;
    cert_metrics.served(cert.not_after());
    let served = cert.served();
    let (auth, client_ca) = args.server.auth(&args.tls.webhook_configuration)?;
    let auth = Arc::new(auth);
    let acceptor = cert.acceptor(client_ca.clone())?;
    let caches = args.cluster.build();
    let engine = args.engine.build();
    let live_policies = args
        .policies
        .build(engine.clone(), args.cluster.verify_exporter_tls);
    // What needs the API server, refused with --instrumentation-file.
    for (on, flag, why) in [
        (
            live_policies.is_some(),
            "--apply-policies",
            "it writes the policies to the API server",
        ),
        (
            auth.bound.is_some(),
            "--webhook-bound-token-audience",
            "the issuer's keys are read from the API server",
        ),
    ] {
        if on && matches!(caches, Caches::Files(_)) {
            return Err(anyhow::anyhow!("{flag} needs cluster mode: {why}").into());
        }
    }
    let catalog = caches.catalog();
    let (shutdown, drain) = args.shutdown.build()?;
    let (webhook_limits, admin_limits) = connection_limits(&args);
    let (events, events_queue) = args.events.build(&args.cluster, metrics.events.clone());

    // 2. Bind both listeners before anything waits on the API server.
    let admin_listener = args.admin.bind().await?;
    let webhook_listener = args.server.bind().await?;
    tracing::info!(
        webhook = %webhook_listener.local_addr()?,
        admin = %admin_listener.local_addr()?,
        "listening"
    );
    let health = admin::Health::new(
        catalog.clone(),
        exposition,
        server_metrics.clone(),
        drain.clone(),
        cert.ready_at_start(),
    );
    let certificate_ready = health.certificate_ready.clone();
    let admin = tokio::spawn(admin::serve(
        admin_listener,
        health,
        admin_limits,
        drain.clone(),
    ));
    let router = server::router(Arc::new(server::Webhook {
        catalog,
        config: engine.clone(),
        metrics: server_metrics.clone(),
        events: events.clone(),
        conversions: server::ConversionBudget::default(),
        auth: auth.clone(),
        instrumentation_wait: match &caches {
            Caches::Watched(catalog, _) => server::InstrumentationWait::new(
                catalog.instrumentation_changes(),
                args.server.instrumentation_wait,
            ),
            Caches::Files(_) => None,
        },
    }));
    let webhook = tokio::spawn(server::serve_tls(
        webhook_listener,
        acceptor,
        router,
        webhook_limits,
        server_metrics,
        drain.clone(),
    ));

    // 3. Then the background parts; readiness follows the files' read or the watches'
    // sync. The watches share one client, built (with retries) only if one of them needs it.
    let client = cluster::connect(args.cluster.kubeconfig.clone()).shared();
    let mut background = JoinSet::new();
    background.spawn(cert.keep(client.clone(), certificate_ready, cert_metrics));
    if let Some(ca) = client_ca {
        background.spawn(ca.watch(args.tls.tls_reload_interval));
    }
    if let Some(tokens) = auth.tokens.clone() {
        background.spawn(tokens.watch(args.tls.tls_reload_interval));
    }
    if let Some(queue) = events_queue {
        // This replica's pod name (the kubelet sets HOSTNAME to it): the Events' instance.
        let instance = std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty());
        let (client, catalog, metrics) = (client.clone(), caches.catalog(), metrics.events.clone());
        background.spawn(async move {
            let publisher = KubePublisher::new(client.await, instance);
            events::run(
                queue,
                publisher,
                catalog,
                events::Limits::default(),
                metrics,
            )
            .await;
        });
    }
    if let Caches::Files(files) = &caches {
        load_files(files.clone(), metrics.watch.clone()).await?;
    }
    let mut status = None;
    if let Caches::Watched(catalog, writers) = caches {
        if let Some(bound) = auth.bound.clone() {
            background.spawn(bound.follow(client.clone(), crate::certs::bound_tokens::KEYS_EVERY));
        }
        let registration = check_registration(&args, &served, &client, &metrics, &mut background);
        let rollout = args.rollout.build();
        if args.status.status || rollout.is_some() || live_policies.is_some() {
            status = Some(tokio::spawn(run_status(
                client.clone(),
                args.status,
                catalog.clone(),
                metrics.clone(),
                drain.clone(),
                Writers {
                    rollout,
                    events,
                    registration: registration.clone(),
                    policies: live_policies,
                },
            )));
        }
        if args.cluster.label_namespaces {
            let labeler = Labeler::new(&catalog, engine.enabled);
            let client = client.clone();
            background.spawn(async move { labeler.run(client.await).await });
        }
        let metrics = metrics.watch.clone();
        background.spawn(async move { writers.watch(client.await, metrics).await });
    }

    // 4. Drain on SIGTERM/SIGINT; a second signal aborts.
    shutdown
        .signaled(async {
            let _ = webhook.await;
            // The admin listener has served /readyz through the drain; give its open
            // requests a moment, then stop regardless.
            if tokio::time::timeout(ADMIN_GRACE, admin).await.is_err() {
                tracing::warn!("admin connections still open at exit; closing them");
            }
        })
        .await?;
    if let Some(status) = status {
        // Released at the signal already; this waits for the release's answer.
        let _ = tokio::time::timeout(ADMIN_GRACE * 3, status).await;
    }
    background.shutdown().await;
    tracing::info!("drained; exiting");
    Ok(())
}

/// What the status pass writes besides the statuses.
pub(super) struct Writers {
    rollout: Option<cluster::rollout::AutoRollout>,
    events: crate::cluster::events::EventSink,
    /// What the check of the webhook configuration found (`--check-registration`).
    registration: Option<cluster::registration::SharedDrift>,
    /// The live policies (`--apply-policies`).
    policies: Option<crate::policy::live::LivePolicies>,
}

/// Starts the check of the webhook configuration (`--check-registration`) when asked and a
/// configuration is named; what it finds.
fn check_registration(
    args: &ServeArgs,
    served: &Arc<crate::certs::ReloadingCert>,
    client: &futures::future::Shared<impl Future<Output = kube::Client> + Send + 'static>,
    metrics: &Arc<cluster::Metrics>,
    background: &mut JoinSet<()>,
) -> Option<cluster::registration::SharedDrift> {
    let name = &args.tls.webhook_configuration;
    if !args.server.check_registration || name.is_empty() {
        return None;
    }
    let found: cluster::registration::SharedDrift = Arc::new(tokio::sync::watch::Sender::new(None));
    let expected = cluster::registration::Expected {
        name: name.clone(),
        failure_policy: args.server.registration_failure_policy.clone(),
        every: args.server.registration_check_interval,
    };
    let (served, client, metrics, shared) = (
        served.clone(),
        client.clone(),
        metrics.registration.clone(),
        found.clone(),
    );
    background.spawn(async move {
        let chain = Arc::new(move || served.chain());
        cluster::registration::run(client.await, expected, chain, shared, metrics).await;
    });
    Some(found)
}

/// The status controller and the automatic rollout (each when on) and their Lease, until
/// the first shutdown signal: then the Lease is
/// released (another replica takes over at its next try) while this one drains.
pub(super) async fn run_status(
    client: futures::future::Shared<impl Future<Output = kube::Client>>,
    args: crate::cli::StatusArgs,
    catalog: Arc<cluster::KubeCatalog>,
    metrics: Arc<cluster::Metrics>,
    mut drain: server::Drain,
    writers: Writers,
) {
    let Writers {
        rollout,
        events,
        registration,
        policies,
    } = writers;
    let client = tokio::select! {
        client = client => client,
        () = drain.draining() => return,
    };
    let lease = args.lease(&client);
    tracing::info!(lease = %lease.name, namespace = %lease.namespace, identity = %lease.identity, "status controller starting; electing its writer");
    let leadership = cluster::elect(client.clone(), lease);
    let changes = catalog.instrumentation_changes();
    let policies = {
        let (client, catalog, leadership) = (client.clone(), catalog.clone(), leadership.clone());
        let changes = catalog.instrumentation_changes();
        async move {
            match policies {
                Some(p) => p.run(client, catalog, leadership, changes).await,
                None => std::future::pending::<()>().await,
            }
        }
    };
    let mut controller =
        cluster::StatusController::new(catalog, leadership.clone(), metrics.status.clone());
    if args.rollback {
        controller = controller.rolling_back(events.clone());
    } else if args.detect_failures {
        controller = controller.detecting_failures(events.clone());
    }
    if args.find_missed {
        let excluded = args.missed_excluded_namespaces.iter().cloned().collect();
        controller = controller.finding_missed(excluded, events);
    }
    if let Some(found) = registration {
        controller = controller.checking_registration(found);
    }
    // The automatic rollout shares the Lease: one holder runs every leader-only writer.
    let status_on = args.status;
    let status = async {
        if status_on {
            controller.run(client.clone()).await;
        } else {
            std::future::pending::<()>().await;
        }
    };
    let rollout = async {
        match rollout {
            Some(r) => {
                r.run(client.clone(), leadership.clone(), changes).await;
            }
            None => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        () = status => {}
        () = rollout => {}
        () = policies => {}
        () = cluster::lease::report(leadership.clone(), metrics.lease.clone()) => {}
        () = drain.draining() => {}
    }
    leadership.release().await;
}

/// Reads the Instrumentation files (off the runtime's workers): the catalog is ready when it
/// returns `Ok`; an unreadable file ends `serve` with its error.
pub(super) async fn load_files(
    files: Arc<cluster::FileCatalog>,
    metrics: Arc<cluster::watch::metrics::Metrics>,
) -> anyhow::Result<()> {
    let count = files.paths().len();
    let read = files.clone();
    // The store is counted synced before the catalog says it is ready, never after.
    let synced = move |n| metrics.store("instrumentations", n, true);
    let n = tokio::task::spawn_blocking(move || read.load_then(synced)).await??;
    tracing::info!(
        instrumentations = n,
        files = count,
        "Instrumentations loaded from files; not watching the cluster"
    );
    Ok(())
}

/// Both listeners' connection limits, their caps fitted under the open-file limit (raised
/// to its hard maximum first).
pub(super) fn connection_limits(args: &ServeArgs) -> (server::ConnLimits, server::ConnLimits) {
    let mut webhook = args.server.limits();
    let mut admin = args.admin.limits(&webhook);
    match server::fds::raise_nofile_limit() {
        Ok(Some(limit)) => {
            let asked = (webhook.max_connections, admin.max_connections);
            if server::fds::fit_caps(
                limit,
                &mut webhook.max_connections,
                &mut admin.max_connections,
            ) {
                tracing::warn!(
                    open_files = limit,
                    asked = ?asked,
                    max_connections = webhook.max_connections,
                    admin_max_connections = admin.max_connections,
                    "the open-file limit cannot hold the connection caps; lowered them"
                );
            }
        }
        Ok(None) => {}
        Err(e) => tracing::warn!(error = %e, "could not raise the open-file limit"),
    }
    (webhook, admin)
}
