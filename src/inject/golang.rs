//! Go injection. PLACEHOLDER: being implemented (issue 4); must not ship as is.

use super::{Agent, Injection, Outcome};
use crate::inject::lang::Language;

pub const DEFAULT_IMAGE: &str =
    "ghcr.io/open-telemetry/opentelemetry-go-instrumentation/autoinstrumentation-go:v0.24.0";

pub struct Go;

impl Agent for Go {
    fn language(&self) -> Language {
        Language::Go
    }

    fn inject(&self, _cx: &mut Injection<'_, '_>) -> Outcome {
        Outcome::NothingInstrumented
    }
}
