//! What the Apache httpd and nginx agents share (the otel-webserver-module).
//!
//! Neither server reads OpenTelemetry settings from the environment, and the module must be
//! named in the server's own configuration, which the image author wrote. So, as the
//! Operator does, for the first targeted container:
//! 1. an init container cloned from the app (its image, env, mounts) copies the server's
//!    configuration directory into a shared volume;
//! 2. an init container running the agent image copies the module into a second volume,
//!    writes the module's configuration (from an env var) next to the copied server
//!    configuration and makes the server load it;
//! 3. the app mounts the agent volume and the edited configuration over its config directory.
//!
//! Every targeted container also gets the language env, the common env and the SDK config.
//! The configuration is cloned once per pod, from the first target: later targets get the
//! env only (as with the Operator).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, EnvVar, ResourceRequirements, Volume, VolumeMount};

use super::copy::ResourceDefaults;
use super::sdk_env::{inject_common_env, inject_sdk_config};
use super::{Injection, Language, Outcome, value_from_origin, value_from_warning};
use crate::crd::InstrumentationSpec;
use crate::pod::env::{EnvValue, field_ref, literal};
use crate::pod::plan::{InitPosition, Slot};

/// Init container that clones the app to copy its configuration (same name for both servers,
/// so Apache httpd and nginx cannot share a pod).
pub const CLONE_CONTAINER: &str = "otel-agent-source-container-clone";
/// Where the agent files are mounted, in the attach init container and in the app.
pub const AGENT_DIR: &str = "/opt/opentelemetry-webserver/agent";
/// Where the copied server configuration is mounted in both init containers.
pub const STAGED_CONF_DIR: &str = "/opt/opentelemetry-webserver/source-conf";
/// Replaced with the pod name by the attach script (the name is unknown at admission).
pub const SERVICE_INSTANCE_ID_PLACEHOLDER: &str = "<<SID-PLACEHOLDER>>";
/// Exporter endpoint written into the module configuration when the spec has none.
pub const DEFAULT_ENDPOINT: &str = "http://localhost:4317/";
/// Default resources of both init containers.
pub const RESOURCES: ResourceDefaults = ResourceDefaults {
    limit_cpu: "500m",
    limit_memory: "256Mi",
    request_cpu: "1m",
    request_memory: "128Mi",
};

/// How one server flavour differs; everything else is shared.
pub struct WebServer<'x> {
    pub lang: Language,
    /// `spec.<lang>.env`, added to every target before the common env.
    pub lang_env: &'x [EnvVar],
    /// The server's configuration directory in the app, mounted over with the edited copy.
    pub conf_dir: String,
    /// Volume holding the copied and edited configuration.
    pub conf_volume: Volume,
    /// Volume holding the agent (module and SDK libraries).
    pub agent_volume: Volume,
    pub resources: ResourceRequirements,
    /// Command (and arguments) of the clone init container.
    pub clone_command: Vec<String>,
    pub clone_args: Option<Vec<String>>,
    /// Name, image and arguments of the attach init container (`/bin/sh -c <args>`).
    pub attach_name: &'static str,
    pub attach_image: String,
    pub attach_args: Vec<String>,
    /// Env var that carries the module configuration into the attach container.
    pub conf_env: &'static str,
    /// Env var that carries the pod name into the attach container.
    pub instance_env: &'static str,
    /// The module configuration text, given the service name of the first target.
    pub agent_conf: &'x dyn Fn(&str) -> String,
    /// nginx: `LD_LIBRARY_PATH` of the first target is extended with the SDK libraries.
    pub extend_library_path: bool,
}

/// `LD_LIBRARY_PATH`, extended on the nginx app so the module finds the SDK libraries.
pub const LD_LIBRARY_PATH: &str = "LD_LIBRARY_PATH";
/// The SDK libraries inside the agent volume.
pub const SDK_LIB_DIR: &str = "/opt/opentelemetry-webserver/agent/sdk_lib/lib";

