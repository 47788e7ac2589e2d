//! Every annotation, label and prefix key the product reads or writes, and their fixed
//! values: public API, like the CRD. Spelled here only, documented here once, and used by
//! this name everywhere (`crate::keys::NAME`): `tests/engine/keys.rs` fails on a
//! re-export, on an import under another name and on a key spelled as a `const` anywhere
//! else. Each language's `inject-<lang>` and `<lang>-container-names` keys are made
//! by [`inject_key!`] and [`container_names_key!`] (the registry, `agents::Language::names`,
//! calls them; `concat!` needs literals, so they repeat the text of [`INJECT_PREFIX`] and
//! [`ANNOTATION_PREFIX`]).

/// `inject_key!("java")`: `instrumentation.opentelemetry.io/inject-java`, as a literal.
macro_rules! inject_key {
    ($name:literal) => {
        concat!("instrumentation.opentelemetry.io/inject-", $name)
    };
}
pub(crate) use inject_key;

/// `container_names_key!("java")`: `instrumentation.opentelemetry.io/java-container-names`,
/// as a literal (nginx's breaks the pattern: [`NGINX_CONTAINER_NAMES`]).
macro_rules! container_names_key {
    ($name:literal) => {
        concat!(
            "instrumentation.opentelemetry.io/",
            $name,
            "-container-names"
        )
    };
}
pub(crate) use container_names_key;

// The OpenTelemetry Operator's, read the same way.

/// The prefix of the injection keys on pods and namespaces (annotations, or labels).
pub const ANNOTATION_PREFIX: &str = "instrumentation.opentelemetry.io/";
/// The prefix of the per-language injection keys (`inject-java`, …).
pub const INJECT_PREFIX: &str = "instrumentation.opentelemetry.io/inject-";
/// Each language's injection key (the registry's, `Language::inject_annotation`, spelled
/// as a constant for code that names one language).
pub const INJECT_JAVA: &str = inject_key!("java");
pub const INJECT_NODEJS: &str = inject_key!("nodejs");
pub const INJECT_PYTHON: &str = inject_key!("python");
pub const INJECT_DOTNET: &str = inject_key!("dotnet");
pub const INJECT_GO: &str = inject_key!("go");
pub const INJECT_APACHE_HTTPD: &str = inject_key!("apache-httpd");
pub const INJECT_NGINX: &str = inject_key!("nginx");
pub const INJECT_SDK: &str = inject_key!("sdk");
/// The container list applied to every requested language.
pub const CONTAINER_NAMES: &str = "instrumentation.opentelemetry.io/container-names";
/// nginx's container list: it breaks the `<lang>-container-names` pattern, as in the Operator.
pub const NGINX_CONTAINER_NAMES: &str =
    "instrumentation.opentelemetry.io/inject-nginx-container-names";
/// The Go agent's target executable.
pub const GO_TARGET_EXE: &str = "instrumentation.opentelemetry.io/otel-go-auto-target-exe";
/// The .NET agent's runtime (`linux-x64`, `linux-musl-x64`).
pub const DOTNET_RUNTIME: &str = "instrumentation.opentelemetry.io/otel-dotnet-auto-runtime";
/// The Python agent's platform (`glibc`, `musl`).
pub const PYTHON_PLATFORM: &str = "instrumentation.opentelemetry.io/otel-python-platform";
/// On a v1beta1 Instrumentation: its v1alpha1-only fields (upstream's conversion carrier,
/// `crd::convert`).
pub const V1ALPHA1_FIELDS: &str = "instrumentation.opentelemetry.io/v1alpha1-fields";
/// The prefix of pod annotations that set resource attributes.
pub const RESOURCE_ANNOTATION_PREFIX: &str = "resource.opentelemetry.io/";
/// The resource attribute annotation that names the service (first in the service name's
/// chain).
pub const SERVICE_NAME_ANNOTATION: &str = "resource.opentelemetry.io/service.name";

// This project's.

