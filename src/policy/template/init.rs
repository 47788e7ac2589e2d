//! The init containers a template adds, and what in them comes from the pod: the first
//! target's `securityContext` (every init container, unless the Instrumentation sets its
//! own), and for the web servers (Apache httpd, nginx) the init container cloned from the
//! first target (its image, env, envFrom, mounts and pull policy) and the service name written
//! into the module's configuration. Each is what the agents note as they add them
//! ([`InitNote`]); anything else of the pod's in an init container (the container's name, its
//! image in a container that is not a clone) is not a template.

use serde_json::Value;

use super::{CONTAINER, IMAGE, NotCovered};
use crate::pod::plan::InitNote;

/// What of the pod the init containers take.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InitHoles {
    /// Each init container gets the first target's `securityContext`, when it has one.
    pub security_from_target: bool,
    /// The init container (its index) cloned from the first target: its `image` is the
    /// target's ([`IMAGE`] in the template), and it takes the target's `env` (the template's
    /// own entries appended unless the target has them), `envFrom`, `volumeMounts` (the
    /// template's after them) and `imagePullPolicy`.
    pub clone_of_target: Option<usize>,
}

/// The holes of `init_containers` (the bare probe's), from the agents' `notes`.
pub(super) fn holes(
    init_containers: &[Value],
    notes: &[InitNote],
) -> Result<InitHoles, NotCovered> {
    if init_containers.is_empty() {
        return Ok(InitHoles::default());
    }
    let text = Value::from(init_containers).to_string();
    if text.contains(CONTAINER) {
        return Err("the init containers hold the container's name".into());
    }
    let clones: Vec<usize> = notes
        .iter()
        .filter_map(|n| match n {
            InitNote::CloneOfTarget { name } => init_containers
                .iter()
                .position(|c| c["name"] == name.as_str()),
            _ => None,
        })
        .collect();
    let clone_of_target = match clones[..] {
        [] => None,
        [k] if init_containers[k]["image"] == IMAGE => Some(k),
        [_] => return Err("the clone of the container does not run its image".into()),
        _ => return Err("several init containers are clones of the container".into()),
    };
    let others_hold_image = init_containers
        .iter()
        .enumerate()
        .any(|(k, c)| Some(k) != clone_of_target && c.to_string().contains(IMAGE));
    if others_hold_image {
        return Err("an init container holds the container's image".into());
    }
    Ok(InitHoles {
        security_from_target: notes.contains(&InitNote::SecurityFromTarget),
        clone_of_target,
    })
}

/// The paths of the template's `mounts` at or below which the engine removes the first
/// target's own mounts and keeps them in the clone, as the agent notes. The injection policy
/// refuses a target mount at or below any other template path.
pub(super) fn hidden_below(mounts: &[Value], notes: &[InitNote]) -> Vec<String> {
    let hidden = |dir: &str| {
        notes
            .iter()
            .any(|n| matches!(n, InitNote::HidesBelow { dir: d } if d == dir))
    };
    mounts
        .iter()
        .filter_map(|m| m["mountPath"].as_str())
        .map(|p| p.trim_end_matches('/'))
        .filter(|dir| !dir.is_empty() && hidden(dir))
        .map(str::to_owned)
        .collect()
}
