//! One file read at start and again when it changes, as a mounted Secret changes on renewal:
//! parsed into what is in force, which a file that cannot be used never replaces. The callers'
//! CA (`client_ca.rs`) and the accepted tokens (`server/auth.rs`) are such files; the
//! serving pair, two files read together, has its own (`files.rs`).

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// Turns a file's contents into what is in force, or says why it cannot.
pub type Parse<T> = fn(&Path, &[u8]) -> Result<T, String>;

/// A file and what it says now.
pub struct Reloading<T> {
    path: PathBuf,
    /// What the file is, in log lines ("client CA", "token file").
    what: &'static str,
    parse: Parse<T>,
    current: RwLock<Arc<T>>,
    /// The contents last seen, to notice changes cheaply.
    seen: RwLock<Vec<u8>>,
}

impl<T: Send + Sync + 'static> Reloading<T> {
    /// Reads and parses the file; fails when it cannot be used.
    pub fn load(path: &Path, what: &'static str, parse: Parse<T>) -> Result<Self, String> {
        let bytes =
            std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let current = parse(path, &bytes)?;
        Ok(Reloading {
            path: path.to_owned(),
            what,
            parse,
            current: RwLock::new(Arc::new(current)),
            seen: RwLock::new(bytes),
        })
    }

    /// What is in force.
    pub fn get(&self) -> Arc<T> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Re-reads the file; puts it in force when it changed and can be used. `None`:
    /// unchanged.
    pub fn reload(&self) -> Option<Result<(), String>> {
        let bytes = match std::fs::read(&self.path) {
            Ok(b) => b,
            Err(e) => return Some(Err(format!("cannot read {}: {e}", self.path.display()))),
        };
        if *self.seen.read().unwrap_or_else(|e| e.into_inner()) == bytes {
            return None;
        }
        let parsed = (self.parse)(&self.path, &bytes);
        // Remembered either way: a half-written file is reported once, and read again when
        // it changes.
        *self.seen.write().unwrap_or_else(|e| e.into_inner()) = bytes;
        Some(parsed.map(|t| *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(t)))
    }

    /// Re-reads the file every `interval` until the task is dropped; a failure is logged once
    /// until it changes.
    pub async fn watch(self: Arc<Self>, interval: Duration) {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        let mut failed: Option<String> = None;
        loop {
            tick.tick().await;
            match self.reload() {
                Some(Ok(())) => {
                    failed = None;
                    tracing::info!(file = %self.path.display(), "{} reloaded", self.what);
                }
                Some(Err(e)) if failed.as_ref() != Some(&e) => {
                    tracing::warn!(error = %e, "{} not reloaded; keeping the one in force", self.what);
                    failed = Some(e);
                }
                Some(Err(_)) | None => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(_: &Path, bytes: &[u8]) -> Result<Vec<String>, String> {
        let text = std::str::from_utf8(bytes).map_err(|_| "not UTF-8".to_owned())?;
        let lines: Vec<String> = text.lines().map(str::to_owned).collect();
        if lines.is_empty() {
            return Err("empty".into());
        }
        Ok(lines)
    }

    #[test]
    fn a_changed_file_is_put_in_force_and_a_bad_one_keeps_the_last_good() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, "a\n").unwrap();
        let r = Reloading::load(&path, "test file", lines).unwrap();
        assert_eq!(r.reload(), None, "unchanged");
        std::fs::write(&path, "b\n").unwrap();
        assert_eq!(r.reload(), Some(Ok(())));
        assert_eq!(*r.get(), ["b"]);
        std::fs::write(&path, "").unwrap();
        assert_eq!(r.reload(), Some(Err("empty".into())));
        assert_eq!(r.reload(), None, "reported once");
        assert_eq!(*r.get(), ["b"], "kept");
        std::fs::remove_file(&path).unwrap();
        assert!(matches!(r.reload(), Some(Err(e)) if e.starts_with("cannot read")));
        assert!(Reloading::load(&path, "test file", lines).is_err());
    }
}
