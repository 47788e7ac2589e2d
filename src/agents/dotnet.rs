//! .NET: an init container copies the auto-instrumentation into a shared volume; every target
//! gets the CLR profiler variables, and the startup hook, additional deps and shared store are
//! joined with `:` onto the container's own values.
//!
//! The profiler is loaded from the image's architecture-neutral `linux/` or `linux-musl/`
//! directory, as the Operator does since its arm64 support: the multi-arch image holds the
//! node's build there (`linux-x64/` is only a symlink in amd64 images). An Operator image
//! whose tag says it is older than that layout gets a warning.

use super::Language;
use super::copy::{self, CopyAgent, CopyLayout};
use super::image_tag::{Release, operator_release};
use super::injection::{Injection, Refusal};
use crate::crd::InstrumentationSpec;
use crate::keys::DOTNET_RUNTIME;
use crate::pod::env::{EnvPlan, ValueExtension, literal};

pub const OTEL_DOTNET_AUTO_HOME: &str = "OTEL_DOTNET_AUTO_HOME";
pub const DOTNET_STARTUP_HOOKS: &str = "DOTNET_STARTUP_HOOKS";
pub const DOTNET_ADDITIONAL_DEPS: &str = "DOTNET_ADDITIONAL_DEPS";
pub const DOTNET_SHARED_STORE: &str = "DOTNET_SHARED_STORE";
copy::copy_layout!("dotnet", "50m", "128Mi");
pub const DEFAULT_IMAGE: &str =
    "ghcr.io/open-telemetry/opentelemetry-operator/autoinstrumentation-dotnet:1.16.0";
const PROFILER_ID: &str = "{918728DD-259F-4A6A-AC2B-B85E1B658318}";
pub const PROFILER_GLIBC: &str =
    "/otel-auto-instrumentation-dotnet/linux/OpenTelemetry.AutoInstrumentation.Native.so";
pub const PROFILER_MUSL: &str =
    "/otel-auto-instrumentation-dotnet/linux-musl/OpenTelemetry.AutoInstrumentation.Native.so";
/// The first .NET version whose Operator image has `linux/` and `linux-musl/`: the image
/// was rebuilt with that layout while 1.16.0 was current (July 2026), so its plain tag and
/// every later tag, and every `<version>-<revision>` tag, have it; older tags never will.
pub const FIRST_NEUTRAL_LAYOUT: (u64, u64, u64) = (1, 16, 0);
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

/// The warning for an Operator image whose tag is older than the `linux/` layout (its
/// profiler would not be found); `None` when the tag is recent or says nothing (another
/// repository, no tag, `latest`).
pub fn layout_warning(image: &str) -> Option<String> {
    let Release {
        tag,
        version,
        suffix,
    } = operator_release(image, "autoinstrumentation-dotnet")?;
    // `-<digits>` is the Operator's build revision, tagged only since August 2026 and so
    // always the new layout; any other suffix is a pre-release of `version`.
    let revision = suffix.is_some_and(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()));
    let older = !revision
        && (version < FIRST_NEUTRAL_LAYOUT
            || (version == FIRST_NEUTRAL_LAYOUT && suffix.is_some()));
    let (a, b, c) = FIRST_NEUTRAL_LAYOUT;
    older.then(|| {
        format!(
            "dotnet: image tag {tag:?} predates the linux/ profiler layout of {a}.{b}.{c}; the profiler will not load"
        )
    })
}

/// The .NET injector.
pub struct DotNet;

impl CopyAgent for DotNet {
    /// The profiler library for the pod's runtime.
    type Variant = &'static str;

