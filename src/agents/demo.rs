//! A language that exists only in unit tests. It is registered with one line in
//! `agents/mod.rs` and nothing else, to prove that this is all a new language needs: the
//! engine finds its annotation, targets its containers, runs it, and reports it in metrics.

use super::sdk_env::inject_common_env;
use super::{Agent, Injection, Language, Outcome};
use crate::pod::env::literal;

/// The variable the demo agent sets.
pub const DEMO_VAR: &str = "DEMO_AGENT";

/// The demo injector: the common env plus one variable.
pub struct Demo;

impl Agent for Demo {
    fn language(&self) -> Language {
        Language::Demo
    }
    fn name(&self) -> &'static str {
        "demo"
    }
    fn inject_annotation(&self) -> &'static str {
        "instrumentation.opentelemetry.io/inject-demo"
    }
    fn container_names_annotation(&self) -> &'static str {
        "instrumentation.opentelemetry.io/demo-container-names"
    }
    fn inject(&self, cx: &mut Injection<'_, '_>) -> Outcome {
        let mut count = 0;
        for &slot in cx.targets {
            if let Some(c) = cx.plan.container(slot) {
                inject_common_env(&mut c.env, &cx.inst.spec);
                c.env.append_if_absent(literal(DEMO_VAR, "on"));
                count += 1;
            }
        }
        if count == 0 {
            Outcome::NothingInstrumented
        } else {
            Outcome::Injected(count)
        }
    }
}
