//! The Apache httpd and nginx clone and attach init containers, run for real: the engine
//! injects a pod, then each init container's command and args (the product's scripts, as
//! the API server stores them) run under `/bin/sh` in a sandbox laid out like the container
//! (see `kubelet/mod.rs`), once with dash and GNU tools and once with BusyBox. The files they
//! leave in the pod's volumes are compared with what the Operator's scripts
//! (`internal/instrumentation/scripts/*.sh`) are documented to write: the server config with
//! the module loaded and the agent config included, the agent config's keys and values (with
//! `$(OTEL_NODE_IP)` expanded by the kubelet and the pod name in place of the placeholder),
//! and the agent files where the config says they are.

mod nginx;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use json_patch::Patch;
use k8s_openapi::api::core::v1::Pod;
use otel_injector::admission::mutate;
use otel_injector::cluster::StaticCatalog;
use otel_injector::engine::{EngineConfig, Snapshot};
use serde_json::{Value, json};

use crate::kubelet::{POD, Run, SHELLS, Shell, expand, read_tree, write_tree};

const AGENT_DIR: &str = "/opt/opentelemetry-webserver/agent";

/// The patched pod for `pod` with the Instrumentations in `yaml` (namespace `shop`).
fn inject(yaml: &str, pod: &Value) -> Value {
    let catalog = StaticCatalog::from_yaml(yaml).unwrap();
    let config = EngineConfig::default();
    let typed: Pod = serde_json::from_value(pod.clone()).unwrap();
    let (ops, report) = mutate(&Snapshot::take(&catalog, "shop", &config), &typed);
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);
    let mut out = pod.clone();
    json_patch::patch(&mut out, &Patch(ops)).unwrap();
    out
}

fn init<'p>(pod: &'p Value, name: &str) -> &'p Value {
    pod["spec"]["initContainers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no init container {name}"))
}

/// A Deployment's pod (service name `frontend`) with one app container.
fn deployment_pod(inject: &str, container: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "generateName": "frontend-7d4b9c8f5-", "namespace": "shop",
            "labels": {"pod-template-hash": "7d4b9c8f5"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "name": "frontend-7d4b9c8f5", "uid": "u1", "controller": true}],
            "annotations": {inject: "true"}
        },
        "spec": {"containers": [container]}
    })
}

/// What `/opt/opentelemetry` holds in the agent image (`autoinstrumentation/apache-httpd`,
/// the otel-webserver-module SDK), as small fakes.
const AGENT_FILES: &[(&str, &str)] = &[
    ("VERSION.txt", "1.0.4\n"),
    (
        "conf/opentelemetry_sdk_log4cxx.xml.template",
        "<log4j:configuration>\n  <appender name=\"main\">\n    <param name=\"File\" value=\"__agent_log_dir__/sdk.log\"/>\n  </appender>\n  <param name=\"Dir\" value=\"__agent_log_dir__\"/>\n</log4j:configuration>\n",
    ),
    ("logs/.keep", ""),
    (
        "WebServerModule/Apache/libmod_apache_otel.so",
        "fake 2.4 module",
    ),
    (
        "WebServerModule/Apache/libmod_apache_otel22.so",
        "fake 2.2 module",
    ),
    (
        "WebServerModule/Nginx/1.26.0/ngx_http_opentelemetry_module.so",
        "fake nginx 1.26.0 module",
    ),
    (
        "WebServerModule/Nginx/1.27.0/ngx_http_opentelemetry_module.so",
        "fake nginx 1.27.0 module",
    ),
    ("sdk_lib/lib/libopentelemetry_common.so", "fake"),
    ("sdk_lib/lib/libopentelemetry_resources.so", "fake"),
    ("sdk_lib/lib/libopentelemetry_trace.so", "fake"),
    ("sdk_lib/lib/libopentelemetry_otlp_recordable.so", "fake"),
    (
        "sdk_lib/lib/libopentelemetry_exporter_ostream_span.so",
        "fake",
    ),
    ("sdk_lib/lib/libopentelemetry_exporter_otlp_grpc.so", "fake"),
    ("sdk_lib/lib/libopentelemetry_webserver_sdk.so", "fake"),
];

