//! What a probe container's own variable did to the injection: kept out some injected
//! variables, was extended in place by the agent, or (`OTEL_RESOURCE_ATTRIBUTES`) was merged
//! and moved after everything injected; anything else leaves such pods to the webhook.

use serde_json::Value;

use super::{VALUE, env_of};
use crate::agents::sdk_env::{OTEL_RESOURCE_ATTRIBUTES, OTEL_SERVICE_NAME};
use crate::policy::template::{Appended, ExtendedVariable, Template, name_of};

/// Whether a probe that sets `OTEL_RESOURCE_ATTRIBUTES` itself (with `valueFrom` when
/// `from`) got every other variable of the template, in order, with its own entry last: a
/// `valueFrom` as given, a literal with the attributes appended after a comma.
pub(super) fn merged_at_the_end(
    template: &Template,
    appended: &[Appended],
    result: Option<&Value>,
    from: bool,
) -> bool {
    let Some(result) = result else {
        return false;
    };
    let env = env_of(result);
    let Some((own, others)) = env.split_last() else {
        return false;
    };
    let expected: Vec<&Value> = template
        .prepended
        .iter()
        .chain(appended.iter().map(|a| &a.entry))
        .filter(|e| name_of(e) != OTEL_RESOURCE_ATTRIBUTES)
        .collect();
    let all_kept = subsequence(others, &expected).is_some_and(|kept| kept.len() == expected.len());
    let own_kept = match from {
        true => own.get("valueFrom").is_some() && own.get("value").is_none(),
        false => own["value"]
            .as_str()
            .and_then(|v| v.strip_prefix(&format!("{VALUE},")))
            .is_some_and(|attrs| !attrs.is_empty()),
    };
    name_of(own) == OTEL_RESOURCE_ATTRIBUTES && all_kept && own_kept
}

/// What one user variable does to the injection.
pub(super) enum VariableEffect {
    /// The injected variables of these names are left out.
    KeepsOut(Vec<String>),
    /// The agent extends it in place.
    Extended(ExtendedVariable),
}

/// Reads the probe result for a container that sets `name` itself: the injection must be
/// the template's with some variables left out (and, for an extension, the user's value
/// extended in place).
pub(super) fn user_variable(
    template: &Template,
    appended: &[Appended],
    name: &str,
    result: Option<Value>,
) -> Option<VariableEffect> {
    let result = result?;
    let env = env_of(&result);
    let at = env.iter().position(|e| name_of(e) == name)?;
    let user = &env[at];
    let pre = &env[..at];
    let post = &env[at + 1..];
    // Every other variable in the template's order, some left out.
    let expected_pre: Vec<&Value> = template
        .prepended
        .iter()
        .filter(|e| name_of(e) != name)
        .collect();
    let all_post: Vec<&Value> = appended.iter().map(|a| &a.entry).collect();
    let kept_pre = subsequence(pre, &expected_pre)?;
    let kept_post = subsequence(post, &all_post)?;
    let mut left_out: Vec<String> = expected_pre
        .iter()
        .chain(&all_post)
        .map(|e| name_of(e).to_owned())
        .filter(|n| !kept_pre.contains(n) && !kept_post.contains(n))
        .collect();
    left_out.retain(|n| n != name);
    left_out.push(name.to_owned());
    let is_user_as_given = user.get("valueFrom").is_some() || user["value"] == VALUE;
    if is_user_as_given {
        return Some(VariableEffect::KeepsOut(left_out));
    }
    // The values of the pod-dependent variables are written in CEL: a user's value of theirs
    // that the engine changes (a merge) cannot be replayed.
    if matches!(name, OTEL_SERVICE_NAME | OTEL_RESOURCE_ATTRIBUTES) {
        return None;
    }
    let value = user["value"].as_str()?;
    let (prefix, suffix) = value.split_once(VALUE)?;
    if suffix.contains(VALUE) || left_out.len() != 1 {
        return None;
    }
    Some(VariableEffect::Extended(ExtendedVariable {
        name: name.to_owned(),
        prefix: prefix.to_owned(),
        suffix: suffix.to_owned(),
        empty: format!("{prefix}{suffix}"),
    }))
}

/// The value the engine writes for `name` when the probe's own is empty (`empty`), if that is
/// the only difference from the probe with a value (`literal`, [`VALUE`] in it): some agents
/// write their part alone, without the separator (Python's `PYTHONPATH`, nginx's
/// `LD_LIBRARY_PATH`).
pub(super) fn empty_value(name: &str, literal: &Value, empty: &Value) -> Option<String> {
    let entry =
        |pod: &Value| -> Option<usize> { env_of(pod).iter().position(|e| name_of(e) == name) };
    let at = entry(empty)?;
    let written = env_of(empty)[at]["value"].as_str().unwrap_or("").to_owned();
    let mut expected: Value = serde_json::from_str(&literal.to_string().replace(VALUE, "")).ok()?;
    let own = entry(&expected)?;
    expected["spec"]["containers"][0]["env"][own]["value"] = Value::from(written.clone());
    (expected == *empty).then_some(written)
}

/// The names of `expected` kept in `got`, when `got` is `expected` with some entries left
/// out (pod-dependent entries compared by name only); `None` otherwise.
fn subsequence(got: &[Value], expected: &[&Value]) -> Option<Vec<String>> {
    let mut kept = Vec::new();
    let mut it = expected.iter();
    for g in got {
        let found = it.by_ref().find(|e| {
            let dependent = matches!(name_of(e), OTEL_SERVICE_NAME | OTEL_RESOURCE_ATTRIBUTES);
            name_of(e) == name_of(g) && (dependent || **e == g)
        })?;
        kept.push(name_of(found).to_owned());
    }
    Some(kept)
}

pub(super) fn mark_kept_out(appended: &mut [Appended], by: &str, names: &[String]) {
    for a in appended
        .iter_mut()
        .filter(|a| names.iter().any(|n| n == name_of(&a.entry)))
    {
        if !a.kept_out_by.iter().any(|b| b == by) {
            a.kept_out_by.push(by.to_owned());
        }
    }
}
