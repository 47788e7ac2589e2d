//! The decision engine: a pure function from (pod, namespace annotations, Instrumentation
//! catalog) to a patch and the warnings that explain it. It knows nothing of HTTP.

pub mod apache;
pub mod dotnet;
pub mod golang;
pub mod java;
pub mod lang;
pub mod nginx;
pub mod nodejs;
pub mod plan;
pub mod python;
pub mod sdk;
pub mod sdk_only;
pub mod select;
pub mod webserver;

use std::collections::BTreeMap;
use std::sync::Arc;

use json_patch::PatchOperation;
use k8s_openapi::api::core::v1::{
    Container, EmptyDirVolumeSource, EnvVar, EphemeralVolumeSource, PersistentVolumeClaimTemplate,
    Pod, ResourceRequirements, SecurityContext, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

pub use lang::{Language, LanguageSet};
use plan::{EnvPlan, EnvValue, InitPosition, PodPlan, Slot};
use sdk::PodInfo;
use select::{Annotations, Request, TargetError};

use crate::crd::{Instrumentation, LanguageSpec};

/// Annotation the webhook puts on every pod it changed; its value lists the injected
/// languages. A pod that carries it is never changed again (reinvocation, re-submission).
pub const INJECTED_ANNOTATION: &str = "otel-injector/injected";
/// Static pods mirrored by the kubelet carry this; they are never mutated.
pub const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";
/// Default `sizeLimit` of the agent's `emptyDir`.
pub const DEFAULT_VOLUME_SIZE: &str = "200Mi";
/// Warnings longer than this are cut (clients truncate long ones anyway).
pub const MAX_WARNING_LEN: usize = 120;

/// Where the engine looks Instrumentations and namespaces up: an in-memory cache, never
/// the API server.
pub trait Catalog {
    /// Whether the cache has synced; before that no decision is made.
    fn ready(&self) -> bool;
    /// One Instrumentation by namespace and name.
    fn instrumentation(&self, namespace: &str, name: &str) -> Option<Arc<Instrumentation>>;
    /// All Instrumentations of a namespace.
    fn instrumentations_in(&self, namespace: &str) -> Vec<Arc<Instrumentation>>;
    /// The annotations of a namespace, when namespaces are watched.
    fn namespace_annotations(&self, namespace: &str) -> Option<Arc<BTreeMap<String, String>>>;
    /// The Pod Security Admission level a namespace enforces
    /// (`pod-security.kubernetes.io/enforce`), when namespaces are watched.
    fn pod_security_enforce(&self, _namespace: &str) -> Option<String> {
        None
    }
    /// Why an Instrumentation that exists could not be read, if that is the case.
    fn unreadable(&self, _namespace: &str, _name: &str) -> Option<String> {
        None
    }
    /// Whether a Secret or ConfigMap exists; `None` when the catalog does not track them.
    fn object_exists(&self, _kind: ObjectKind, _namespace: &str, _name: &str) -> Option<bool> {
        None
    }
}

/// Objects an Instrumentation can reference from the pod's namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObjectKind {
    Secret,
    ConfigMap,
}

impl ObjectKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ObjectKind::Secret => "Secret",
            ObjectKind::ConfigMap => "ConfigMap",
        }
    }
}

/// Default agent images, per language (overridable by flags).
#[derive(Clone, Debug)]
pub struct DefaultImages {
    images: BTreeMap<Language, String>,
}

impl Default for DefaultImages {
    fn default() -> Self {
        let images = [
            (Language::Java, java::DEFAULT_IMAGE),
            (Language::NodeJs, nodejs::DEFAULT_IMAGE),
            (Language::Python, python::DEFAULT_IMAGE),
            (Language::DotNet, dotnet::DEFAULT_IMAGE),
            (Language::Go, golang::DEFAULT_IMAGE),
            (Language::ApacheHttpd, apache::DEFAULT_IMAGE),
            (Language::Nginx, nginx::DEFAULT_IMAGE),
        ]
        .into_iter()
        .map(|(l, i)| (l, i.to_owned()))
        .collect();
        DefaultImages { images }
    }
}

impl DefaultImages {
    pub fn get(&self, l: Language) -> &str {
        self.images.get(&l).map(String::as_str).unwrap_or("")
    }

    pub fn set(&mut self, l: Language, image: String) {
        self.images.insert(l, image);
    }
}

