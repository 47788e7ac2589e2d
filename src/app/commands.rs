//! The offline commands (`inject`, `explain`, `convert`, `policy`): manifests in, the
//! cluster read once when asked, the result printed.

use crate::cli::{ConvertArgs, ExplainArgs, ExplainFormat, InjectArgs, OfflineArgs, PolicyArgs};
use crate::cluster;
use crate::offline;

use super::{Failure, Skipped, print};

/// The manifests and the context of their decisions (with `--cluster`, the cluster read
/// once).
pub(super) async fn offline_inputs(
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
pub(super) async fn read_cluster(
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

/// `otel-injector convert`.
pub(super) async fn convert(args: &ConvertArgs) -> Result<(), Failure> {
    let sources = offline::manifests::read(&args.manifests.files)?;
    let done = offline::convert::convert_all(sources, args.to.version(), args.output)?;
    Ok(print(&done.output)?)
}

/// `otel-injector policy`.
pub(super) async fn policy(args: &PolicyArgs) -> Result<(), Failure> {
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
    match &args.static_manifests {
        None => Ok(print(&offline::write_objects(
            &rendered.objects,
            args.output,
        ))?),
        Some(dir) => {
            let (mutating, validating) = crate::policy::by_plugin(rendered.objects);
            let file = |plugin: &str| {
                let ext = match args.output {
                    offline::OutputFormat::Json => "json",
                    offline::OutputFormat::Yaml => "yaml",
                };
                dir.join(plugin).join(format!("{}.{ext}", args.name_prefix))
            };
            write_manifest(&file("mutating"), &mutating, args.output)?;
            write_manifest(&file("validating"), &validating, args.output)?;
            Ok(())
        }
    }
}

/// Replaces `path` with `objects` (the API server reads a changed file within a minute; a
/// rename, so that it never reads half a file), or removes it when there are none (mode
/// `both` has no validating policy).
fn write_manifest(
    path: &std::path::Path,
    objects: &[serde_json::Value],
    format: offline::OutputFormat,
) -> anyhow::Result<()> {
    use anyhow::Context as _;
    if objects.is_empty() {
        match std::fs::remove_file(path) {
            Ok(()) => eprintln!("removed {}", path.display()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("removing {}", path.display())),
        }
        return Ok(());
    }
    let parent = path.parent().unwrap_or(std::path::Path::new("."));
    std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    // Not read by the API server: it reads .yaml, .yml and .json files only.
    let partial = path.with_extension("partial");
    std::fs::write(&partial, offline::write_objects(objects, format))
        .with_context(|| format!("writing {}", partial.display()))?;
    std::fs::rename(&partial, path).with_context(|| format!("writing {}", path.display()))?;
    eprintln!("wrote {} ({} objects)", path.display(), objects.len());
    Ok(())
}

/// `otel-injector inject`.
pub(super) async fn inject(args: &InjectArgs) -> Result<(), Failure> {
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

/// `otel-injector explain`.
pub(super) async fn explain(args: &ExplainArgs) -> Result<(), Failure> {
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
