//! Load tool: starts the real `otel-injector serve` (release build) on 127.0.0.1 with
//! generated certificates and an `--instrumentation-file`, opens N keep-alive TLS
//! connections (HTTP/1.1, full handshakes, as the kube-apiserver does) and sends reviews for
//! a bounded time and count. Two scenarios in one invocation:
//!
//! - `baseline`: a Deployment CREATE review (tests/data/deployment-create.json): TLS, HTTP,
//!   envelope parse and response, the object never decoded: the cheapest full round trip;
//! - `injection`: a Pod CREATE injecting Java (tests/data/pod-create-inject-java.json).
//!
//! Prints requests/s, latency percentiles, errors and the server's CPU time per request for
//! both, their injection/baseline ratios, and the server's RSS (VmRSS, VmHWM) at rest and
//! after each scenario.
//!
//! ```sh
//! cargo run --release --example load -- [--connections 4] [--duration 10] [--warmup 1]
//!     [--rounds 1] [--max-requests 500000] [--binary PATH] [--log-level info]
//!     [--baseline-review FILE] [--inject-review FILE]
//! ```

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpListener as StdListener, TcpStream as StdStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context as _, bail, ensure};
use rustls::ClientConfig;
use rustls::client::Resumption;
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

const MAX_DURATION: Duration = Duration::from_secs(60);
const INSTRUMENTATION: &str = include_str!("../tests/data/instrumentations/java-load.yaml");

struct Args {
    connections: usize,
    duration: Duration,
    warmup: Duration,
    rounds: usize,
    max_requests: usize,
    binary: Option<PathBuf>,
    log_level: String,
    baseline: PathBuf,
    inject: PathBuf,
}

fn parse_args() -> anyhow::Result<Args> {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let mut a = Args {
        connections: 4,
        duration: Duration::from_secs(10),
        warmup: Duration::from_secs(1),
        rounds: 1,
        max_requests: 500_000,
        binary: None,
        log_level: "info".into(),
        baseline: data.join("deployment-create.json"),
        inject: data.join("pod-create-inject-java.json"),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut val = || it.next().with_context(|| format!("{flag} needs a value"));
        let secs = |v: String| anyhow::Ok(Duration::try_from_secs_f64(v.parse()?)?);
        match flag.as_str() {
            "--connections" => a.connections = val()?.parse()?,
            "--duration" => a.duration = secs(val()?)?,
            "--warmup" => a.warmup = secs(val()?)?,
            "--rounds" => a.rounds = val()?.parse()?,
            "--max-requests" => a.max_requests = val()?.parse()?,
            "--binary" => a.binary = Some(val()?.into()),
            "--log-level" => a.log_level = val()?,
            "--baseline-review" => a.baseline = val()?.into(),
            "--inject-review" => a.inject = val()?.into(),
            _ => bail!("unknown argument {flag} (see the header of examples/load.rs)"),
        }
    }
    ensure!((1..=256).contains(&a.connections), "--connections 1..=256");
    ensure!((1..=10).contains(&a.rounds), "--rounds 1..=10");
    if a.duration > MAX_DURATION || a.warmup > MAX_DURATION {
        eprintln!("durations capped at {MAX_DURATION:?}");
    }
    a.duration = a.duration.min(MAX_DURATION);
    a.warmup = a.warmup.min(MAX_DURATION);
    a.max_requests = a.max_requests.clamp(1, 5_000_000);
    Ok(a)
}

// === the server process ===

