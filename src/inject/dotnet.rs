//! DotNet injection. PLACEHOLDER: being implemented (issue 4); must not ship as is.

use super::{Agent, Injection, Outcome};
use crate::inject::lang::Language;

pub const DEFAULT_IMAGE: &str =
    "ghcr.io/open-telemetry/opentelemetry-operator/autoinstrumentation-dotnet:1.16.0";

pub struct DotNet;

impl Agent for DotNet {
    fn language(&self) -> Language {
        Language::DotNet
    }

    fn inject(&self, _cx: &mut Injection<'_, '_>) -> Outcome {
        Outcome::NothingInstrumented
    }
}
