//! The mutation plan: what injection adds to a pod, kept as additions over the borrowed
//! original so that the patch touches only what changed (no clone of the whole pod).

use std::collections::BTreeMap;

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
#[derive(Debug)]
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

    /// Adds a mount unless the container already mounts something at that path.
    pub fn mount(&mut self, mount: VolumeMount) {
        let taken = self
            .container
            .volume_mounts
            .iter()
            .flatten()
            .enumerate()
            .filter(|(i, _)| !self.removed_mounts.contains(i))
            .map(|(_, m)| m)
            .chain(&self.new_mounts)
            .any(|m| m.mount_path == mount.mount_path);
        if !taken {
            self.new_mounts.push(mount);
        }
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
#[derive(Debug)]
pub struct PodPlan<'a> {
    pub pod: &'a Pod,
    containers: BTreeMap<Slot, ContainerPlan<'a>>,
    pub new_init_containers: Vec<(InitPosition, Container)>,
    pub new_containers: Vec<Container>,
    pub new_volumes: Vec<Volume>,
    pub share_process_namespace: bool,
    pub new_annotations: BTreeMap<String, String>,
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
        }
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

    pub fn add_volume(&mut self, v: Volume) {
        if !self.has_volume(&v.name) {
            self.new_volumes.push(v);
        }
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
