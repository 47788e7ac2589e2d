//! Go: eBPF auto-instrumentation runs in a privileged sidecar that shares the pod's process
//! namespace and attaches to the target binary (`OTEL_GO_AUTO_TARGET_EXE`). The app container
//! is not changed; the sidecar gets the env, computed for the app container.

use k8s_openapi::api::core::v1::{
    Container, HostPathVolumeSource, SecurityContext, Volume, VolumeMount,
};

use super::copy::ResourceDefaults;
use super::exporter_tls::ExporterTlsFiles;
use super::injection::{Effect, Injection};
use super::sdk_env::{inject_common_env, inject_sdk_config};
use super::{Agent, Language};
use crate::crd::{GoSpec, LanguageSpec};
use crate::keys::{CONTAINER_NAMES, GO_TARGET_EXE};
use crate::pod::env::{EnvPlan, literal};
use crate::pod::plan::InitPosition;
use crate::pod::select::split_names;

pub const DEFAULT_IMAGE: &str =
    "ghcr.io/open-telemetry/opentelemetry-go-instrumentation/autoinstrumentation-go:v0.24.0";
/// The sidecar's name (the Operator's; it also marks a pod as injected for the Operator).
pub const SIDECAR: &str = "opentelemetry-auto-instrumentation";
/// The sidecar's variable naming the binary to instrument.
pub const OTEL_GO_AUTO_TARGET_EXE: &str = "OTEL_GO_AUTO_TARGET_EXE";
/// hostPath volume the eBPF programs need.
pub const KERNEL_DEBUG_VOLUME: &str = "kernel-debug";
pub const KERNEL_DEBUG_PATH: &str = "/sys/kernel/debug";
const RESOURCES: ResourceDefaults = ResourceDefaults::agent("50m", "64Mi");

/// The Go injector.
pub struct Go;

impl Agent for Go {
    fn supports_init_targets(&self) -> bool {
        false
    }

    fn needs_privileges(&self) -> bool {
        true
    }

    fn inject(&self, cx: &mut Injection<'_, '_>) -> Effect {
        let default = GoSpec::default();
        let (inst, info) = (cx.inst, cx.info);
        let go = inst.spec.go.as_deref().unwrap_or(&default);
        let pod: &k8s_openapi::api::core::v1::Pod = cx.plan.pod;
        let pod_spec = pod.spec.as_ref();
        if pod_spec.and_then(|s| s.share_process_namespace) == Some(false) {
            cx.warn(
                "go: pod sets shareProcessNamespace: false, which the Go sidecar needs; not injected"
                    .into(),
            );
            return Effect::NothingInstrumented;
        }
        // Counted before init containers are filtered out, as the Operator counts names.
        let named = split_names(cx.annotations.get(CONTAINER_NAMES)).len()
            + split_names(
                cx.annotations
                    .get(Language::Go.container_names_annotation()),
            )
            .len();
        if named > 1 || cx.targets.len() > 1 {
            cx.warn(format!(
                "go: {} containers named; Go instruments one container per pod; not injected",
                named.max(cx.targets.len())
            ));
            return Effect::NothingInstrumented;
        }
        // Empty when the only named container was an init container (already warned).
        let Some(app) = cx.targets.first().and_then(|&s| cx.plan.original(s)) else {
            return Effect::NothingInstrumented;
        };
        // The sidecar's env, in the Operator's order: the target (annotation first, so it
        // beats go.env), go.env, the common env, then the SDK config of the app container.
        let mut env = EnvPlan::new(&[]);
        if let Some(exe) = cx
            .annotations
            .pod(GO_TARGET_EXE)
            .filter(|v| !v.trim().is_empty())
        {
            env.append_if_absent(literal(OTEL_GO_AUTO_TARGET_EXE, exe));
        }
        for e in go.env() {
            env.append_if_absent(e.clone());
        }
        inject_common_env(&mut env, &inst.spec);
        inject_sdk_config(&mut env, info, &inst.spec, app);
        if !env.contains(OTEL_GO_AUTO_TARGET_EXE) {
            cx.warn(format!(
                "go: {OTEL_GO_AUTO_TARGET_EXE} not set (annotation otel-go-auto-target-exe or go.env); \
                 not injected"
            ));
            return Effect::NothingInstrumented;
        }

        let security = go
            .security_context
            .as_deref()
            .cloned()
            .unwrap_or(SecurityContext {
                privileged: Some(true),
                run_as_user: Some(0),
                ..Default::default()
            });
        let image = cx.image(Language::Go);
        let mut mounts = vec![VolumeMount {
            name: KERNEL_DEBUG_VOLUME.to_owned(),
            mount_path: KERNEL_DEBUG_PATH.to_owned(),
            ..Default::default()
        }];
        // The exporter's TLS files are read by the agent, so they go on the sidecar.
        let tls_volumes = ExporterTlsFiles::of(&inst.spec)
            .map(|t| t.volumes())
            .unwrap_or_default();
        for (volume, mount) in tls_volumes {
            mounts.push(mount);
            cx.plan.add_volume(volume);
        }
        let sidecar = Container {
            name: SIDECAR.to_owned(),
            image: Some(image),
            env: Some(env.to_vec()),
            resources: Some(RESOURCES.or(go.resources())),
            security_context: Some(security),
            volume_mounts: Some(mounts),
            image_pull_policy: inst.spec.image_pull_policy.clone(),
            ..Default::default()
        };
        if cx.delivery.native_sidecar {
            // A native sidecar: starts before the app containers and stops after them.
            let native = Container {
                restart_policy: Some("Always".to_owned()),
                ..sidecar
            };
            cx.plan.add_init_container(InitPosition::End, native);
        } else {
            cx.plan.new_containers.push(sidecar);
        }
        cx.plan.add_volume(Volume {
            name: KERNEL_DEBUG_VOLUME.to_owned(),
            host_path: Some(HostPathVolumeSource {
                path: KERNEL_DEBUG_PATH.to_owned(),
                type_: None,
            }),
            ..Default::default()
        });
        cx.plan.share_process_namespace = true;
        Effect::Injected(1)
    }
}
