//! End-to-end tests through a real kube-apiserver and etcd (`just e2e`).
//!
//! The binaries come from `scripts/e2e-build.sh`; one control plane is shared by the tests
//! of this process, each test runs its own `otel-injector serve` process behind its own
//! webhook configuration and namespaces (see `harness.rs`). Every case asserts the pod as
//! the apiserver stored it.

#[path = "../support/mod.rs"]
mod support;

mod burst;
mod callers;
mod certmanager;
mod conversion;
mod declarative;
mod delivery_auto;
mod delivery_cost;
mod faults;
mod harness;
mod injection;
mod install;
mod languages;
mod latency;
mod manifests;
mod memory;
mod missed;
mod offline;
mod outcome;
mod policy;
mod privileges;
mod registration;
mod rolling;
mod rollout;
mod routing;
mod safety;
mod scale;
mod selectors;
mod selfcert;
mod soak;
mod static_registration;
mod status;
mod telemetry;
mod workloads;
