//! Apache httpd: the otel-webserver-module is attached through the server's configuration
//! (see [`super::webserver`]): a clone of the app copies its config directory, the agent
//! init container writes `opentemetry_agent.conf` (sic, as the Operator names it) and adds an
//! `Include` of it to `httpd.conf`, and the app mounts the result over its config directory.

use std::fmt::Write as _;

use super::copy::agent_volume;
use super::injection::{Effect, Injection};
use super::webserver::{
    self, AGENT_DIR, ConfSyntax, SERVICE_INSTANCE_ID_PLACEHOLDER, STAGED_CONF_DIR, WebServer,
};
use super::{Agent, Language};
use crate::crd::{ApacheHttpdSpec, LanguageSpec};

pub const DEFAULT_IMAGE: &str =
    "ghcr.io/open-telemetry/opentelemetry-operator/autoinstrumentation-apache-httpd:1.0.4";
webserver::webserver_layout!(
    "apache",
    "OTEL_APACHE_AGENT_CONF",
    "APACHE_SERVICE_INSTANCE_ID"
);
/// Config directory when `apacheHttpd.configPath` is unset.
pub const DEFAULT_CONFIG_PATH: &str = "/usr/local/apache2/conf";
/// File name of the module configuration (the Operator's spelling, kept for compatibility).
pub const AGENT_CONF_FILE: &str = "opentemetry_agent.conf";

