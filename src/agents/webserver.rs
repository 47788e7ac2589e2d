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
//! Every target gets the language env, the common env and the SDK config; the configuration
//! is cloned once per pod, from the first target (as with the Operator).
//!
//! The attach init container gets the pod and node IPs, `spec.<lang>.env` and `spec.env`
//! before the module configuration, so that the kubelet expands a `$(VAR)` in it (for
//! example `http://$(OTEL_NODE_IP):4317`) before the script writes it into the file.
//! Every value written into the server's configuration is checked first (control
//! characters refuse the language with a warning) and written as one directive argument
//! ([`ConfSyntax::arg`]); nothing the user wrote is ever parsed by a shell.

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, EnvVar, ResourceRequirements, Volume, VolumeMount};

use super::Language;
use super::copy::ResourceDefaults;
use super::injection::{Effect, Injection, ValueFromOrigin, value_from_origin, value_from_warning};
use super::sdk_env::{inject_common_env, inject_common_env_except, inject_sdk_config};
use crate::crd::{CONFIG_PATH_MAX_LENGTH, CONFIG_PATH_PATTERN, InstrumentationSpec};
use crate::pod::env::{EnvPlan, ValueExtension, field_ref, literal};
use crate::pod::plan::{InitPosition, Slot};

/// `webserver_layout!("name", AGENT_CONF_ENV, SERVICE_INSTANCE_ID_ENV)`, the Operator's names:
/// `ATTACH_CONTAINER` (installs the module, edits the copied configuration), `CONF_VOLUME`
/// (the edited configuration), `AGENT_VOLUME` (the agent files), and the variables carrying
/// the module configuration and the pod name into the attach container.
macro_rules! webserver_layout {
    ($name:literal, $conf_env:literal, $instance_env:literal) => {
        pub const ATTACH_CONTAINER: &str = concat!("otel-agent-attach-", $name);
        pub const CONF_VOLUME: &str = concat!("otel-", $name, "-conf-dir");
        pub const AGENT_VOLUME: &str = concat!("otel-", $name, "-agent");
        pub const AGENT_CONF_ENV: &str = $conf_env;
        pub const SERVICE_INSTANCE_ID_ENV: &str = $instance_env;
    };
}
pub(super) use webserver_layout;

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
pub const RESOURCES: ResourceDefaults = ResourceDefaults::agent("1m", "128Mi");

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
    /// The module configuration text, given the service name of the first target, or the
    /// warning that a value cannot be written into the server's configuration.
    pub agent_conf: &'x dyn Fn(&str) -> Result<String, String>,
    /// nginx: `LD_LIBRARY_PATH` of the first target is extended with the SDK libraries.
    pub extend_library_path: bool,
}

/// `LD_LIBRARY_PATH`, extended on the nginx app so the module finds the SDK libraries.
pub const LD_LIBRARY_PATH: &str = "LD_LIBRARY_PATH";
/// The SDK libraries inside the agent volume.
pub const SDK_LIB_DIR: &str = "/opt/opentelemetry-webserver/agent/sdk_lib/lib";

/// How a server's configuration files spell one directive argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfSyntax {
    /// Apache httpd: words split at whitespace; a word may be quoted (`ap_getword_conf`).
    Apache,
    /// nginx: as Apache, and `;`, `{`, `}` and a leading `#` end or open a directive
    /// (`ngx_conf_read_token`).
    Nginx,
}

impl ConfSyntax {
    fn special(self, c: char) -> bool {
        c.is_whitespace()
            || matches!(c, '"' | '\'' | '\\')
            || (self == ConfSyntax::Nginx && matches!(c, ';' | '{' | '}' | '#'))
    }

    /// `value` as exactly one directive argument. A value the server reads back unchanged as
    /// one word is written as it is (every value the Operator's own examples use, so the file
    /// is the Operator's); anything else is put in double quotes with `\` and `"` escaped,
    /// which both servers read back as the original text. Control characters must have
    /// been refused before ([`checked`]): no quoting keeps a newline inside a directive.
    pub fn arg(self, value: &str) -> Cow<'_, str> {
        let word = value.trim();
        if !word.is_empty() && !word.chars().any(|c| self.special(c)) {
            return Cow::Borrowed(value);
        }
        let mut quoted = String::with_capacity(value.len() + 2);
        quoted.push('"');
        for c in value.chars() {
            if matches!(c, '"' | '\\') {
                quoted.push('\\');
            }
            quoted.push(c);
        }
        quoted.push('"');
        Cow::Owned(quoted)
    }
}

