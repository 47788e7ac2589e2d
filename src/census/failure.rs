//! A failing pod, read from its container statuses (`--detect-failures`): crash-looping,
//! OOM-killed, or restarted [`CRASH_RESTARTS`] times or more.

/// A container of a pod that is failing: waiting in `CrashLoopBackOff`, OOM-killed, or
/// restarted [`CRASH_RESTARTS`] times or more.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodFailure {
    pub pod: Box<str>,
    pub container: Box<str>,
    /// Its last termination's reason (`OOMKilled`, `Error`, ...), else its current one,
    /// else why it waits (`CrashLoopBackOff`); `None` when nothing says (it restarted).
    pub reason: Option<Box<str>>,
    pub exit_code: Option<i32>,
    pub restarts: i32,
}

/// A container restarted this often counts as failing, whatever its state now.
pub const CRASH_RESTARTS: i32 = 3;

impl PodFailure {
    /// The first failing container of a pod (init containers first), if any.
    pub fn of(pod: &str, status: &k8s_openapi::api::core::v1::PodStatus) -> Option<PodFailure> {
        let all = status
            .init_container_statuses
            .iter()
            .flatten()
            .chain(status.container_statuses.iter().flatten());
        for c in all {
            let state = c.state.as_ref();
            let waiting = state
                .and_then(|s| s.waiting.as_ref())
                .and_then(|w| w.reason.as_deref());
            let ended = c
                .last_state
                .as_ref()
                .and_then(|s| s.terminated.as_ref())
                .or_else(|| state.and_then(|s| s.terminated.as_ref()));
            let oom = [
                c.last_state.as_ref().and_then(|s| s.terminated.as_ref()),
                state.and_then(|s| s.terminated.as_ref()),
            ]
            .into_iter()
            .flatten()
            .any(|t| t.reason.as_deref() == Some("OOMKilled"));
            let backoff = waiting == Some("CrashLoopBackOff");
            if !(oom || backoff || c.restart_count >= CRASH_RESTARTS) {
                continue;
            }
            let reason = match ended.and_then(|t| t.reason.as_deref()) {
                _ if oom => Some("OOMKilled"),
                Some(r) => Some(r),
                None => waiting,
            };
            return Some(PodFailure {
                pod: pod.into(),
                container: c.name.as_str().into(),
                reason: reason.map(Into::into),
                exit_code: ended.map(|t| t.exit_code),
                restarts: c.restart_count,
            });
        }
        None
    }
}

impl std::fmt::Display for PodFailure {
    /// `pod web-7d9f-x2x container app: OOMKilled (exit code 137), 4 restarts`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "pod {} container {}: ", self.pod, self.container)?;
        if let Some(reason) = &self.reason {
            write!(f, "{reason}")?;
            if let Some(code) = self.exit_code {
                write!(f, " (exit code {code})")?;
            }
            write!(f, ", ")?;
        }
        let s = if self.restarts == 1 { "" } else { "s" };
        write!(f, "{} restart{s}", self.restarts)
    }
}