/// Run as `/bin/sh -c ATTACH_SCRIPT -- <config dir>` in the agent image, after the clone
/// copied the app's config directory to the staged directory. It copies the agent, renders
/// its log configuration, writes the module configuration (pod name filled in) and makes
/// `httpd.conf` include it from the config directory the app will see.
pub const ATTACH_SCRIPT: &str = r#"set -e
conf_dir="$1"
agent=/opt/opentelemetry-webserver/agent
staged=/opt/opentelemetry-webserver/source-conf
cp -r /opt/opentelemetry/* "$agent"
sed "s|__agent_log_dir__|$agent/logs|g" "$agent/conf/opentelemetry_sdk_log4cxx.xml.template" \
  > "$agent/conf/opentelemetry_sdk_log4cxx.xml"
printf '%s\n' "$OTEL_APACHE_AGENT_CONF" \
  | sed "s|<<SID-PLACEHOLDER>>|$APACHE_SERVICE_INSTANCE_ID|g" > "$staged/opentemetry_agent.conf"
printf '\nInclude %s/opentemetry_agent.conf\n' "$conf_dir" >> "$staged/httpd.conf"
"#;

/// The Apache httpd injector.
pub struct ApacheHttpd;

/// The config directory: `configPath` without a trailing `/`, or the default.
pub fn config_dir(config_path: Option<&str>) -> String {
    match config_path.filter(|p| !p.is_empty()) {
        None => DEFAULT_CONFIG_PATH.to_owned(),
        Some(p) if p.len() > 1 => p.strip_suffix('/').unwrap_or(p).to_owned(),
        Some(p) => p.to_owned(),
    }
}

/// The module configuration written to `opentemetry_agent.conf`: the SDK libraries, the
/// module for the Apache version (2.2 has its own build) and the `ApacheModule*` settings,
/// each value checked and written as one directive argument; or the warning that one
/// cannot be.
pub fn agent_conf(
    spec: &ApacheHttpdSpec,
    endpoint: &str,
    service: &str,
    namespace: &str,
) -> Result<String, String> {
    let lang = Language::ApacheHttpd;
    let endpoint = webserver::checked(lang, "spec.exporter.endpoint", endpoint)?;
    let service = webserver::checked(lang, "the service name", service)?;
    let namespace = webserver::checked(lang, "the namespace", namespace)?;
    let lib = format!("{AGENT_DIR}/sdk_lib/lib");
    let module = format!("{AGENT_DIR}/WebServerModule/Apache");
    let suffix = if spec.version.as_deref() == Some("2.2") {
        "22"
    } else {
        ""
    };
    let mut out = String::from("\n#Load the Otel Webserver SDK\n");
    for l in [
        "common",
        "resources",
        "trace",
        "otlp_recordable",
        "exporter_ostream_span",
        "exporter_otlp_grpc",
    ] {
        let _ = writeln!(out, "LoadFile {lib}/libopentelemetry_{l}.so");
    }
    let _ = write!(
        out,
        "#Load the Otel ApacheModule SDK\n\
         LoadFile {lib}/libopentelemetry_webserver_sdk.so\n\
         #Load the Apache Module. In this example for Apache 2.4\n\
         #LoadModule otel_apache_module {module}/libmod_apache_otel.so\n\
         #Load the Apache Module. In this example for Apache 2.2\n\
         #LoadModule otel_apache_module {module}/libmod_apache_otel22.so\n\
         LoadModule otel_apache_module {module}/libmod_apache_otel{suffix}.so\n\
         #Attributes\n"
    );
    // The two leading spaces in " ON" are the Operator's; kept so the file is identical.
    let defaults = [
        ("ApacheModuleEnabled", "ON".to_owned()),
        ("ApacheModuleOtelSpanExporter", "otlp".to_owned()),
        ("ApacheModuleOtelExporterEndpoint", endpoint.to_owned()),
        ("ApacheModuleServiceName", service.to_owned()),
        ("ApacheModuleServiceNamespace", namespace.to_owned()),
        (
            "ApacheModuleServiceInstanceId",
            SERVICE_INSTANCE_ID_PLACEHOLDER.to_owned(),
        ),
        ("ApacheModuleResolveBackends", " ON".to_owned()),
        ("ApacheModuleTraceAsError", " ON".to_owned()),
    ];
    for (k, v) in webserver::module_attributes(lang, &defaults, &spec.attrs)? {
        let _ = writeln!(out, "{k} {}", ConfSyntax::Apache.arg(&v));
    }
    Ok(out)
}

impl Agent for ApacheHttpd {
    fn supports_init_targets(&self) -> bool {
        false
    }

    fn inject(&self, cx: &mut Injection<'_, '_>) -> Effect {
        let default = ApacheHttpdSpec::default();
        let apache = cx.inst.spec.apache_httpd.as_deref().unwrap_or(&default);
        let path = apache.config_path.as_deref().unwrap_or_default();
        if let Err(warning) =
            webserver::check_config_path(Language::ApacheHttpd, "spec.apacheHttpd.configPath", path)
        {
            cx.warn(warning);
            return Effect::InvalidValue;
        }
        let conf_dir = config_dir(apache.config_path.as_deref());
        let endpoint = webserver::endpoint(&cx.inst.spec);
        let namespace = webserver::service_namespace(cx.info.namespace, "apache-httpd");
        let render = |service: &str| agent_conf(apache, &endpoint, service, &namespace);
        let image = cx.image(Language::ApacheHttpd);
        let ws = WebServer {
            lang: Language::ApacheHttpd,
            lang_env: apache.env(),
            // The config copy is always an emptyDir; only the agent honours the claim template.
            conf_volume: agent_volume(CONF_VOLUME, None, apache.volume_limit_size()),
            agent_volume: agent_volume(
                AGENT_VOLUME,
                apache.volume_claim_template(),
                apache.volume_limit_size(),
            ),
            resources: webserver::RESOURCES.or(apache.resources()),
            clone_command: super::copy::copy_dir(&conf_dir, STAGED_CONF_DIR),
            clone_args: None,
            attach_name: ATTACH_CONTAINER,
            attach_image: image,
            attach_args: vec![ATTACH_SCRIPT.into(), "--".into(), conf_dir.clone()],
            conf_env: AGENT_CONF_ENV,
            instance_env: SERVICE_INSTANCE_ID_ENV,
            agent_conf: &render,
            extend_library_path: false,
            conf_dir,
        };
        webserver::inject(cx, &ws)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_dir_defaults_and_trailing_slash() {
        assert_eq!(config_dir(None), DEFAULT_CONFIG_PATH);
        assert_eq!(config_dir(Some("")), DEFAULT_CONFIG_PATH);
        assert_eq!(config_dir(Some("/etc/httpd/conf/")), "/etc/httpd/conf");
        assert_eq!(config_dir(Some("/etc/httpd")), "/etc/httpd");
    }

    #[test]
    fn script_names_the_files_the_operator_names() {
        assert!(ATTACH_SCRIPT.contains(AGENT_CONF_FILE));
        assert!(ATTACH_SCRIPT.contains(AGENT_CONF_ENV));
        assert!(ATTACH_SCRIPT.contains(SERVICE_INSTANCE_ID_ENV));
        assert!(ATTACH_SCRIPT.contains(SERVICE_INSTANCE_ID_PLACEHOLDER));
        assert!(ATTACH_SCRIPT.contains(AGENT_DIR));
        assert!(ATTACH_SCRIPT.contains(STAGED_CONF_DIR));
    }
}