/// The server, killed and reaped on drop.
struct Server {
    child: Child,
    webhook: SocketAddr,
    admin: SocketAddr,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn newest_mtime(dir: &Path) -> Option<SystemTime> {
    let mut newest = None;
    for e in std::fs::read_dir(dir).ok()?.flatten() {
        let m = if e.path().is_dir() {
            newest_mtime(&e.path())
        } else {
            e.metadata().and_then(|m| m.modified()).ok()
        };
        newest = newest.max(m);
    }
    newest
}

/// `--binary`, else `<target>/release/otel-injector`, built first if missing.
fn binary(args: &Args) -> anyhow::Result<PathBuf> {
    if let Some(b) = &args.binary {
        return Ok(b.clone());
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or(root.join("target"), PathBuf::from);
    let bin = target.join("release/otel-injector");
    if !bin.exists() {
        eprintln!("building {} ...", bin.display());
        let cargo = std::env::var_os("CARGO").unwrap_or("cargo".into());
        let st = Command::new(cargo)
            .args(["build", "--release", "--bin", "otel-injector"])
            .current_dir(root)
            .status()?;
        ensure!(st.success(), "cargo build --release failed");
    }
    let built = std::fs::metadata(&bin)?.modified()?;
    if newest_mtime(&root.join("src")).is_some_and(|src| src > built) {
        eprintln!(
            "warning: {} is older than src/; `cargo build --release` to measure the current code",
            bin.display()
        );
    }
    Ok(bin)
}

fn free_addr() -> anyhow::Result<SocketAddr> {
    Ok(StdListener::bind("127.0.0.1:0")?.local_addr()?)
}

/// A plain-HTTP GET on the admin port: the body of a 200 answer.
fn admin_get(admin: SocketAddr, path: &str) -> Option<String> {
    let mut s = StdStream::connect_timeout(&admin, Duration::from_secs(1)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: load\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let (head, body) = out.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200").then(|| body.to_owned())
}

/// `/readyz` answers 200: the server has read its Instrumentation file.
fn ready(admin: SocketAddr) -> bool {
    admin_get(admin, "/readyz").is_some()
}

/// The server's own `otel_injector_admission_duration_seconds` (sum in seconds, count):
/// body read, review and metrics, without TLS, HTTP and scheduling.
fn handler_time(admin: SocketAddr) -> (f64, f64) {
    let text = admin_get(admin, "/metrics").unwrap_or_default();
    let get = |series: &str| {
        text.lines()
            .find_map(|l| {
                l.strip_prefix(series)?
                    .strip_prefix(' ')?
                    .trim()
                    .parse()
                    .ok()
            })
            .unwrap_or(0.0)
    };
    (
        get("otel_injector_admission_duration_seconds_sum"),
        get("otel_injector_admission_duration_seconds_count"),
    )
}

/// Starts the server with its files in `dir`; returns it with a TLS client trusting its CA.
fn start(bin: &Path, dir: &Path, log_level: &str) -> anyhow::Result<(Server, TlsConnector)> {
    let certs = otel_injector::certs::generate("otel-injector load CA", &["127.0.0.1".into()])?;
    let tls = dir.join("tls");
    certs.write_to(&tls)?;
    let instrumentations = dir.join("instrumentations.yaml");
    std::fs::write(&instrumentations, INSTRUMENTATION)?;
    let log = dir.join("server.log");
    let arg = |p: &Path| p.display().to_string();
    for _attempt in 0..5 {
        let (webhook, admin) = (free_addr()?, free_addr()?);
        let out = std::fs::File::create(&log)?;
        let mut cmd = Command::new(bin);
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("OTEL_INJECTOR_") {
                cmd.env_remove(k);
            }
        }
        cmd.arg("serve")
            .args(["--tls-cert-file", &arg(&tls.join("tls.crt"))])
            .args(["--tls-key-file", &arg(&tls.join("tls.key"))])
            .args(["--instrumentation-file", &arg(&instrumentations)])
            .args(["--webhook-addr", &webhook.to_string()])
            .args(["--admin-addr", &admin.to_string()])
            .args(["--log-level", log_level, "--shutdown-delay", "0s"])
            .env_remove("KUBECONFIG")
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out);
        let child = cmd
            .spawn()
            .with_context(|| format!("spawn {}", bin.display()))?;
        let mut server = Server {
            child,
            webhook,
            admin,
        };
        let until = Instant::now() + Duration::from_secs(30);
        while Instant::now() < until && server.child.try_wait()?.is_none() && !ready(admin) {
            std::thread::sleep(Duration::from_millis(10));
        }
        if ready(admin) {
            let mut roots = rustls::RootCertStore::empty();
            roots.add(CertificateDer::from_pem_slice(certs.ca_cert.as_bytes())?)?;
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let mut cfg = ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()?
                .with_root_certificates(roots)
                .with_no_client_auth();
            cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
            cfg.resumption = Resumption::disabled();
            return Ok((server, TlsConnector::from(Arc::new(cfg))));
        }
        drop(server);
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if !text.contains("failed to bind") {
            bail!("otel-injector did not come up:\n{text}");
        }
    }
    bail!("five port clashes in a row")
}

/// (VmRSS, VmHWM) in KiB.
fn rss(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// User + system CPU time of a process (all threads), from /proc/<pid>/stat in clock ticks
/// (USER_HZ is 100 on Linux).
fn cpu_time(pid: &str) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the parenthesised command name: state is field 3, utime 14, stime 15.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<u64> = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|v| v.parse().ok())
        .collect();
    Duration::from_millis(f.iter().sum::<u64>() * 10)
}

// === the client ===