/// Engine settings that come from the command line.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    pub enabled: LanguageSet,
    pub images: DefaultImages,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            enabled: LanguageSet::all(),
            images: DefaultImages::default(),
        }
    }
}

/// Why a pod that asked for injection did not get (all of) it. A fixed set: these are
/// the values of the `reason` metric label.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SkipReason {
    CacheNotReady,
    NoInstrumentation,
    MultipleInstrumentations,
    InstrumentationNotFound,
    InstrumentationInvalid,
    InvalidContainerNames,
    LanguageDisabled,
    PodSecurity,
    ExporterTlsMissing,
    NothingInstrumented,
    NoContainers,
}

impl SkipReason {
    pub const ALL: [SkipReason; 11] = [
        SkipReason::CacheNotReady,
        SkipReason::NoInstrumentation,
        SkipReason::MultipleInstrumentations,
        SkipReason::InstrumentationNotFound,
        SkipReason::InstrumentationInvalid,
        SkipReason::InvalidContainerNames,
        SkipReason::LanguageDisabled,
        SkipReason::PodSecurity,
        SkipReason::ExporterTlsMissing,
        SkipReason::NothingInstrumented,
        SkipReason::NoContainers,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            SkipReason::CacheNotReady => "cache_not_ready",
            SkipReason::NoInstrumentation => "no_instrumentation",
            SkipReason::MultipleInstrumentations => "multiple_instrumentations",
            SkipReason::InstrumentationNotFound => "instrumentation_not_found",
            SkipReason::InstrumentationInvalid => "instrumentation_invalid",
            SkipReason::InvalidContainerNames => "invalid_container_names",
            SkipReason::LanguageDisabled => "language_disabled",
            SkipReason::PodSecurity => "pod_security",
            SkipReason::ExporterTlsMissing => "exporter_tls_missing",
            SkipReason::NothingInstrumented => "nothing_instrumented",
            SkipReason::NoContainers => "no_containers",
        }
    }
}

/// A language (or the whole pod, when `language` is `None`) that was not injected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skip {
    pub language: Option<Language>,
    pub reason: SkipReason,
}

/// The engine's answer for one pod.
#[derive(Debug, Default)]
pub struct Decision {
    /// JSON-patch operations; empty when the pod is admitted unchanged.
    pub patch: Vec<PatchOperation>,
    /// Short messages for the client, each at most [`MAX_WARNING_LEN`] characters.
    pub warnings: Vec<String>,
    /// Languages injected.
    pub injected: Vec<Language>,
    /// Languages requested but not injected, with the reason.
    pub skipped: Vec<Skip>,
    /// Whether the pod (or its namespace) asked for any injection.
    pub requested: bool,
    /// Whether the pod had been injected already (by this webhook).
    pub already_injected: bool,
}

impl Decision {
    fn warn(&mut self, msg: String) {
        self.warnings.push(shorten(msg));
    }

    fn skip(&mut self, language: Option<Language>, reason: SkipReason, msg: String) {
        self.skipped.push(Skip { language, reason });
        self.warn(msg);
    }
}

/// Cuts a warning to [`MAX_WARNING_LEN`] characters on a character boundary.
pub fn shorten(mut msg: String) -> String {
    if msg.chars().count() > MAX_WARNING_LEN {
        let cut = msg
            .char_indices()
            .nth(MAX_WARNING_LEN - 1)
            .map_or(msg.len(), |(i, _)| i);
        msg.truncate(cut);
        msg.push('…');
    }
    msg
}

/// What an agent did.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// This many containers were instrumented.
    Injected(usize),
    /// Every target was skipped (each with its own warning).
    NothingInstrumented,
}

/// Everything an agent needs to inject one language.
pub struct Injection<'p, 'a> {
    pub plan: &'p mut PodPlan<'a>,
    pub info: &'p PodInfo<'a>,
    pub inst: &'p Instrumentation,
    pub targets: &'p [Slot],
    pub config: &'p EngineConfig,
    pub annotations: &'p Annotations<'a>,
    warnings: &'p mut Vec<String>,
}

impl Injection<'_, '_> {
    pub fn warn(&mut self, msg: String) {
        self.warnings.push(shorten(msg));
    }

    /// Agent init containers go before the first targeted init container (which needs the
    /// agent files when it runs), or after all init containers.
    pub fn init_position(&self, instrumented: &[Slot]) -> InitPosition {
        instrumented
            .iter()
            .filter_map(|s| match s {
                Slot::Init(i) => Some(InitPosition::Before(*i)),
                Slot::App(_) => None,
            })
            .min()
            .unwrap_or(InitPosition::End)
    }

