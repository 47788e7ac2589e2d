//! Reading a pod as the engine needs it: only the fields it reads ([`PodIn`]), and a count
//! of its containers that allocates nothing, to refuse a pod whose decode would amplify.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, EnvFromSource, EnvVar, EphemeralContainer, Pod, PodSpec, SecurityContext, Volume,
    VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde::Deserialize;

/// The parts of a pod's metadata the engine reads. Everything else, `managedFields` above
/// all (often most of the object), is skipped while parsing instead of being decoded.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub(super) struct MetaIn {
    pub(super) name: Option<String>,
    pub(super) generate_name: Option<String>,
    pub(super) namespace: Option<String>,
    pub(super) uid: Option<String>,
    pub(super) labels: Option<BTreeMap<String, String>>,
    pub(super) annotations: Option<BTreeMap<String, String>>,
    pub(super) owner_references: Option<Vec<OwnerReference>>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub(super) struct PodIn {
    metadata: MetaIn,
    spec: Option<SpecIn>,
}

/// The parts of a pod's spec the engine and the patch read. Everything else (probes,
/// ports, resources, tolerations, the sources of volumes…) is skipped while parsing: the
/// patch only appends to lists and addresses their entries by index, so it never writes
/// back what was not read. `null` reads as absent, as k8s-openapi reads it.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct SpecIn {
    containers: Option<Vec<ContainerIn>>,
    init_containers: Option<Vec<ContainerIn>>,
    /// Only their names are read (no two containers of a pod may share one).
    ephemeral_containers: Option<Vec<NameIn>>,
    /// Only their names are read (what the plan adds must not collide with them).
    volumes: Option<Vec<NameIn>>,
    node_name: Option<String>,
    share_process_namespace: Option<bool>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct ContainerIn {
    name: Option<String>,
    image: Option<String>,
    image_pull_policy: Option<String>,
    env: Option<Vec<EnvVar>>,
    env_from: Option<Vec<EnvFromSource>>,
    volume_mounts: Option<Vec<VolumeMount>>,
    security_context: Option<SecurityContext>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct NameIn {
    name: Option<String>,
}

impl From<ContainerIn> for Container {
    fn from(c: ContainerIn) -> Container {
        Container {
            name: c.name.unwrap_or_default(),
            image: c.image,
            image_pull_policy: c.image_pull_policy,
            env: c.env,
            env_from: c.env_from,
            volume_mounts: c.volume_mounts,
            security_context: c.security_context,
            ..Default::default()
        }
    }
}

/// Each entry of a list of which only the names are read, as the API type of that name.
fn named<T>(list: Option<Vec<NameIn>>, new: impl Fn(String) -> T) -> Option<Vec<T>> {
    list.map(|l| {
        l.into_iter()
            .map(|n| new(n.name.unwrap_or_default()))
            .collect()
    })
}

impl From<SpecIn> for PodSpec {
    fn from(s: SpecIn) -> PodSpec {
        let containers = |list: Option<Vec<ContainerIn>>| {
            list.map(|l| l.into_iter().map(Container::from).collect::<Vec<_>>())
        };
        PodSpec {
            containers: containers(s.containers).unwrap_or_default(),
            init_containers: containers(s.init_containers),
            ephemeral_containers: named(s.ephemeral_containers, |name| EphemeralContainer {
                name,
                ..Default::default()
            }),
            volumes: named(s.volumes, |name| Volume {
                name,
                ..Default::default()
            }),
            node_name: s.node_name,
            share_process_namespace: s.share_process_namespace,
            ..Default::default()
        }
    }
}

impl From<PodIn> for Pod {
    fn from(p: PodIn) -> Pod {
        let m = p.metadata;
        Pod {
            metadata: ObjectMeta {
                name: m.name,
                generate_name: m.generate_name,
                namespace: m.namespace,
                uid: m.uid,
                labels: m.labels,
                annotations: m.annotations,
                owner_references: m.owner_references,
                ..Default::default()
            },
            spec: p.spec.map(PodSpec::from),
            status: None,
        }
    }
}

/// A pod object as the webhook reads it: only the fields the engine and the patch read
/// ([`MetaIn`], [`SpecIn`]), every other field skipped unread. Deciding on it gives the same
/// answer as deciding on the whole typed pod (the fuzz corpus checks this on every input).
pub fn decode_pod(object: &str) -> Result<Pod, serde_json::Error> {
    serde_json::from_str::<PodIn>(object).map(Pod::from)
}

/// Objects up to this size are decoded without counting their containers first: even all
/// tiny containers, they decode to a few MiB at most.
pub(super) const COUNT_CONTAINERS_ABOVE: usize = 64 * 1024;
/// Decoding may take at most this many times the object's size.
const MAX_DECODE_FACTOR: usize = 16;

/// Whether decoding `object` would take more than [`MAX_DECODE_FACTOR`] times its size, by
/// the containers it lists (counted without allocating).
pub(super) fn too_many_containers(object: &str) -> bool {
    if object.len() <= COUNT_CONTAINERS_ABOVE {
        return false;
    }
    let Ok(count) = serde_json::from_str::<CountPod>(object) else {
        return false; // the decode reports it
    };
    let containers = count
        .spec
        .map_or(0, |s| s.containers.0 + s.init_containers.0);
    containers.saturating_mul(std::mem::size_of::<k8s_openapi::api::core::v1::Container>())
        > object.len().saturating_mul(MAX_DECODE_FACTOR)
}

#[derive(Deserialize)]
struct CountPod {
    #[serde(default)]
    spec: Option<CountSpec>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CountSpec {
    #[serde(default)]
    containers: Count,
    #[serde(default)]
    init_containers: Count,
}

/// The length of a JSON array, every element skipped unread.
#[derive(Default)]
struct Count(usize);

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Count;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a list")
            }
            fn visit_unit<E>(self) -> Result<Count, E> {
                Ok(Count(0))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Count, A::Error> {
                let mut n = 0;
                while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {
                    n += 1;
                }
                Ok(Count(n))
            }
        }
        d.deserialize_any(Visit)
    }
}
