//! .NET: an init container copies the auto-instrumentation into a shared volume; every target
//! gets the CLR profiler variables, and the startup hook, additional deps and shared store are
//! joined with `:` onto the container's own values.

use k8s_openapi::api::core::v1::VolumeMount;

use super::plan::{EnvValue, literal};
use super::{
    Agent, CopyAgent, Injection, Outcome, ResourceDefaults, value_from_origin, value_from_warning,
};
use crate::crd::{DotNet as DotNetSpec, LanguageSpec};
use crate::inject::lang::Language;

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
const AGENT: CopyAgent = CopyAgent {
    language: Language::DotNet,
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
    fn language(&self) -> Language {
        Language::DotNet
    }

    fn inject(&self, cx: &mut Injection<'_, '_>) -> Outcome {
        let default = DotNetSpec::default();
        let dotnet = cx.inst.spec.dotnet.as_ref().unwrap_or(&default);
        // The Operator reads a preset OTEL_DOTNET_AUTO_HOME as "configured some other way".
        if dotnet.env().iter().any(|e| e.name == OTEL_DOTNET_AUTO_HOME) {
            cx.warn(format!(
                "dotnet: spec.dotnet.env sets {OTEL_DOTNET_AUTO_HOME}; not injected"
            ));
            return Outcome::NothingInstrumented;
        }
        let runtime = cx.annotations.get(RUNTIME_ANNOTATION);
        let Some(profiler) = profiler_path(runtime) else {
            cx.warn(format!(
                "dotnet: otel-dotnet-auto-runtime {:?} is not supported (use linux-x64 or linux-musl-x64); not injected",
                runtime.unwrap_or("")
            ));
            return Outcome::NothingInstrumented;
        };
        let spec_env = cx.inst.spec.env.as_slice();
        let mut done = Vec::new();
        'targets: for &slot in cx.targets {
            let Some(c) = cx.plan.container(slot) else {
                continue;
            };
            let name = c.name();
            for var in LISTS {
                if let Some(origin) = value_from_origin(&c.env, &[dotnet.env(), spec_env], var) {
                    let msg = value_from_warning(Language::DotNet, name, var, origin);
                    cx.warn(msg);
                    continue 'targets;
                }
            }
            if c.env.contains(OTEL_DOTNET_AUTO_HOME) {
                cx.warn(format!(
                    "dotnet: container {name:?} already sets {OTEL_DOTNET_AUTO_HOME}; not instrumented"
                ));
                continue;
            }
            c.mount(VolumeMount {
                name: VOLUME.into(),
                mount_path: MOUNT.into(),
                ..Default::default()
            });
            for e in dotnet.env() {
                c.env.append_if_absent(e.clone());
            }
            super::sdk::inject_common_env(&mut c.env, &cx.inst.spec);
            for (var, value, merge) in variables(profiler) {
                let current = match c.env.get(var) {
                    None => None,
                    Some(EnvValue::Literal(v)) => Some(v.to_owned()),
                    // Only the list variables are checked up front; the user's value wins.
                    Some(EnvValue::ValueFrom) => continue,
                };
                match (merge, current) {
                    (_, None) => {
                        c.env.append_if_absent(literal(var, value));
                    }
                    (Merge::IfAbsent, Some(_)) => {}
                    // An empty list gets the agent's entry alone, not a leading `:`.
                    (Merge::Join, Some(v)) if v.is_empty() => {
                        c.env.set_literal(var, value.to_owned());
                    }
                    (Merge::Join, Some(v)) => {
                        c.env.set_literal(var, format!("{v}:{value}"));
                    }
                }
            }
            let app = c.container;
            super::sdk::inject_sdk_config(&mut c.env, cx.info, &cx.inst.spec, app);
            done.push(slot);
        }
        if done.is_empty() {
            return Outcome::NothingInstrumented;
        }

        let command = super::copy_dir("/autoinstrumentation", MOUNT);
        cx.add_copy_agent(&AGENT, dotnet, command, &done);
        Outcome::Injected(done.len())
    }
}