    const LAYOUT: &'static CopyLayout = &LAYOUT;
    const EXTENDS: &'static [&'static str] = &LISTS;
    // The Operator reads a preset OTEL_DOTNET_AUTO_HOME as "configured some other way".
    const REFUSES: &'static [&'static str] = &[OTEL_DOTNET_AUTO_HOME];

    /// An image of the Operator's older layout is named in a warning.
    fn injected(&self, cx: &mut Injection<'_, '_>) {
        if let Some(warning) = layout_warning(&cx.image(Language::DotNet)) {
            cx.warn(warning);
        }
    }

    fn variant(&self, cx: &Injection<'_, '_>) -> Result<&'static str, Refusal> {
        // The Operator reads a preset OTEL_DOTNET_AUTO_HOME as "configured some other way".
        let spec_env = cx.inst.spec.dotnet.iter().flat_map(|d| &d.env);
        if spec_env
            .into_iter()
            .any(|e| e.name == OTEL_DOTNET_AUTO_HOME)
        {
            return Err(Refusal::Unsupported(format!(
                "dotnet: spec.dotnet.env sets {OTEL_DOTNET_AUTO_HOME}; not injected"
            )));
        }
        let runtime = cx.annotations.get(DOTNET_RUNTIME);
        profiler_path(runtime).ok_or_else(|| {
            Refusal::Unsupported(format!(
                "dotnet: otel-dotnet-auto-runtime {:?} is not supported (use linux-x64 or linux-musl-x64); not injected",
                runtime.unwrap_or("")
            ))
        })
    }
    fn image_sub_path(&self, _: &&'static str) -> Option<&'static str> {
        Some("autoinstrumentation")
    }
    fn edit_env(
        &self,
        env: &mut EnvPlan<'_>,
        _: &str,
        _: &InstrumentationSpec,
        profiler: &&'static str,
        _: bool,
    ) {
        for (var, value, merge) in variables(profiler) {
            match merge {
                // The user's value wins (a `valueFrom` too).
                Merge::IfAbsent => {
                    env.append_if_absent(literal(var, value));
                }
                // An empty list gets the agent's entry alone, not a leading `:`.
                Merge::Join => env.extend(var, ValueExtension::path_list(value)),
            }
        }
    }
    fn copy_command(&self, _: &&'static str) -> Vec<String> {
        copy::copy_dir("/autoinstrumentation", MOUNT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GHCR: &str = "ghcr.io/open-telemetry/opentelemetry-operator/autoinstrumentation-dotnet";

    #[test]
    fn operator_tags_older_than_the_neutral_layout_are_warned_about() {
        let warn = |tag: &str| {
            format!(
                "dotnet: image tag {tag:?} predates the linux/ profiler layout of 1.16.0; the profiler will not load"
            )
        };
        for tag in ["1.15.0", "1.2.0", "0.4.0-beta.1", "1.16.0-rc.1", "1.16.0-"] {
            assert_eq!(
                layout_warning(&format!("{GHCR}:{tag}")),
                Some(warn(tag)),
                "{tag}"
            );
        }
        assert_eq!(
            layout_warning("otel/autoinstrumentation-dotnet:1.10.0"),
            Some(warn("1.10.0"))
        );
        assert_eq!(
            layout_warning(&format!("{GHCR}:1.15.0@sha256:0123")),
            Some(warn("1.15.0"))
        );
    }

    #[test]
    fn recent_or_unknown_tags_and_other_images_are_not_warned_about() {
        for image in [
            format!("{GHCR}:1.16.0"),
            format!("{GHCR}:1.16.0-1"),
            format!("{GHCR}:1.17.0-2"),
            format!("{GHCR}:1.15.0-1"),
            format!("{GHCR}:2.0.0"),
            format!("{GHCR}:latest"),
            format!("{GHCR}@sha256:0123"),
            GHCR.to_owned(),
            "registry.example/dotnet-agent:1.2.0".to_owned(),
            "docker.io/otel/autoinstrumentation-dotnet:1.16.0".to_owned(),
        ] {
            assert_eq!(layout_warning(&image), None, "{image}");
        }
        assert!(layout_warning(DEFAULT_IMAGE).is_none());
    }

    #[test]
    fn profiler_paths_are_the_architecture_neutral_directories() {
        assert_eq!(profiler_path(None), Some(PROFILER_GLIBC));
        assert_eq!(profiler_path(Some("linux-x64")), Some(PROFILER_GLIBC));
        assert_eq!(profiler_path(Some("linux-musl-x64")), Some(PROFILER_MUSL));
        assert_eq!(profiler_path(Some("linux-arm64")), None);
        assert!(PROFILER_GLIBC.contains("/linux/") && PROFILER_MUSL.contains("/linux-musl/"));
    }
}
