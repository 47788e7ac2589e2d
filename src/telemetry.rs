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

/// The pending lines, and the output behind the lock taken around every write to it (after
/// `pending`'s, never before it), which keeps lines in the order they were logged.
struct Shared {
    pending: Mutex<Vec<u8>>,
    wake: Condvar,
    out: Mutex<Box<dyn Write + Send>>,
}

impl Shared {
    /// Pending lines to `out`, and the writer thread that writes them.
    fn start(out: Box<dyn Write + Send>) -> &'static Shared {
        let shared: &'static Shared = Box::leak(Box::new(Shared {
            pending: Mutex::new(Vec::new()),
            wake: Condvar::new(),
            out: Mutex::new(out),
        }));
        let spawned = std::thread::Builder::new()
            .name("log-writer".into())
            .spawn(move || write_batches(shared));
        if spawned.is_err() {
            // No thread: lines wait for 1 MiB of them, or for `flush`; say so.
            eprintln!("otel-injector: no log writer thread; logs are written at exit");
        }
        shared
    }

    /// Writes `pending` out and empties it; the caller holds `pending`'s lock.
    fn write_pending(&self, pending: &mut Vec<u8>) {
        let mut out = lock(&self.out);
        let _ = out.write_all(pending);
        pending.clear();
    }
}

static SHARED: OnceLock<&'static Shared> = OnceLock::new();

fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
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
            Shared::start(Box::new(std::io::stderr()))
        });
        if started {
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
        // The output's lock before `pending`'s is released: no line overtakes this batch.
        let mut out = lock(&shared.out);
        drop(pending);
        let _ = out.write_all(&batch);
        drop(out);
        batch.clear();
        batch.shrink_to(64 * 1024);
    }
}

/// Writes every pending line now.
pub fn flush() {
    if let Some(shared) = SHARED.get() {
        shared.write_pending(&mut lock(&shared.pending));
    }
}

/// [`flush`], unless the pending lines' lock is held (a panic on a thread that holds it must
/// not wait for itself).
fn flush_unless_busy() {
    if let Some(shared) = SHARED.get()
        && let Ok(mut pending) = shared.pending.try_lock()
    {
        shared.write_pending(&mut pending);
    }
}

/// One log line's writer: appends to the pending lines.
pub struct Line(&'static Shared);

impl Write for Line {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let shared = self.0;
        let mut pending = lock(&shared.pending);
        let was_empty = pending.is_empty();
        pending.extend_from_slice(buf);
        if pending.len() > MAX_PENDING {
            // The writer thread is behind: write here, as an unbatched writer would.
            shared.write_pending(&mut pending);
            return Ok(buf.len());
        }
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
    use std::sync::Arc;

    /// An output the test reads back.
    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);

    impl Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            lock(&self.0).extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn lines(range: std::ops::Range<usize>) -> Vec<String> {
        range.map(|i| format!("line {i}\n")).collect()
    }

    #[test]
    fn the_writer_thread_writes_every_line_in_order() {
        let sink = Sink::default();
        let batched = Batched(Shared::start(Box::new(sink.clone())));
        let written = lines(0..200);
        for l in &written {
            batched.make_writer().write_all(l.as_bytes()).unwrap();
        }
        let until = std::time::Instant::now() + Duration::from_secs(10);
        while lock(&sink.0).len() < written.concat().len() && std::time::Instant::now() < until {
            std::thread::sleep(GATHER);
        }
        assert_eq!(
            String::from_utf8(lock(&sink.0).clone()).unwrap(),
            written.concat()
        );
        assert!(lock(&batched.0.pending).is_empty());
    }

    #[test]
    fn past_the_bound_the_logging_thread_writes_itself_in_order() {
        let sink = Sink::default();
        let shared = Shared::start(Box::new(sink.clone()));
        // Hold the output, as a stderr that does not keep up would: the writer thread
        // waits on it, and lines pile up past the bound.
        let out = lock(&shared.out);
        let big = "x".repeat(MAX_PENDING / 4) + "\n";
        let logger = std::thread::spawn(move || {
            for _ in 0..5 {
                Line(shared).write_all(big.as_bytes()).unwrap();
            }
        });
        std::thread::sleep(GATHER * 5);
        assert!(lock(&sink.0).is_empty(), "nothing passes a held output");
        drop(out);
        logger.join().unwrap();
        shared.write_pending(&mut lock(&shared.pending));
        let text = String::from_utf8(lock(&sink.0).clone()).unwrap();
        assert_eq!(text.len(), 5 * (MAX_PENDING / 4 + 1));
        assert!(text.lines().all(|l| l.len() == MAX_PENDING / 4));
    }
}
