//! The test oracle of [`super::init`]: what the init containers take of the target, learnt as
//! it was before the agents noted it, by probing the engine with a container that has a
//! security context, the fields a clone takes, and mounts at and below each template path.

use serde_json::{Value, json};

use crate::policy::template::init::InitHoles;
use crate::policy::template::{CONTAINER, IMAGE, NotCovered};

/// What the probe container holds to show what the clone takes of it.
fn clone_probe() -> Value {
    json!({
        "env": [{"name": "ZQ_CLONED", "value": "zq"}],
        "envFrom": [{"configMapRef": {"name": "zq-cloned"}}],
        "volumeMounts": [{"name": "zq-cloned", "mountPath": "/zq-cloned"}],
        "imagePullPolicy": "Always",
    })
}

/// The holes of `init_containers` (the bare probe's), read off the engine: `decided` runs a
/// probe whose container has the given fields added (and the volumes its mounts name).
pub fn holes(
    init_containers: &[Value],
    decided: impl Fn(&Value) -> Option<Value>,
) -> Result<InitHoles, NotCovered> {
    if init_containers.is_empty() {
        return Ok(InitHoles::default());
    }
    // The clone runs the container's image (the typed reading checked that no other does).
    let clone_of_target = init_containers.iter().position(|c| c["image"] == IMAGE);
    let inits_of = |fields: &Value| -> Option<Vec<Value>> {
        decided(fields)?["spec"]["initContainers"]
            .as_array()
            .cloned()
    };

    let security = json!({"runAsUser": 4242, "runAsNonRoot": true});
    let got = inits_of(&json!({"securityContext": security}))
        .ok_or("a security context stops the injection")?;
    let copied: Vec<Value> = init_containers
        .iter()
        .map(|c| with(c, "securityContext", security.clone()))
        .collect();
    let security_from_target = if got == init_containers {
        false
    } else if got == copied {
        true
    } else {
        return Err("the init containers depend on the container's security context".into());
    };

    if let Some(k) = clone_of_target {
        let probe = clone_probe();
        let got = inits_of(&probe).ok_or("the container's own fields stop the injection")?;
        let mut expected = init_containers.to_vec();
        expected[k] = cloned(&init_containers[k], &probe);
        if got != expected {
            return Err("the clone of the container is not the container's as given".into());
        }
    }
    Ok(InitHoles {
        security_from_target,
        clone_of_target,
    })
}

/// The paths of the template's `mounts` at or below which the engine removes the first
/// target's own mounts and keeps them in the clone (number `clone`): a probe whose container
/// mounts something at the path and below it gets exactly the template's mounts, and its
/// clone both of them, first. Any other result leaves such pods not covered (the injection
/// policy refuses a target mount at or below a template path).
pub fn hidden_below(
    mounts: &[Value],
    clone: usize,
    decided: impl Fn(&Value) -> Option<Value>,
) -> Vec<String> {
    mounts
        .iter()
        .filter_map(|m| m["mountPath"].as_str())
        .map(|p| p.trim_end_matches('/'))
        .filter(|dir| !dir.is_empty() && !dir.contains(CONTAINER))
        .filter(|dir| {
            let own = json!([
                {"name": "zq-hidden", "mountPath": dir},
                {"name": "zq-hidden-below", "mountPath": format!("{dir}/zq-below")},
            ]);
            let Some(pod) = decided(&json!({ "volumeMounts": own })) else {
                return false;
            };
            let target = &pod["spec"]["containers"][0]["volumeMounts"];
            let cloned = pod["spec"]["initContainers"][clone]["volumeMounts"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            *target == Value::from(mounts.to_vec()) && cloned.starts_with(own.as_array().unwrap())
        })
        .map(str::to_owned)
        .collect()
}

/// `c` with `field` set to `value`.
fn with(c: &Value, field: &str, value: Value) -> Value {
    let mut c = c.clone();
    c[field] = value;
    c
}

/// The clone `c` of a container that has `own`'s fields: its env first, then the clone's
/// entries it does not set; its envFrom and pull policy; its mounts, then the clone's.
fn cloned(c: &Value, own: &Value) -> Value {
    let own_env = own["env"].as_array().cloned().unwrap_or_default();
    let names: Vec<&Value> = own_env.iter().map(|e| &e["name"]).collect();
    let mut env = own_env.clone();
    env.extend(
        c["env"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| !names.contains(&&e["name"]))
            .cloned(),
    );
    let mut mounts = own["volumeMounts"].as_array().cloned().unwrap_or_default();
    mounts.extend(c["volumeMounts"].as_array().into_iter().flatten().cloned());
    let mut out = with(c, "env", Value::from(env));
    out["envFrom"] = own["envFrom"].clone();
    out["imagePullPolicy"] = own["imagePullPolicy"].clone();
    out["volumeMounts"] = Value::from(mounts);
    out
}
