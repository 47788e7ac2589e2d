//! Child processes that can never outlive the process that started them.
//!
//! Every server (etcd, kube-apiserver, otel-injector) runs under a tiny `sh` watchdog whose
//! standard input is a pipe held by this process (its `ChildStdin`). The watchdog starts
//! the server in the background, and a second background job blocks reading that pipe. The
//! read returns (EOF) when the write end closes: when we drop it, or when this process dies
//! for any reason, SIGKILL included, because the kernel closes its descriptors. The job then
//! sends SIGKILL to the server. No `unsafe`, no `prctl`, no process groups needed.
//!
//! The watchdog stays the server's parent and reaps it itself, so the pid it signals cannot
//! have been reused; it exits with the server's status.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::net::TcpListener;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// `sh -c WATCHDOG watchdog-NAME PIDFILE PROGRAM ARGS...`
///
/// fd 3 keeps the lifeline pipe for the killer job: a background job of a non-interactive
/// shell gets `/dev/null` as its standard input, so the pipe has to be on another fd.
const WATCHDOG: &str = r#"
pidfile=$1; shift
exec 3<&0 0</dev/null
"$@" 3<&- &
c=$!
echo "$c" > "$pidfile"
( read _ <&3; kill -KILL "$c" 2>/dev/null ) &
w=$!
exec 3<&-
wait "$c"; rc=$?
kill "$w" 2>/dev/null
exit "$rc"
"#;

/// `sh -c JANITOR janitor DIR`: when the lifeline closes, waits for the servers whose pid
/// files are in DIR to be gone, then removes DIR. Only matters when this process dies
/// without running destructors (a static control plane, SIGKILL).
const JANITOR: &str = r#"
read _
for f in "$1"/*.pid; do
    [ -f "$f" ] || continue
    p=$(cat "$f"); n=0
    while kill -0 "$p" 2>/dev/null && [ "$n" -lt 200 ]; do sleep 0.05; n=$((n+1)); done
done
rm -rf "$1"
"#;

/// A server process under a watchdog. Dropping it kills the server and waits for it.
pub struct Supervised {
    pub name: String,
    child: Child,
    lifeline: Option<ChildStdin>,
    pub log: PathBuf,
    pid_file: PathBuf,
    status: Option<ExitStatus>,
}

impl Supervised {
    /// Starts `program args` with stdout and stderr appended to `log`. `configure` may set
    /// the environment. The pid file goes next to the log.
    pub fn spawn<I, S>(
        name: &str,
        program: &Path,
        args: I,
        log: &Path,
        configure: impl FnOnce(&mut Command),
    ) -> io::Result<Supervised>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let out = File::create(log)?;
        let pid_file = log.with_extension("pid");
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(WATCHDOG)
            .arg(format!("watchdog-{name}"))
            .arg(&pid_file)
            .arg(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(out.try_clone()?)
            .stderr(out)
            // Its own process group: a terminal's Ctrl-C reaches only us, and we tear down
            // in order (the lifeline still kills the server if we die of it).
            .process_group(0);
        configure(&mut cmd);
        let mut child = cmd.spawn()?;
        let lifeline = child.stdin.take();
        Ok(Supervised {
            name: name.to_owned(),
            child,
            lifeline,
            log: log.to_owned(),
            pid_file,
            status: None,
        })
    }

    /// The server's own pid (not the watchdog's), once the watchdog has written it.
    pub fn pid(&self) -> Option<u32> {
        std::fs::read_to_string(&self.pid_file)
            .ok()
            .and_then(|s| s.trim().parse().ok())
    }

    /// The exit status if the server has exited (the watchdog exits with it).
    pub fn exited(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.try_wait().ok().flatten();
        }
        self.status
    }

    /// Kills the server (closes the lifeline) and waits for the watchdog to report it.
    pub fn stop(&mut self) -> Option<ExitStatus> {
        self.lifeline.take();
        let until = Instant::now() + Duration::from_secs(15);
        while self.exited().is_none() {
            if Instant::now() >= until {
                // Not expected: the watchdog itself is stuck. Kill it; the killer job still
                // holds the closed pipe and has already signalled the server.
                let _ = self.child.kill();
                self.status = self.child.wait().ok();
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        self.status
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The last `lines` lines of the log.
    pub fn log_tail(&self, lines: usize) -> String {
        tail(&self.log, lines)
    }
}

impl Drop for Supervised {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Removes a directory once this process is gone, however it ends (see [`JANITOR`]).
pub struct Janitor {
    child: Child,
    lifeline: Option<ChildStdin>,
}

impl Janitor {
    pub fn watch(dir: &Path) -> io::Result<Janitor> {
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(JANITOR)
            .arg("janitor")
            .arg(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()?;
        let lifeline = child.stdin.take();
        Ok(Janitor { child, lifeline })
    }
}

impl Drop for Janitor {
    fn drop(&mut self) {
        self.lifeline.take();
        let _ = self.child.wait();
    }
}

/// The last `lines` lines of a file (reads at most its last 256 KiB).
pub fn tail(path: &Path, lines: usize) -> String {
    let Ok(mut f) = File::open(path) else {
        return format!("({} not readable)", path.display());
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = f.seek(SeekFrom::Start(len.saturating_sub(256 * 1024)));
    let mut buf = Vec::new();
    let _ = f.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf);
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// A free TCP port on 127.0.0.1, chosen at random in 20000–32767: below Linux's ephemeral
/// range, so an outgoing connection cannot take it between this check and the server's
/// bind, and never the same twice in one process. The server may still lose a race with
/// another process; callers retry on "address already in use".
pub fn free_port() -> u16 {
    use std::collections::BTreeSet;
    use std::sync::Mutex;
    static GIVEN: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        let p = 20000 + (random_u64() % 12768) as u16;
        if given.contains(&p) {
            continue;
        }
        if TcpListener::bind(("127.0.0.1", p)).is_ok() {
            given.insert(p);
            return p;
        }
    }
}

/// A random number from the standard library's per-process random hash keys.
pub fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.finish()
}

/// 32 hex digits from /dev/urandom (a bearer token).
pub fn random_hex() -> io::Result<String> {
    let mut buf = [0u8; 16];
    File::open("/dev/urandom")?.read_exact(&mut buf)?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

/// What a process holds, from `/proc/<pid>`: resident set, its peak, open descriptors.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// `VmRSS`, bytes.
    pub rss: u64,
    /// `VmHWM` (the peak resident set), bytes.
    pub peak: u64,
    pub fds: usize,
}

/// The [`Usage`] of `pid`; zeros for a process that is gone.
pub fn usage(pid: u32) -> Usage {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let bytes = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |kib| kib * 1024)
    };
    Usage {
        rss: bytes("VmRSS:"),
        peak: bytes("VmHWM:"),
        fds: std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count()),
    }
}

/// Bytes in MiB, for reports.
pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / 1048576.0
}
