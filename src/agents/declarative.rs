//! Declarative SDK configuration (a v1beta1 `declarativeConfig`) delivered without any write:
//! the file is rendered per pod, the Kubernetes and service attributes merged into its
//! `resource.attributes`, and travels in the pod's own annotation
//! ([`CONFIG_FILE_ANNOTATION`]), projected read-only into each instrumented container by a
//! `downwardAPI` volume; `OTEL_CONFIG_FILE` points at it.
//!
//! Values unknown at admission (the pod's name, node and UID) are `${VAR}` references to
//! the downward-API variables the SDK resolves at start-up; so are the values that differ
//! between the pod's instrumented containers (`service.name` is `${OTEL_SERVICE_NAME}`, set
//! per container as in env mode, so a user's own value still wins).
//!
//! [`render`] makes the file, [`deliver`] puts it into the plan; between them the engine
//! holds it to the size rules (`engine/bound.rs`: the file's and the pod's annotations').

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, DownwardAPIVolumeFile, DownwardAPIVolumeSource, ObjectFieldSelector, Volume,
    VolumeMount,
};
use serde_json::Value;

use super::sdk_env::{OTEL_SERVICE_NAME, resource_attributes};
use crate::crd::declarative::{Attribute, SdkResource};
use crate::crd::{Instrumentation, InstrumentationSpec};
use crate::keys::CONFIG_FILE_ANNOTATION;
use crate::pod::env::literal;
use crate::pod::info::PodInfo;
use crate::pod::plan::{PodPlan, Slot};

/// The volume and where it is mounted.
pub const VOLUME: &str = "otel-injector-sdk-config";
pub const MOUNT: &str = "/otel-injector/sdk-config";
/// The file in the volume, and the variable that names it to the SDK.
pub const FILE: &str = "sdk-config.yaml";
pub const OTEL_CONFIG_FILE: &str = "OTEL_CONFIG_FILE";
/// The per-container variables the file refers to for values that differ by container.
pub const PER_CONTAINER_PREFIX: &str = "OTEL_INJECTOR_RESOURCE_";

/// Why the file could not be rendered. Its size is the engine's to judge
/// (`engine/bound.rs`), between [`render`] and [`deliver`].
#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    /// Another Instrumentation's file already goes into this pod (one file per pod).
    Collision(String),
    /// The file cannot be written as YAML.
    Unrenderable(String),
}

/// `inst`'s declarative configuration rendered for this pod, not yet in the plan.
#[derive(Debug)]
pub struct Rendered {
    /// The file's text, as the annotation carries it.
    pub text: String,
    /// The Instrumentation (`ns/name`) it comes from.
    owner: String,
    /// The containers that read it: those the agents of `owner`'s languages changed.
    changed: Vec<Slot>,
    /// Per container of `changed`, in order, the variables the file refers to.
    per_container: PerContainer,
}

/// Renders `inst`'s declarative configuration for the containers in `slots` that the agent
/// changed (and those of the languages injected from it before); `None` when `inst` has none.
pub fn render(
    plan: &PodPlan<'_>,
    slots: &[Slot],
    info: &PodInfo<'_>,
    inst: &Instrumentation,
) -> Result<Option<Rendered>, Refused> {
    let spec = &inst.spec;
    let Some(config) = spec.declarative_config() else {
        return Ok(None);
    };
    let owner = inst.qualified();
    // A language injected earlier from the same Instrumentation shares the file: it is
    // rendered again over all their containers.
    let mut changed: Vec<Slot> = match &plan.config_file {
        Some((earlier, _)) if *earlier != owner => {
            return Err(Refused::Collision(format!(
                "the pod already gets the SDK configuration file of {earlier}"
            )));
        }
        Some((_, earlier)) => earlier.clone(),
        None => Vec::new(),
    };
    for &slot in slots {
        if !changed.contains(&slot) && plan.containers().any(|(s, c)| s == slot && c.is_changed()) {
            changed.push(slot);
        }
    }
    let containers: Vec<&Container> = changed.iter().filter_map(|&s| plan.original(s)).collect();
    let (attributes, per_container) = attributes_for(info, spec, &containers);

    let mut file = config.clone();
    let resource = file.resource.get_or_insert_with(SdkResource::default);
    for (name, value) in attributes {
        if !resource.attributes.iter().any(|a| a.name == name) {
            resource.attributes.push(Attribute {
                name,
                value: Value::String(value),
                type_: None,
            });
        }
    }
    let text = serde_saphyr::to_string(&file).map_err(|e| Refused::Unrenderable(e.to_string()))?;
    Ok(Some(Rendered {
        text,
        owner,
        changed,
        per_container,
    }))
}

