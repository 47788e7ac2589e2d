//! nginx: the otel-webserver-module is attached through the server's configuration (see
//! [`super::webserver`]): a clone of the app copies the config directory and records
//! `nginx -v`, the agent init container prepends `env OTEL_RESOURCE_ATTRIBUTES;` and the
//! `load_module` line for that version to the config file and drops the module settings into
//! `conf.d/opentelemetry_agent.conf`; the app mounts the result over its config directory and
//! finds the SDK libraries through `LD_LIBRARY_PATH`.

use std::fmt::Write as _;

use k8s_openapi::api::core::v1::{EmptyDirVolumeSource, Volume};

use super::injection::{Effect, Injection};
use super::webserver::{self, ConfSyntax, SERVICE_INSTANCE_ID_PLACEHOLDER, WebServer};
use super::{Agent, Language};
use crate::crd::{LanguageSpec, NginxSpec};

/// The nginx module ships in the Apache httpd agent image.
pub const DEFAULT_IMAGE: &str =
    "ghcr.io/open-telemetry/opentelemetry-operator/autoinstrumentation-apache-httpd:1.0.4";
webserver::webserver_layout!(
    "nginx",
    "OTEL_NGINX_AGENT_CONF",
    "OTEL_NGINX_SERVICE_INSTANCE_ID"
);
/// Config file when `nginx.configFile` is unset.
pub const DEFAULT_CONFIG_FILE: &str = "/etc/nginx/nginx.conf";
/// File name of the module configuration, moved into `conf.d`.
pub const AGENT_CONF_FILE: &str = "opentelemetry_agent.conf";

/// Run as `/bin/sh -c CLONE_SCRIPT -- <config dir>` in a clone of the app: copies the config
/// directory to the staged directory and records the nginx version (`nginx -v` prints
/// `nginx version: nginx/1.27.0` on stderr; the part after the last `/` is kept).
pub const CLONE_SCRIPT: &str = r#"set -e
conf_dir="$1"
staged=/opt/opentelemetry-webserver/source-conf
cp -r "$conf_dir"/. "$staged"
banner="$( { nginx -v; } 2>&1 )"
printf '%s\n' "${banner##*/}" > "$staged/version.txt"
"#;