/// The agent volume after the attach step: the image's files, plus the log configuration
/// rendered with the agent's log directory.
fn expected_agent_volume() -> BTreeMap<String, String> {
    let mut files: BTreeMap<String, String> = AGENT_FILES
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    files.insert(
        "conf/opentelemetry_sdk_log4cxx.xml".to_owned(),
        "<log4j:configuration>\n  <appender name=\"main\">\n    <param name=\"File\" value=\"/opt/opentelemetry-webserver/agent/logs/sdk.log\"/>\n  </appender>\n  <param name=\"Dir\" value=\"/opt/opentelemetry-webserver/agent/logs\"/>\n</log4j:configuration>\n".to_owned(),
    );
    files
}

/// Host directories of one test: the images' files and the pod's volumes.
struct Layout {
    dir: tempfile::TempDir,
    volumes: BTreeMap<String, PathBuf>,
}

impl Layout {
    fn new(volume_names: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut volumes = BTreeMap::new();
        for name in volume_names {
            let p = dir.path().join("volumes").join(name);
            std::fs::create_dir_all(&p).unwrap();
            volumes.insert((*name).to_owned(), p);
        }
        write_tree(&dir.path().join("agent-image"), AGENT_FILES);
        Layout { dir, volumes }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn volume(&self, name: &str) -> BTreeMap<String, String> {
        read_tree(&self.volumes[name])
    }

    fn run(&self, container: &Value, image: &[(&str, &Path)], shell: Shell) {
        Run {
            container,
            image,
            volumes: &self.volumes,
            shell,
            scratch: self.dir.path(),
            extra: &[],
        }
        .run(&POD);
    }

    /// The host file behind an absolute path in `container`, through its volume mounts.
    fn resolve(&self, container: &Value, path: &str) -> PathBuf {
        let mounts = container["volumeMounts"].as_array().unwrap();
        let m = mounts
            .iter()
            .filter(|m| {
                let at = m["mountPath"].as_str().unwrap();
                path.strip_prefix(at).is_some_and(|r| r.starts_with('/'))
            })
            .max_by_key(|m| m["mountPath"].as_str().unwrap().len())
            .unwrap_or_else(|| panic!("{path} is on no volume of {}", container["name"]));
        let rest = &path[m["mountPath"].as_str().unwrap().len() + 1..];
        self.volumes[m["name"].as_str().unwrap()].join(rest)
    }
}

/// Every absolute path an uncommented `LoadFile`/`LoadModule`/`load_module`/`Include` line
/// names exists where the app container will look for it (relative ones are the image's own).
fn assert_referenced_files_exist(layout: &Layout, app: &Value, config: &str) {
    let mut seen = 0;
    for line in config.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let path = match words.as_slice() {
            ["LoadFile", path] | ["LoadModule", _, path] | ["Include", path] => *path,
            ["load_module", path] => path.trim_end_matches(';'),
            _ => continue,
        };
        if !path.starts_with('/') {
            continue;
        }
        assert!(
            layout.resolve(app, path).is_file(),
            "{path} ({line:?}) is missing in the app's view"
        );
        seen += 1;
    }
    assert!(seen > 0, "no file referenced in {config:?}");
}

// === Apache httpd ===

const HTTPD_24_CONF: &str = r#"ServerRoot "/usr/local/apache2"
Listen 80
LoadModule mpm_event_module modules/mod_mpm_event.so
LoadModule authz_core_module modules/mod_authz_core.so
LoadModule mime_module modules/mod_mime.so
LoadModule log_config_module modules/mod_log_config.so
User daemon
Group daemon
DocumentRoot "/usr/local/apache2/htdocs"
<Directory "/usr/local/apache2/htdocs">
    Require all granted
