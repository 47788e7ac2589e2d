//! Agents delivered by an init container that copies their files into a shared volume
//! (Java, Node.js, Python, .NET): the per-container loop they share, the volume and the init
//! container. A copy agent supplies only its names and its own environment edit.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, EmptyDirVolumeSource, EphemeralVolumeSource, ImageVolumeSource,
    PersistentVolumeClaimTemplate, ResourceRequirements, SecurityContext, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::Agent;
use super::injection::{Effect, Injection, Refusal, value_from_origin, value_from_warning};
use super::sdk_env::{inject_common_env, inject_sdk_config};
use crate::crd::{Instrumentation, InstrumentationSpec, NoSection};
use crate::pod::env::EnvPlan;

/// Default `sizeLimit` of the agent's `emptyDir`.
pub const DEFAULT_VOLUME_SIZE: &str = "200Mi";

/// `copy_layout!("name", request_cpu, request_memory)`: a copy language's `INIT_CONTAINER`
/// and `VOLUME` (`opentelemetry-auto-instrumentation-<name>`, the Operator's), `MOUNT`
/// (`/otel-auto-instrumentation-<name>`) and its `LAYOUT` with the Operator's resources.
macro_rules! copy_layout {
    ($name:literal, $request_cpu:literal, $request_memory:literal) => {
        pub const INIT_CONTAINER: &str = concat!("opentelemetry-auto-instrumentation-", $name);
        pub const VOLUME: &str = INIT_CONTAINER;
        pub const MOUNT: &str = concat!("/otel-auto-instrumentation-", $name);
        const LAYOUT: $crate::agents::copy::CopyLayout = $crate::agents::copy::CopyLayout {
            init_container: INIT_CONTAINER,
            volume: VOLUME,
            mount: MOUNT,
            resources: $crate::agents::copy::ResourceDefaults::agent($request_cpu, $request_memory),
        };
    };
}
pub(super) use copy_layout;

/// Default resources of an agent's init container: the Operator's limits, the same for
/// every agent ([`LIMIT_CPU`], [`LIMIT_MEMORY`]), and the agent's own requests.
#[derive(Clone, Copy, Debug)]
pub struct ResourceDefaults {
    pub request_cpu: &'static str,
    pub request_memory: &'static str,
}

/// The CPU limit of every agent's init container, unless the Instrumentation sets limits.
pub const LIMIT_CPU: &str = "500m";
/// The memory limit of every agent's init container, unless the Instrumentation sets limits.
pub const LIMIT_MEMORY: &str = "256Mi";

impl ResourceDefaults {
    /// An agent's defaults: the common limits, and these requests.
    pub const fn agent(request_cpu: &'static str, request_memory: &'static str) -> Self {
        ResourceDefaults {
            request_cpu,
            request_memory,
        }
    }

    /// The Instrumentation's resources, with these defaults for whichever of limits and
    /// requests it leaves unset (as the Operator's defaulting does).
    pub fn or(self, given: Option<&ResourceRequirements>) -> ResourceRequirements {
        let pair = |cpu: &str, mem: &str| {
            BTreeMap::from([
                ("cpu".to_owned(), Quantity(cpu.to_owned())),
                ("memory".to_owned(), Quantity(mem.to_owned())),
            ])
        };
        let mut r = given.cloned().unwrap_or_default();
        if r.limits.as_ref().is_none_or(BTreeMap::is_empty) {
            r.limits = Some(pair(LIMIT_CPU, LIMIT_MEMORY));
        }
        if r.requests.as_ref().is_none_or(BTreeMap::is_empty) {
            r.requests = Some(pair(self.request_cpu, self.request_memory));
        }
        r
    }
}

/// The names a copy agent puts into the pod.
pub struct CopyLayout {
    pub init_container: &'static str,
    pub volume: &'static str,
    /// Where the init container mounts the volume (and, unless the agent says otherwise,
    /// where the targets mount it).
    pub mount: &'static str,
    pub resources: ResourceDefaults,
}

/// What one copy agent does differently; [`inject`] does the rest. Every copy agent is an
/// [`Agent`] through it.
pub trait CopyAgent: Sync {
    /// A per-pod choice read from annotations (Python's platform, .NET's runtime).
    type Variant;