    /// `spec.initContainerSecurityContext`, else the first instrumented container's, so that
    /// pods under a restricted policy stay admissible.
    pub fn init_security_context(&self, instrumented: &[Slot]) -> Option<SecurityContext> {
        self.inst
            .spec
            .init_container_security_context
            .clone()
            .or_else(|| {
                instrumented
                    .first()
                    .and_then(|s| self.plan.original(*s))
                    .and_then(|c| c.security_context.clone())
            })
    }
}

/// Where a variable that the agent must extend gets a `valueFrom` (which the webhook can
/// neither read nor extend), if it does once the env layers are merged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueFromOrigin {
    /// The container itself (or an agent that ran before).
    Container,
    /// `spec.<lang>.env` or `spec.env` of the Instrumentation.
    Instrumentation,
}

/// Whether `name` will be set with `valueFrom` once `layers` (language env, then `spec.env`)
/// are merged into `env` with append-if-absent: the container's own definition always wins,
/// else the first layer that defines it.
pub fn value_from_origin(
    env: &EnvPlan<'_>,
    layers: &[&[EnvVar]],
    name: &str,
) -> Option<ValueFromOrigin> {
    match env.get(name) {
        Some(EnvValue::ValueFrom) => Some(ValueFromOrigin::Container),
        Some(EnvValue::Literal(_)) => None,
        None => layers
            .iter()
            .find_map(|layer| layer.iter().find(|e| e.name == name))
            .filter(|e| e.value_from.is_some())
            .map(|_| ValueFromOrigin::Instrumentation),
    }
}

/// The warning for a target skipped because `var` comes from `valueFrom`.
pub fn value_from_warning(
    lang: Language,
    container: &str,
    var: &str,
    origin: ValueFromOrigin,
) -> String {
    match origin {
        ValueFromOrigin::Container => {
            format!("{lang}: container {container:?} sets {var} with valueFrom; not instrumented")
        }
        ValueFromOrigin::Instrumentation => format!(
            "{lang}: Instrumentation sets {var} with valueFrom; container {container:?} not instrumented"
        ),
    }
}

/// The Node.js injector.
/// `cp -r <dir>/. <into>`: copies a directory's content, dotfiles included.
pub fn copy_dir(dir: &str, into: &str) -> Vec<String> {
    vec![
        "cp".into(),
        "-r".into(),
        format!("{}/.", dir.trim_end_matches('/')),
        into.into(),
    ]
}

/// An agent delivered by an init container that copies its files into a shared volume
/// (Java, Node.js, Python, .NET).
pub struct CopyAgent {
    pub language: Language,
    pub init_container: &'static str,
    pub volume: &'static str,
    /// Where the init container mounts the volume.
    pub mount: &'static str,
    pub resources: ResourceDefaults,
}

impl Injection<'_, '_> {
    /// Adds the agent's volume and its init container running `command`, placed before the
    /// first instrumented init container (or after all of them). Returns the position and
    /// the init container, for agents that add more init containers like it.
    pub fn add_copy_agent(
        &mut self,
        agent: &CopyAgent,
        spec: &dyn LanguageSpec,
        command: Vec<String>,
        instrumented: &[Slot],
    ) -> (InitPosition, Container) {
        self.plan.add_volume(agent_volume(
            agent.volume,
            spec.volume_claim_template(),
            spec.volume_limit_size(),
        ));
        let image = spec
            .image()
            .unwrap_or_else(|| self.config.images.get(agent.language))
            .to_owned();
        let init = init_container(
            agent.init_container,
            image,
            command,
            agent.volume,
            agent.mount,
            &agent.resources.or(spec.resources()),
            self.inst,
            self.init_security_context(instrumented),
        );
        let at = self.init_position(instrumented);
        self.plan.add_init_container(at, init.clone());
        (at, init)
    }
}

/// One language's injection logic. Agents only add to the plan; the engine owns selection,
/// validation and the patch.
pub trait Agent: Sync {
    fn language(&self) -> Language;
    /// Whether init containers can be targets.
    fn supports_init_targets(&self) -> bool {
        true
    }
    /// Whether the agent needs privileges that Pod Security `baseline` and `restricted`
    /// forbid (the Go agent: privileged, hostPath).
    fn needs_privileges(&self) -> bool {
        false
    }
    fn inject(&self, cx: &mut Injection<'_, '_>) -> Outcome;
}

