//! Node.js: an init container copies the SDK into a shared volume, and
//! `--require <mount>/autoinstrumentation.js` is appended to `NODE_OPTIONS` of every target.

use super::copy::{self, CopyAgent, CopyLayout};
use super::injection::{Injection, Refusal};
use crate::crd::InstrumentationSpec;
use crate::pod::env::{EnvPlan, ValueExtension, literal};

pub const NODE_OPTIONS: &str = "NODE_OPTIONS";
pub const OTEL_METRICS_EXPORTER: &str = "OTEL_METRICS_EXPORTER";
copy::copy_layout!("nodejs", "50m", "128Mi");
pub const DEFAULT_IMAGE: &str =
    "ghcr.io/open-telemetry/opentelemetry-operator/autoinstrumentation-nodejs:0.78.0";

/// The Node.js injector.
pub struct NodeJs;

impl CopyAgent for NodeJs {
    type Variant = ();

    const LAYOUT: &'static CopyLayout = &LAYOUT;
    const EXTENDS: &'static [&'static str] = &[NODE_OPTIONS];

    fn variant(&self, _: &Injection<'_, '_>) -> Result<(), Refusal> {
        Ok(())
    }
    // The Operator's language defaults, after the common env so that spec.env wins.
    fn image_sub_path(&self, _: &()) -> Option<&'static str> {
        Some("autoinstrumentation")
    }
    fn edit_env(
        &self,
        env: &mut EnvPlan<'_>,
        mount: &str,
        _: &InstrumentationSpec,
        _: &(),
        _: bool,
    ) {
        let arg = format!(" --require {mount}/autoinstrumentation.js");
        env.extend(NODE_OPTIONS, ValueExtension::after(arg));
        // Without an exporter the Node.js SDK starts no metric reader (metrics are lost).
        env.append_if_absent(literal(OTEL_METRICS_EXPORTER, "otlp"));
    }
    fn copy_command(&self, _: &()) -> Vec<String> {
        copy::copy_dir("/autoinstrumentation", MOUNT)
    }
}
