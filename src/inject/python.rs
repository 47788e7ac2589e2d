//! Python: an init container copies the glibc or musl build of the SDK into a shared volume,
//! and `PYTHONPATH` of every target gets the auto-instrumentation dir in front and the mount
//! at the end.

use k8s_openapi::api::core::v1::VolumeMount;

use super::plan::{EnvValue, literal};
use super::{
    Agent, CopyAgent, Injection, Outcome, ResourceDefaults, value_from_origin, value_from_warning,
};
use crate::crd::{LanguageSpec, Python as PythonSpec};
use crate::inject::lang::Language;

pub const PYTHONPATH: &str = "PYTHONPATH";
/// `glibc` (the default) or `musl`; namespace-vs-pod precedence applies.
pub const PLATFORM_ANNOTATION: &str = "instrumentation.opentelemetry.io/otel-python-platform";
pub const INIT_CONTAINER: &str = "opentelemetry-auto-instrumentation-python";
pub const VOLUME: &str = "opentelemetry-auto-instrumentation-python";
pub const MOUNT: &str = "/otel-auto-instrumentation-python";
const PATH_PREFIX: &str =
    "/otel-auto-instrumentation-python/opentelemetry/instrumentation/auto_instrumentation";
pub const DEFAULT_IMAGE: &str =
    "ghcr.io/open-telemetry/opentelemetry-operator/autoinstrumentation-python:0.64b0";
const AGENT: CopyAgent = CopyAgent {
    language: Language::Python,
    init_container: INIT_CONTAINER,
    volume: VOLUME,
    mount: MOUNT,
    resources: ResourceDefaults {
        limit_cpu: "500m",
        limit_memory: "256Mi",
        request_cpu: "50m",
        request_memory: "64Mi",
    },
};
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

impl Agent for Python {
    fn language(&self) -> Language {
        Language::Python
    }

    fn inject(&self, cx: &mut Injection<'_, '_>) -> Outcome {
        let platform = cx.annotations.get(PLATFORM_ANNOTATION);
        let Some(source) = platform_source(platform) else {
            cx.warn(format!(
                "python: otel-python-platform {:?} is not supported (use glibc or musl); not injected",
                platform.unwrap_or("")
            ));
            return Outcome::NothingInstrumented;
        };
        let default = PythonSpec::default();
        let python = cx.inst.spec.python.as_ref().unwrap_or(&default);
        let mut done = Vec::new();
        for &slot in cx.targets {
            let Some(c) = cx.plan.container(slot) else {
                continue;
            };
            let name = c.name();
            // spec.env cannot define PYTHONPATH: it is merged after PYTHONPATH is set.
            if let Some(origin) = value_from_origin(&c.env, &[python.env()], PYTHONPATH) {
                let msg = value_from_warning(Language::Python, name, PYTHONPATH, origin);
                cx.warn(msg);
                continue;
            }
            c.mount(VolumeMount {
                name: VOLUME.into(),
                mount_path: MOUNT.into(),
                ..Default::default()
            });
            for e in python.env() {
                c.env.append_if_absent(e.clone());
            }
            // As the Operator does, PYTHONPATH is composed before the common env is added.
            let value = match c.env.get(PYTHONPATH) {
                // An empty entry would put the working directory on the path.
                Some(EnvValue::Literal(v)) if !v.is_empty() => {
                    format!("{PATH_PREFIX}:{v}:{MOUNT}")
                }
                _ => format!("{PATH_PREFIX}:{MOUNT}"),
            };
            c.env.set_literal(PYTHONPATH, value);
            super::sdk::inject_common_env(&mut c.env, &cx.inst.spec);
            for (k, v) in DEFAULTS {
                c.env.append_if_absent(literal(k, v));
            }
            let app = c.container;
            super::sdk::inject_sdk_config(&mut c.env, cx.info, &cx.inst.spec, app);
            done.push(slot);
        }
        if done.is_empty() {
            return Outcome::NothingInstrumented;
        }

        let command = super::copy_dir(source, MOUNT);
        cx.add_copy_agent(&AGENT, python, command, &done);
        Outcome::Injected(done.len())
    }
}