/// The agent for a language.
pub fn agent(l: Language) -> &'static dyn Agent {
    match l {
        Language::Java => &java::Java,
        Language::NodeJs => &nodejs::NodeJs,
        Language::Python => &python::Python,
        Language::DotNet => &dotnet::DotNet,
        Language::Go => &golang::Go,
        Language::ApacheHttpd => &apache::ApacheHttpd,
        Language::Nginx => &nginx::Nginx,
        Language::Sdk => &sdk_only::SdkOnly,
    }
}

/// A Secret or ConfigMap named by `spec.exporter.tls` that the catalog knows is missing
/// from the pod's namespace. The pod could not start with its volume mounted, so that
/// language is not injected (as the Operator does), and the warning says why.
fn missing_tls_reference(
    catalog: &dyn Catalog,
    namespace: &str,
    inst: &Instrumentation,
) -> Option<(ObjectKind, String)> {
    let tls = sdk::ExporterTls::of(&inst.spec)?;
    let refs = [
        (ObjectKind::Secret, tls.secret()),
        (ObjectKind::ConfigMap, tls.config_map()),
    ];
    refs.into_iter().find_map(|(kind, name)| {
        let name = name?;
        (catalog.object_exists(kind, namespace, name) == Some(false))
            .then(|| (kind, name.to_owned()))
    })
}

/// Default resources of an agent's init container.
#[derive(Clone, Copy, Debug)]
pub struct ResourceDefaults {
    pub limit_cpu: &'static str,
    pub limit_memory: &'static str,
    pub request_cpu: &'static str,
    pub request_memory: &'static str,
}

impl ResourceDefaults {
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
            r.limits = Some(pair(self.limit_cpu, self.limit_memory));
        }
        if r.requests.as_ref().is_none_or(BTreeMap::is_empty) {
            r.requests = Some(pair(self.request_cpu, self.request_memory));
        }
        r
    }
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

/// An init container that copies agent files into the shared volume.
#[allow(clippy::too_many_arguments)]
pub fn init_container(
    name: &str,
    image: String,
    command: Vec<String>,
    volume: &str,
    mount_path: &str,
    resources: &ResourceRequirements,
    inst: &Instrumentation,
    security_context: Option<SecurityContext>,
) -> Container {
    Container {
        name: name.to_owned(),
        image: Some(image),
        command: Some(command),
        resources: Some(resources.clone()),
        volume_mounts: Some(vec![VolumeMount {
            name: volume.to_owned(),
            mount_path: mount_path.to_owned(),
            ..Default::default()
        }]),
        image_pull_policy: inst.spec.image_pull_policy.clone(),
        security_context,
        ..Default::default()
    }
}

fn qualified(inst: &Instrumentation) -> String {
    format!(
        "{}/{}",
        inst.metadata.namespace.as_deref().unwrap_or(""),
        inst.metadata.name.as_deref().unwrap_or("")
    )
}

fn by_name(
    catalog: &dyn Catalog,
    key: &str,
    ns: &str,
    name: &str,
) -> Result<Arc<Instrumentation>, (SkipReason, String)> {
    if let Some(i) = catalog.instrumentation(ns, name) {
        return Ok(i);
    }
    Err(match catalog.unreadable(ns, name) {
        Some(e) => (
            SkipReason::InstrumentationInvalid,
            format!("{key}: Instrumentation \"{ns}/{name}\" cannot be read ({e}); not injected"),
        ),
        None => (
            SkipReason::InstrumentationNotFound,
            format!("{key}: Instrumentation \"{ns}/{name}\" not found; not injected"),
        ),
    })
}

/// Finds the Instrumentation a request names.
fn resolve(
    catalog: &dyn Catalog,
    namespace: &str,
    request: &Request<'_>,
    lang: Language,
) -> Result<Arc<Instrumentation>, (SkipReason, String)> {
    let key = format!("inject-{lang}");
    match *request {
        Request::No => Err((SkipReason::NoInstrumentation, String::new())),
        Request::Default => {
            let mut all = catalog.instrumentations_in(namespace);
            match all.len() {
                1 => Ok(all.remove(0)),
                0 => Err((
                    SkipReason::NoInstrumentation,
                    format!("{key}: no Instrumentation in namespace {namespace:?}; not injected"),
                )),
                n => Err((
                    SkipReason::MultipleInstrumentations,
                    format!(
                        "{key}: {n} Instrumentations in namespace {namespace:?}; name one instead of \"true\""
                    ),
                )),
            }
        }
        Request::Named(name) => by_name(catalog, &key, namespace, name),
        Request::Qualified {
            namespace: ns,
            name,
        } => by_name(catalog, &key, ns, name),
    }
}

