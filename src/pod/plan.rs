//! The mutation plan: what injection adds to a pod, kept as additions over the borrowed
//! original so that the patch touches only what changed (no clone of the whole pod).

use std::collections::BTreeMap;

use crate::pod::names::NameSet;

use k8s_openapi::api::core::v1::{Container, Pod, Volume, VolumeMount};

use super::env::EnvPlan;

/// Which list a targeted container lives in, and its index there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Slot {
    /// `spec.initContainers[i]`.
    Init(usize),
    /// `spec.containers[i]`.
    App(usize),
}

/// Edits to one existing container.
#[derive(Clone, Debug)]
pub struct ContainerPlan<'a> {
    pub container: &'a Container,
    pub env: EnvPlan<'a>,
    pub new_mounts: Vec<VolumeMount>,
    /// Indices of original mounts to remove (for agents that mount over a path).
    pub removed_mounts: Vec<usize>,
}

impl<'a> ContainerPlan<'a> {
    fn new(container: &'a Container) -> Self {
        ContainerPlan {
            container,
            env: EnvPlan::new(container.env.as_deref().unwrap_or_default()),
            new_mounts: Vec::new(),
            removed_mounts: Vec::new(),
        }
    }

    pub fn name(&self) -> &'a str {
        &self.container.name
    }

    /// Removes the container's own mount at `path`, if any (an agent mounts over it).
    pub fn unmount(&mut self, path: &str) {
        for (i, m) in self.container.volume_mounts.iter().flatten().enumerate() {
            if m.mount_path == path && !self.removed_mounts.contains(&i) {
                self.removed_mounts.push(i);
            }
        }
    }

    /// Adds a mount unless this plan already mounts something at that path (two languages
    /// sharing the exporter TLS volumes). A path the user's own mount holds is added anyway,
    /// and [`PodPlan::check`] reports it.
    pub fn mount(&mut self, mount: VolumeMount) {
        if !self
            .new_mounts
            .iter()
            .any(|m| m.mount_path == mount.mount_path)
        {
            self.new_mounts.push(mount);
        }
    }

    /// The original mounts that stay.
    fn kept_mounts(&self) -> impl Iterator<Item = &'a VolumeMount> + '_ {
        let removed = &self.removed_mounts;
        self.container
            .volume_mounts
            .iter()
            .flatten()
            .enumerate()
            .filter(move |(i, _)| !removed.contains(i))
            .map(|(_, m)| m)
    }

    pub fn is_changed(&self) -> bool {
        self.env.is_changed() || !self.new_mounts.is_empty() || !self.removed_mounts.is_empty()
    }
}

/// Where a new init container goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum InitPosition {
    /// Before the original init container at this index (it uses what this one copies).
    Before(usize),
    /// After every existing init container.
    End,
}

/// Everything injection adds to a pod.
#[derive(Clone, Debug)]
pub struct PodPlan<'a> {
    pub pod: &'a Pod,
    containers: BTreeMap<Slot, ContainerPlan<'a>>,
    pub new_init_containers: Vec<(InitPosition, Container)>,
    pub new_containers: Vec<Container>,
    pub new_volumes: Vec<Volume>,
    pub share_process_namespace: bool,
    pub new_annotations: BTreeMap<String, String>,
    /// The Instrumentation (`namespace/name`) whose declarative configuration file the pod
    /// gets, and the containers that read it: every language of that Instrumentation shares
    /// one file.
    pub config_file: Option<(String, Vec<Slot>)>,
    /// What the init containers take of the first target, as the agents say when they add
    /// them ([`InitNote`]).
    pub init_notes: Vec<InitNote>,
}

/// What an init container takes of the pod: the agents' typed declaration, which a policy
/// replays without running them on probes (`policy::template::init`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InitNote {
    /// The init containers added run with the first target's `securityContext` (the
    /// Instrumentation sets none of its own).
    SecurityFromTarget,
    /// Init container `name` is a clone of the first target: its image, env (then the added
    /// entries it does not set), envFrom, mounts (then the added ones) and pull policy.
    CloneOfTarget { name: String },
    /// The first target's own mounts at or below `dir` are removed from it and kept by the
    /// clone.
    HidesBelow { dir: String },
}

impl<'a> PodPlan<'a> {
    pub fn new(pod: &'a Pod) -> Self {
        PodPlan {
            pod,
            containers: BTreeMap::new(),
            new_init_containers: Vec::new(),
            new_containers: Vec::new(),
            new_volumes: Vec::new(),
            share_process_namespace: false,
            new_annotations: BTreeMap::new(),
            config_file: None,
            init_notes: Vec::new(),
        }
    }

    /// Notes that init container `name` is a clone of the first target, which takes over its
    /// own mounts at or below `dir` ([`InitNote`]).
    pub fn note_clone(&mut self, name: &str, dir: &str) {
        self.init_notes.extend([
            InitNote::CloneOfTarget {
                name: name.to_owned(),
            },
            InitNote::HidesBelow {
                dir: dir.trim_end_matches('/').to_owned(),
            },
        ]);
    }

