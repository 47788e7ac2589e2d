//! `just demo`: a real kube-apiserver + etcd, the real `otel-injector serve`, and the
//! example Instrumentation and pod from `examples/`; prints the pod as the apiserver stored
//! it, then tears everything down.
//!
//! `--hold` (or `DEMO_HOLD=1`) keeps the cluster and the webhook running until Ctrl-C and
//! prints the `KUBECONFIG` to use with kubectl meanwhile.

#[path = "demo/describe.rs"]
mod describe;
#[path = "demo/live.rs"]
mod live;

use describe::{describe, single_doc};
use live::{live_span, wait_for_signal};

#[path = "support/mod.rs"]
#[allow(unused_imports)] // the re-exports the demo does not use
mod support;

use otel_injector::keys::INJECTED_ANNOTATION;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use support::api::{self, Registration};
use support::controlplane::ControlPlane;
use support::tools::root;
use support::webhook::Webhook;

#[tokio::main]
async fn main() -> ExitCode {
    let hold = std::env::args().any(|a| a == "--hold")
        || std::env::var("DEMO_HOLD").is_ok_and(|v| v == "1");
    match run(hold).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("demo failed: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Wall-clock steps, printed at the end.
struct Clock {
    start: Instant,
    last: Instant,
    steps: Vec<(String, Duration)>,
}

impl Clock {
    fn new() -> Clock {
        let now = Instant::now();
        Clock {
            start: now,
            last: now,
            steps: Vec::new(),
        }
    }

    fn step(&mut self, what: &str) {
        let now = Instant::now();
        self.steps.push((what.to_owned(), now - self.last));
        eprintln!("[demo] {what} ({} ms)", (now - self.last).as_millis());
        self.last = now;
    }
}

async fn run(hold: bool) -> Result<(), String> {
    let mut clock = Clock::new();
    let binary = build_webhook()?;
    clock.step("otel-injector binary built");

    let mut cp = ControlPlane::start().await?;
    clock.step(&format!(
        "etcd + kube-apiserver ready at {} (binaries found in {} ms)",
        cp.url,
        cp.timings.binaries.as_millis()
    ));
    let client = cp.client();
    let version = client
        .apiserver_version()
        .await
        .map(|v| v.git_version)
        .unwrap_or_else(|e| format!("unknown ({e})"));
    api::install_crds(&client, &root().join("manifests/crd.yaml")).await?;
    clock.step("Instrumentation CRD established");

    // The webhook runs as the default install's ServiceAccount, with its read-only RBAC.
    let identity = support::identity::issue(
        &cp,
        support::identity::SERVICE_ACCOUNT,
        &["base/otel-injector.yaml"],
        &cp.dir.join("identities"),
    )
    .await?;
    let mut webhook = Webhook::start(&binary, &identity.kubeconfig).await?;
    webhook.wait_ready(Duration::from_secs(30)).await?;
    clock.step(&format!(
        "otel-injector serving {} and ready (caches synced), as {} with the RBAC of \
         manifests/base/otel-injector.yaml",
        webhook.url(),
        identity.user
    ));
    let config = api::webhook_configuration(&Registration {
        manifest: &api::webhook_manifest_path(),
        name: "otel-injector",
        url: &webhook.url(),
        ca_pem: &webhook.certs.ca_cert,
        failure_policy: "Ignore",
        timeout_seconds: 5,
        scope: None,
    })?;
    api::create_webhook_configuration(&client, &config).await?;
    // The CRD's conversion (v1beta1, `kubectl get otelinst`) goes to the same process.
    api::point_conversion(
        &client,
        &webhook.conversion_url(),
        Some(&webhook.certs.ca_cert),
    )
    .await?;

    api::create_namespace(&client, "demo", &[], &[]).await?;
    let inst = single_doc(&root().join("examples/instrumentation.yaml"))?;
    let ns = inst["metadata"]["namespace"].as_str().unwrap_or("demo");
    let r = api::create_instrumentation(&client, ns, &inst).await?;
    if r.status != 201 {
        return Err(format!(
            "create Instrumentation: HTTP {}: {}",
            r.status,
            r.message()
        ));
    }
    clock.step(
        "webhook registered (admission and the CRD's conversion); namespace demo and \
         examples/instrumentation.yaml created (the apiserver's first write to a new CRD takes \
         about 2 s)",
    );
    let pod = single_doc(&root().join("examples/pod.yaml"))?;
    // The webhook configuration and the webhook's Instrumentation cache both fill
    // asynchronously: dry-run the pod until the webhook is called, then until it comes
    // back injected.
    let calls = webhook.requests().await.total();
    let until = Instant::now() + Duration::from_secs(30);
    let mut active = false;
    loop {
        let r = api::create_pod(&client, ns, &pod, true).await?;
        if !active && webhook.requests().await.total() > calls {
            active = true;
            clock.step("webhook configuration active (first dry-run reached the webhook)");
        }
        if r.body["metadata"]["annotations"][INJECTED_ANNOTATION].is_string() {
            break;
        }
        if Instant::now() > until {
            return Err(format!(
                "the webhook did not inject a dry-run pod within 30 s (warnings {:?})\n{}",
                r.warnings,
                webhook.log()
            ));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    clock.step("dry-run pod injected (Instrumentation in the webhook's cache)");

    let created = api::create_pod(&client, ns, &pod, false).await?;
    if created.status != 201 {
        return Err(format!(
            "create pod: HTTP {}: {}",
            created.status,
            created.message()
        ));
    }
    let name = created.body["metadata"]["name"]
        .as_str()
        .unwrap_or_default();
    let stored = api::get_pod(&client, ns, name)
        .await?
        .ok_or_else(|| format!("pod {ns}/{name} not stored"))?;
    clock.step("pod created and read back");

    println!();
    println!(
        "kube-apiserver {version} + etcd on 127.0.0.1; webhook {}",
        webhook.url()
    );
    println!("Created examples/pod.yaml (generateName checkout-7d4b9c8f5-) in namespace {ns}.");
    println!(
        "Warnings returned to the client: {}",
        if created.warnings.is_empty() {
            "none".to_owned()
        } else {
            created.warnings.join(" | ")
        }
    );
    println!();
    print!("{}", describe(&stored));
    println!();
    let total = clock.start.elapsed();
    println!("Timing (wall clock, since the demo started):");
    for (what, d) in &clock.steps {
        println!("  {:>6} ms  {what}", d.as_millis());
    }
    println!(
        "  {:>6} ms  total, until the pod above was printed",
        total.as_millis()
    );

    // Then for real: a Deployment whose pod the controllers make, the pod runner runs with
    // the real Java agent, and the span it sends to the real collector.
    let (live, live_state) = live_span(&mut cp, &client, &mut clock).await?;
    println!();
    println!("Timing of the live part (wall clock):");
    for (what, d) in clock
        .steps
        .iter()
        .skip_while(|(w, _)| !w.starts_with("controllers"))
    {
        println!("  {:>6} ms  {what}", d.as_millis());
    }
    println!(
        "  {:>6} ms  total, until the span below was received",
        clock.start.elapsed().as_millis()
    );
    println!();
    print!("{live}");

    if hold {
        println!();
        println!("Holding: the cluster and the webhook keep running. In another shell:");
        println!("  export KUBECONFIG={}", cp.kubeconfig.display());
        println!("  kubectl -n {ns} get pod {name} -o yaml");
        println!("  kubectl -n {ns} create -f examples/pod.yaml");
        println!("Ctrl-C tears everything down.");
        wait_for_signal().await;
        eprintln!();
    }
    let t = Instant::now();
    drop(live_state);
    webhook.stop();
    drop(webhook);
    cp.stop();
    drop(cp);
    let kept = std::env::var_os("E2E_KEEP").is_some_and(|v| v == "1");
    eprintln!(
        "[demo] torn down in {} ms (webhook, kube-apiserver, etcd stopped; temp dir {})",
        t.elapsed().as_millis(),
        if kept { "kept (E2E_KEEP=1)" } else { "removed" }
    );
    Ok(())
}

/// Builds the product's binary (this package's `e2e-otel-injector`, same profile and
/// dependency features as this example) and returns its path: examples land in
/// `target/<profile>/examples/`, binaries in `target/<profile>/`.
fn build_webhook() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .ok_or("unexpected location of the demo executable")?;
    let release = profile_dir.file_name().is_some_and(|n| n == "release");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(root()).args([
        "build",
        "--locked",
        "--quiet",
        "--package",
        "otel-injector-e2e",
        "--bin",
        "e2e-otel-injector",
    ]);
    if release {
        cmd.arg("--release");
    }
    // `cargo run` gives this process the package's CARGO_MANIFEST_DIR, CARGO_PKG_* and so
    // on. Passed on, they change build-script inputs (ring reruns on CARGO_MANIFEST_DIR)
    // and every later build would start over from ring.
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy();
        if k.starts_with("CARGO_PKG_")
            || matches!(
                &*k,
                "CARGO_MANIFEST_DIR"
                    | "CARGO_MANIFEST_PATH"
                    | "CARGO_CRATE_NAME"
                    | "CARGO_BIN_NAME"
                    | "CARGO_PRIMARY_PACKAGE"
                    | "CARGO_RUSTC_CURRENT_DIR"
            )
        {
            cmd.env_remove(&*k);
        }
    }
    let st = cmd
        .status()
        .map_err(|e| format!("cargo build --bin e2e-otel-injector: {e}"))?;
    if !st.success() {
        return Err(format!("cargo build --bin e2e-otel-injector failed ({st})"));
    }
    let bin = profile_dir.join("e2e-otel-injector");
    if !bin.is_file() {
        return Err(format!("{} was not built", bin.display()));
    }
    support::tools::install_crypto_provider();
    Ok(bin)
}
