//! Nginx injection. PLACEHOLDER: being implemented (issue 4); must not ship as is.

use super::{Agent, Injection, Outcome};
use crate::inject::lang::Language;

pub const DEFAULT_IMAGE: &str =
    "ghcr.io/open-telemetry/opentelemetry-operator/autoinstrumentation-apache-httpd:1.0.4";

pub struct Nginx;

impl Agent for Nginx {
    fn language(&self) -> Language {
        Language::Nginx
    }

    fn inject(&self, _cx: &mut Injection<'_, '_>) -> Outcome {
        Outcome::NothingInstrumented
    }
}