/// Containers the OpenTelemetry Operator adds. A pod carrying one was injected before this
/// webhook ran (during a migration both may be installed): never inject it twice.
const OPERATOR_INIT_CONTAINERS: [&str; 7] = [
    "opentelemetry-auto-instrumentation-java",
    "opentelemetry-auto-instrumentation-nodejs",
    "opentelemetry-auto-instrumentation-python",
    "opentelemetry-auto-instrumentation-dotnet",
    "otel-agent-attach-apache",
    "otel-agent-attach-nginx",
    "otel-agent-source-container-clone",
];
const OPERATOR_SIDECAR: &str = "opentelemetry-auto-instrumentation";

fn injected_by_operator(pod: &Pod) -> bool {
    let Some(spec) = pod.spec.as_ref() else {
        return false;
    };
    spec.init_containers
        .iter()
        .flatten()
        .any(|c| OPERATOR_INIT_CONTAINERS.contains(&c.name.as_str()))
        || spec.containers.iter().any(|c| c.name == OPERATOR_SIDECAR)
}

/// Mounts the exporter TLS files into every target the agent changed (the SDK variables
/// point into these mounts), and adds their volumes once.
fn mount_exporter_tls(plan: &mut PodPlan<'_>, slots: &[Slot], inst: &Instrumentation) {
    let Some(tls) = sdk::ExporterTls::of(&inst.spec) else {
        return;
    };
    let volumes = tls.volumes();
    if volumes.is_empty() {
        return;
    }
    for &slot in slots {
        if let Some(c) = plan.container(slot).filter(|c| c.is_changed()) {
            for (_, m) in &volumes {
                c.mount(m.clone());
            }
        }
    }
    for (v, _) in volumes {
        plan.add_volume(v);
    }
}

