//! `serve`'s live policies (`--apply-policies`).

use clap::{Args, ValueEnum};

use crate::engine::EngineConfig;
use crate::policy::live::LivePolicies;
use crate::policy::{Form, Mode, PolicyOptions};

/// Which policies the Lease holder keeps current.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum Apply {
    /// None: `otel-injector policy` renders them, whoever applies manifests applies them.
    #[default]
    Off,
    /// Those of `otel-injector policy --mode policy`.
    Policy,
    /// Those of `otel-injector policy --mode both`.
    Both,
}

#[derive(Debug, Args)]
#[command(next_help_heading = "Live policies")]
pub struct LivePolicyArgs {
    /// Keep policy mode's MutatingAdmissionPolicies current (docs/policy.md): the replica that
    /// holds the Lease renders them from its Instrumentation cache, as `otel-injector policy
    /// --mode MODE --cluster` would, whenever an Instrumentation or a namespace's injection
    /// keys change (and every minute); reading the namespaces, it gives an Instrumentation
    /// without a selector a policy per language, which only the pods with that language's key
    /// and those of the namespaces whose keys ask for it reach. It applies them (server-side apply, field manager otel-injector-policies) and deletes
    /// those named `<--policy-name-prefix>.…` it no longer renders, a deleted Instrumentation's
    /// among them: their bindings have no paramRef, so that deletion is what stops their
    /// injection. Needs get/list/create/
    /// patch/delete on the admission policies and their bindings and the Lease
    /// (manifests/components/live-policies): whoever holds that may mutate any object the API
    /// server admits. Cluster mode only. `off`: render them with the CLI.
    #[arg(long, env = "OTEL_INJECTOR_APPLY_POLICIES", value_enum, default_value_t = Apply::Off)]
    pub apply_policies: Apply,

    /// With --apply-policies: the first part of every object's name
    /// (`<prefix>.<namespace>.<instrumentation>.<language>`, `<prefix>.not-injected`, …); the
    /// objects it deletes are those of this prefix.
    #[arg(long, env = "OTEL_INJECTOR_POLICY_NAME_PREFIX", default_value = "otel-injector")]
    pub policy_name_prefix: String,

    /// With --apply-policies: bind only in namespaces with this label, as KEY=VALUE
    /// (repeatable: all of them; comma-separated in the env var). An Instrumentation of a
    /// namespace without them gets no policy until its namespace is labeled (unless shared
    /// with every namespace).
    #[arg(
        long,
        env = "OTEL_INJECTOR_POLICY_NAMESPACE_LABELS",
        value_name = "KEY=VALUE",
        value_delimiter = ',',
        value_parser = super::offline::label
    )]
    pub policy_namespace_label: Vec<(String, String)>,
}

impl LivePolicyArgs {
    /// The writer, when asked for; `config`: the engine's flags; `verify_exporter_tls`:
    /// the webhook's `--verify-exporter-tls`.
    pub fn build(&self, config: EngineConfig, verify_exporter_tls: bool) -> Option<LivePolicies> {
        let mode = match self.apply_policies {
            Apply::Off => return None,
            Apply::Policy => Mode::Policy,
            Apply::Both => Mode::Both,
        };
        Some(LivePolicies {
            config,
            options: PolicyOptions {
                mode,
                // Objects it can delete and write again (the manifest form is for files),
                // and deletes when their Instrumentation goes: no params.
                form: Form::Live,
                prefix: self.policy_name_prefix.clone(),
                namespace_labels: self.policy_namespace_label.clone(),
                verify_exporter_tls,
                // The watched namespaces, and a change of one renders again.
                namespaces_read: true,
            },
        })
    }
}
