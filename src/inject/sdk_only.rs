//! SDK only (`inject-sdk`): no agent, no init container, no volume; each target gets the
//! common SDK configuration, for applications that bring their own OpenTelemetry SDK.

use super::{Agent, Injection, Outcome};
use crate::inject::lang::Language;

/// The SDK-only injector.
pub struct SdkOnly;

impl Agent for SdkOnly {
    fn language(&self) -> Language {
        Language::Sdk
    }

    fn inject(&self, cx: &mut Injection<'_, '_>) -> Outcome {
        let mut count = 0;
        for &slot in cx.targets {
            let Some(c) = cx.plan.container(slot) else {
                continue;
            };
            super::sdk::inject_common_env(&mut c.env, &cx.inst.spec);
            let app = c.container;
            super::sdk::inject_sdk_config(&mut c.env, cx.info, &cx.inst.spec, app);
            count += 1;
        }
        if count == 0 {
            Outcome::NothingInstrumented
        } else {
            Outcome::Injected(count)
        }
    }
}
