//! What to change so that a skipped language is injected: one line per skip reason.

use crate::engine::SkipReason;

/// What to change so that a skipped language is injected.
pub fn fix(reason: SkipReason) -> &'static str {
    match reason {
        SkipReason::CacheNotReady => "wait for the webhook's caches to sync",
        SkipReason::NoInstrumentation => {
            "create an Instrumentation in the pod's namespace (offline: --instrumentation-file), or name one as ns/name in the annotation"
        }
        SkipReason::MultipleInstrumentations => {
            "name the Instrumentation in the annotation instead of \"true\""
        }
        SkipReason::InstrumentationNotFound => {
            "create that Instrumentation, or correct the name in the annotation"
        }
        SkipReason::InstrumentationInvalid => {
            "correct the Instrumentation as the message says (`otel-injector crd` prints its schema)"
        }
        SkipReason::InvalidContainerNames => {
            "name existing containers, each once; with several languages, set <lang>-container-names for each"
        }
        SkipReason::LanguageDisabled => "add the language to --enabled-languages",
        SkipReason::PodSecurity => {
            "run the workload in a namespace whose Pod Security level allows privileged pods"
        }
        SkipReason::ExporterTlsMissing => {
            "create the Secret or ConfigMap that spec.exporter.tls names, in the pod's namespace"
        }
        SkipReason::NothingInstrumented => {
            "see the warnings: no targeted container could be instrumented"
        }
        SkipReason::NoContainers => "give the pod at least one container",
        SkipReason::RolledBack => {
            "find out why it failed (status.rolledBack, the Warning Event, the container's last termination), then remove the otel-injector/rolled-back annotation from the workload's pod template, or change the Instrumentation: either tries again"
        }
        SkipReason::PolicyUnsupported => {
            "install the webhook too (policy mode both): it serves the pods no policy covers (docs/policy.md)"
        }
        SkipReason::NameCollision => {
            "rename the pod's container, volume or variable that uses the agent's name"
        }
        SkipReason::PodTooLarge => "instrument fewer containers, or raise --max-pod-bytes",
        SkipReason::DeclarativeConfigTooLarge => {
            "shrink the Instrumentation's spec.declarativeConfig (its rendered file may take 64 KiB), or the pod's own annotations (all of them and the file together may take the 256 KiB Kubernetes allows)"
        }
        SkipReason::InvalidValue => "correct the value the message names",
        SkipReason::CrossNamespaceDenied => {
            "annotate the Instrumentation otel-injector/cross-namespace: \"allowed\", use one in the pod's namespace, or change --cross-namespace-references"
        }
        SkipReason::ImageRequired => {
            "set spec.<language>.image in the v1beta1 Instrumentation (v1beta1 has no default image)"
        }
        SkipReason::DeclarativeConfigUnsupported => {
            "use an envConfig Instrumentation for this language, or add it to --declarative-config-languages if its agent reads OTEL_CONFIG_FILE"
        }
        SkipReason::BaseUnresolved => {
            "create the base the message names, or correct (or remove) the Instrumentation's otel-injector/base annotation; a base in another namespace must be shared with it (otel-injector/cross-namespace)"
        }
        SkipReason::AgentPredatesConfigFile => {
            "use an agent image that reads OTEL_CONFIG_FILE (Java 2.26.0 or later: spec.java.image, or --agent-image when the Instrumentation names none), or an envConfig Instrumentation"
        }
    }
}
