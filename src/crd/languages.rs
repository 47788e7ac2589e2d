//! The seven per-language sections of the spec (`java`, `nodejs`, ...): each names its
//! descriptions and its own extra fields; `language_section!` supplies the rest.

use k8s_openapi::api::core::v1::SecurityContext;

use super::object::schema_objects;
use super::section::language_section;
use super::validation::{CONFIG_PATH_MAX_LENGTH, CONFIG_PATH_PATTERN};

language_section! {
    /// Java auto-instrumentation (javaagent).
    pub struct JavaSpec {
        /// Image with the javaagent JAR.
        image,
        /// Java-specific env vars; they take precedence over spec.env.
        env,
        /// Compute resources of the init container.
        resources,
        /// Ephemeral volume for the agent files; if unset an emptyDir is used.
        volume_claim_template,
        /// Extension JARs, all copied into one directory.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub extensions: Vec<Extension>,
    }
}

schema_objects! {
    /// A Java agent extension.
    pub struct Extension {
        /// Image with the extension JARs.
        pub image: String,
        /// Directory holding the extension JARs in that image.
        pub dir: String,
    }
}

language_section! {
    /// Node.js auto-instrumentation.
    pub struct NodeJsSpec {
        /// Image with the Node.js SDK and instrumentations.
        image,
        /// Node.js-specific env vars; they take precedence over spec.env.
        env,
        /// Compute resources of the init container.
        resource_requirements,
        /// Ephemeral volume for the instrumentation files; if unset an emptyDir is used.
        volume_claim_template,
    }
}

language_section! {
    /// Python auto-instrumentation.
    pub struct PythonSpec {
        /// Image with the Python SDK and instrumentations.
        image,
        /// Python-specific env vars; they take precedence over spec.env.
        env,
        /// Compute resources of the init container.
        resource_requirements,
        /// Ephemeral volume for the instrumentation files; if unset an emptyDir is used.
        volume_claim_template,
    }
}

language_section! {
    /// .NET auto-instrumentation.
    pub struct DotNetSpec {
        /// Image with the .NET SDK and instrumentations.
        image,
        /// .NET-specific env vars; they take precedence over spec.env.
        env,
        /// Compute resources of the init container.
        resource_requirements,
        /// Ephemeral volume for the instrumentation files; if unset an emptyDir is used.
        volume_claim_template,
    }
}

language_section! {
    /// Go auto-instrumentation (eBPF sidecar).
    pub struct GoSpec {
        /// Image of the Go auto-instrumentation sidecar.
        image,
        /// Go-specific env vars; they take precedence over spec.env.
        env,
        /// Compute resources of the sidecar.
        resource_requirements,
        /// Ephemeral volume for the instrumentation files; if unset an emptyDir is used.
        volume_claim_template,
        /// Security context of the sidecar (it needs privileges to use eBPF).
        pub security_context: Option<Box<SecurityContext>>,
    }
}

language_section! {
    /// Apache HTTPD auto-instrumentation (otel-webserver-module).
    pub struct ApacheHttpdSpec with attrs {
        /// Image with the Apache HTTPD module.
        image,
        /// Apache-specific env vars; they take precedence over spec.env.
        env,
        /// Compute resources of the init containers.
        resource_requirements,
        /// Ephemeral volume for the module files; if unset an emptyDir is used.
        volume_claim_template,
        /// Apache HTTPD version: 2.4 (default) or 2.2.
        pub version: Option<String>,
        /// Directory of the Apache configuration (default /usr/local/apache2/conf).
        #[schemars(length(max = CONFIG_PATH_MAX_LENGTH), pattern(CONFIG_PATH_PATTERN))]
        pub config_path: Option<String>,
    }
}

language_section! {
    /// Nginx auto-instrumentation (otel-webserver-module).
    pub struct NginxSpec with attrs {
        /// Image with the Nginx module.
        image,
        /// Nginx-specific env vars; they take precedence over spec.env.
        env,
        /// Compute resources of the init containers.
        resource_requirements,
        /// Ephemeral volume for the module files; if unset an emptyDir is used.
        volume_claim_template,
        /// Nginx configuration file (default /etc/nginx/nginx.conf).
        #[schemars(length(max = CONFIG_PATH_MAX_LENGTH), pattern(CONFIG_PATH_PATTERN))]
        pub config_file: Option<String>,
    }
}
