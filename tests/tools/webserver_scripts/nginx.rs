//! nginx: the module loaded for the recorded version through the scripts, a config path with
//! spaces.

use std::collections::BTreeMap;

use serde_json::json;

use crate::kubelet::{SHELLS, write_executable, write_tree};

use super::{
    AGENT_DIR, Layout, assert_referenced_files_exist, deployment_pod, expected_agent_volume, init,
    inject,
};

pub(super) const NGINX_CONF: &str = r#"user  nginx;
worker_processes  auto;

error_log  /var/log/nginx/error.log notice;
pid        /var/run/nginx.pid;

events {
    worker_connections  1024;
}

http {
    include       /etc/nginx/mime.types;
    default_type  application/octet-stream;
    sendfile        on;
    keepalive_timeout  65;
    include /etc/nginx/conf.d/*.conf;
}
"#;

pub(super) const DEFAULT_SERVER: &str = r#"server {
    listen       80;
    server_name  localhost;
    location / {
        root   /usr/share/nginx/html;
        index  index.html index.htm;
    }
}
"#;

/// The nginx module settings the Operator's `getNginxOtelConfig` renders, after the kubelet
/// and the attach script (see [`apache_agent_conf`]).
pub(super) const NGINX_AGENT_CONF: &str = "NginxModuleEnabled ON;\n\
    NginxModuleOtelExporterEndpoint http://10.0.0.7:4317;\n\
    NginxModuleOtelMaxQueueSize 4096;\n\
    NginxModuleOtelSpanExporter otlp;\n\
    NginxModuleResolveBackends ON;\n\
    NginxModuleServiceInstanceId frontend-7d4b9c8f5-x2x9q;\n\
    NginxModuleServiceName frontend;\n\
    NginxModuleServiceNamespace shop;\n\
    NginxModuleTraceAsError ON;\n\n";

pub(super) const NGINX_INSTRUMENTATION: &str = r#"
apiVersion: opentelemetry.io/v1alpha1
kind: Instrumentation
metadata:
  name: web
  namespace: shop
spec:
  exporter:
    endpoint: http://$(OTEL_NODE_IP):4317
  nginx:
    env:
      - name: NGINX_OTEL_DEBUG
        value: "0"
    attrs:
      - name: NginxModuleOtelMaxQueueSize
        value: "4096"
"#;

pub(super) fn nginx_tree(conf_file: &str) -> Vec<(String, String)> {
    vec![
        (conf_file.to_owned(), NGINX_CONF.to_owned()),
        (
            "mime.types".to_owned(),
            "types {\n    text/html html;\n}\n".to_owned(),
        ),
        ("conf.d/default.conf".to_owned(), DEFAULT_SERVER.to_owned()),
        (".htpasswd".to_owned(), "admin:$apr1$abc$def\n".to_owned()),
        (".well-known/ready".to_owned(), "ok\n".to_owned()),
    ]
}

/// Injects nginx, runs both init containers (the config directory and file name given to the
/// scripts may be replaced, to reach paths the engine itself refuses) and checks every file
/// they write.
pub(super) fn nginx_case(conf_dir: Option<&str>, conf_file: &str) {
    let pod = inject(
        NGINX_INSTRUMENTATION,
        &deployment_pod(
            "instrumentation.opentelemetry.io/inject-nginx",
            json!({"name": "proxy", "image": "nginx:1.27.0"}),
        ),
    );
    let mut clone = init(&pod, "otel-agent-source-container-clone").clone();
    let mut attach = init(&pod, "otel-agent-attach-nginx").clone();
    let app = &pod["spec"]["containers"][0];
    assert_eq!(
        attach["env"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap())
            .collect::<Vec<_>>(),
        [
            "OTEL_NODE_IP",
            "OTEL_POD_IP",
            "NGINX_OTEL_DEBUG",
            "OTEL_NGINX_AGENT_CONF",
            "OTEL_NGINX_SERVICE_INSTANCE_ID"
        ]
    );
    let conf_dir = match conf_dir {
        Some(dir) => {
            clone["args"][2] = json!(dir);
            attach["args"][2] = json!(conf_file);
            dir
        }
        None => "/etc/nginx",
    };

    let tree = nginx_tree(conf_file);
    let tree: Vec<(&str, &str)> = tree.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    for shell in SHELLS {
        let layout = Layout::new(&["otel-nginx-conf-dir", "otel-nginx-agent"]);
        write_tree(&layout.path("app-image/conf"), &tree);
        // `nginx -v` prints its banner on stderr.
        write_executable(
            &layout.path("app-image/bin/nginx"),
            "#!/bin/sh\necho 'nginx version: nginx/1.27.0' >&2\n",
        );
        layout.run(
            &clone,
            &[
                (conf_dir, &layout.path("app-image/conf")),
                ("/usr/local/bin", &layout.path("app-image/bin")),
            ],
            shell,
        );
        layout.run(
            &attach,
            &[("/opt/opentelemetry", &layout.path("agent-image"))],
            shell,
        );

        let mut expected: BTreeMap<String, String> = tree
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        expected.insert(
            conf_file.to_owned(),
            format!(
                "env OTEL_RESOURCE_ATTRIBUTES;\n\
                 load_module {AGENT_DIR}/WebServerModule/Nginx/1.27.0/ngx_http_opentelemetry_module.so;\n\
                 {NGINX_CONF}"
            ),
        );
        expected.insert("version.txt".to_owned(), "1.27.0\n".to_owned());
        expected.insert(
            "conf.d/opentelemetry_agent.conf".to_owned(),
            NGINX_AGENT_CONF.to_owned(),
        );
        let conf = layout.volume("otel-nginx-conf-dir");
        assert_eq!(conf, expected, "{shell:?}");
        assert_eq!(
            layout.volume("otel-nginx-agent"),
            expected_agent_volume(),
            "{shell:?}"
        );
        assert_referenced_files_exist(&layout, app, &conf[conf_file]);
    }
}

#[test]
fn nginx_config_loads_the_module_for_the_recorded_version_and_keeps_dotfiles() {
    nginx_case(None, "nginx.conf");
}

#[test]
fn nginx_scripts_quote_a_config_path_with_spaces() {
    // The engine refuses such paths (the CRD's pattern); the scripts must still treat them as
    // one word each, since they reach them only as arguments.
    nginx_case(Some("/srv/my nginx"), "my site.conf");
}
