//! The test oracle of [`super::notes`] and [`super::init`]: what a template takes of the pod,
//! learnt as it was before the agents noted their edits, by probing the engine once per
//! variable (set as a literal, with `valueFrom`, and empty for an extended one), with a
//! container that has a security context and the fields a clone takes, and with mounts at and
//! below each template path, and diffing what it did. The notes must say the same, which the
//! policy tests compare over Instrumentations and languages.

mod init;
mod user;

use serde_json::{Value, json};

use super::{
    Appended, Kind, NotCovered, Template, check_appended, decide_seeing, name_of, probe_config,
    probe_pod,
};
use crate::agents::sdk_env::{OTEL_RESOURCE_ATTRIBUTES, OTEL_SERVICE_NAME};
use crate::cluster::StaticCatalog;
use crate::crd::Instrumentation;
use crate::engine::{EngineConfig, SkipReason};
use user::{VariableEffect, empty_value, mark_kept_out, merged_at_the_end, user_variable};

/// `typed` with its env part learnt by probing, and the extended variables an empty value
/// of which could not be replayed.
pub fn probed(
    typed: &Template,
    config: &EngineConfig,
) -> Result<(Template, Vec<String>), NotCovered> {
    let inst = &typed.instrumentation;
    let (lang, variant) = (typed.language, typed.variant);
    let ns = inst.metadata.namespace.clone().unwrap_or_default();
    let catalog = StaticCatalog::new([Instrumentation::clone(inst)]).with_namespace(&ns, &[]);
    let config = probe_config(config);
    let decided = |env: Value| decide(&catalog, &config, &ns, &probe_pod(inst, lang, variant, env));
    let run = |env: Value| decided(env).ok();
    let bare = probe_pod(inst, lang, variant, json!([]));
    let injected = run(json!([])).ok_or("the webhook injects nothing")?;
    // The bare probe with the container's `fields` added (and the volumes its mounts name).
    let with_fields = |fields: &Value| {
        let mut pod = bare.clone();
        for (k, v) in fields.as_object().into_iter().flatten() {
            pod["spec"]["containers"][0][k] = v.clone();
        }
        let volumes: Vec<Value> = fields["volumeMounts"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|m| json!({"name": m["name"], "emptyDir": {}}))
            .collect();
        if !volumes.is_empty() {
            pod["spec"]["volumes"] = Value::from(volumes);
        }
        decide(&catalog, &config, &ns, &pod).ok()
    };
    // A user variable splits the list into what is put before it and after it.
    let with_user = run(json!([{"name": "ZQ_USER", "value": VALUE}]))
        .ok_or("a user variable stops the injection")?;
    let env = env_of(&with_user);
    let at = env
        .iter()
        .position(|e| name_of(e) == "ZQ_USER")
        .ok_or("the user's variable is gone")?;
    let prepended = env[..at].to_vec();
    let mut appended: Vec<Appended> = env[at + 1..]
        .iter()
        .map(|e| Appended {
            kind: match name_of(e) {
                OTEL_SERVICE_NAME => Kind::ServiceName,
                OTEL_RESOURCE_ATTRIBUTES => Kind::ResourceAttributes,
                _ => Kind::Fixed,
            },
            entry: e.clone(),
            kept_out_by: Vec::new(),
        })
        .collect();
    if env_of(&injected) != [prepended.as_slice(), &env[at + 1..]].concat() {
        return Err("the injected variables depend on the container's".into());
    }
    check_appended(&appended)?;

    // What the notes gave, forgotten: the probes must find it again.
    let mut template = typed.clone();
    template.prepended = prepended;
    template.extensions.clear();
    template.refuse_literal.clear();
    template.refuse_value_from.clear();
    template.merges_resource_attributes = false;
    template.agent_refuses.clear();
    template.init = init::holes(&typed.init_containers, with_fields)?;
    template.hidden_below = match template.init.clone_of_target {
        Some(k) => init::hidden_below(&typed.mounts, k, with_fields),
        None => Vec::new(),
    };
    let mut refuse_empty = Vec::new();
    let names: Vec<String> = template
        .prepended
        .iter()
        .map(|e| name_of(e).to_owned())
        .chain(appended.iter().map(|a| name_of(&a.entry).to_owned()))
        .collect();
    for name in &names {
        let literal = json!([{"name": name, "value": VALUE}]);
        let value_from =
            json!([{"name": name, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]);
        let (literal, value_from) = (decided(literal), decided(value_from));
        for (result, from) in [(&literal, false), (&value_from, true)] {
            if *result == Err(Some(SkipReason::NothingInstrumented)) {
                template.agent_refuses.push((name.clone(), from));
            }
        }
        if name == OTEL_RESOURCE_ATTRIBUTES
            && merged_at_the_end(&template, &appended, literal.as_ref().ok(), false)
            && merged_at_the_end(&template, &appended, value_from.as_ref().ok(), true)
        {
            template.merges_resource_attributes = true;
            mark_kept_out(&mut appended, name, std::slice::from_ref(name));
            continue;
        }
        let literal_pod = literal.as_ref().ok().cloned();
        match user_variable(&template, &appended, name, literal.ok()) {
            Some(VariableEffect::KeepsOut(names)) => mark_kept_out(&mut appended, name, &names),
            Some(VariableEffect::Extended(mut ext)) => {
                mark_kept_out(&mut appended, name, std::slice::from_ref(name));
                // What an empty value becomes, or such pods are not covered.
                let empty = decided(json!([{"name": name, "value": ""}])).ok();
                match literal_pod.zip(empty) {
                    Some((with, empty)) => match empty_value(name, &with, &empty) {
                        Some(written) => ext.empty = written,
                        None => refuse_empty.push(name.clone()),
                    },
                    None => refuse_empty.push(name.clone()),
                }
                template.extensions.push(ext);
            }
            None => template.refuse_literal.push(name.clone()),
        }
        match user_variable(&template, &appended, name, value_from.ok()) {
            Some(VariableEffect::KeepsOut(_)) => {}
            _ => template.refuse_value_from.push(name.clone()),
        }
    }
    template.appended = appended;
    Ok((template, refuse_empty))
}

/// A user variable's value in the oracle's probes.
pub(super) const VALUE: &str = "zq-otel-injector-value-zq";

/// The engine's result for `pod`, with image volumes: the pod injected, or the reason of the
/// webhook's first skip when nothing was (`None`: no skip said why).
fn decide(
    catalog: &StaticCatalog,
    config: &EngineConfig,
    ns: &str,
    pod: &Value,
) -> Result<Value, Option<SkipReason>> {
    decide_seeing(catalog, config, ns, pod, |_| {})
}

pub(super) fn env_of(pod: &Value) -> Vec<Value> {
    pod["spec"]["containers"][0]["env"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}
