//! Node.js: an init container copies the SDK into a shared volume, and
//! `--require <mount>/autoinstrumentation.js` is appended to `NODE_OPTIONS` of every target.

use k8s_openapi::api::core::v1::{EnvVar, VolumeMount};

use super::plan::{EnvPlan, EnvValue, literal};
use super::{Agent, Injection, Outcome, ResourceDefaults, agent_volume, init_container};
use crate::crd::{LanguageSpec, NodeJs as NodeJsSpec};
use crate::inject::lang::Language;

pub const NODE_OPTIONS: &str = "NODE_OPTIONS";
pub const OTEL_METRICS_EXPORTER: &str = "OTEL_METRICS_EXPORTER";
pub const INIT_CONTAINER: &str = "opentelemetry-auto-instrumentation-nodejs";
pub const VOLUME: &str = "opentelemetry-auto-instrumentation-nodejs";
pub const MOUNT: &str = "/otel-auto-instrumentation-nodejs";
pub const DEFAULT_IMAGE: &str =
    "ghcr.io/open-telemetry/opentelemetry-operator/autoinstrumentation-nodejs:0.78.0";
const RESOURCES: ResourceDefaults = ResourceDefaults {
    limit_cpu: "500m",
    limit_memory: "256Mi",
    request_cpu: "50m",
    request_memory: "128Mi",
};

/// Where a variable that the agent must extend gets a `valueFrom` (which the webhook can
/// neither read nor extend), if it does once the env layers are merged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ValueFromOrigin {
    /// The container itself (or an agent that ran before).
    Container,
    /// `spec.<lang>.env` or `spec.env` of the Instrumentation.
    Instrumentation,
}

/// Whether `name` will be set with `valueFrom` once `layers` (language env, then `spec.env`)
/// are merged into `env` with append-if-absent: the container's own definition always wins,
/// else the first layer that defines it.
pub(crate) fn value_from_origin(
    env: &EnvPlan<'_>,
    layers: &[&[EnvVar]],
    name: &str,
) -> Option<ValueFromOrigin> {
    match env.get(name) {
        Some(EnvValue::ValueFrom) => Some(ValueFromOrigin::Container),
        Some(EnvValue::Literal(_)) => None,
        None => layers
            .iter()
            .find_map(|layer| layer.iter().find(|e| e.name == name))
            .filter(|e| e.value_from.is_some())
            .map(|_| ValueFromOrigin::Instrumentation),
    }
}

/// The warning for a target skipped because `var` comes from `valueFrom`.
pub(crate) fn value_from_warning(
    lang: Language,
    container: &str,
    var: &str,
    origin: ValueFromOrigin,
) -> String {
    match origin {
        ValueFromOrigin::Container => {
            format!("{lang}: container {container:?} sets {var} with valueFrom; not instrumented")
        }
        ValueFromOrigin::Instrumentation => format!(
            "{lang}: Instrumentation sets {var} with valueFrom; container {container:?} not instrumented"
        ),
    }
}

/// The Node.js injector.
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
            if let Some(origin) =
                value_from_origin(&c.env, &[nodejs.env(), spec_env], NODE_OPTIONS)
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
            // The Node.js SDK starts no metric reader without an exporter: metrics would be lost.
            c.env.append_if_absent(literal(OTEL_METRICS_EXPORTER, "otlp"));
            let app = c.container;
            super::sdk::inject_sdk_config(&mut c.env, cx.info, &cx.inst.spec, app);
            done.push(slot);
        }
        if done.is_empty() {
            return Outcome::NothingInstrumented;
        }

        cx.plan.add_volume(agent_volume(
            VOLUME,
            nodejs.volume_claim_template(),
            nodejs.volume_limit_size(),
        ));
        let image = nodejs
            .image()
            .unwrap_or_else(|| cx.config.images.get(Language::NodeJs))
            .to_owned();
        let init = init_container(
            INIT_CONTAINER,
            image,
            vec![
                "cp".into(),
                "-r".into(),
                "/autoinstrumentation/.".into(),
                MOUNT.into(),
            ],
            VOLUME,
            MOUNT,
            &RESOURCES.or(nodejs.resources()),
            cx.inst,
            cx.init_security_context(&done),
        );
        let at = cx.init_position(&done);
        cx.plan.add_init_container(at, init);
        Outcome::Injected(done.len())
    }
}
