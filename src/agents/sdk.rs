//! SDK only (`inject-sdk`): no agent, no init container, no volume; each target gets the
//! common SDK configuration, for applications that bring their own OpenTelemetry SDK.

use super::injection::{Effect, Injection};
use super::sdk_env::{inject_common_env, inject_sdk_config};
use super::{Agent, identity};

/// The SDK-only injector.
pub struct SdkOnly;

impl Agent for SdkOnly {
    identity!(Sdk, "sdk");

    fn inject(&self, cx: &mut Injection<'_, '_>) -> Effect {
        let mut count = 0;
        for &slot in cx.targets {
            let Some(c) = cx.plan.container(slot) else {
                continue;
            };
            inject_common_env(&mut c.env, &cx.inst.spec);
            let app = c.container;
            inject_sdk_config(&mut c.env, cx.info, &cx.inst.spec, app);
            count += 1;
        }
        if count == 0 {
            Effect::NothingInstrumented
        } else {
            Effect::Injected(count)
        }
    }
}
