//! Node.js: an init container copies the SDK into a shared volume, and
//! `--require <mount>/autoinstrumentation.js` is appended to `NODE_OPTIONS` of every target.

use k8s_openapi::api::core::v1::VolumeMount;

use super::plan::{EnvValue, literal};
use super::{
    Agent, CopyAgent, Injection, Outcome, ResourceDefaults, value_from_origin, value_from_warning,
};
use crate::crd::{LanguageSpec, NodeJs as NodeJsSpec};
use crate::inject::lang::Language;

pub const NODE_OPTIONS: &str = "NODE_OPTIONS";
pub const OTEL_METRICS_EXPORTER: &str = "OTEL_METRICS_EXPORTER";
pub const INIT_CONTAINER: &str = "opentelemetry-auto-instrumentation-nodejs";
pub const VOLUME: &str = "opentelemetry-auto-instrumentation-nodejs";
pub const MOUNT: &str = "/otel-auto-instrumentation-nodejs";
pub const DEFAULT_IMAGE: &str =
    "ghcr.io/open-telemetry/opentelemetry-operator/autoinstrumentation-nodejs:0.78.0";
const AGENT: CopyAgent = CopyAgent {
    language: Language::NodeJs,
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

pub struct NodeJs;

impl Agent for NodeJs {
    fn language(&self) -> Language {
        Language::NodeJs
    }

    fn inject(&self, cx: &mut Injection<'_, '_>) -> Outcome {
        let default = NodeJsSpec::default();
        let nodejs = cx.inst.spec.nodejs.as_ref().unwrap_or(&default);
        let spec_env = cx.inst.spec.env.as_slice();
        let mut done = Vec::new();
        for &slot in cx.targets {
            let Some(c) = cx.plan.container(slot) else {
                continue;
            };
            let name = c.name();
            if let Some(origin) = value_from_origin(&c.env, &[nodejs.env(), spec_env], NODE_OPTIONS)
            {
                let msg = value_from_warning(Language::NodeJs, name, NODE_OPTIONS, origin);
                cx.warn(msg);
                continue;
            }
            c.mount(VolumeMount {
                name: VOLUME.into(),
                mount_path: MOUNT.into(),
                ..Default::default()
            });
            for e in nodejs.env() {
                c.env.append_if_absent(e.clone());
            }
            super::sdk::inject_common_env(&mut c.env, &cx.inst.spec);
            // The Operator's language defaults, after the common env so that spec.env wins.
            let arg = format!(" --require {MOUNT}/autoinstrumentation.js");
            let value = match c.env.get(NODE_OPTIONS) {
                Some(EnvValue::Literal(v)) => format!("{v}{arg}"),
                _ => arg,
            };
            c.env.set_literal(NODE_OPTIONS, value);
            // Without an exporter the Node.js SDK starts no metric reader (metrics are lost).
            let metrics = literal(OTEL_METRICS_EXPORTER, "otlp");
            c.env.append_if_absent(metrics);
            let app = c.container;
            super::sdk::inject_sdk_config(&mut c.env, cx.info, &cx.inst.spec, app);
            done.push(slot);
        }
        if done.is_empty() {
            return Outcome::NothingInstrumented;
        }

        let command = super::copy_dir("/autoinstrumentation", MOUNT);
        cx.add_copy_agent(&AGENT, nodejs, command, &done);
        Outcome::Injected(done.len())
    }
}