type Conn = BufReader<TlsStream<TcpStream>>;

async fn connect(addr: SocketAddr, tls: &TlsConnector) -> std::io::Result<Conn> {
    let tcp = TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    let name = ServerName::IpAddress(addr.ip().into());
    Ok(BufReader::new(tls.connect(name, tcp).await?))
}

/// One request/response; the response is checked for status 200, a complete body and, when
/// `patch`, a JSON patch.
async fn roundtrip(
    c: &mut Conn,
    req: &[u8],
    patch: bool,
    body: &mut Vec<u8>,
) -> anyhow::Result<()> {
    c.get_mut().write_all(req).await?;
    c.get_mut().flush().await?;
    let mut line = String::new();
    let mut status_ok = false;
    let mut len = None;
    loop {
        line.clear();
        ensure!(c.read_line(&mut line).await? > 0, "connection closed");
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        status_ok |= l.starts_with("HTTP/1.1 200 ");
        if let Some((k, v)) = l.split_once(':')
            && k.eq_ignore_ascii_case("content-length")
        {
            len = Some(v.trim().parse::<usize>()?);
        }
    }
    body.resize(len.context("no content-length")?, 0);
    c.read_exact(body).await?;
    ensure!(status_ok, "status: {}", String::from_utf8_lossy(body));
    ensure!(
        !patch || body.windows(12).any(|w| w == b"\"patchType\":"),
        "no patch in {}",
        String::from_utf8_lossy(body)
    );
    Ok(())
}

/// Where the load goes: the webhook address, a TLS client for it, the server's pid.
#[derive(Clone)]
struct Target {
    addr: SocketAddr,
    admin: SocketAddr,
    tls: TlsConnector,
    pid: String,
}

