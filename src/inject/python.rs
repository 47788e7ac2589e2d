//! Python injection. PLACEHOLDER: being implemented (issue 4); must not ship as is.

use super::{Agent, Injection, Outcome};
use crate::inject::lang::Language;

pub const DEFAULT_IMAGE: &str =
    "ghcr.io/open-telemetry/opentelemetry-operator/autoinstrumentation-python:0.64b0";

pub struct Python;

impl Agent for Python {
    fn language(&self) -> Language {
        Language::Python
    }

    fn inject(&self, _cx: &mut Injection<'_, '_>) -> Outcome {
        Outcome::NothingInstrumented
    }
}
