//! Sdk injection. PLACEHOLDER: being implemented (issue 4); must not ship as is.

use super::{Agent, Injection, Outcome};
use crate::inject::lang::Language;

pub const DEFAULT_IMAGE: &str = "";

pub struct SdkOnly;

impl Agent for SdkOnly {
    fn language(&self) -> Language {
        Language::Sdk
    }

    fn inject(&self, _cx: &mut Injection<'_, '_>) -> Outcome {
        Outcome::NothingInstrumented
    }
}
