//! Shutdown, after kubert's: [`sigint_or_sigterm`] gives a [`Shutdown`], which waits for
//! the signals, and a [`Drain`] watch, which tells the listeners where the drain stands.
//!
//! The first SIGTERM or SIGINT starts the drain: `/readyz` fails at once, so endpoints drop
//! the replica; after the delay the listeners stop accepting, finish in-flight requests and
//! close idle connections. A second signal aborts the drain: [`Shutdown::signaled`] returns
//! [`Aborted`] up to `main`, which exits with status 130.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use futures::{Stream, StreamExt};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;

/// Where the process stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum ProcessPhase {
    Serving,
    /// Signaled: not ready any more, still accepting.
    Draining,
    /// Listeners stop accepting and finish what they have.
    Closing,
}

/// A second signal arrived before the drain was complete.
#[derive(Debug, thiserror::Error)]
#[error("a second signal aborted the drain")]
pub struct Aborted(());

/// Waits for the shutdown signals and drives the [`Drain`].
pub struct Shutdown {
    signals: Pin<Box<dyn Stream<Item = ()> + Send>>,
    phase: watch::Sender<ProcessPhase>,
    delay: Duration,
}

/// The listeners' view of the shutdown. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Drain {
    phase: watch::Receiver<ProcessPhase>,
    timeout: Duration,
}

/// Listens for SIGINT and SIGTERM. After the first, listeners keep accepting for `delay`
/// (with `/readyz` failing), then get at most `timeout` to finish their requests.
pub fn sigint_or_sigterm(delay: Duration, timeout: Duration) -> std::io::Result<(Shutdown, Drain)> {
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let signals = futures::stream::poll_fn(move |cx| match term.poll_recv(cx) {
        Poll::Ready(s) => Poll::Ready(s),
        Poll::Pending => int.poll_recv(cx),
    });
    Ok(with_signals(signals, delay, timeout))
}

/// The pair, driven by any stream of signals (tests).
fn with_signals(
    signals: impl Stream<Item = ()> + Send + 'static,
    delay: Duration,
    timeout: Duration,
) -> (Shutdown, Drain) {
    let (tx, rx) = watch::channel(ProcessPhase::Serving);
    let shutdown = Shutdown {
        signals: Box::pin(signals),
        phase: tx,
        delay,
    };
    (shutdown, Drain { phase: rx, timeout })
}

/// The pair with a channel for signals: each `()` sent is one signal (tests of this module
/// and of the listeners).
#[cfg(test)]
pub(crate) fn manual(
    delay: Duration,
    timeout: Duration,
) -> (tokio::sync::mpsc::UnboundedSender<()>, Shutdown, Drain) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let signals = futures::stream::poll_fn(move |cx| rx.poll_recv(cx));
    let (shutdown, drain) = with_signals(signals, delay, timeout);
    (tx, shutdown, drain)
}

impl Shutdown {
    /// Waits for the first signal, then drains: the [`Drain`] reports draining at once and
    /// closing after the delay, and `drained` (the listeners finishing) is awaited. Returns
    /// its output, or [`Aborted`] if a second signal comes first.
    pub async fn signaled<T>(self, drained: impl Future<Output = T>) -> Result<T, Aborted> {
        let Shutdown {
            mut signals,
            phase,
            delay,
        } = self;
        if signals.next().await.is_none() {
            // No more signals can come: serve until the process is ended otherwise.
            std::future::pending::<()>().await;
        }
        tracing::info!(?delay, "shutdown requested; /readyz now fails");
        phase.send_replace(ProcessPhase::Draining);
        let drain = async {
            tokio::time::sleep(delay).await;
            phase.send_replace(ProcessPhase::Closing);
            drained.await
        };
        tokio::select! {
            out = drain => Ok(out),
            Some(()) = signals.next() => {
                tracing::warn!("second signal; aborting without drain");
                Err(Aborted(()))
            }
        }
    }
}

impl Drain {
    /// True from the first signal on (`/readyz` fails).
    pub fn is_draining(&self) -> bool {
        *self.phase.borrow() >= ProcessPhase::Draining
    }

    /// Resolves at the first signal (when `/readyz` starts failing). Never once the
    /// [`Shutdown`] is gone without a signal.
    pub async fn draining(&mut self) {
        self.reached(ProcessPhase::Draining).await
    }

    /// Resolves when listeners must stop accepting. Never once the [`Shutdown`] is gone
    /// without getting there (an aborted drain: the process is exiting, not draining).
    pub async fn closing(&mut self) {
        self.reached(ProcessPhase::Closing).await
    }

    /// Resolves once the process is at `phase` or past it; never if the [`Shutdown`] is
    /// gone before.
    async fn reached(&mut self, phase: ProcessPhase) {
        if self.phase.wait_for(|p| *p >= phase).await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// The longest a listener waits for its open requests once closing.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::mpsc;
    use tokio::time::Instant;

    fn pair(delay_ms: u64) -> (mpsc::UnboundedSender<()>, Shutdown, Drain) {
        manual(Duration::from_millis(delay_ms), Duration::from_secs(1))
    }

    #[tokio::test]
    async fn one_signal_drains_after_the_delay() {
        let (signal, shutdown, drain) = pair(50);
        assert!(!drain.is_draining());
        let watcher = drain.clone();
        let t0 = Instant::now();
        let run = tokio::spawn(shutdown.signaled(async move {
            let mut drain = drain;
            drain.closing().await;
            "drained"
        }));
        signal.send(()).unwrap();
        let out = run.await.unwrap();
        assert_eq!(out.unwrap(), "drained");
        assert!(
            t0.elapsed() >= Duration::from_millis(50),
            "closed before the delay"
        );
        assert!(watcher.is_draining());
    }

    #[tokio::test]
    async fn a_second_signal_aborts() {
        let (signal, shutdown, drain) = pair(10_000);
        let run = tokio::spawn(shutdown.signaled(std::future::pending::<()>()));
        signal.send(()).unwrap();
        let mut listener = drain.clone();
        tokio::time::timeout(Duration::from_secs(5), async {
            while !drain.is_draining() {
                tokio::task::yield_now().await;
            }
        })
        .await
        .unwrap();
        signal.send(()).unwrap();
        let out = tokio::time::timeout(Duration::from_secs(5), run)
            .await
            .unwrap();
        assert!(matches!(out.unwrap(), Err(Aborted(()))));
        // Aborted: listeners are not told to drain (the process is exiting).
        let closed = tokio::time::timeout(Duration::from_millis(50), listener.closing()).await;
        assert!(
            closed.is_err(),
            "an aborted drain told the listeners to close"
        );
    }
}
