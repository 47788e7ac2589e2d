//! What both versions of the `Instrumentation` kind share, written once: `instrumentation_kind!`
//! derives a version's `Instrumentation` from its spec struct with the one group, kind,
//! short names, status and status columns (`kubectl get otelinst`), and its `None` fields
//! left out when serialized, so the two versions cannot drift; each version names only its
//! own columns (where its exporter and sampler live).

/// `instrumentation_kind! { version = "v1beta1", columns = [...], <spec struct> }`: the spec
/// struct with `CustomResource` and the `#[kube]` attribute of the version: `Age`, the
/// version's `columns`, then the status counts.
macro_rules! instrumentation_kind {
    (
        version = $version:literal,
        columns = [$($column:literal),* $(,)?],
        $(#[$attr:meta])*
        pub struct $spec:ident { $($body:tt)* }
    ) => {
        #[::serde_with::skip_serializing_none]
        #[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
        #[kube(
            group = "opentelemetry.io",
            version = $version,
            kind = "Instrumentation",
            namespaced,
            shortname = "otelinst",
            shortname = "otelinsts",
            status = "InstrumentationStatus",
            derive = "PartialEq",
            derive = "Default",
            doc = "Instrumentation is the spec for OpenTelemetry instrumentation.",
            printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#,
            $(printcolumn = $column,)*
            printcolumn = r#"{"name": "Injected", "type": "integer", "jsonPath": ".status.injected", "description": "Pods injected with the current spec"}"#,
            printcolumn = r#"{"name": "Outdated", "type": "integer", "jsonPath": ".status.outdated", "description": "Pods injected with an earlier spec"}"#,
            printcolumn = r#"{"name": "Skipped", "type": "integer", "jsonPath": ".status.skipped", "description": "Pods that asked for it and were not injected"}"#,
            printcolumn = r#"{"name": "Missed", "type": "integer", "jsonPath": ".status.missed", "description": "Pods that asked for it and were admitted without the webhook"}"#,
            printcolumn = r#"{"name": "Failing", "type": "integer", "jsonPath": ".status.failing", "description": "Pods injected with the current spec that are failing (--detect-failures)"}"#,
            printcolumn = r#"{"name": "Rolled Back", "type": "string", "jsonPath": ".status.rolledBack[*].name", "description": "Workloads rolled back from the current spec (otel-injector/on-failure: rollback)"}"#
        )]
        $(#[$attr])*
        pub struct $spec { $($body)* }
    };
}
pub(super) use instrumentation_kind;
