//! The certificates' series: reloads and the validity of the certificate served now.

use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::metrics::{Counted, label_enum, registered};

label_enum! {
    /// How a serving certificate reload ended.
    ReloadResult {
        Success => "success",
        Error => "error",
    }
}

/// The certificates' series.
#[derive(Debug)]
pub struct Metrics {
    reloads: Counted<ReloadResult>,
    expiry: Gauge,
}

impl Metrics {
    /// The series, registered into `registry`, every reload result created at zero.
    pub fn register(registry: &mut Registry) -> Self {
        Metrics {
            reloads: Counted::register(
                registry,
                "certificate_reloads",
                "Serving certificate reloads by result",
                "result",
            ),
            expiry: registered(
                registry,
                "certificate_expiry_timestamp_seconds",
                "End of the validity (notAfter) of the serving certificate served now, in unix \
                 seconds",
            ),
        }
    }

    pub fn reload(&self, result: ReloadResult) {
        self.reloads.inc(result);
    }

    /// The serving certificate now served ends its validity at `not_after` (unix seconds).
    pub fn served(&self, not_after: i64) {
        self.expiry.set(not_after);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_certificate_series() {
        crate::metrics::exposes(
            Metrics::register,
            |m| m.served(1_796_083_200),
            &[
                "otel_injector_certificate_reloads_total{result=\"error\"} 0",
                "# TYPE otel_injector_certificate_expiry_timestamp_seconds gauge",
                "otel_injector_certificate_expiry_timestamp_seconds 1796083200",
            ],
        );
    }
}
