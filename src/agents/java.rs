//! Java: an init container copies the agent (and each extension) into a shared volume, and
//! `-javaagent:` is appended to `JAVA_TOOL_OPTIONS` of every target.

use k8s_openapi::api::core::v1::Container;

use super::copy::{self, AgentImage, CopyAgent, CopyLayout};
use super::image_tag::operator_release;
use super::injection::{Injection, Refusal};
use crate::crd::InstrumentationSpec;
use crate::pod::env::{EnvPlan, ValueExtension};

pub const JAVA_TOOL_OPTIONS: &str = "JAVA_TOOL_OPTIONS";
copy::copy_layout!("java", "50m", "64Mi");
pub const DEFAULT_IMAGE: &str =
    "ghcr.io/open-telemetry/opentelemetry-operator/autoinstrumentation-java:2.30.0";

/// Name of the init container (copy) or image volume (image volumes) of extension `i`.
const EXTENSION_PREFIX: &str = "opentelemetry-auto-instrumentation-extension-";

/// Where a target mounts extension `i` from its image volume.
fn extension_mount(mount: &str, i: usize) -> String {
    format!("{mount}-extension-{i}")
}

/// The Java agent injector.
pub struct Java;

/// The first Java agent that reads `OTEL_CONFIG_FILE` (stable since 2.26.0).
pub const FIRST_CONFIG_FILE_RELEASE: (u64, u64, u64) = (2, 26, 0);

impl CopyAgent for Java {
    type Variant = ();

    const LAYOUT: &'static CopyLayout = &LAYOUT;
    const EXTENDS: &'static [&'static str] = &[JAVA_TOOL_OPTIONS];

    fn predates_config_file<'i>(&self, image: &'i str) -> Option<&'i str> {
        let release = operator_release(image, "autoinstrumentation-java")?;
        (release.version < FIRST_CONFIG_FILE_RELEASE).then_some(release.tag)
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
    // Each container mounts the agent at its own path (as the Operator does), so a second
    // Java container never reads another's copy.
    fn target_mount(&self, container: &str) -> String {
        format!("{MOUNT}-{container}")
    }
    fn edit_env(
        &self,
        env: &mut EnvPlan<'_>,
        mount: &str,
        spec: &InstrumentationSpec,
        _: &(),
        image_volumes: bool,
    ) {
        let mut arg = format!(" -javaagent:{mount}/javaagent.jar");
        let count = spec.java.as_ref().map_or(0, |j| j.extensions.len());
        if count > 0 && image_volumes {
            // One image volume per extension, each listed.
            let paths: Vec<String> = (0..count).map(|i| extension_mount(mount, i)).collect();
            arg.push_str(&format!(" -Dotel.javaagent.extensions={}", paths.join(",")));
        } else if count > 0 {
            arg.push_str(&format!(" -Dotel.javaagent.extensions={mount}/extensions"));
        }
        env.extend(JAVA_TOOL_OPTIONS, ValueExtension::after(arg));
    }
    /// The agent's image, and one image per extension mounted beside it (an image volume is
    /// read-only, so nothing can be mounted inside it).
    fn images(
        &self,
        spec: &InstrumentationSpec,
        image: &str,
        mount: &str,
        _: &(),
    ) -> Vec<AgentImage> {
        let agent = AgentImage {
            volume: VOLUME.to_owned(),
            reference: image.to_owned(),
            mount_path: mount.to_owned(),
            sub_path: None,
        };
        let extensions = spec.java.iter().flat_map(|j| &j.extensions).enumerate();
        let extensions = extensions.map(|(i, ext)| AgentImage {
            volume: format!("{EXTENSION_PREFIX}{i}"),
            reference: ext.image.clone(),
            mount_path: extension_mount(mount, i),
            sub_path: Some(ext.dir.trim_matches('/').to_owned()).filter(|d| !d.is_empty()),
        });
        std::iter::once(agent).chain(extensions).collect()
    }
    fn copy_command(&self, _: &()) -> Vec<String> {
        vec![
            "cp".into(),
            "/javaagent.jar".into(),
            format!("{MOUNT}/javaagent.jar"),
        ]
    }
    /// One init container per extension, like the agent's own, copying into `extensions/`.
    fn more_init_containers(&self, spec: &InstrumentationSpec, init: &Container) -> Vec<Container> {
        let extensions = spec.java.iter().flat_map(|j| &j.extensions);
        extensions
            .enumerate()
            .map(|(i, ext)| Container {
                name: format!("{EXTENSION_PREFIX}{i}"),
                image: Some(ext.image.clone()),
                command: Some(copy::copy_dir(&ext.dir, &format!("{MOUNT}/extensions"))),
                ..init.clone()
            })
            .collect()
    }
}