    /// Its init container, volume, mount and default resources ([`copy_layout!`]).
    const LAYOUT: &'static CopyLayout;
    /// Variables the agent extends: a `valueFrom` on any of them skips the container.
    const EXTENDS: &'static [&'static str];
    /// Variables whose presence in a container (in any form) leaves it alone.
    const REFUSES: &'static [&'static str] = &[];
    /// The variant for this pod, or the warning that skips the language.
    fn variant(&self, cx: &Injection<'_, '_>) -> Result<Self::Variant, Refusal>;
    /// Whether the agent edits its variables before `spec.env` is merged (so `spec.env`
    /// cannot define them, as with the Operator's PYTHONPATH).
    fn edits_before_common_env(&self) -> bool {
        false
    }
    /// Where a target mounts the agent volume.
    fn target_mount(&self, _container: &str) -> String {
        Self::LAYOUT.mount.to_owned()
    }
    /// The agent's own environment edit of one target mounted at `mount`.
    /// `image_volumes`: the agent is mounted from its image instead of copied.
    fn edit_env(
        &self,
        env: &mut EnvPlan<'_>,
        mount: &str,
        spec: &InstrumentationSpec,
        variant: &Self::Variant,
        image_volumes: bool,
    );
    /// Variables set when absent after the common env, for agents that edit before it.
    fn after_common_env(&self, _env: &mut EnvPlan<'_>) {}
    /// The init container's command.
    fn copy_command(&self, variant: &Self::Variant) -> Vec<String>;
    /// Where the agent lives in its image (`None`: the image's root), for image volumes.
    fn image_sub_path(&self, _variant: &Self::Variant) -> Option<&'static str> {
        None
    }
    /// The image volumes a target mounts at `mount` (image-volume delivery): the agent's
    /// image, plus any the agent adds (Java's extensions).
    fn images(
        &self,
        _spec: &InstrumentationSpec,
        image: &str,
        mount: &str,
        variant: &Self::Variant,
    ) -> Vec<AgentImage> {
        vec![AgentImage {
            volume: Self::LAYOUT.volume.to_owned(),
            reference: image.to_owned(),
            mount_path: mount.to_owned(),
            sub_path: self.image_sub_path(variant).map(str::to_owned),
        }]
    }
    /// As [`Agent::predates_config_file`] (Java's knows the agents that cannot read the
    /// declarative configuration file).
    fn predates_config_file<'i>(&self, _image: &'i str) -> Option<&'i str> {
        None
    }
    /// After the agent instrumented the pod: anything more to say (a warning).
    fn injected(&self, _cx: &mut Injection<'_, '_>) {}
    /// Init containers placed right after the agent's own (Java's extensions).
    fn more_init_containers(
        &self,
        _spec: &InstrumentationSpec,
        _init: &Container,
    ) -> Vec<Container> {
        Vec::new()
    }
}

impl<A: CopyAgent> Agent for A {
    fn predates_config_file<'i>(&self, image: &'i str) -> Option<&'i str> {
        CopyAgent::predates_config_file(self, image)
    }
    fn inject(&self, cx: &mut Injection<'_, '_>) -> Effect {
        let effect = inject(self, cx);
        if let Effect::Injected(_) = effect {
            self.injected(cx);
        }
        effect
    }
}

/// An image mounted as a volume (image-volume delivery).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentImage {
    pub volume: String,
    pub reference: String,
    pub mount_path: String,
    /// The directory inside the image that is mounted.
    pub sub_path: Option<String>,
}

