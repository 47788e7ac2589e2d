//! How a container's own variables change what the template adds, read off the agents'
//! notes of one engine run ([`EnvNote`]) rather than off a probe per variable: each variable
//! the template adds is left out when the container defines it (its name alone, unless a note
//! says which names), a variable the agent extends is extended in place (and its `valueFrom`
//! refused, as the agent refuses the container), `OTEL_RESOURCE_ATTRIBUTES` is merged and
//! moved last, and a variable the agent refuses leaves the pod to the webhook.

use super::{ExtendedVariable, Template, name_of};
use crate::agents::sdk_env::OTEL_RESOURCE_ATTRIBUTES;
use crate::pod::env::EnvNote;

/// Fills in `template` (its variables already read) what `notes` say of them.
pub(super) fn read(template: &mut Template, notes: &[EnvNote]) {
    // Every name the template adds, in order, then any other name a note refuses.
    let mut names: Vec<String> = template
        .prepended
        .iter()
        .map(|e| name_of(e).to_owned())
        .chain(
            template
                .appended
                .iter()
                .map(|a| name_of(&a.entry).to_owned()),
        )
        .collect();
    for note in notes {
        if let EnvNote::Refuses { name } = note
            && !names.iter().any(|n| n == name)
        {
            names.push((*name).to_owned());
        }
    }
    let in_order = |unless: &[&str]| -> Vec<String> {
        let mut by: Vec<String> = names
            .iter()
            .filter(|n| unless.contains(&n.as_str()))
            .cloned()
            .collect();
        let others = unless.iter().filter(|u| !names.iter().any(|n| n == *u));
        by.extend(others.map(|u| (*u).to_owned()));
        by
    };

    for name in &names {
        let refused = notes
            .iter()
            .any(|n| matches!(n, EnvNote::Refuses { name: r } if r == name));
        let extension = notes.iter().find_map(|n| match n {
            EnvNote::Extended { name: e, extension } if e == name => Some(extension),
            _ => None,
        });
        let kept_out_by = notes.iter().find_map(|n| match n {
            EnvNote::KeptOutBy { name: k, unless } if k == name => Some(in_order(unless)),
            _ => None,
        });
        let merged = notes
            .iter()
            .any(|n| matches!(n, EnvNote::Merged { name: m } if m == name));
        let appended = template
            .appended
            .iter_mut()
            .find(|a| name_of(&a.entry) == name);
        let refuses_value_from = refused || extension.is_some();
        if refused {
            template.agent_refuses.push((name.clone(), false));
        }
        if refuses_value_from {
            template.agent_refuses.push((name.clone(), true));
        }
        // With no attribute to add the merge only moves the container's own entry last,
        // which the policy does not replay: such a container is left to the webhook.
        let mut moved_only = false;
        match appended {
            // The agent leaving the container alone is no reason for the injected one to be
            // left out: the pod is not covered.
            Some(a) if refused => a.kept_out_by.clear(),
            Some(a) if merged && name == OTEL_RESOURCE_ATTRIBUTES => {
                if a.entry["value"] == "" {
                    moved_only = true;
                    a.kept_out_by.clear();
                } else {
                    template.merges_resource_attributes = true;
                }
            }
            Some(a) => {
                if let Some(by) = kept_out_by {
                    a.kept_out_by = by;
                }
            }
            None => {}
        }
        if refused || moved_only {
            template.refuse_literal.push(name.clone());
        } else if let Some(x) = extension {
            template.extensions.push(ExtendedVariable {
                name: name.clone(),
                prefix: x.prefix.clone(),
                suffix: x.suffix.clone(),
                empty: x.empty.clone(),
            });
        }
        if refuses_value_from || moved_only {
            template.refuse_value_from.push(name.clone());
        }
    }
}
