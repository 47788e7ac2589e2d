//! .NET: an init container copies the auto-instrumentation into a shared volume; every target
//! gets the CLR profiler variables, and the startup hook, additional deps and shared store are
//! joined with `:` onto the container's own values.

use super::copy::{self, CopyAgent, CopyLayout, ResourceDefaults};
use super::{Agent, Injection, Names, Outcome, names};
use crate::crd::{InstrumentationSpec, LanguageSpec};
use crate::pod::env::{EnvPlan, EnvValue, literal};

/// `linux-x64` (the default) or `linux-musl-x64`; namespace-vs-pod precedence applies.
pub const RUNTIME_ANNOTATION: &str = "instrumentation.opentelemetry.io/otel-dotnet-auto-runtime";
pub const OTEL_DOTNET_AUTO_HOME: &str = "OTEL_DOTNET_AUTO_HOME";
pub const DOTNET_STARTUP_HOOKS: &str = "DOTNET_STARTUP_HOOKS";
pub const DOTNET_ADDITIONAL_DEPS: &str = "DOTNET_ADDITIONAL_DEPS";
pub const DOTNET_SHARED_STORE: &str = "DOTNET_SHARED_STORE";
pub const INIT_CONTAINER: &str = "opentelemetry-auto-instrumentation-dotnet";
pub const VOLUME: &str = "opentelemetry-auto-instrumentation-dotnet";
pub const MOUNT: &str = "/otel-auto-instrumentation-dotnet";
pub const DEFAULT_IMAGE: &str =
    "ghcr.io/open-telemetry/opentelemetry-operator/autoinstrumentation-dotnet:1.16.0";
const LAYOUT: CopyLayout = CopyLayout {
    init_container: INIT_CONTAINER,
    volume: VOLUME,
    mount: MOUNT,
    resources: ResourceDefaults {
        limit_cpu: "500m",
        limit_memory: "256Mi",
        request_cpu: "50m",
        request_memory: "128Mi",
    },
};
const PROFILER_ID: &str = "{918728DD-259F-4A6A-AC2B-B85E1B658318}";
const PROFILER_GLIBC: &str =
    "/otel-auto-instrumentation-dotnet/linux-x64/OpenTelemetry.AutoInstrumentation.Native.so";
const PROFILER_MUSL: &str =
    "/otel-auto-instrumentation-dotnet/linux-musl-x64/OpenTelemetry.AutoInstrumentation.Native.so";
/// Variables the runtime reads as `:`-separated lists: the agent's entry is appended to
/// the user's. A `valueFrom` on any of them cannot be extended, so the container is skipped.
const LISTS: [&str; 3] = [
    DOTNET_STARTUP_HOOKS,
    DOTNET_ADDITIONAL_DEPS,
    DOTNET_SHARED_STORE,
];

/// How a variable is set: only when absent, or joined onto the user's list.
#[derive(Clone, Copy)]
enum Merge {
    IfAbsent,
    Join,
}

/// The agent's variables in the Operator's order.
fn variables(profiler: &'static str) -> [(&'static str, &'static str, Merge); 7] {
    [
        ("CORECLR_ENABLE_PROFILING", "1", Merge::IfAbsent),
        ("CORECLR_PROFILER", PROFILER_ID, Merge::IfAbsent),
        ("CORECLR_PROFILER_PATH", profiler, Merge::IfAbsent),
        (
            DOTNET_STARTUP_HOOKS,
            "/otel-auto-instrumentation-dotnet/net/OpenTelemetry.AutoInstrumentation.StartupHook.dll",
            Merge::Join,
        ),
        (
            DOTNET_ADDITIONAL_DEPS,
            "/otel-auto-instrumentation-dotnet/AdditionalDeps",
            Merge::Join,
        ),
        (OTEL_DOTNET_AUTO_HOME, MOUNT, Merge::IfAbsent),
        (
            DOTNET_SHARED_STORE,
            "/otel-auto-instrumentation-dotnet/store",
            Merge::Join,
        ),
    ]
}

/// The profiler library for a runtime annotation value.
fn profiler_path(runtime: Option<&str>) -> Option<&'static str> {
    match runtime.unwrap_or("") {
        "" | "linux-x64" => Some(PROFILER_GLIBC),
        "linux-musl-x64" => Some(PROFILER_MUSL),
        _ => None,
    }
}

/// The .NET injector.
pub struct DotNet;

impl Agent for DotNet {
    fn names(&self) -> &'static Names {
        const NAMES: Names = names!(DotNet, "dotnet");
        &NAMES
    }
    fn default_image(&self) -> Option<&'static str> {
        Some(DEFAULT_IMAGE)
    }
    fn section<'s>(&self, spec: &'s InstrumentationSpec) -> Option<&'s dyn LanguageSpec> {
        Some(spec.dotnet.as_ref()?)
    }
    fn inject(&self, cx: &mut Injection<'_, '_>) -> Outcome {
        copy::inject(self, cx)
    }
}

impl CopyAgent for DotNet {
    /// The profiler library for the pod's runtime.
    type Variant = &'static str;

    fn layout(&self) -> &'static CopyLayout {
        &LAYOUT
    }
    fn variant(&self, cx: &Injection<'_, '_>) -> Result<&'static str, String> {
        // The Operator reads a preset OTEL_DOTNET_AUTO_HOME as "configured some other way".
        let spec_env = cx.inst.spec.dotnet.iter().flat_map(|d| &d.env);
        if spec_env
            .into_iter()
            .any(|e| e.name == OTEL_DOTNET_AUTO_HOME)
        {
            return Err(format!(
                "dotnet: spec.dotnet.env sets {OTEL_DOTNET_AUTO_HOME}; not injected"
            ));
        }
        let runtime = cx.annotations.get(RUNTIME_ANNOTATION);
        profiler_path(runtime).ok_or_else(|| {
            format!(
                "dotnet: otel-dotnet-auto-runtime {:?} is not supported (use linux-x64 or linux-musl-x64); not injected",
                runtime.unwrap_or("")
            )
        })
    }
    fn extends(&self) -> &'static [&'static str] {
        &LISTS
    }
    fn refuse(&self, container: &str, env: &EnvPlan<'_>) -> Option<String> {
        env.contains(OTEL_DOTNET_AUTO_HOME).then(|| {
            format!(
                "dotnet: container {container:?} already sets {OTEL_DOTNET_AUTO_HOME}; not instrumented"
            )
        })
    }
    fn edit_env(
        &self,
        env: &mut EnvPlan<'_>,
        _: &str,
        _: &InstrumentationSpec,
        profiler: &&'static str,
    ) {
        for (var, value, merge) in variables(profiler) {
            let current = match env.get(var) {
                None => None,
                Some(EnvValue::Literal(v)) => Some(v.to_owned()),
                // Only the list variables are checked up front; the user's value wins.
                Some(EnvValue::ValueFrom) => continue,
            };
            match (merge, current) {
                (_, None) => {
                    env.append_if_absent(literal(var, value));
                }
                (Merge::IfAbsent, Some(_)) => {}
                // An empty list gets the agent's entry alone, not a leading `:`.
                (Merge::Join, Some(v)) if v.is_empty() => {
                    env.set_literal(var, value.to_owned());
                }
                (Merge::Join, Some(v)) => {
                    env.set_literal(var, format!("{v}:{value}"));
                }
            }
        }
    }
    fn copy_command(&self, _: &&'static str) -> Vec<String> {
        copy::copy_dir("/autoinstrumentation", MOUNT)
    }
}