/// Delivers a rendered file: the annotation, the volume once, and per container the mount,
/// `OTEL_CONFIG_FILE` and the variables the file refers to.
pub fn deliver(plan: &mut PodPlan<'_>, rendered: Rendered) {
    let Rendered {
        text,
        owner,
        changed,
        per_container,
    } = rendered;
    plan.new_annotations
        .insert(CONFIG_FILE_ANNOTATION.to_owned(), text);
    plan.add_volume(volume());
    for (slot, values) in changed.iter().zip(per_container) {
        let Some(c) = plan.container(*slot) else {
            continue;
        };
        c.mount(VolumeMount {
            name: VOLUME.to_owned(),
            mount_path: MOUNT.to_owned(),
            read_only: Some(true),
            ..Default::default()
        });
        c.env
            .append_if_absent(literal(OTEL_CONFIG_FILE, format!("{MOUNT}/{FILE}")));
        for (name, value) in values {
            c.env.append_if_absent(literal(&name, value));
        }
    }
    plan.config_file = Some((owner, changed));
}

/// The `downwardAPI` volume that projects the annotation into [`FILE`].
fn volume() -> Volume {
    Volume {
        name: VOLUME.to_owned(),
        downward_api: Some(DownwardAPIVolumeSource {
            items: Some(vec![DownwardAPIVolumeFile {
                path: FILE.to_owned(),
                field_ref: Some(ObjectFieldSelector {
                    field_path: format!("metadata.annotations['{CONFIG_FILE_ANNOTATION}']"),
                    ..Default::default()
                }),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Per container, in the order given, the variables to set: (name, value).
type PerContainer = Vec<Vec<(String, String)>>;

/// The resource attributes the webhook adds for `containers`, with Kubernetes' `$(VAR)`
/// references written as the SDK's `${VAR}`: one value where every container has the same,
/// a per-container variable where they differ (a key only some containers have is left
/// out), `service.name` always `${OTEL_SERVICE_NAME}`. Also, per container, the variables
/// to set.
fn attributes_for(
    info: &PodInfo<'_>,
    spec: &InstrumentationSpec,
    containers: &[&Container],
) -> (BTreeMap<String, String>, PerContainer) {
    let each: Vec<BTreeMap<&str, Cow<'_, str>>> = containers
        .iter()
        .map(|c| resource_attributes(info, spec, c, &[]))
        .collect();
    let mut out = BTreeMap::new();
    let mut per_container = vec![Vec::new(); containers.len()];
    let Some(first) = each.first() else {
        return (out, per_container);
    };
    for (key, value) in first {
        if each.iter().any(|m| !m.contains_key(key)) {
            continue;
        }
        if each.iter().all(|m| m.get(key) == Some(value)) {
            out.insert((*key).to_owned(), sdk_references(value));
        } else {
            let var = format!(
                "{PER_CONTAINER_PREFIX}{}",
                key.to_ascii_uppercase().replace(['.', '-', '/'], "_")
            );
            out.insert((*key).to_owned(), format!("${{{var}}}"));
            // The variable's own value keeps Kubernetes' `$(VAR)`: the kubelet expands it
            // (the SDK substitutes only in the file, never inside a variable's value).
            for (i, m) in each.iter().enumerate() {
                per_container[i].push((var.clone(), m[key].to_string()));
            }
        }
    }
    if spec.service_metadata() || info.annotation("service.name").is_some() {
        out.insert(
            "service.name".to_owned(),
            format!("${{{OTEL_SERVICE_NAME}}}"),
        );
    }
    (out, per_container)
}

/// `$(VAR)` (Kubernetes' reference to an earlier variable) as `${VAR}` (the SDK's).
fn sdk_references(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(start) = rest.find("$(") {
        let Some(len) = rest[start..].find(')') else {
            break;
        };
        out.push_str(&rest[..start]);
        out.push_str("${");
        out.push_str(&rest[start + 2..start + len]);
        out.push('}');
        rest = &rest[start + len + 1..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubernetes_references_become_the_sdks() {
        assert_eq!(
            sdk_references("apps.$(OTEL_RESOURCE_ATTRIBUTES_POD_NAME).app"),
            "apps.${OTEL_RESOURCE_ATTRIBUTES_POD_NAME}.app"
        );
        assert_eq!(sdk_references("plain"), "plain");
        assert_eq!(sdk_references("$(A)$(B)"), "${A}${B}");
        assert_eq!(sdk_references("open $(A"), "open $(A");
    }
}