/// Decides what to inject into `pod`, created in `namespace`.
pub fn decide(
    pod: &Pod,
    namespace: &str,
    catalog: &dyn Catalog,
    config: &EngineConfig,
) -> Decision {
    let mut d = Decision::default();
    let pod_annotations = pod.metadata.annotations.as_ref();
    if pod_annotations.is_some_and(|a| a.contains_key(MIRROR_ANNOTATION)) {
        return d;
    }
    let ns_annotations = catalog.namespace_annotations(namespace);
    let annotations = Annotations::new(pod, ns_annotations.as_deref());

    let requests: Vec<(Language, Request<'_>)> = Language::ALL
        .into_iter()
        .map(|l| (l, Request::parse(annotations.get(l.inject_annotation()))))
        .filter(|(_, r)| *r != Request::No)
        .collect();
    // Before the namespace store has synced, only the pod's own annotations are seen.
    if requests.is_empty() {
        return d;
    }
    d.requested = true;

    if pod_annotations.is_some_and(|a| a.contains_key(INJECTED_ANNOTATION))
        || injected_by_operator(pod)
    {
        d.already_injected = true;
        return d;
    }
    if !catalog.ready() {
        d.skip(
            None,
            SkipReason::CacheNotReady,
            "otel-injector: Instrumentation cache not synced yet; pod admitted without injection"
                .into(),
        );
        return d;
    }
    let has_containers = pod.spec.as_ref().is_some_and(|s| !s.containers.is_empty());
    if !has_containers {
        d.skip(
            None,
            SkipReason::NoContainers,
            "otel-injector: pod has no containers; not injected".into(),
        );
        return d;
    }

    // Languages this webhook does not inject are reported and take no part in targeting.
    let mut requests = requests;
    requests.retain(|(lang, _)| {
        let enabled = config.enabled.contains(*lang);
        if !enabled {
            d.skip(
                Some(*lang),
                SkipReason::LanguageDisabled,
                format!("inject-{lang}: {lang} injection is disabled on this webhook"),
            );
        }
        enabled
    });

    // Container targeting: the common list applies to every language, each language's own
    // list is added to it. Several languages need explicit lists for each of them.
    let common = select::split_names(annotations.get(select::CONTAINER_NAMES));
    let mut lists: Vec<(Language, &Request<'_>, Vec<&str>)> = requests
        .iter()
        .map(|(l, r)| {
            let mut names = common.clone();
            names.extend(select::split_names(
                annotations.get(l.container_names_annotation()),
            ));
            (*l, r, names)
        })
        .collect();
    if lists.len() > 1 {
        let with = lists.iter().filter(|(_, _, n)| !n.is_empty()).count();
        if with != lists.len() {
            let msg = if with == 0 {
                "otel-injector: several languages requested; set <lang>-container-names for each"
            } else {
                "otel-injector: some requested languages have container names and some not; set them for all"
            };
            d.skip(None, SkipReason::InvalidContainerNames, msg.into());
            return d;
        }
    }
    let mut targets = Vec::with_capacity(lists.len());
    for (l, r, names) in lists.drain(..) {
        match select::resolve_targets(pod, &names) {
            Ok(t) => targets.push((l, r, t)),
            Err(e) => {
                let from_common = match &e {
                    TargetError::Unknown(n) | TargetError::Duplicate(n) => {
                        common.contains(&n.as_str())
                    }
                    TargetError::Empty => common.contains(&""),
                };
                let key = if from_common {
                    select::CONTAINER_NAMES
                        .trim_start_matches(lang::ANNOTATION_PREFIX)
                        .to_owned()
                } else {
                    l.container_names_annotation()
                        .trim_start_matches(lang::ANNOTATION_PREFIX)
                        .to_owned()
                };
                let reason = SkipReason::InvalidContainerNames;
                d.skip(Some(l), reason, format!("{key}: {e}; pod not injected"));
                // As the Operator does, a bad list leaves the whole pod unchanged.
                return d;
            }
        }
    }

    let info = PodInfo::new(pod, namespace);
    let mut plan = PodPlan::new(pod);
    for (lang, request, slots) in targets {
        let agent = agent(lang);
        if agent.needs_privileges()
            && let Some(level) = catalog
                .pod_security_enforce(namespace)
                .filter(|l| l == "baseline" || l == "restricted")
        {
            d.skip(
                Some(lang),
                SkipReason::PodSecurity,
                format!(
                    "inject-{lang}: namespace enforces Pod Security {level:?}, which rejects the privileged {lang} agent; not injected"
                ),
            );
            continue;
        }
        let inst = match resolve(catalog, namespace, request, lang) {
            Ok(i) => i,
            Err((reason, msg)) => {
                d.skip(Some(lang), reason, msg);
                continue;
            }
        };
        if let Some((kind, name)) = missing_tls_reference(catalog, namespace, &inst) {
            d.skip(
                Some(lang),
                SkipReason::ExporterTlsMissing,
                format!(
                    "inject-{lang}: exporter TLS {} {name:?} not found in namespace {namespace:?}; not injected",
                    kind.as_str()
                ),
            );
            continue;
        }
        let slots: Vec<Slot> = if agent.supports_init_targets() {
            slots
        } else {
            let (inits, apps): (Vec<_>, Vec<_>) =
                slots.into_iter().partition(|s| matches!(s, Slot::Init(_)));
            for s in inits {
                if let Some(c) = plan.original(s) {
                    d.warn(format!(
                        "{lang}: init container {:?} cannot be instrumented; skipped",
                        c.name
                    ));
                }
            }
            apps
        };
        let mut warnings = Vec::new();
        let outcome = agent.inject(&mut Injection {
            plan: &mut plan,
            info: &info,
            inst: &inst,
            targets: &slots,
            config,
            annotations: &annotations,
            warnings: &mut warnings,
        });
        d.warnings.extend(warnings);
        match outcome {
            Outcome::Injected(_) => {
                mount_exporter_tls(&mut plan, &slots, &inst);
                d.injected.push(lang);
            }
            Outcome::NothingInstrumented => d.skipped.push(Skip {
                language: Some(lang),
                reason: SkipReason::NothingInstrumented,
            }),
        }
        tracing::debug!(language = %lang, instrumentation = %qualified(&inst), ?outcome, "agent ran");
    }

    if !d.injected.is_empty() {
        let value = d
            .injected
            .iter()
            .map(|l| l.as_str())
            .collect::<Vec<_>>()
            .join(",");
        plan.new_annotations
            .insert(INJECTED_ANNOTATION.to_owned(), value);
        d.patch = crate::patch::build(&plan);
    }
    d
}
