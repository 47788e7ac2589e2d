//! A language that exists only in unit tests. It is registered with one line in
//! `agents/mod.rs` and nothing else, to prove that this is all a new language needs: the
//! engine finds its annotation, targets its containers, runs it, and reports it in metrics.

use super::Agent;
use super::injection::{Effect, Injection};
use super::sdk_env::inject_common_env;
use crate::pod::env::literal;

/// The variable the demo agent sets.
pub const DEMO_VAR: &str = "DEMO_AGENT";

/// The demo injector: the common env plus one variable.
pub struct Demo;

impl Agent for Demo {
    fn inject(&self, cx: &mut Injection<'_, '_>) -> Effect {
        cx.each_target(|c, inst, _| {
            inject_common_env(&mut c.env, &inst.spec);
            c.env.append_if_absent(literal(DEMO_VAR, "on"));
        })
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Pod;
    use serde_json::json;

    use super::*;
    use crate::admission::mutate;
    use crate::agents::Language;
    use crate::cluster::StaticCatalog;
    use crate::engine::{EngineConfig, Snapshot};

    #[test]
    fn a_registry_line_is_all_a_new_language_needs() {
        let catalog = StaticCatalog::one("shop", "demo");
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "annotations": {
                "instrumentation.opentelemetry.io/inject-demo": "true",
                "instrumentation.opentelemetry.io/demo-container-names": "b"}},
            "spec": {"containers": [{"name": "a"}, {"name": "b"}]}
        }))
        .unwrap();
        let config = EngineConfig::default();
        assert!(config.enabled.contains(Language::Demo));
        assert_eq!("demo".parse::<Language>().unwrap(), Language::Demo);

        let (patch, report) = mutate(&Snapshot::take(&catalog, "shop", &config), &pod);
        assert_eq!(report.injected, [Language::Demo]);
        assert_eq!(report.injected[0].instrumentation, "shop/demo");
        assert!(report.warnings.is_empty(), "{:?}", report.warnings);
        let mut out = serde_json::to_value(&pod).unwrap();
        json_patch::patch(&mut out, &json_patch::Patch(patch)).unwrap();
        let env = &out["spec"]["containers"][1]["env"];
        let names: Vec<_> = env.as_array().unwrap().iter().map(|e| &e["name"]).collect();
        assert_eq!(names, ["OTEL_NODE_IP", "OTEL_POD_IP", DEMO_VAR]);
        assert!(out["spec"]["containers"][0].get("env").is_none());
        assert_eq!(
            out["metadata"]["annotations"]["otel-injector/injected"],
            "demo"
        );

        // Disabled like any other language.
        let mut off = EngineConfig::default();
        off.enabled.remove(Language::Demo);
        let (patch, report) = mutate(&Snapshot::take(&catalog, "shop", &off), &pod);
        assert_eq!(report.skipped[0].reason.as_str(), "language_disabled");
        // Only the outcome is recorded.
        assert_eq!(
            serde_json::to_value(&patch).unwrap(),
            json!([
                {"op": "add", "path": "/metadata/annotations/otel-injector~1status",
                    "value": "demo=skipped language_disabled shop/*"},
                {"op": "add", "path": "/metadata/labels",
                    "value": {"otel-injector/injected": "false"}}
            ])
        );
    }
}
