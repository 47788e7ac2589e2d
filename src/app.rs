//! The composition root: each command's parts, built from their flag groups and started
//! in the order the design asks for.

use std::io::Write as _;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt as _;
use tokio::task::JoinSet;

use crate::cli::{
    Command, ConvertArgs, DevCertsArgs, ExplainArgs, ExplainFormat, InjectArgs, OfflineArgs,
    PolicyArgs, RolloutArgs, ServeArgs,
};
use crate::cluster::events::{self, KubePublisher};
use crate::cluster::{self, Caches, Labeler};
use crate::metrics;
use crate::offline;
use crate::server::{self, admin};

/// How long the admin listener's open requests (a stalled scrape, say) may hold the exit
/// once the webhook has drained.
const ADMIN_GRACE: Duration = Duration::from_secs(1);

/// Runs one command to its end.
pub async fn run(command: Command) -> Result<(), Failure> {
    match command {
        Command::Serve(args) => serve(*args).await,
        Command::Crd(args) => Ok(print(&args.yaml())?),
        Command::DevCerts(args) => Ok(dev_certs(&args)?),
        Command::Inject(args) => inject(&args).await,
        Command::Convert(args) => convert(&args).await,
        Command::Policy(args) => policy(&args).await,
        Command::Explain(args) => explain(&args).await,
        Command::Rollout(args) => rollout(&args).await,
    }
}

