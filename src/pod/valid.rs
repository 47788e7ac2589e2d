//! Whole-pod validity, as far as injection can break it: what the API server's validation
//! rejects when names collide. Used by tests and fuzz targets on every patched pod.

use std::collections::HashSet;

use k8s_openapi::api::core::v1::{Container, Pod};

/// Checks a pod: container names unique across init, app and ephemeral containers; volume
/// names unique; every mount names a volume and mount paths are unique per container; no
/// variable defined twice in a container. Returns the first problem found.
pub fn check(pod: &Pod) -> Result<(), String> {
    let Some(spec) = pod.spec.as_ref() else {
        return Ok(());
    };
    let mut volumes = HashSet::new();
    for v in spec.volumes.iter().flatten() {
        if !volumes.insert(v.name.as_str()) {
            return Err(format!("volume {:?} is defined twice", v.name));
        }
    }
    let mut names = HashSet::new();
    let ephemeral = spec.ephemeral_containers.iter().flatten();
    let ephemeral = ephemeral.map(|c| (&c.name, &c.env, &c.volume_mounts));
    let regular = spec
        .init_containers
        .iter()
        .flatten()
        .chain(&spec.containers);
    let all = regular
        .map(|c: &Container| (&c.name, &c.env, &c.volume_mounts))
        .chain(ephemeral);
    for (name, env, mounts) in all {
        if !names.insert(name.as_str()) {
            return Err(format!("container name {name:?} is used twice"));
        }
        let mut paths = HashSet::new();
        for m in mounts.iter().flatten() {
            if !volumes.contains(m.name.as_str()) {
                return Err(format!(
                    "container {name:?} mounts missing volume {:?}",
                    m.name
                ));
            }
            if !paths.insert(m.mount_path.as_str()) {
                return Err(format!(
                    "container {name:?} mounts {:?} twice",
                    m.mount_path
                ));
            }
        }
        let mut vars = HashSet::new();
        for e in env.iter().flatten() {
            if !vars.insert(e.name.as_str()) {
                return Err(format!("container {name:?} defines {} twice", e.name));
            }
        }
    }
    Ok(())
}