</Directory>
ErrorLog /proc/self/fd/2
TypesConfig conf/mime.types
Include conf/extra/httpd-default.conf
"#;

const HTTPD_22_CONF: &str = r#"ServerTokens OS
ServerRoot "/etc/httpd"
Listen 80
LoadModule authz_host_module modules/mod_authz_host.so
LoadModule log_config_module modules/mod_log_config.so
Include conf.d/*.conf
User apache
Group apache
NameVirtualHost *:80
DocumentRoot "/var/www/html"
<Directory "/var/www/html">
    Order allow,deny
    Allow from all
</Directory>
"#;

/// The Apache module configuration the Operator's `getApacheOtelConfig` renders, after the
/// kubelet and the attach script: `$(OTEL_NODE_IP)` expanded, the pod name in place of the
/// placeholder, and the trailing newline the script's `printf '%s\n'` (the Operator's `echo`)
/// adds.
fn apache_agent_conf(suffix: &str) -> String {
    let lib = "/opt/opentelemetry-webserver/agent/sdk_lib/lib";
    let m = "/opt/opentelemetry-webserver/agent/WebServerModule/Apache";
    format!(
        "\n#Load the Otel Webserver SDK\n\
         LoadFile {lib}/libopentelemetry_common.so\n\
         LoadFile {lib}/libopentelemetry_resources.so\n\
         LoadFile {lib}/libopentelemetry_trace.so\n\
         LoadFile {lib}/libopentelemetry_otlp_recordable.so\n\
         LoadFile {lib}/libopentelemetry_exporter_ostream_span.so\n\
         LoadFile {lib}/libopentelemetry_exporter_otlp_grpc.so\n\
         #Load the Otel ApacheModule SDK\n\
         LoadFile {lib}/libopentelemetry_webserver_sdk.so\n\
         #Load the Apache Module. In this example for Apache 2.4\n\
         #LoadModule otel_apache_module {m}/libmod_apache_otel.so\n\
         #Load the Apache Module. In this example for Apache 2.2\n\
         #LoadModule otel_apache_module {m}/libmod_apache_otel22.so\n\
         LoadModule otel_apache_module {m}/libmod_apache_otel{suffix}.so\n\
         #Attributes\n\
         ApacheModuleEnabled ON\n\
         ApacheModuleOtelExporterEndpoint http://10.0.0.7:4317\n\
         ApacheModuleOtelMaxQueueSize 4096\n\
         ApacheModuleOtelSpanExporter otlp\n\
         ApacheModuleResolveBackends  ON\n\
         ApacheModuleServiceInstanceId frontend-7d4b9c8f5-x2x9q\n\
         ApacheModuleServiceName frontend\n\
         ApacheModuleServiceNamespace shop\n\
         ApacheModuleTraceAsError  ON\n\n"
    )
}

fn apache_instrumentation(extra: &str) -> String {
    format!(
        r#"
apiVersion: opentelemetry.io/v1alpha1
kind: Instrumentation
metadata:
  name: web
  namespace: shop
spec:
  exporter:
    endpoint: http://$(OTEL_NODE_IP):4317
  env:
    - name: OTEL_LOGS_EXPORTER
      value: otlp
  apacheHttpd:
    attrs:
      - name: ApacheModuleOtelMaxQueueSize
        value: "4096"
{extra}"#
    )
}

/// Injects Apache httpd, runs both init containers on a config tree at `conf_dir` and checks
/// every file they write.
fn apache_case(version_lines: &str, conf_dir: &str, httpd_conf: &str, suffix: &str) {
    let pod = inject(
        &apache_instrumentation(version_lines),
        &deployment_pod(
            "instrumentation.opentelemetry.io/inject-apache-httpd",
            json!({"name": "web", "image": "httpd:2.4.62"}),
        ),
    );
    let clone = init(&pod, "otel-agent-source-container-clone");
    let attach = init(&pod, "otel-agent-attach-apache");
    let app = &pod["spec"]["containers"][0];
    // The attach container's env, in order: what the kubelet expands `$(OTEL_NODE_IP)` with.
    let names: Vec<&str> = attach["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "OTEL_NODE_IP",
            "OTEL_POD_IP",
            "OTEL_LOGS_EXPORTER",
            "OTEL_APACHE_AGENT_CONF",
            "APACHE_SERVICE_INSTANCE_ID"
        ]
    );

    let app_tree: &[(&str, &str)] = &[
        ("httpd.conf", httpd_conf),
        ("mime.types", "text/html html htm\ntext/css css\n"),
        ("extra/httpd-default.conf", "Timeout 60\nKeepAlive On\n"),
        (".htpasswd", "admin:$apr1$abc$def\n"),
    ];
    for shell in SHELLS {
        let layout = Layout::new(&["otel-apache-conf-dir", "otel-apache-agent"]);
        write_tree(&layout.path("app-image"), app_tree);
        layout.run(clone, &[(conf_dir, &layout.path("app-image"))], shell);
        layout.run(
            attach,
            &[("/opt/opentelemetry", &layout.path("agent-image"))],
            shell,
        );

        let mut expected: BTreeMap<String, String> = app_tree
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        expected.insert(
            "httpd.conf".to_owned(),
            format!("{httpd_conf}\nInclude {conf_dir}/opentemetry_agent.conf\n"),
        );
        expected.insert(
            "opentemetry_agent.conf".to_owned(),
            apache_agent_conf(suffix),
        );
        let conf = layout.volume("otel-apache-conf-dir");
        assert_eq!(conf, expected, "{shell:?}");
        assert_eq!(
            layout.volume("otel-apache-agent"),
            expected_agent_volume(),
            "{shell:?}"
        );
        assert_referenced_files_exist(&layout, app, &conf["httpd.conf"]);
        assert_referenced_files_exist(&layout, app, &conf["opentemetry_agent.conf"]);
    }
}

#[test]
fn apache_2_4_config_includes_the_module_config_with_the_node_ip_expanded() {
    apache_case("", "/usr/local/apache2/conf", HTTPD_24_CONF, "");
}

#[test]
fn apache_2_2_config_loads_the_2_2_module_from_its_own_config_dir() {
    apache_case(
        "    version: \"2.2\"\n    configPath: /etc/httpd/conf/\n",
        "/etc/httpd/conf",
        HTTPD_22_CONF,
        "22",
    );
}

// === nginx ===

#[test]
fn the_scripts_reach_the_sandbox_as_the_kubelet_passes_them() {
    // The kubelet expands `$(VAR)` in command and args too: the scripts must survive it
    // unchanged (they use no `$$` and no `$(` naming a variable).
    let env = BTreeMap::from([
        ("OTEL_NODE_IP".to_owned(), "10.0.0.7".to_owned()),
        ("OTEL_POD_IP".to_owned(), "10.244.1.17".to_owned()),
    ]);
    for script in [
        otel_injector::agents::apache::ATTACH_SCRIPT,
        otel_injector::agents::nginx::CLONE_SCRIPT,
        otel_injector::agents::nginx::ATTACH_SCRIPT,
    ] {
        assert_eq!(expand(script, &env), script);
    }
}

#[test]
fn expansion_follows_the_kubelet() {
    let vars = BTreeMap::from([
        ("A".to_owned(), "1".to_owned()),
        ("NODE".to_owned(), "10.0.0.7".to_owned()),
    ]);
    for (input, expected) in [
        ("http://$(NODE):4317", "http://10.0.0.7:4317"),
        ("$(A)$(A)", "11"),
        ("$(B)", "$(B)"),
        ("$$(A)", "$(A)"),
        ("$$", "$"),
        ("a$", "a$"),
        ("$(A", "$(A"),
        ("$x", "$x"),
        ("`x` $(touch /p) ;", "`x` $(touch /p) ;"),
    ] {
        assert_eq!(expand(input, &vars), expected, "{input}");
    }
}