    /// The original container in a slot.
    pub fn original(&self, slot: Slot) -> Option<&'a Container> {
        let spec = self.pod.spec.as_ref()?;
        match slot {
            Slot::App(i) => spec.containers.get(i),
            Slot::Init(i) => spec.init_containers.as_ref()?.get(i),
        }
    }

    /// The edit plan for a container, created on first use.
    pub fn container(&mut self, slot: Slot) -> Option<&mut ContainerPlan<'a>> {
        let original = self.original(slot)?;
        Some(
            self.containers
                .entry(slot)
                .or_insert_with(|| ContainerPlan::new(original)),
        )
    }

    pub fn containers(&self) -> impl Iterator<Item = (Slot, &ContainerPlan<'a>)> {
        self.containers.iter().map(|(s, c)| (*s, c))
    }

    /// Whether the pod (original or planned) has a volume with this name.
    pub fn has_volume(&self, name: &str) -> bool {
        let spec = self.pod.spec.as_ref();
        spec.and_then(|s| s.volumes.as_ref())
            .into_iter()
            .flatten()
            .any(|v| v.name == name)
            || self.new_volumes.iter().any(|v| v.name == name)
    }

    pub fn add_init_container(&mut self, at: InitPosition, c: Container) {
        self.new_init_containers.push((at, c));
    }

    /// Adds a volume unless this plan already adds one of that name (languages sharing the
    /// exporter TLS volumes). A name the user's pod already uses is added anyway, and
    /// [`PodPlan::check`] reports it.
    pub fn add_volume(&mut self, v: Volume) {
        if !self.new_volumes.iter().any(|n| n.name == v.name) {
            self.new_volumes.push(v);
        }
    }

    /// Checks that the pod this plan makes is valid, as far as what the plan adds goes:
    /// container names unique across init, app and ephemeral containers; volume names
    /// unique; each added mount names a volume and takes a path no other mount of that
    /// container holds; no variable added twice to one container. Returns what collides.
    /// Problems the user's pod already had are not this plan's and are not reported.
    pub fn check(&self) -> Result<(), String> {
        let spec = self.pod.spec.as_ref();
        let original_containers = spec.into_iter().flat_map(|s| {
            let inits = s.init_containers.iter().flatten().map(|c| &c.name);
            let apps = s.containers.iter().map(|c| &c.name);
            let ephemeral = s.ephemeral_containers.iter().flatten().map(|c| &c.name);
            inits.chain(apps).chain(ephemeral)
        });
        let added = self
            .new_init_containers
            .iter()
            .map(|(_, c)| c)
            .chain(&self.new_containers);
        let mut names: NameSet<'_> = original_containers.map(String::as_str).collect();
        for c in added.clone() {
            if !names.insert(&c.name) {
                return Err(format!("container name {:?} is already taken", c.name));
            }
        }
        let original_volumes = spec.and_then(|s| s.volumes.as_ref()).into_iter().flatten();
        let mut volumes: NameSet<'_> = original_volumes.map(|v| v.name.as_str()).collect();
        for v in &self.new_volumes {
            if !volumes.insert(&v.name) {
                return Err(format!("volume name {:?} is already taken", v.name));
            }
        }
        let mounts_ok =
            |container: &str, kept: &mut dyn Iterator<Item = &VolumeMount>, new: &[VolumeMount]| {
                let mut paths: NameSet<'_> = kept.map(|m| m.mount_path.as_str()).collect();
                for m in new {
                    if !volumes.contains(m.name.as_str()) {
                        return Err(format!(
                            "container {container:?} would mount missing volume {:?}",
                            m.name
                        ));
                    }
                    if !paths.insert(&m.mount_path) {
                        return Err(format!(
                            "container {container:?} already mounts {:?}",
                            m.mount_path
                        ));
                    }
                }
                Ok(())
            };
        for c in self.containers.values() {
            mounts_ok(c.name(), &mut c.kept_mounts(), &c.new_mounts)?;
            c.env
                .check_added()
                .map_err(|n| format!("container {:?} would define {n} twice", c.name()))?;
        }
        for c in added {
            mounts_ok(
                &c.name,
                &mut std::iter::empty(),
                c.volume_mounts.as_deref().unwrap_or_default(),
            )?;
            let mut env = NameSet::default();
            for e in c.env.iter().flatten() {
                if !env.insert(e.name.as_str()) {
                    return Err(format!(
                        "container {:?} would define {} twice",
                        c.name, e.name
                    ));
                }
            }
        }
        Ok(())
    }

    pub fn is_changed(&self) -> bool {
        self.containers.values().any(ContainerPlan::is_changed)
            || !self.new_init_containers.is_empty()
            || !self.new_containers.is_empty()
            || !self.new_volumes.is_empty()
            || self.share_process_namespace
            || !self.new_annotations.is_empty()
    }
}