/// The per-container loop every copy agent shares: check, mount, language env, common env
/// and the agent's edit (in the agent's order), SDK config; then the volume and the init
/// container, once, if any target was instrumented.
fn inject<A: CopyAgent>(agent: &A, cx: &mut Injection<'_, '_>) -> Effect {
    let variant = match agent.variant(cx) {
        Ok(v) => v,
        Err(Refusal::Unsupported(warning)) => {
            cx.warn(warning);
            return Effect::NothingInstrumented;
        }
        Err(Refusal::Invalid(warning)) => {
            cx.warn(warning);
            return Effect::InvalidValue;
        }
    };
    let lang = cx.lang;
    let inst: &Instrumentation = cx.inst;
    let spec = &inst.spec;
    let section = lang.section(spec).unwrap_or(&NoSection);
    let before = agent.edits_before_common_env();
    let layers: &[&[_]] = if before {
        &[section.env()]
    } else {
        &[section.env(), spec.env.as_slice()]
    };
    let image = cx.image(lang);
    let image_volumes = cx.delivery.image_volumes;
    let mut mounted: Vec<AgentImage> = Vec::new();
    let mut done = Vec::new();
    'targets: for &slot in cx.targets {
        let Some(c) = cx.plan.container(slot) else {
            continue;
        };
        let name = c.name();
        for var in A::EXTENDS {
            if let Some(origin) = value_from_origin(&c.env, layers, var) {
                cx.warn(value_from_warning(lang, name, var, origin));
                continue 'targets;
            }
        }
        if let Some(var) = A::REFUSES.iter().find(|var| c.env.refuses(var)) {
            cx.warn(format!(
                "{lang}: container {name:?} already sets {var}; not instrumented"
            ));
            continue;
        }
        let mount = agent.target_mount(name);
        if image_volumes {
            // The same paths as a copy, so the environment is the same in both modes.
            for img in agent.images(spec, &image, &mount, &variant) {
                c.mount(VolumeMount {
                    name: img.volume.clone(),
                    mount_path: img.mount_path.clone(),
                    sub_path: img.sub_path.clone(),
                    read_only: Some(true),
                    ..Default::default()
                });
                if !mounted.iter().any(|m| m.volume == img.volume) {
                    mounted.push(img);
                }
            }
        } else {
            c.mount(VolumeMount {
                name: A::LAYOUT.volume.into(),
                mount_path: mount.clone(),
                ..Default::default()
            });
        }
        for e in section.env() {
            c.env.append_if_absent(e.clone());
        }
        if before {
            agent.edit_env(&mut c.env, &mount, spec, &variant, image_volumes);
            inject_common_env(&mut c.env, spec);
            agent.after_common_env(&mut c.env);
        } else {
            inject_common_env(&mut c.env, spec);
            agent.edit_env(&mut c.env, &mount, spec, &variant, image_volumes);
        }
        let app = c.container;
        inject_sdk_config(&mut c.env, cx.info, spec, app);
        done.push(slot);
    }
    if done.is_empty() {
        return Effect::NothingInstrumented;
    }

    if image_volumes {
        if section.volume_claim_template().is_some() || section.volume_limit_size().is_some() {
            cx.warn(format!(
                "{lang}: volumeClaimTemplate and volumeLimitSize do not apply to image volumes; ignored"
            ));
        }
        for img in mounted {
            cx.plan
                .add_volume(image_volume(img, spec.image_pull_policy.clone()));
        }
        return Effect::Injected(done.len());
    }
    let layout = A::LAYOUT;
    cx.plan.add_volume(agent_volume(
        layout.volume,
        section.volume_claim_template(),
        section.volume_limit_size(),
    ));
    let init = init_container(
        layout.init_container,
        cx.image(lang),
        agent.copy_command(&variant),
        layout,
        section.resources(),
        inst,
        cx.init_security_context(&done),
    );
    let at = cx.init_position(&done);
    let more = agent.more_init_containers(spec, &init);
    cx.plan.add_init_container(at, init);
    for c in more {
        cx.plan.add_init_container(at, c);
    }
    Effect::Injected(done.len())
}

/// An `image` volume of `img` (KEP-4639), pulled with the Instrumentation's policy.
fn image_volume(img: AgentImage, pull_policy: Option<String>) -> Volume {
    Volume {
        name: img.volume,
        image: Some(ImageVolumeSource {
            reference: Some(img.reference),
            pull_policy,
        }),
        ..Default::default()
    }
}

/// `cp -r <dir>/. <into>`: copies a directory's content, dotfiles included.
pub fn copy_dir(dir: &str, into: &str) -> Vec<String> {
    vec![
        "cp".into(),
        "-r".into(),
        format!("{}/.", dir.trim_end_matches('/')),
        into.into(),
    ]
}

/// The shared volume an agent is copied into: an ephemeral volume from the
/// `volumeClaimTemplate` when given, else an `emptyDir` with a size limit.
pub fn agent_volume(
    name: &str,
    claim: Option<&PersistentVolumeClaimTemplate>,
    size: Option<&Quantity>,
) -> Volume {
    if let Some(claim) = claim {
        return Volume {
            name: name.to_owned(),
            ephemeral: Some(EphemeralVolumeSource {
                volume_claim_template: Some(claim.clone()),
            }),
            ..Default::default()
        };
    }
    Volume {
        name: name.to_owned(),
        empty_dir: Some(EmptyDirVolumeSource {
            size_limit: Some(
                size.cloned()
                    .unwrap_or_else(|| Quantity(DEFAULT_VOLUME_SIZE.to_owned())),
            ),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The init container that copies agent files into the shared volume.
fn init_container(
    name: &str,
    image: String,
    command: Vec<String>,
    layout: &CopyLayout,
    resources: Option<&ResourceRequirements>,
    inst: &Instrumentation,
    security_context: Option<SecurityContext>,
) -> Container {
    Container {
        name: name.to_owned(),
        image: Some(image),
        command: Some(command),
        resources: Some(layout.resources.or(resources)),
        volume_mounts: Some(vec![VolumeMount {
            name: layout.volume.to_owned(),
            mount_path: layout.mount.to_owned(),
            ..Default::default()
        }]),
        image_pull_policy: inst.spec.image_pull_policy.clone(),
        security_context,
        ..Default::default()
    }
}
