//! Every annotation and label the engine reads, where it reads it and what for: the list the
//! policy corpus is generated from (`e2e/tests/policy/keys.rs`), so that a key the engine
//! starts to read is tried against the policies too. `tests/engine/keys_read.rs` checks that
//! every key of [`crate::keys`] the engine, the agents and the pod model name is listed here
//! (or written, never read).

use crate::agents::Language;
use crate::keys::{
    APP_INSTANCE, APP_NAME, APP_VERSION, BASE_ANNOTATION, CONTAINER_NAMES,
    CROSS_NAMESPACE_ANNOTATION, DELIVERY_ANNOTATION, DOTNET_RUNTIME, GO_TARGET_EXE,
    INJECTED_ANNOTATION, MIRROR_ANNOTATION, POD_SECURITY_ENFORCE, POD_TEMPLATE_HASH,
    PYTHON_PLATFORM, RESOURCE_ANNOTATION_PREFIX, ROLLED_BACK_ANNOTATION, SELECTOR_ANNOTATION,
};

/// Where a key is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadOn {
    /// An injection key: the pod's label, else the pod's annotation, each over the
    /// namespace's (`pod::select::effective`).
    InjectionKey,
    /// The pod's label, else its annotation.
    Pod,
    /// The pod's annotation.
    PodAnnotation,
    /// The pod's label.
    PodLabel,
    /// The namespace's label.
    NamespaceLabel,
    /// The Instrumentation's annotation.
    Instrumentation,
}

/// What the engine does with a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyUse {
    /// A language's request: `"true"`, a name, `ns/name`, `"false"`.
    Request(Language),
    /// The containers every requested language targets.
    Containers,
    /// The containers one language targets.
    LanguageContainers(Language),
    /// Chooses a variant of the language's agent (Python's platform, .NET's runtime) or its
    /// target (Go's executable).
    Variant(Language),
    /// A resource attribute: the key is the prefix, `<prefix><attribute>` on the pod.
    ResourceAttribute,
    /// The service name, instance or version from the `app.kubernetes.io` labels.
    ServiceLabel,
    /// With an owner reference, the Deployment's name (the ReplicaSet's minus this hash).
    OwnerHash,
    /// Injected before (by this project or the Operator): left alone.
    InjectedBefore,
    /// A mirror (static) pod: left alone.
    Mirror,
    /// The safety net's marker: a language rolled back from one spec.
    RolledBack,
    /// The namespace's Pod Security level, which the Go sidecar's privileges must meet.
    PodSecurity,
    /// How an Instrumentation's agents are delivered (init container or image volume).
    Delivery,
    /// Whether an Instrumentation may be named from other namespaces.
    CrossNamespace,
    /// The Instrumentation's shared base, whose spec it is laid over.
    Base,
    /// The Instrumentation's selector: the pods it injects with no key of theirs.
    Selector,
}

/// One key the engine reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyRead {
    pub key: String,
    pub on: ReadOn,
    pub role: KeyUse,
}

/// Every key the engine reads, each language's keys from the registry.
pub fn keys_read() -> Vec<KeyRead> {
    let key = |key: &str, on, role| KeyRead {
        key: key.to_owned(),
        on,
        role,
    };
    let mut all = Vec::new();
    for &lang in Language::ALL {
        all.push(key(
            lang.inject_annotation(),
            ReadOn::InjectionKey,
            KeyUse::Request(lang),
        ));
        all.push(key(
            lang.container_names_annotation(),
            ReadOn::InjectionKey,
            KeyUse::LanguageContainers(lang),
        ));
    }
    all.extend([
        key(CONTAINER_NAMES, ReadOn::InjectionKey, KeyUse::Containers),
        key(
            PYTHON_PLATFORM,
            ReadOn::InjectionKey,
            KeyUse::Variant(Language::Python),
        ),
        key(
            DOTNET_RUNTIME,
            ReadOn::InjectionKey,
            KeyUse::Variant(Language::DotNet),
        ),
        key(GO_TARGET_EXE, ReadOn::Pod, KeyUse::Variant(Language::Go)),
        key(
            RESOURCE_ANNOTATION_PREFIX,
            ReadOn::PodAnnotation,
            KeyUse::ResourceAttribute,
        ),
        key(APP_NAME, ReadOn::PodLabel, KeyUse::ServiceLabel),
        key(APP_INSTANCE, ReadOn::PodLabel, KeyUse::ServiceLabel),
        key(APP_VERSION, ReadOn::PodLabel, KeyUse::ServiceLabel),
        key(POD_TEMPLATE_HASH, ReadOn::PodLabel, KeyUse::OwnerHash),
        key(
            INJECTED_ANNOTATION,
            ReadOn::PodAnnotation,
            KeyUse::InjectedBefore,
        ),
        key(MIRROR_ANNOTATION, ReadOn::PodAnnotation, KeyUse::Mirror),
        key(
            ROLLED_BACK_ANNOTATION,
            ReadOn::PodAnnotation,
            KeyUse::RolledBack,
        ),
        key(
            POD_SECURITY_ENFORCE,
            ReadOn::NamespaceLabel,
            KeyUse::PodSecurity,
        ),
        key(
            DELIVERY_ANNOTATION,
            ReadOn::Instrumentation,
            KeyUse::Delivery,
        ),
        key(
            CROSS_NAMESPACE_ANNOTATION,
            ReadOn::Instrumentation,
            KeyUse::CrossNamespace,
        ),
        key(BASE_ANNOTATION, ReadOn::Instrumentation, KeyUse::Base),
        key(
            SELECTOR_ANNOTATION,
            ReadOn::Instrumentation,
            KeyUse::Selector,
        ),
    ]);
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_key_is_listed_once_with_every_language() {
        let all = keys_read();
        let mut keys: Vec<&str> = all.iter().map(|k| k.key.as_str()).collect();
        keys.sort_unstable();
        let n = keys.len();
        keys.dedup();
        assert_eq!(keys.len(), n, "a key listed twice");
        for &lang in Language::ALL {
            assert!(
                all.iter().any(|k| k.role == KeyUse::Request(lang)),
                "{lang}"
            );
        }
        assert_eq!(n, 2 * Language::ALL.len() + 17);
    }
}
