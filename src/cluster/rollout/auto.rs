//! The automatic mode of `serve` (leader only): restarts the stale workloads of the
//! Instrumentations annotated `otel-injector/rollout: automatic`.