/// `value`, if it can go into a server's configuration: a control character (a newline
/// above all) would end the directive and start one the user wrote, so it refuses the
/// language with a warning naming `what`.
pub fn checked<'v>(lang: Language, what: &str, value: &'v str) -> Result<&'v str, String> {
    if value.chars().any(char::is_control) {
        Err(format!(
            "{lang}: {what} has a control character; not injected"
        ))
    } else {
        Ok(value)
    }
}

/// `configPath` / `configFile` reach the clone's command, the attach script's argument and
/// (Apache) an `Include` line. The CRD's pattern, which the API server enforces, is checked
/// again here because Instrumentations read from files never met it.
pub fn check_config_path(lang: Language, field: &str, path: &str) -> Result<(), String> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '/' | '-');
    if path.len() <= CONFIG_PATH_MAX_LENGTH as usize && path.chars().all(allowed) {
        Ok(())
    } else {
        Err(format!(
            "{lang}: {field} must match {CONFIG_PATH_PATTERN}, at most {CONFIG_PATH_MAX_LENGTH} characters; not injected"
        ))
    }
}

/// `OTEL_*` settings of the module, as `(key, value)` pairs: the defaults, then
/// `spec.<lang>.attrs` replacing or adding keys. Sorted by key, as the Operator writes them.
/// A key must be a directive name and a value must pass [`checked`].
pub fn module_attributes(
    lang: Language,
    defaults: &[(&str, String)],
    attrs: &[EnvVar],
) -> Result<BTreeMap<String, String>, String> {
    let mut map: BTreeMap<String, String> = defaults
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect();
    for a in attrs {
        let directive = a.name.starts_with(|c: char| c.is_ascii_alphabetic())
            && a.name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !directive {
            return Err(format!(
                "{lang}: attrs name {:?} is not a directive name (letters, digits, _); not injected",
                a.name
            ));
        }
        let value = a.value.as_deref().unwrap_or_default();
        checked(lang, &format!("attrs {}", a.name), value)?;
        map.insert(a.name.clone(), value.to_owned());
    }
    Ok(map)
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

/// The attach container's env: the pod and node IPs, `spec.<lang>.env` and `spec.env` in
/// the order the app containers get them, then the module configuration and the pod name,
/// so that a `$(VAR)` in the configuration names a variable defined before it, which is
/// all the kubelet expands. User variables named like the last two are left out: the
/// script must read the webhook's values.
fn attach_env(ws: &WebServer<'_>, spec: &InstrumentationSpec, agent_conf: String) -> Vec<EnvVar> {
    let reserved = [ws.conf_env, ws.instance_env];
    let mut env = EnvPlan::new(&[]);
    for e in ws.lang_env {
        if !reserved.contains(&e.name.as_str()) {
            env.append_if_absent(e.clone());
        }
    }
    inject_common_env_except(&mut env, spec, &reserved);
    env.append_if_absent(literal(ws.conf_env, agent_conf));
    env.append_if_absent(field_ref(ws.instance_env, "metadata.name"));
    env.to_vec()
}

/// Whether a target cannot take the module: nginx extends `LD_LIBRARY_PATH`, which a
/// `valueFrom` (in the container or the language env) makes impossible.
fn library_path_from_value_from(env: &EnvPlan<'_>, ws: &WebServer<'_>) -> Option<ValueFromOrigin> {
    if ws.extend_library_path {
        value_from_origin(env, &[ws.lang_env], LD_LIBRARY_PATH)
    } else {
        None
    }
}

/// Injects one web server flavour into the app containers among the targets.
pub fn inject(cx: &mut Injection<'_, '_>, ws: &WebServer<'_>) -> Effect {
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
        return Effect::NothingInstrumented;
    }
    let (inst, info, targets) = (cx.inst, cx.info, cx.targets);
    let spec = &inst.spec;
    let use_labels = spec.use_labels_for_resource_attributes();

    // The target that gets the module (init containers were filtered out by the engine,
    // `supports_init_targets`). Its configuration is rendered, and refused if a value cannot
    // be written, before anything in the pod is changed.
    let first = targets.iter().copied().find(|&slot| {
        matches!(slot, Slot::App(_))
            && cx
                .plan
                .container(slot)
                .is_some_and(|c| library_path_from_value_from(&c.env, ws).is_none())
    });
    let agent_conf = match first.and_then(|slot| cx.plan.original(slot)) {
        None => String::new(),
        Some(app) => match (ws.agent_conf)(&info.service_name(use_labels, app)) {
            Ok(conf) => conf,
            Err(warning) => {
                cx.warn(warning);
                return Effect::InvalidValue;
            }
        },
    };

    let mut warnings = Vec::new();
    let mut done = Vec::new();
    let mut first_name: Option<&str> = None;
    let mut clone_env = Vec::new();
    for &slot in targets {
        if !matches!(slot, Slot::App(_)) {
            continue;
        }
        let Some(c) = cx.plan.container(slot) else {
            continue;
        };
        let app = c.container;
        let name = app.name.as_str();
        let is_first = first_name.is_none() && Some(slot) == first;
        if let Some(first_name) = first_name {
            warnings.push(format!(
                "{lang}: only {first_name:?} gets the module (one config clone per pod); \
                 {name:?} gets the SDK env only"
            ));
        } else if !is_first {
            // Before the first target, a target is skipped only for its library path.
            if let Some(origin) = library_path_from_value_from(&c.env, ws) {
                warnings.push(value_from_warning(lang, name, LD_LIBRARY_PATH, origin));
            }
            continue;
        }
        for e in ws.lang_env {
            c.env.append_if_absent(e.clone());
        }
        if is_first {
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
            if ws.extend_library_path {
                c.env
                    .extend(LD_LIBRARY_PATH, ValueExtension::path_list(SDK_LIB_DIR));
            }
            first_name = Some(name);
        }
        inject_common_env(&mut c.env, spec);
        inject_sdk_config(&mut c.env, info, spec, app);
        done.push(slot);
    }
    for w in warnings {
        cx.warn(w);
    }
    let (Some(first), Some(_)) = (first, first_name) else {
        return Effect::NothingInstrumented;
    };
    let Some(app) = cx.plan.original(first) else {
        return Effect::NothingInstrumented;
    };

    // Both init containers run with the first target's securityContext: the clone runs its
    // image, and the attach container writes into the volumes the clone wrote.
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
        env: Some(attach_env(ws, spec, agent_conf)),
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
    cx.plan.note_clone(CLONE_CONTAINER, &ws.conf_dir);
    cx.plan.add_init_container(InitPosition::End, clone);
    cx.plan.add_init_container(InitPosition::End, attach);
    Effect::Injected(done.len())
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
    fn arguments_are_quoted_only_when_the_server_would_split_or_change_them() {
        use ConfSyntax::{Apache, Nginx};
        for (syntax, value, written) in [
            (Apache, "frontend", "frontend"),
            (Apache, " ON", " ON"),
            (
                Apache,
                "http://$(OTEL_NODE_IP):4317",
                "http://$(OTEL_NODE_IP):4317",
            ),
            (Apache, "a;b#c{d}", "a;b#c{d}"),
            (Apache, "my service", "\"my service\""),
            (Apache, "", "\"\""),
            (Apache, "a\"b", "\"a\\\"b\""),
            (Apache, "a\\", "\"a\\\\\""),
            (Apache, "'x'", "\"'x'\""),
            (Nginx, "frontend", "frontend"),
            (Nginx, "a;b", "\"a;b\""),
            (Nginx, "#x", "\"#x\""),
            (Nginx, "{x}", "\"{x}\""),
            (Nginx, "a\\n", "\"a\\\\n\""),
        ] {
            assert_eq!(syntax.arg(value), written, "{syntax:?} {value:?}");
        }
    }

    #[test]
    fn config_paths_follow_the_crd_pattern() {
        let check = |p: &str| check_config_path(Language::Nginx, "spec.nginx.configFile", p);
        assert!(check("/etc/nginx/nginx.conf").is_ok());
        assert!(check("").is_ok());
        assert!(check(&"a".repeat(256)).is_ok());
        for bad in [
            "/etc/my nginx",
            "/etc/x\n",
            "/etc/$(x)",
            "/etc/`x`",
            "/etc/x;y",
        ] {
            assert_eq!(
                check(bad),
                Err("nginx: spec.nginx.configFile must match ^[A-Za-z0-9._/-]*$, at most 256 characters; not injected".to_owned()),
                "{bad:?}"
            );
        }
        assert!(check(&"a".repeat(257)).is_err());
    }

    #[test]
    fn attrs_override_and_add_keys_in_sorted_order() {
        let m = module_attributes(
            Language::Nginx,
            &[("B", "1".into()), ("A", "2".into())],
            &[literal("B", "x"), literal("C", "y")],
        )
        .unwrap();
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
