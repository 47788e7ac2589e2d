//! Java: an init container copies the agent (and each extension) into a shared volume, and
//! `-javaagent:` is appended to `JAVA_TOOL_OPTIONS` of every target.

use k8s_openapi::api::core::v1::{Container, VolumeMount};

use super::plan::EnvValue;
use super::{
    Agent, CopyAgent, Injection, Outcome, ResourceDefaults, value_from_origin, value_from_warning,
};
use crate::crd::{Java as JavaSpec, LanguageSpec};
use crate::inject::lang::Language;

pub const JAVA_TOOL_OPTIONS: &str = "JAVA_TOOL_OPTIONS";
pub const INIT_CONTAINER: &str = "opentelemetry-auto-instrumentation-java";
pub const VOLUME: &str = "opentelemetry-auto-instrumentation-java";
const INIT_MOUNT: &str = "/otel-auto-instrumentation-java";
pub const DEFAULT_IMAGE: &str =
    "ghcr.io/open-telemetry/opentelemetry-operator/autoinstrumentation-java:2.30.0";
const AGENT: CopyAgent = CopyAgent {
    language: Language::Java,
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

        let command = vec![
            "cp".into(),
            "/javaagent.jar".into(),
            format!("{INIT_MOUNT}/javaagent.jar"),
        ];
        let (at, agent_init) = cx.add_copy_agent(&AGENT, java, command, &done);
        for (i, ext) in java.extensions.iter().enumerate() {
            let command = super::copy_dir(&ext.dir, &format!("{INIT_MOUNT}/extensions"));
            let init = Container {
                name: format!("opentelemetry-auto-instrumentation-extension-{i}"),
                image: Some(ext.image.clone()),
                command: Some(command),
                ..agent_init.clone()
            };
            cx.plan.add_init_container(at, init);
        }
        Outcome::Injected(done.len())
    }
}