/// One scenario: a name, the whole HTTP request, whether the answer must carry a patch.
type Scenario = (&'static str, Arc<Vec<u8>>, bool);

/// Per-connection loop until `until` or the shared request budget is spent; returns the
/// latencies (ns) and the error count. A connection that fails is opened again.
async fn drive(
    conn: &mut Option<Conn>,
    target: Target,
    (_, req, patch): Scenario,
    until: Instant,
    budget: Arc<AtomicIsize>,
) -> (Vec<u64>, usize) {
    let (mut lat, mut errors, mut body) = (Vec::new(), 0, Vec::new());
    while Instant::now() < until && budget.fetch_sub(1, Ordering::Relaxed) > 0 {
        let c = match conn {
            Some(c) => c,
            None => match connect(target.addr, &target.tls).await {
                Ok(c) => conn.insert(c),
                Err(_) => {
                    errors += 1;
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
        };
        let t = Instant::now();
        match roundtrip(c, &req, patch, &mut body).await {
            Ok(()) => lat.push(t.elapsed().as_nanos() as u64),
            Err(e) => {
                if errors == 0 {
                    eprintln!("error: {e:#}");
                }
                errors += 1;
                *conn = None;
            }
        }
    }
    (lat, errors)
}

#[derive(Default)]
struct Stats {
    lat: Vec<u64>,
    errors: usize,
    wall: Duration,
    server_cpu: Duration,
    client_cpu: Duration,
    /// Handler time (s) and requests by the server's histogram.
    handler: (f64, f64),
}

impl Stats {
    fn rps(&self) -> f64 {
        self.lat.len() as f64 / self.wall.as_secs_f64()
    }
    /// Percentile in µs of the sorted latencies.
    fn p(&self, q: f64) -> f64 {
        let i = ((self.lat.len() as f64 * q).ceil() as usize).clamp(1, self.lat.len().max(1));
        self.lat.get(i - 1).map_or(f64::NAN, |&ns| ns as f64 / 1e3)
    }
    fn cpu_per_req(&self, cpu: Duration) -> f64 {
        cpu.as_secs_f64() * 1e6 / self.lat.len().max(1) as f64
    }
    fn handler_us(&self) -> f64 {
        self.handler.0 * 1e6 / self.handler.1.max(1.0)
    }
}

/// Runs one scenario for `length` (at most `budget` requests) on every connection at once.
async fn phase(
    conns: &mut [Option<Conn>],
    target: &Target,
    scenario: &Scenario,
    length: Duration,
    budget: usize,
    stats: &mut Stats,
) {
    let budget = Arc::new(AtomicIsize::new(budget as isize));
    let (cpu0, me0) = (cpu_time(&target.pid), cpu_time("self"));
    let h0 = handler_time(target.admin);
    let start = Instant::now();
    let until = start + length;
    let runs = conns
        .iter_mut()
        .map(|c| drive(c, target.clone(), scenario.clone(), until, budget.clone()));
    for (lat, errors) in futures::future::join_all(runs).await {
        stats.lat.extend(lat);
        stats.errors += errors;
    }
    stats.wall += start.elapsed();
    stats.server_cpu += cpu_time(&target.pid).saturating_sub(cpu0);
    stats.client_cpu += cpu_time("self").saturating_sub(me0);
    let h1 = handler_time(target.admin);
    stats.handler.0 += h1.0 - h0.0;
    stats.handler.1 += h1.1 - h0.1;
}

fn request(path: &Path) -> anyhow::Result<Arc<Vec<u8>>> {
    let body = std::fs::read(path).with_context(|| path.display().to_string())?;
    let mut req = format!(
        "POST /mutate-v1-pod?timeout=10s HTTP/1.1\r\nHost: otel-injector.otel-injector.svc:443\r\n\
         Accept: application/json, */*\r\nContent-Type: application/json\r\n\
         User-Agent: kube-apiserver-admission\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    req.extend_from_slice(&body);
    Ok(Arc::new(req))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
    let bin = binary(&args)?;
    let scenarios: [Scenario; 2] = [
        ("baseline", request(&args.baseline)?, false),
        ("injection", request(&args.inject)?, true),
    ];
    let dir = tempfile::tempdir()?;
    let (server, tls) = start(&bin, dir.path(), &args.log_level)?;
    let pid = server.child.id();
    let target = Target {
        addr: server.webhook,
        admin: server.admin,
        tls,
        pid: pid.to_string(),
    };
    eprintln!(
        "server {} (pid {pid}) on {}; {} connection(s); per scenario and round {:?} after a {:?} warm-up, at most {} requests; {} round(s)",
        bin.display(),
        server.webhook,
        args.connections,
        args.duration,
        args.warmup,
        args.max_requests,
        args.rounds,
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut rss_lines = vec![("at rest", rss(pid))];

    let mut conns = Vec::new();
    for _ in 0..args.connections {
        conns.push(Some(
            connect(target.addr, &target.tls)
                .await
                .context("TLS connect")?,
        ));
    }
    let mut stats: [Stats; 2] = Default::default();
    for round in 0..args.rounds {
        for (scenario, stats) in scenarios.iter().zip(&mut stats) {
            let (w, d, n) = (args.warmup, args.duration, args.max_requests);
            phase(&mut conns, &target, scenario, w, n, &mut Stats::default()).await;
            phase(&mut conns, &target, scenario, d, n, stats).await;
            if round + 1 == args.rounds {
                rss_lines.push((scenario.0, rss(pid)));
            }
        }
    }

    println!(
        "\n{:<10} {:>9} {:>6} {:>9} {:>8} {:>8} {:>8} {:>8} {:>13} {:>13} {:>11}",
        "scenario",
        "requests",
        "errors",
        "req/s",
        "p50 µs",
        "p90 µs",
        "p99 µs",
        "max µs",
        "srv CPU µs/r",
        "gen CPU µs/r",
        "handler µs"
    );
    for ((name, ..), s) in scenarios.iter().zip(&mut stats) {
        s.lat.sort_unstable();
        println!(
            "{name:<10} {:>9} {:>6} {:>9.0} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>13.1} {:>13.1} {:>11.1}",
            s.lat.len(),
            s.errors,
            s.rps(),
            s.p(0.5),
            s.p(0.9),
            s.p(0.99),
            s.p(1.0),
            s.cpu_per_req(s.server_cpu),
            s.cpu_per_req(s.client_cpu),
            s.handler_us()
        );
    }
    let [b, i] = &stats;
    println!(
        "ratio injection/baseline: req/s {:.2}  p50 {:.2}  p90 {:.2}  p99 {:.2}  server CPU/req {:.2}  handler {:.2}",
        i.rps() / b.rps(),
        i.p(0.5) / b.p(0.5),
        i.p(0.9) / b.p(0.9),
        i.p(0.99) / b.p(0.99),
        i.cpu_per_req(i.server_cpu) / b.cpu_per_req(b.server_cpu),
        i.handler_us() / b.handler_us()
    );
    for (when, (rss, hwm)) in rss_lines {
        let when = format!("RSS {when}:");
        println!("{when:<20} VmRSS {rss:>7} KiB  VmHWM {hwm:>7} KiB");
    }
    let failed = stats.iter().any(|s| s.lat.is_empty());
    drop(server);
    ensure!(!failed, "a scenario completed no request");
    Ok(())
}