/// How a command failed: what `main` prints, and the exit code that says so.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    /// A second signal cut the drain short: 130, as a shell reports an interrupted process.
    /// Nothing is printed (the log said it).
    #[error(transparent)]
    Aborted(#[from] server::Aborted),
    /// `inject`/`explain --strict`: the output is written, and some object was not (fully)
    /// injected: 2.
    #[error(transparent)]
    Skipped(#[from] Skipped),
    /// Bad manifests: the message names the file and document: 1.
    #[error(transparent)]
    Input(#[from] offline::manifests::InputError),
    /// `rollout` cannot run: the message names the permission it lacks: 1.
    #[error(transparent)]
    Rollout(#[from] cluster::rollout::RolloutError),
    /// `rollout` stopped at a workload: 1.
    #[error(transparent)]
    RolloutStopped(#[from] RolloutStopped),
    /// Anything else, printed with its chain of causes: 1.
    #[error(transparent)]
    Other(#[from] anyhow::Error),
}

/// Errors with no exit code of their own: anything else (1), with their causes.
macro_rules! other {
    ($($t:ty),*) => {$(
        impl From<$t> for Failure {
            fn from(e: $t) -> Self {
                Failure::Other(e.into())
            }
        }
    )*};
}
other!(
    std::io::Error,
    serde_json::Error,
    crate::certs::TlsError,
    cluster::list::ListError
);

impl Failure {
    pub fn exit_code(&self) -> u8 {
        match self {
            Failure::Aborted(_) => 130,
            Failure::Skipped(_) => 2,
            _ => 1,
        }
    }

    /// What `main` prints on stderr, if anything.
    pub fn message(&self) -> Option<String> {
        match self {
            Failure::Aborted(_) => None,
            Failure::Other(e) => Some(format!("Error: {e:?}")),
            e => Some(format!("Error: {e}")),
        }
    }
}

/// `inject` and `explain` ended with objects that asked for a language that was not
/// injected, under `--strict`; the process exits with 2.
#[derive(Debug, thiserror::Error)]
#[error("{0} object(s) asked for a language that was not injected (--strict)")]
pub struct Skipped(pub usize);

/// The manifests and the context of their decisions (with `--cluster`, the cluster read
/// once).
async fn offline_inputs(
    args: &OfflineArgs,
) -> Result<(Vec<offline::manifests::Source>, offline::Context), Failure> {
    let sources = offline::manifests::read(&args.manifests.files)?;
    let auto = args.engine.agent_delivery == crate::engine::AgentDelivery::Auto;
    let cluster = read_cluster(&args.read, auto).await?;
    let ctx = offline::Context::build(
        &sources,
        &args.instrumentation_file,
        &args.namespace_annotation,
        cluster,
        args.engine.build(),
        args.namespace.clone(),
    )?;
    Ok((sources, ctx))
}

/// The cluster, read once when the flags ask for it; `auto`: say when the `ImageVolume` gate
/// cannot be read (the `auto` delivery then follows the version).
async fn read_cluster(
    read: &crate::cli::ClusterRead,
    auto: bool,
) -> Result<Option<cluster::ClusterView>, Failure> {
    let Some(kubeconfig) = read.cluster() else {
        return Ok(None);
    };
    // The kube client's rustls needs a process-wide provider.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let view = cluster::list::read(kubeconfig).await?;
    if let Some(e) = view.gate_error.as_ref().filter(|_| auto) {
        let (major, minor) = view.server.version;
        eprintln!(
            "note: the ImageVolume feature gate cannot be read ({e}); `auto` agent \
             delivery follows the API server version {major}.{minor}"
        );
    }
    Ok(Some(view))
}

/// Writes `text` to stdout (an error, a closed pipe among them, is the command's).
fn print(text: &str) -> std::io::Result<()> {
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(text.as_bytes())?;
    stdout.flush()
}

/// `otel-injector convert`.
async fn convert(args: &ConvertArgs) -> Result<(), Failure> {
    let sources = offline::manifests::read(&args.manifests.files)?;
    let done = offline::convert::convert_all(sources, args.to.version(), args.output)?;
    Ok(print(&done.output)?)
}

/// `otel-injector policy`.
async fn policy(args: &PolicyArgs) -> Result<(), Failure> {
    if args.files.is_empty() && args.read.cluster().is_none() {
        return Err(anyhow::anyhow!(
            "nothing to render: name Instrumentations with -f, or read a cluster's with --cluster"
        )
        .into());
    }
    let sources = offline::manifests::read(&args.files)?;
    // The policies always deliver by image volume: the gate decides nothing here.
    let cluster = read_cluster(&args.read, false).await?;
    let ctx = offline::Context::build(
        &sources,
        &[],
        &[],
        cluster,
        args.engine.build(),
        args.namespace.clone(),
    )?;
    let rendered = crate::policy::render(&ctx.catalog, &ctx.config, &args.options());
    for (inst, coverage) in &rendered.coverage {
        let injected: Vec<&str> = coverage.injected.iter().map(|l| l.as_str()).collect();
        eprintln!(
            "{inst}: policy injects {}",
            match injected.is_empty() {
                true => "nothing".to_owned(),
                false => injected.join(", "),
            }
        );
        for (lang, why) in &coverage.not_covered {
            eprintln!("{inst}: {lang} not covered: {why}");
        }
    }
    Ok(print(&offline::write_objects(
        &rendered.objects,
        args.output,
    ))?)
}

/// `otel-injector inject`.
async fn inject(args: &InjectArgs) -> Result<(), Failure> {
    let (sources, ctx) = offline_inputs(&args.input).await?;
    let options = offline::inject::Options {
        output: args.output,
        diff: args.diff,
    };
    let done = offline::inject::inject(&ctx, sources, options)?;
    for w in &done.warnings {
        eprintln!("warning: {w}");
    }
    print(&done.output)?;
    if args.strict && done.skipped > 0 {
        return Err(Skipped(done.skipped).into());
    }
    Ok(())
}

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
    let acceptor = cert.acceptor()?;
    let caches = args.cluster.build();
    let catalog = caches.catalog();
    let engine = args.engine.build();
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
        let rollout = args.rollout.build();
        if args.status.status || rollout.is_some() {
            status = Some(tokio::spawn(run_status(
                client.clone(),
                args.status,
                catalog.clone(),
                metrics.clone(),
                drain.clone(),
                rollout,
                events,
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

/// The status controller and the automatic rollout (each when on) and their Lease, until
/// the first shutdown signal: then the Lease is
/// released (another replica takes over at its next try) while this one drains.
async fn run_status(
    client: futures::future::Shared<impl Future<Output = kube::Client>>,
    args: crate::cli::StatusArgs,
    catalog: Arc<cluster::KubeCatalog>,
    metrics: Arc<cluster::Metrics>,
    mut drain: server::Drain,
    rollout: Option<cluster::rollout::AutoRollout>,
    events: crate::cluster::events::EventSink,
) {
    let client = tokio::select! {
        client = client => client,
        () = drain.draining() => return,
    };
    let lease = args.lease(&client);
    tracing::info!(lease = %lease.name, namespace = %lease.namespace, identity = %lease.identity, "status controller starting; electing its writer");
    let leadership = cluster::elect(client.clone(), lease);
    let changes = catalog.instrumentation_changes();
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
        () = cluster::lease::report(leadership.clone(), metrics.lease.clone()) => {}
        () = drain.draining() => {}
    }
    leadership.release().await;
}

/// `otel-injector explain`.
async fn explain(args: &ExplainArgs) -> Result<(), Failure> {
    let (sources, ctx) = offline_inputs(&args.input).await?;
    let explanations = offline::explain::explain(&ctx, &sources)?;
    if explanations.is_empty() {
        return Err(offline::manifests::InputError::NoWorkload.into());
    }
    let text = match args.output {
        ExplainFormat::Text => offline::explain::text(&explanations),
        ExplainFormat::Json => {
            let mut t = serde_json::to_string_pretty(&explanations)?;
            t.push('\n');
            t
        }
    };
    Ok(print(&text)?)
}

/// `rollout` stopped at a workload; the process exits with 1.
#[derive(Debug, thiserror::Error)]
#[error("rollout stopped at {stop}{pending}")]
pub struct RolloutStopped {
    pub stop: cluster::rollout::Stop,
    /// `; not restarted: ...`, or empty.
    pub pending: String,
}

/// `otel-injector rollout`.
async fn rollout(args: &RolloutArgs) -> Result<(), Failure> {
    use cluster::rollout::{RolloutError, Step, plan, run};
    // The kube client's rustls needs a process-wide provider.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let kubeconfig = args.kubeconfig.as_deref();
    let client = cluster::connect_once(kubeconfig)
        .await
        .map_err(RolloutError::from)?;
    let (namespace, name) = &args.instrumentation;
    let excluded = args.excluded_namespaces.iter().cloned().collect();
    let census = run::read_plan(&client, namespace, name, &excluded).await?;
    print!(
        "{}",
        plan::describe(&census.key, &census.tally, &census.plan)
    );
    if args.dry_run {
        println!("dry run: nothing restarted");
        return Ok(());
    }
    if census.plan.restarts.is_empty() {
        return Ok(());
    }
    let report = run::execute(
        &client,
        &census.plan,
        census.spec,
        &args.settings(),
        &mut |step| match step {
            Step::Restarted { workload, stamp } => {
                println!("restarted {workload} (restartedAt {stamp})");
            }
            Step::Complete { workload, took } => {
                println!("complete  {workload} in {:.1}s", took.as_secs_f64());
            }
            Step::Soaking { workload, soak } => {
                println!(
                    "canary    {workload}: soaking {} before the others",
                    crate::duration::format(soak)
                );
            }
            Step::Soaked { workload } => println!("soaked    {workload}: continuing"),
            Step::Stopped(_) => {}
        },
    )
    .await;
    if let Some(stop) = report.stopped {
        let pending = if report.pending.is_empty() {
            String::new()
        } else {
            let names: Vec<String> = report.pending.iter().map(ToString::to_string).collect();
            format!("; not restarted: {}", names.join(", "))
        };
        return Err(RolloutStopped { stop, pending }.into());
    }
    println!("done: {} restarted and complete", report.completed.len());
    Ok(())
}

/// Reads the Instrumentation files (off the runtime's workers): the catalog is ready when it
/// returns `Ok`; an unreadable file ends `serve` with its error.
async fn load_files(
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
fn connection_limits(args: &ServeArgs) -> (server::ConnLimits, server::ConnLimits) {
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

/// `otel-injector dev-certs`.
fn dev_certs(args: &DevCertsArgs) -> anyhow::Result<()> {
    let certs = crate::certs::generate(&args.ca_name, &args.hosts)?;
    certs.write_to(&args.out_dir)?;
    println!(
        "wrote ca.crt, ca.key, tls.crt, tls.key to {} for {}",
        args.out_dir.display(),
        args.hosts.join(", ")
    );
    Ok(())
}

#[cfg(test)]
mod tests;
