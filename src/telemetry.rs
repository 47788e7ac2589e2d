//! Logging: tracing to stderr, plain or JSON, through [`Batched`]: lines gather in memory
//! and one thread writes them, so a review that logs makes no system call of its own.

use std::io::Write;
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Duration;

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    // Human-readable lines, the span fields as a prefix.
    #[default]
    Plain,
    // One JSON object per line, with the current span fields.
    Json,
}

/// Installs the global subscriber. `filter` uses EnvFilter syntax; an invalid one falls
/// back to `info` with a warning.
pub fn init(format: LogFormat, filter: &str) {
    let (filter, bad) = match EnvFilter::try_new(filter) {
        Ok(f) => (f, None),
        Err(e) => (EnvFilter::new("info"), Some(e)),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(Batched::start());
    let _ = match format {
        LogFormat::Plain => builder.try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .try_init(),
    };
    if let Some(e) = bad {
        tracing::warn!(error = %e, "invalid --log-level; using info");
    }
}

/// How long the writer thread waits after the first line of a batch, gathering more before
/// one `write` to stderr. A line shows within about this long.
const GATHER: Duration = Duration::from_millis(20);
/// Lines held at most: past this, a logging thread writes them itself, as an unbatched
/// writer would (stderr that does not keep up slows logging down; memory stays bounded).
const MAX_PENDING: usize = 1024 * 1024;

/// The pending lines, and the lock taken around every write to stderr (after `pending`'s,
/// never before it), which keeps lines in the order they were logged.
struct Shared {
    pending: Mutex<Vec<u8>>,
    wake: Condvar,
    out: Mutex<()>,
}

static SHARED: OnceLock<Shared> = OnceLock::new();

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Log lines batched to stderr by one thread ([`GATHER`], [`MAX_PENDING`]); [`flush`]
/// writes what is pending (at exit, and before a panic's message).
#[derive(Clone, Copy)]
pub struct Batched(&'static Shared);

impl Batched {
    /// The process's batched stderr; its writer thread starts with the first call.
    pub fn start() -> Batched {
        let mut started = false;
        let shared = SHARED.get_or_init(|| {
            started = true;
            Shared {
                pending: Mutex::new(Vec::new()),
                wake: Condvar::new(),
                out: Mutex::new(()),
            }
        });
        if started {
            let spawned = std::thread::Builder::new()
                .name("log-writer".into())
                .spawn(move || write_batches(shared));
            if spawned.is_err() {
                // No thread: every line waits for the next one, or for `flush`; say so.
                eprintln!("otel-injector: no log writer thread; logs are written at exit");
            }
            let previous = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                flush_unless_busy();
                previous(info);
            }));
        }
        Batched(shared)
    }
}

fn write_batches(shared: &'static Shared) {
    let mut batch = Vec::new();
    loop {
        {
            let mut pending = lock(&shared.pending);
            while pending.is_empty() {
                pending = shared
                    .wake
                    .wait(pending)
                    .unwrap_or_else(PoisonError::into_inner);
            }
        }
        std::thread::sleep(GATHER);
        let mut pending = lock(&shared.pending);
        std::mem::swap(&mut *pending, &mut batch);
        let _out = lock(&shared.out);
        drop(pending);
        let _ = std::io::stderr().write_all(&batch);
        batch.clear();
        batch.shrink_to(64 * 1024);
    }
}

/// Writes every pending line now.
pub fn flush() {
    if let Some(shared) = SHARED.get() {
        let mut pending = lock(&shared.pending);
        let _out = lock(&shared.out);
        let _ = std::io::stderr().write_all(&pending);
        pending.clear();
    }
}

/// [`flush`], unless a lock is held (a panic on a thread that holds one must not wait for
/// itself).
fn flush_unless_busy() {
    let Some(shared) = SHARED.get() else {
        return;
    };
    let Ok(mut pending) = shared.pending.try_lock() else {
        return;
    };
    let Ok(_out) = shared.out.try_lock() else {
        return;
    };
    let _ = std::io::stderr().write_all(&pending);
    pending.clear();
}

/// One log line's writer: appends to the pending lines.
pub struct Line(&'static Shared);

impl Write for Line {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let shared = self.0;
        let mut pending = lock(&shared.pending);
        let was_empty = pending.is_empty();
        if pending.len() + buf.len() > MAX_PENDING {
            let _out = lock(&shared.out);
            let mut stderr = std::io::stderr();
            stderr.write_all(&pending)?;
            pending.clear();
            stderr.write_all(buf)?;
            return Ok(buf.len());
        }
        pending.extend_from_slice(buf);
        drop(pending);
        if was_empty {
            shared.wake.notify_one();
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Batched {
    type Writer = Line;

    fn make_writer(&'a self) -> Line {
        Line(self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_written_in_order_and_none_is_lost() {
        // Through the writer this process's logging uses; `flush` empties it.
        let batched = Batched::start();
        let lines: Vec<String> = (0..200).map(|i| format!("line {i}\n")).collect();
        for l in &lines {
            batched.make_writer().write_all(l.as_bytes()).unwrap();
        }
        let pending = lock(&batched.0.pending).clone();
        // The writer thread may have taken some already; what is left is a suffix, whole
        // lines in order.
        let text = String::from_utf8(pending).unwrap();
        assert!(lines.concat().ends_with(&text));
        flush();
        assert!(lock(&batched.0.pending).is_empty());
    }
}