/// On every pod the webhook changed; its value lists the injected languages. A pod that
/// carries it is never changed again (reinvocation, re-submission).
pub const INJECTED_ANNOTATION: &str = "otel-injector/injected";
/// On every pod that asked for injection: `true` when a language was injected, else `false`.
pub const INJECTED_LABEL: &str = "otel-injector/injected";
/// The outcome per requested language (grammar in `engine::outcome`).
pub const STATUS_ANNOTATION: &str = "otel-injector/status";
/// On a pod, pod template or namespace: [`OPT_OUT`] keeps the webhook away; `true` is what
/// the targeted variant's labeler keeps on namespaces that ask.
pub const OPT_OUT_LABEL: &str = "otel-injector/inject";
/// The opt-out value of [`OPT_OUT_LABEL`] and of [`ROLLOUT_ANNOTATION`].
pub const OPT_OUT: &str = "disabled";
/// On an Instrumentation: lets pods of other namespaces use it
/// (`--cross-namespace-references=opt-in`).
pub const CROSS_NAMESPACE_ANNOTATION: &str = "otel-injector/cross-namespace";
/// On an Instrumentation: the Instrumentation whose spec it is laid over (`name`, or
/// `namespace/name`), a shared base (`crd::base` has the merge rule).
pub const BASE_ANNOTATION: &str = "otel-injector/base";
/// On an Instrumentation: the pods it injects with no annotation of theirs (languages,
/// namespace and pod label selectors, containers; `crd::selector` has the form).
pub const SELECTOR_ANNOTATION: &str = "otel-injector/selector";
/// On a pod a selector asked for: per injected language, the Instrumentation whose selector
/// asked (`java=platform/java`, comma-separated, in the outcome's order).
pub const SELECTED_BY_ANNOTATION: &str = "otel-injector/selected-by";
/// On a pod: how its agents are delivered (`copy`, `image-volume`).
pub const DELIVERY_ANNOTATION: &str = "otel-injector/agent-delivery";
/// On an Instrumentation ([`AUTOMATIC`]) or a workload ([`OPT_OUT`]): the rollout.
pub const ROLLOUT_ANNOTATION: &str = "otel-injector/rollout";
/// The value of [`ROLLOUT_ANNOTATION`] that turns the automatic rollout on.
pub const AUTOMATIC: &str = "automatic";
/// On a workload's pod template (so on its pods): the languages rolled back after its pods
/// failed with them, each with the spec it failed with (`java=3f2a9c1b,python=...`). The
/// engine skips such a language (`rolled_back`) while the Instrumentation's spec is that
/// one; a changed spec is tried again.
pub const ROLLED_BACK_ANNOTATION: &str = "otel-injector/rolled-back";
/// On a workload itself (not its template, so it survives `kubectl rollout undo` and changes
/// no pod): the languages and specs the safety net has rolled it back from, in the grammar of
/// [`ROLLED_BACK_ANNOTATION`]. Read by every Lease holder, so a workload is rolled back once
/// per language and spec whoever holds the Lease and however often it restarts.
pub const ROLLBACK_TRIED_ANNOTATION: &str = "otel-injector/rollback-tried";
/// On an Instrumentation ([`ROLLBACK`]): what the Lease holder does when workloads fail with
/// its current spec.
pub const ON_FAILURE_ANNOTATION: &str = "otel-injector/on-failure";
/// The value of [`ON_FAILURE_ANNOTATION`] that rolls failing workloads back.
pub const ROLLBACK: &str = "rollback";
/// On a stored (v1alpha1) Instrumentation: its v1beta1-only fields and whether languages
/// without an image get the default one (`crd::convert`; the engine reads it).
pub const V1BETA1_FIELDS: &str = "otel-injector/v1beta1-fields";
/// On a pod: the rendered SDK configuration file of a declarative Instrumentation, projected
/// into the pod by a `downwardAPI` volume.
pub const CONFIG_FILE_ANNOTATION: &str = "otel-injector/sdk-config";
/// On the objects `otel-injector policy` renders: selects them all (`kubectl delete ... -l`,
/// `apply --prune`).
pub const POLICY_LABEL: &str = "otel-injector/policy";
/// On an injection policy: the Instrumentation it was rendered from, and its spec hash.
pub const INSTRUMENTATION_ANNOTATION: &str = "otel-injector/instrumentation";
pub const SPEC_HASH_ANNOTATION: &str = "otel-injector/spec-hash";
/// On an injection policy: the languages it injects, and why the others are left out.
pub const LANGUAGES_ANNOTATION: &str = "otel-injector/languages";
pub const NOT_COVERED_ANNOTATION: &str = "otel-injector/not-covered";
/// On the built-in certificate's Secret: the serving certificate's validity and hosts.
pub const SERVING_NOT_BEFORE: &str = "otel-injector.opentelemetry.io/serving-not-before";
pub const SERVING_NOT_AFTER: &str = "otel-injector.opentelemetry.io/serving-not-after";
pub const SERVING_HOSTS: &str = "otel-injector.opentelemetry.io/serving-hosts";

/// The namespaces the shipped webhook configuration (and the policies' bindings) exclude by
/// name: the defaults of every flag that leaves them alone.
pub const EXCLUDED_BY_NAME: [&str; 2] = ["kube-system", "otel-injector"];

// Kubernetes' and its tools'.

/// On static pods mirrored by the kubelet; they are never mutated.
pub const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";
/// A Deployment's ReplicaSet's pods carry their template's hash.
pub const POD_TEMPLATE_HASH: &str = "pod-template-hash";
/// A StatefulSet's (and DaemonSet's) pods carry their controller revision's name.
pub const CONTROLLER_REVISION_HASH: &str = "controller-revision-hash";
/// What `kubectl rollout restart` sets on a pod template.
pub const RESTARTED_AT: &str = "kubectl.kubernetes.io/restartedAt";
/// kubectl's copy of the last applied object.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";
/// The Pod Security Admission level a namespace enforces.
pub const POD_SECURITY_ENFORCE: &str = "pod-security.kubernetes.io/enforce";
/// The recommended labels the service name and version may come from.
pub const APP_INSTANCE: &str = "app.kubernetes.io/instance";
pub const APP_NAME: &str = "app.kubernetes.io/name";
pub const APP_VERSION: &str = "app.kubernetes.io/version";
/// On the objects this project creates (the built-in certificate's Secret).
pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prefixes_agree() {
        assert!(INJECT_PREFIX.starts_with(ANNOTATION_PREFIX));
        assert!(CONTAINER_NAMES.starts_with(ANNOTATION_PREFIX));
        assert!(SERVICE_NAME_ANNOTATION.starts_with(RESOURCE_ANNOTATION_PREFIX));
        assert_eq!(inject_key!("x"), format!("{INJECT_PREFIX}x"));
        assert_eq!(
            container_names_key!("x"),
            format!("{ANNOTATION_PREFIX}x-container-names")
        );
        assert_eq!(INJECTED_ANNOTATION, INJECTED_LABEL, "one key, on two maps");
    }
}
