//! The root of the process's one prometheus-client registry. Each part owns its series in
//! its own `Metrics` (`server`, `cluster`, `certs`), registered into this root with
//! `Metrics::register(&mut Registry)` (the Linkerd policy controller's style); this module
//! holds only the root, the build information series and the exposition. Label values are
//! bounded (never a pod name or an error string): enums made by [`label_enum!`].

use std::marker::PhantomData;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
pub use prometheus_client::registry::{Metric, Registry};

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

/// A new metric of type `M`, registered into `registry` as `name` (`help`).
pub fn registered<M: Metric + Clone + Default>(
    registry: &mut Registry,
    name: &str,
    help: &str,
) -> M {
    let metric = M::default();
    registry.register(name, help, metric.clone());
    metric
}

/// A bounded set of label values: an enum made by [`label_enum!`] (or one that spells
/// itself the same way, like the engine's skip reasons).
pub trait LabelValue: Copy + 'static {
    /// Every value, in declaration order.
    const ALL: &'static [Self];
    /// The value as the label writes it.
    fn as_str(self) -> &'static str;
    /// Its position in [`LabelValue::ALL`].
    fn index(self) -> usize;
}

/// A counter per value of `E` under one label, registered as one family, every series
/// created at zero (dashboards see zeros, not gaps) and counted without a lookup.
#[derive(Clone, Debug)]
pub struct Counted<E> {
    counters: Vec<Counter>,
    values: PhantomData<E>,
}

impl<E: LabelValue> Counted<E> {
    /// Registers `name` (`help`) with label `label` into `registry`.
    pub fn register(registry: &mut Registry, name: &str, help: &str, label: &'static str) -> Self {
        let family = Family::<[(&'static str, &'static str); 1], Counter>::default();
        registry.register(name, help, family.clone());
        let counters = E::ALL
            .iter()
            .map(|v| family.get_or_create(&[(label, v.as_str())]).clone())
            .collect();
        Counted {
            counters,
            values: PhantomData,
        }
    }

    fn counter(&self, value: E) -> &Counter {
        &self.counters[value.index()]
    }

    pub fn inc(&self, value: E) {
        self.counter(value).inc();
    }

    /// The count of `value` so far.
    pub fn get(&self, value: E) -> u64 {
        self.counter(value).get()
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

/// Tests of the parts' series: the exposition of the series `register` makes, after
/// `exercise`; it must hold every one of `needles`.
#[cfg(test)]
pub(crate) fn exposes<M>(
    register: fn(&mut Registry) -> M,
    exercise: impl FnOnce(&M),
    needles: &[&str],
) -> String {
    let mut registry = root();
    let m = register(&mut registry);
    exercise(&m);
    let text = Exposition::new(registry).encode();
    for needle in needles {
        assert!(text.contains(needle), "missing {needle:?} in\n{text}");
    }
    text
}

#[cfg(test)]
mod tests;