/// `OTEL_*` settings of the module, as `(key, value)` pairs: the defaults, then
/// `spec.<lang>.attrs` replacing or adding keys. Sorted by key, as the Operator writes them.
pub fn module_attributes(
    defaults: &[(&str, String)],
    attrs: &[EnvVar],
) -> BTreeMap<String, String> {
    let mut map: BTreeMap<String, String> = defaults
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect();
    for a in attrs {
        map.insert(a.name.clone(), a.value.clone().unwrap_or_default());
    }
    map
}

/// The exporter endpoint for the module configuration.
pub fn endpoint(spec: &InstrumentationSpec) -> String {
    spec.exporter
        .as_ref()
        .and_then(|e| e.endpoint.as_deref())
        .filter(|e| !e.is_empty())
        .unwrap_or(DEFAULT_ENDPOINT)
        .to_owned()
}

/// `service.namespace` for the module: the pod's namespace, else `fallback`.
pub fn service_namespace(namespace: &str, fallback: &str) -> String {
    if namespace.is_empty() {
        fallback.to_owned()
    } else {
        namespace.to_owned()
    }
}

/// Whether a mount path is the directory itself or lies below it.
fn within(path: &str, dir: &str) -> bool {
    let path = path.trim_end_matches('/');
    let dir = dir.trim_end_matches('/');
    path == dir || path.strip_prefix(dir).is_some_and(|r| r.starts_with('/'))
}

fn mount(name: &str, path: &str) -> VolumeMount {
    VolumeMount {
        name: name.to_owned(),
        mount_path: path.to_owned(),
        ..Default::default()
    }
}

fn other_server(lang: Language) -> &'static str {
    if lang == Language::Nginx {
        "apache-httpd"
    } else {
        "nginx"
    }
}