/// Run as `/bin/sh -c ATTACH_SCRIPT -- <config file name>` in the agent image: copies the
/// agent, renders its log configuration, writes the module configuration (pod name filled in)
/// into `conf.d`, and puts `env OTEL_RESOURCE_ATTRIBUTES;` and the `load_module` line for the
/// recorded version at the top of the config file.
pub const ATTACH_SCRIPT: &str = r#"set -e
conf_file="$1"
agent=/opt/opentelemetry-webserver/agent
staged=/opt/opentelemetry-webserver/source-conf
cp -r /opt/opentelemetry/* "$agent"
version="$(cat "$staged/version.txt")"
sed "s|__agent_log_dir__|$agent/logs|g" "$agent/conf/opentelemetry_sdk_log4cxx.xml.template" \
  > "$agent/conf/opentelemetry_sdk_log4cxx.xml"
printf '%s\n' "$OTEL_NGINX_AGENT_CONF" \
  | sed "s|<<SID-PLACEHOLDER>>|$OTEL_NGINX_SERVICE_INSTANCE_ID|g" > "$staged/opentelemetry_agent.conf"
{
  printf 'env OTEL_RESOURCE_ATTRIBUTES;\n'
  printf 'load_module %s/WebServerModule/Nginx/%s/ngx_http_opentelemetry_module.so;\n' "$agent" "$version"
  cat "$staged/$conf_file"
} > "$staged/.otel-$conf_file"
mv "$staged/.otel-$conf_file" "$staged/$conf_file"
mv "$staged/opentelemetry_agent.conf" "$staged/conf.d"
"#;

/// The nginx injector.
pub struct Nginx;

/// The config directory and file name of `configFile` (or the default), as Go's
/// `filepath.Dir` and `filepath.Base` split them for ordinary paths.
pub fn config_location(config_file: Option<&str>) -> (String, String) {
    let file = config_file
        .filter(|f| !f.is_empty())
        .unwrap_or(DEFAULT_CONFIG_FILE);
    match file.rfind('/') {
        None => (".".to_owned(), file.to_owned()),
        Some(i) => {
            let dir = file[..i].trim_end_matches('/');
            let dir = if dir.is_empty() { "/" } else { dir };
            (dir.to_owned(), file[i + 1..].to_owned())
        }
    }
}

/// The module settings (`NginxModule* value;` lines, sorted by key), each value checked and
/// written as one directive argument; or the warning that one cannot be.
pub fn agent_conf(
    spec: &NginxSpec,
    endpoint: &str,
    service: &str,
    namespace: &str,
) -> Result<String, String> {
    let lang = Language::Nginx;
    let endpoint = webserver::checked(lang, "spec.exporter.endpoint", endpoint)?;
    let service = webserver::checked(lang, "the service name", service)?;
    let namespace = webserver::checked(lang, "the namespace", namespace)?;
    let defaults = [
        ("NginxModuleEnabled", "ON".to_owned()),
        ("NginxModuleOtelSpanExporter", "otlp".to_owned()),
        ("NginxModuleOtelExporterEndpoint", endpoint.to_owned()),
        ("NginxModuleServiceName", service.to_owned()),
        ("NginxModuleServiceNamespace", namespace.to_owned()),
        (
            "NginxModuleServiceInstanceId",
            SERVICE_INSTANCE_ID_PLACEHOLDER.to_owned(),
        ),
        ("NginxModuleResolveBackends", "ON".to_owned()),
        ("NginxModuleTraceAsError", "ON".to_owned()),
    ];
    let mut out = String::new();
    for (k, v) in webserver::module_attributes(lang, &defaults, &spec.attrs)? {
        let _ = writeln!(out, "{k} {};", ConfSyntax::Nginx.arg(&v));
    }
    Ok(out)
}

fn empty_dir(name: &str) -> Volume {
    Volume {
        name: name.to_owned(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Default::default()
    }
}

impl Agent for Nginx {
    fn supports_init_targets(&self) -> bool {
        false
    }

    fn inject(&self, cx: &mut Injection<'_, '_>) -> Effect {
        let default = NginxSpec::default();
        let nginx = cx.inst.spec.nginx.as_deref().unwrap_or(&default);
        let path = nginx.config_file.as_deref().unwrap_or_default();
        if let Err(warning) =
            webserver::check_config_path(Language::Nginx, "spec.nginx.configFile", path)
        {
            cx.warn(warning);
            return Effect::InvalidValue;
        }
        let (conf_dir, conf_file) = config_location(nginx.config_file.as_deref());
        let endpoint = webserver::endpoint(&cx.inst.spec);
        let namespace = webserver::service_namespace(cx.info.namespace, "nginx");
        let render = |service: &str| agent_conf(nginx, &endpoint, service, &namespace);
        let image = cx.image(Language::Nginx);
        let ws = WebServer {
            lang: Language::Nginx,
            lang_env: nginx.env(),
            // As in the Operator, both volumes are plain emptyDirs.
            conf_volume: empty_dir(CONF_VOLUME),
            agent_volume: empty_dir(AGENT_VOLUME),
            resources: webserver::RESOURCES.or(nginx.resources()),
            clone_command: vec!["/bin/sh".into(), "-c".into()],
            clone_args: Some(vec![CLONE_SCRIPT.into(), "--".into(), conf_dir.clone()]),
            attach_name: ATTACH_CONTAINER,
            attach_image: image,
            attach_args: vec![ATTACH_SCRIPT.into(), "--".into(), conf_file],
            conf_env: AGENT_CONF_ENV,
            instance_env: SERVICE_INSTANCE_ID_ENV,
            agent_conf: &render,
            extend_library_path: true,
            conf_dir,
        };
        webserver::inject(cx, &ws)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_file_is_split_into_directory_and_name() {
        let s = |d: &str, f: &str| (d.to_owned(), f.to_owned());
        assert_eq!(config_location(None), s("/etc/nginx", "nginx.conf"));
        assert_eq!(config_location(Some("")), s("/etc/nginx", "nginx.conf"));
        assert_eq!(
            config_location(Some("/opt/app/conf/main.conf")),
            s("/opt/app/conf", "main.conf")
        );
        assert_eq!(config_location(Some("/nginx.conf")), s("/", "nginx.conf"));
        assert_eq!(config_location(Some("nginx.conf")), s(".", "nginx.conf"));
    }

    #[test]
    fn scripts_name_the_files_the_operator_names() {
        assert!(ATTACH_SCRIPT.contains(AGENT_CONF_FILE));
        assert!(ATTACH_SCRIPT.contains(AGENT_CONF_ENV));
        assert!(ATTACH_SCRIPT.contains(SERVICE_INSTANCE_ID_ENV));
        assert!(ATTACH_SCRIPT.contains(SERVICE_INSTANCE_ID_PLACEHOLDER));
        assert!(ATTACH_SCRIPT.contains("version.txt") && CLONE_SCRIPT.contains("version.txt"));
        assert!(ATTACH_SCRIPT.contains(webserver::AGENT_DIR));
    }
}
