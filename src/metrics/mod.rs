//! The root of the process's one prometheus-client registry. Each part owns its series in
//! its own `Metrics` (`server`, `cluster`, `certs`), registered into this root with
//! `Metrics::register(&mut Registry)` (the Linkerd policy controller's style); this module
//! holds only the root, the build information series and the exposition. Label values are
//! bounded (never a pod name or an error string): enums made by [`label_enum!`].

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
pub use prometheus_client::registry::Registry;

mod labels;

pub(crate) use labels::label_enum;

/// The `otel_injector_build_info` series: what this binary was built from.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BuildLabels {
    pub version: &'static str,
    pub commit: &'static str,
    pub rustc: &'static str,
    pub target: &'static str,
}

impl BuildLabels {
    /// This binary's build facts ([`crate::build_info`]).
    pub const fn current() -> Self {
        BuildLabels {
            version: crate::build_info::VERSION,
            commit: crate::build_info::COMMIT,
            rustc: crate::build_info::RUSTC_VERSION,
            target: crate::build_info::TARGET,
        }
    }
}

/// The root registry: every name under `otel_injector_`, with `otel_injector_build_info`.
pub fn root() -> Registry {
    let mut registry = Registry::with_prefix("otel_injector");
    let build_info = Family::<BuildLabels, Gauge>::default();
    build_info.get_or_create(&BuildLabels::current()).set(1);
    registry.register(
        "build_info",
        "Always 1; the labels say what this binary was built from",
        build_info,
    );
    registry
}

/// The registry once every part has registered: what `/metrics` serves.
#[derive(Debug)]
pub struct Exposition(Registry);

impl Exposition {
    pub fn new(registry: Registry) -> Self {
        Exposition(registry)
    }

    /// The OpenMetrics text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.0);
        out
    }
}

#[cfg(test)]
mod tests;