/// Injects one web server flavour into the app containers among the targets.
pub fn inject(cx: &mut Injection<'_, '_>, ws: &WebServer<'_>) -> Outcome {
    let lang = ws.lang;
    let planned = |name: &str| {
        cx.plan
            .new_init_containers
            .iter()
            .any(|(_, c)| c.name == name)
    };
    if planned(CLONE_CONTAINER) {
        cx.warn(format!(
            "{lang}: {} and {lang} cannot be injected into one pod (same clone container); \
             {lang} not injected",
            other_server(lang)
        ));
        return Outcome::NothingInstrumented;
    }
    let (inst, info) = (cx.inst, cx.info);
    let spec = &inst.spec;
    let use_labels = spec.use_labels_for_resource_attributes();
    let mut warnings = Vec::new();
    let mut done = Vec::new();
    let mut first: Option<(Slot, &str)> = None;
    let mut clone_env = Vec::new();
    let mut agent_conf = String::new();
    for &slot in cx.targets {
        // Init containers were filtered out by the engine (`supports_init_targets`).
        if !matches!(slot, Slot::App(_)) {
            continue;
        }
        let Some(c) = cx.plan.container(slot) else {
            continue;
        };
        let app = c.container;
        let name = app.name.as_str();
        if let Some((_, first_name)) = first {
            warnings.push(format!(
                "{lang}: only {first_name:?} gets the module (one config clone per pod); \
                 {name:?} gets the SDK env only"
            ));
        } else if ws.extend_library_path {
            // Only the language env is merged before the variable is extended; `spec.env`
            // comes after it and cannot define it any more.
            if let Some(origin) = value_from_origin(&c.env, &[ws.lang_env], LD_LIBRARY_PATH) {
                warnings.push(value_from_warning(lang, name, LD_LIBRARY_PATH, origin));
                continue;
            }
        }
        for e in ws.lang_env {
            c.env.append_if_absent(e.clone());
        }
        if first.is_none() {
            // The clone sees the app as it is configured, plus the language env.
            clone_env = c.env.to_vec();
            // The app's own mounts at or below the config directory would hide the edited
            // copy; the clone keeps them, so their content is part of the copy.
            let hidden: Vec<&str> = app
                .volume_mounts
                .iter()
                .flatten()
                .filter(|m| within(&m.mount_path, &ws.conf_dir))
                .map(|m| m.mount_path.as_str())
                .collect();
            for path in hidden {
                c.unmount(path);
            }
            c.mount(mount(&ws.agent_volume.name, AGENT_DIR));
            c.mount(mount(&ws.conf_volume.name, &ws.conf_dir));
            agent_conf = (ws.agent_conf)(&info.service_name(use_labels, app));
            if ws.extend_library_path {
                let value = match c.env.get(LD_LIBRARY_PATH) {
                    // An empty entry would put the working directory on the path.
                    Some(EnvValue::Literal(v)) if !v.is_empty() => format!("{v}:{SDK_LIB_DIR}"),
                    _ => SDK_LIB_DIR.to_owned(),
                };
                c.env.set_literal(LD_LIBRARY_PATH, value);
            }
            first = Some((slot, name));
        }
        inject_common_env(&mut c.env, spec);
        inject_sdk_config(&mut c.env, info, spec, app);
        done.push(slot);
    }
    for w in warnings {
        cx.warn(w);
    }
    let Some((first, _)) = first else {
        return Outcome::NothingInstrumented;
    };
    let Some(app) = cx.plan.original(first) else {
        return Outcome::NothingInstrumented;
    };

    let security = cx.init_security_context(&[first]);
    let mut clone_mounts = app.volume_mounts.clone().unwrap_or_default();
    clone_mounts.push(mount(&ws.conf_volume.name, STAGED_CONF_DIR));
    let clone = Container {
        name: CLONE_CONTAINER.to_owned(),
        image: app.image.clone(),
        command: Some(ws.clone_command.clone()),
        args: ws.clone_args.clone(),
        env: (!clone_env.is_empty()).then_some(clone_env),
        env_from: app.env_from.clone(),
        volume_mounts: Some(clone_mounts),
        resources: Some(ws.resources.clone()),
        security_context: security.clone(),
        image_pull_policy: app.image_pull_policy.clone(),
        ..Default::default()
    };
    let attach = Container {
        name: ws.attach_name.to_owned(),
        image: Some(ws.attach_image.clone()),
        command: Some(vec!["/bin/sh".into(), "-c".into()]),
        args: Some(ws.attach_args.clone()),
        env: Some(vec![
            literal(ws.conf_env, agent_conf),
            field_ref(ws.instance_env, "metadata.name"),
        ]),
        resources: Some(ws.resources.clone()),
        volume_mounts: Some(vec![
            mount(&ws.agent_volume.name, AGENT_DIR),
            mount(&ws.conf_volume.name, STAGED_CONF_DIR),
        ]),
        security_context: security,
        image_pull_policy: spec.image_pull_policy.clone(),
        ..Default::default()
    };
    cx.plan.add_volume(ws.conf_volume.clone());
    cx.plan.add_volume(ws.agent_volume.clone());
    cx.plan.add_init_container(InitPosition::End, clone);
    cx.plan.add_init_container(InitPosition::End, attach);
    Outcome::Injected(done.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mounts_within_the_config_directory() {
        assert!(within("/etc/nginx", "/etc/nginx"));
        assert!(within("/etc/nginx/", "/etc/nginx"));
        assert!(within("/etc/nginx/nginx.conf", "/etc/nginx"));
        assert!(within("/etc/nginx/conf.d", "/etc/nginx/"));
        assert!(!within("/etc/nginx2", "/etc/nginx"));
        assert!(!within("/etc", "/etc/nginx"));
    }

    #[test]
    fn attrs_override_and_add_keys_in_sorted_order() {
        let m = module_attributes(
            &[("B", "1".into()), ("A", "2".into())],
            &[literal("B", "x"), literal("C", "y")],
        );
        assert_eq!(
            m.into_iter().collect::<Vec<_>>(),
            [
                ("A".to_owned(), "2".to_owned()),
                ("B".to_owned(), "x".to_owned()),
                ("C".to_owned(), "y".to_owned())
            ]
        );
    }
}
