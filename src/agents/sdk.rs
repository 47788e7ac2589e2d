//! SDK only (`inject-sdk`): no agent, no init container, no volume; each target gets the
//! common SDK configuration, for applications that bring their own OpenTelemetry SDK.

use super::Agent;
use super::injection::{Effect, Injection};
use super::sdk_env::{inject_common_env, inject_sdk_config};

/// The SDK-only injector.
pub struct SdkOnly;

impl Agent for SdkOnly {
    fn inject(&self, cx: &mut Injection<'_, '_>) -> Effect {
        cx.each_target(|c, inst, info| {
            inject_common_env(&mut c.env, &inst.spec);
            let app = c.container;
            inject_sdk_config(&mut c.env, info, &inst.spec, app);
        })
    }
}
