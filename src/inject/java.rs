//! Java: an init container copies the agent (and each extension) into a shared volume, and
//! `-javaagent:` is appended to `JAVA_TOOL_OPTIONS` of every target.

use k8s_openapi::api::core::v1::VolumeMount;

use super::plan::EnvValue;
use super::{
    Agent, Injection, Outcome, ResourceDefaults, agent_volume, init_container, value_from_origin,
    value_from_warning,
};
use crate::crd::{Java as JavaSpec, LanguageSpec};
use crate::inject::lang::Language;

pub const JAVA_TOOL_OPTIONS: &str = "JAVA_TOOL_OPTIONS";
pub const INIT_CONTAINER: &str = "opentelemetry-auto-instrumentation-java";
pub const VOLUME: &str = "opentelemetry-auto-instrumentation-java";
const INIT_MOUNT: &str = "/otel-auto-instrumentation-java";
pub const DEFAULT_IMAGE: &str =
    "ghcr.io/open-telemetry/opentelemetry-operator/autoinstrumentation-java:2.30.0";
const RESOURCES: ResourceDefaults = ResourceDefaults {
    limit_cpu: "500m",
    limit_memory: "256Mi",
    request_cpu: "50m",
    request_memory: "64Mi",
};

/// The Java agent injector.
pub struct Java;

impl Agent for Java {
    fn language(&self) -> Language {
        Language::Java
    }

    fn inject(&self, cx: &mut Injection<'_, '_>) -> Outcome {
        let default = JavaSpec::default();
        let java = cx.inst.spec.java.as_ref().unwrap_or(&default);
        let spec_env = cx.inst.spec.env.as_slice();
        let mut done = Vec::new();
        for &slot in cx.targets {
            let Some(c) = cx.plan.container(slot) else {
                continue;
            };
            let name = c.name();
            if let Some(origin) =
                value_from_origin(&c.env, &[java.env(), spec_env], JAVA_TOOL_OPTIONS)
            {
                let msg = value_from_warning(Language::Java, name, JAVA_TOOL_OPTIONS, origin);
                cx.warn(msg);
                continue;
            }
            // Each container mounts the agent at its own path (as the Operator does), so a
            // second Java container never reads another's copy.
            let mount = format!("{INIT_MOUNT}-{name}");
            c.mount(VolumeMount {
                name: VOLUME.into(),
                mount_path: mount.clone(),
                ..Default::default()
            });
            for e in java.env() {
                c.env.append_if_absent(e.clone());
            }
            super::sdk::inject_common_env(&mut c.env, &cx.inst.spec);
            let mut arg = format!(" -javaagent:{mount}/javaagent.jar");
            if !java.extensions.is_empty() {
                arg.push_str(&format!(" -Dotel.javaagent.extensions={mount}/extensions"));
            }
            let value = match c.env.get(JAVA_TOOL_OPTIONS) {
                Some(EnvValue::Literal(v)) => format!("{v}{arg}"),
                _ => arg,
            };
            c.env.set_literal(JAVA_TOOL_OPTIONS, value);
            let app = c.container;
            super::sdk::inject_sdk_config(&mut c.env, cx.info, &cx.inst.spec, app);
            done.push(slot);
        }
        if done.is_empty() {
            return Outcome::NothingInstrumented;
        }

        cx.plan.add_volume(agent_volume(
            VOLUME,
            java.volume_claim_template(),
            java.volume_limit_size(),
        ));
        let at = cx.init_position(&done);
        let resources = RESOURCES.or(java.resources());
        let image = java
            .image()
            .unwrap_or_else(|| cx.config.images.get(Language::Java))
            .to_owned();
        let security = cx.init_security_context(&done);
        let mut inits = vec![init_container(
            INIT_CONTAINER,
            image,
            vec![
                "cp".into(),
                "/javaagent.jar".into(),
                format!("{INIT_MOUNT}/javaagent.jar"),
            ],
            VOLUME,
            INIT_MOUNT,
            &resources,
            cx.inst,
            security.clone(),
        )];
        for (i, ext) in java.extensions.iter().enumerate() {
            inits.push(init_container(
                &format!("opentelemetry-auto-instrumentation-extension-{i}"),
                ext.image.clone(),
                vec![
                    "cp".into(),
                    "-r".into(),
                    format!("{}/.", ext.dir.trim_end_matches('/')),
                    format!("{INIT_MOUNT}/extensions"),
                ],
                VOLUME,
                INIT_MOUNT,
                &resources,
                cx.inst,
                security.clone(),
            ));
        }
        for c in inits {
            cx.plan.add_init_container(at, c);
        }
        Outcome::Injected(done.len())
    }
}
