//! The fixed reasons a pod that asked for a language did not get it: the values of the
//! `reason` metric label and of the outcome annotation's skipped entries.

impl crate::metrics::LabelValue for SkipReason {
    const ALL: &'static [Self] = &SkipReason::ALL;
    fn as_str(self) -> &'static str {
        SkipReason::as_str(self)
    }
    fn index(self) -> usize {
        self as usize
    }
}

/// Why a pod that asked for injection did not get (all of) it.
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
    NameCollision,
    PodTooLarge,
    InvalidValue,
    CrossNamespaceDenied,
    /// A v1beta1 Instrumentation names no image for the language (v1beta1 has no default).
    ImageRequired,
    /// A declarative Instrumentation and a language not in `--declarative-config-languages`.
    DeclarativeConfigUnsupported,
    /// Policy mode: no MutatingAdmissionPolicy covers the pod (and no webhook is installed).
    PolicyUnsupported,
    /// The workload was rolled back after failing with this spec (`otel-injector/rolled-back`).
    RolledBack,
    /// A declarative SDK configuration file over its own bound, or past what the pod's
    /// annotations may hold with it (`engine/bound.rs`).
    DeclarativeConfigTooLarge,
    /// A declarative Instrumentation and an agent image whose tag predates the agent's
    /// reading of `OTEL_CONFIG_FILE` (Java before 2.26.0).
    AgentPredatesConfigFile,
    /// The Instrumentation names a base (`otel-injector/base`) that is missing, unreadable,
    /// too deep, part of a cycle or not shared with its namespace.
    BaseUnresolved,
}

impl SkipReason {
    pub const ALL: [SkipReason; 22] = [
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
        SkipReason::NameCollision,
        SkipReason::PodTooLarge,
        SkipReason::InvalidValue,
        SkipReason::CrossNamespaceDenied,
        SkipReason::ImageRequired,
        SkipReason::DeclarativeConfigUnsupported,
        SkipReason::PolicyUnsupported,
        SkipReason::RolledBack,
        SkipReason::DeclarativeConfigTooLarge,
        SkipReason::AgentPredatesConfigFile,
        SkipReason::BaseUnresolved,
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
            SkipReason::NameCollision => "name_collision",
            SkipReason::PodTooLarge => "pod_too_large",
            SkipReason::InvalidValue => "invalid_value",
            SkipReason::CrossNamespaceDenied => "cross_namespace_denied",
            SkipReason::ImageRequired => "image_required",
            SkipReason::DeclarativeConfigUnsupported => "declarative_config_unsupported",
            SkipReason::PolicyUnsupported => "policy_unsupported",
            SkipReason::RolledBack => "rolled_back",
            SkipReason::DeclarativeConfigTooLarge => "declarative_config_too_large",
            SkipReason::AgentPredatesConfigFile => "agent_predates_config_file",
            SkipReason::BaseUnresolved => "base_unresolved",
        }
    }

    /// The reason whose label is `s` ([`SkipReason::as_str`]).
    pub fn from_label(s: &str) -> Option<SkipReason> {
        SkipReason::ALL.into_iter().find(|r| r.as_str() == s)
    }
}
