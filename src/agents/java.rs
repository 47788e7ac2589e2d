//! Java: an init container copies the agent (and each extension) into a shared volume, and
//! `-javaagent:` is appended to `JAVA_TOOL_OPTIONS` of every target.

use k8s_openapi::api::core::v1::Container;

use super::copy::{self, CopyAgent, CopyLayout, ResourceDefaults};
use super::{Agent, Injection, Names, Outcome, Refusal, names};
use crate::crd::{InstrumentationSpec, LanguageSpec};
use crate::pod::env::{EnvPlan, EnvValue};

pub const JAVA_TOOL_OPTIONS: &str = "JAVA_TOOL_OPTIONS";
pub const INIT_CONTAINER: &str = "opentelemetry-auto-instrumentation-java";
pub const VOLUME: &str = "opentelemetry-auto-instrumentation-java";
const INIT_MOUNT: &str = "/otel-auto-instrumentation-java";
pub const DEFAULT_IMAGE: &str =
    "ghcr.io/open-telemetry/opentelemetry-operator/autoinstrumentation-java:2.30.0";
const LAYOUT: CopyLayout = CopyLayout {
    init_container: INIT_CONTAINER,
    volume: VOLUME,
    mount: INIT_MOUNT,
    resources: ResourceDefaults {
        limit_cpu: "500m",
        limit_memory: "256Mi",
        request_cpu: "50m",
        request_memory: "64Mi",
    },
};

/// The Java agent injector.
pub struct Java;

impl Agent for Java {
    fn names(&self) -> &'static Names {
        const NAMES: Names = names!(Java, "java");
        &NAMES
    }
    fn default_image(&self) -> Option<&'static str> {
        Some(DEFAULT_IMAGE)
    }
    fn section<'s>(&self, spec: &'s InstrumentationSpec) -> Option<&'s dyn LanguageSpec> {
        Some(spec.java.as_ref()?)
    }
    fn inject(&self, cx: &mut Injection<'_, '_>) -> Outcome {
        copy::inject(self, cx)
    }
}

impl CopyAgent for Java {
    type Variant = ();

    fn layout(&self) -> &'static CopyLayout {
        &LAYOUT
    }
    /// An extension's `dir` is an argument of the extension's copy command: a control
    /// character in it is refused (the command is run without a shell, so nothing else in it
    /// is interpreted).
    fn variant(&self, cx: &Injection<'_, '_>) -> Result<(), Refusal> {
        let extensions = cx.inst.spec.java.iter().flat_map(|j| &j.extensions);
        for (i, ext) in extensions.enumerate() {
            if ext.dir.chars().any(char::is_control) {
                return Err(Refusal::Invalid(format!(
                    "java: spec.java.extensions[{i}].dir has a control character; not injected"
                )));
            }
        }
        Ok(())
    }
    fn extends(&self) -> &'static [&'static str] {
        &[JAVA_TOOL_OPTIONS]
    }
    // Each container mounts the agent at its own path (as the Operator does), so a second
    // Java container never reads another's copy.
    fn target_mount(&self, container: &str) -> String {
        format!("{INIT_MOUNT}-{container}")
    }
    fn edit_env(&self, env: &mut EnvPlan<'_>, mount: &str, spec: &InstrumentationSpec, _: &()) {
        let mut arg = format!(" -javaagent:{mount}/javaagent.jar");
        if spec.java.as_ref().is_some_and(|j| !j.extensions.is_empty()) {
            arg.push_str(&format!(" -Dotel.javaagent.extensions={mount}/extensions"));
        }
        let value = match env.get(JAVA_TOOL_OPTIONS) {
            Some(EnvValue::Literal(v)) => format!("{v}{arg}"),
            _ => arg,
        };
        env.set_literal(JAVA_TOOL_OPTIONS, value);
    }
    fn copy_command(&self, _: &()) -> Vec<String> {
        vec![
            "cp".into(),
            "/javaagent.jar".into(),
            format!("{INIT_MOUNT}/javaagent.jar"),
        ]
    }
    /// One init container per extension, like the agent's own, copying into `extensions/`.
    fn more_init_containers(&self, spec: &InstrumentationSpec, init: &Container) -> Vec<Container> {
        let extensions = spec.java.iter().flat_map(|j| &j.extensions);
        extensions
            .enumerate()
            .map(|(i, ext)| Container {
                name: format!("opentelemetry-auto-instrumentation-extension-{i}"),
                image: Some(ext.image.clone()),
                command: Some(copy::copy_dir(
                    &ext.dir,
                    &format!("{INIT_MOUNT}/extensions"),
                )),
                ..init.clone()
            })
            .collect()
    }
}
