//! Python: an init container copies the glibc or musl build of the SDK into a shared volume,
//! and `PYTHONPATH` of every target gets the auto-instrumentation dir in front and the mount
//! at the end.

use super::copy::{self, CopyAgent, CopyLayout};
use super::injection::{Injection, Refusal};
use crate::crd::InstrumentationSpec;
use crate::keys::PYTHON_PLATFORM;
use crate::pod::env::{EnvPlan, ValueExtension, literal};

pub const PYTHONPATH: &str = "PYTHONPATH";
copy::copy_layout!("python", "50m", "64Mi");
const PATH_PREFIX: &str =
    "/otel-auto-instrumentation-python/opentelemetry/instrumentation/auto_instrumentation";
pub const DEFAULT_IMAGE: &str =
    "ghcr.io/open-telemetry/opentelemetry-operator/autoinstrumentation-python:0.64b0";
/// Set when absent: the auto-instrumentation ships only the OTLP/HTTP exporters.
const DEFAULTS: [(&str, &str); 4] = [
    ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
    ("OTEL_TRACES_EXPORTER", "otlp"),
    ("OTEL_METRICS_EXPORTER", "otlp"),
    ("OTEL_LOGS_EXPORTER", "otlp"),
];

/// The directory of the image to copy for a platform annotation value.
fn platform_source(platform: Option<&str>) -> Option<&'static str> {
    match platform.unwrap_or("") {
        "" | "glibc" => Some("/autoinstrumentation"),
        "musl" => Some("/autoinstrumentation-musl"),
        _ => None,
    }
}

/// The Python injector.
pub struct Python;

impl CopyAgent for Python {
    /// The directory of the image to copy.
    type Variant = &'static str;

    const LAYOUT: &'static CopyLayout = &LAYOUT;
    const EXTENDS: &'static [&'static str] = &[PYTHONPATH];

    fn variant(&self, cx: &Injection<'_, '_>) -> Result<&'static str, Refusal> {
        let platform = cx.annotations.get(PYTHON_PLATFORM);
        platform_source(platform).ok_or_else(|| {
            Refusal::Unsupported(format!(
                "python: otel-python-platform {:?} is not supported (use glibc or musl); not injected",
                platform.unwrap_or("")
            ))
        })
    }
    // As the Operator does, PYTHONPATH is composed before the common env is added, so
    // spec.env cannot define it.
    fn edits_before_common_env(&self) -> bool {
        true
    }
    fn image_sub_path(&self, source: &&'static str) -> Option<&'static str> {
        Some(source.trim_start_matches('/'))
    }
    fn edit_env(
        &self,
        env: &mut EnvPlan<'_>,
        mount: &str,
        _: &InstrumentationSpec,
        _: &&str,
        _: bool,
    ) {
        // An empty entry would put the working directory on the path.
        let extension = ValueExtension {
            prefix: format!("{PATH_PREFIX}:"),
            suffix: format!(":{mount}"),
            empty: format!("{PATH_PREFIX}:{mount}"),
        };
        env.extend(PYTHONPATH, extension);
    }
    fn after_common_env(&self, env: &mut EnvPlan<'_>) {
        for (k, v) in DEFAULTS {
            env.append_if_absent(literal(k, v));
        }
    }
    fn copy_command(&self, source: &&'static str) -> Vec<String> {
        copy::copy_dir(source, MOUNT)
    }
}
