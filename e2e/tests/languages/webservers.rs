//! Apache httpd and nginx: the clone of the app's config and the module's attach step.

use otel_injector::agents;
use otel_injector::agents::Language;
use serde_json::json;

use crate::harness::*;

use super::{
    INJECT_NGINX, container, create_injected, env_order, init, names, one_env, pod_of, setup, spec,
    var,
};
use otel_injector::keys::INJECT_APACHE_HTTPD;

#[tokio::test]
async fn apache_httpd_pod_with_a_probe_gets_a_valid_clone_and_the_module() {
    let (env, ns) = setup("lang-apache", Options::default()).await;
    let inst = env
        .instrumentation(
            &ns,
            "web-inst",
            spec(
                "http://otel-collector.observability:4317",
                json!({"apacheHttpd": one_env("APACHE_OTEL_DEBUG", "0")}),
            ),
        )
        .await;
    // A readiness probe and envFrom on the server: the clone init container must not keep
    // the probe (the apiserver rejects probes on init containers).
    let mut p = pod_of(
        "frontend",
        json!({INJECT_APACHE_HTTPD: "true"}),
        json!([{
            "name": "web", "image": "httpd:2.4.62",
            "env": [{"name": "LISTEN", "value": "8080"}],
            "envFrom": [{"configMapRef": {"name": "web-env"}}],
            "securityContext": {"runAsUser": 33},
            "readinessProbe": {"httpGet": {"path": "/", "port": 8080}},
            "volumeMounts": [
                {"name": "conf", "mountPath": "/usr/local/apache2/conf/httpd.conf", "subPath": "httpd.conf"},
                {"name": "html", "mountPath": "/usr/local/apache2/htdocs"}
            ]
        }]),
    );
    p["spec"]["volumes"] = json!([{"name": "conf", "configMap": {"name": "web-conf"}},
                                  {"name": "html", "emptyDir": {}}]);
    let stored = create_injected(&env, &ns, &[inst], &p, &[Language::ApacheHttpd]).await;

    let web = container(&stored, "web");
    assert_eq!(
        names(&web["env"]),
        env_order(&["LISTEN", "APACHE_OTEL_DEBUG", "OTEL_LOGS_EXPORTER"])
    );
    assert_eq!(var(web, "OTEL_SERVICE_NAME"), "frontend");
    assert_eq!(
        web["volumeMounts"],
        json!([
            {"name": "html", "mountPath": "/usr/local/apache2/htdocs"},
            {"name": "otel-apache-agent", "mountPath": "/opt/opentelemetry-webserver/agent"},
            {"name": "otel-apache-conf-dir", "mountPath": "/usr/local/apache2/conf"}
        ])
    );
    assert_eq!(
        names(&stored["spec"]["initContainers"]),
        [
            "otel-agent-source-container-clone",
            "otel-agent-attach-apache"
        ]
    );
    let clone = init(&stored, "otel-agent-source-container-clone");
    assert_eq!(clone["image"], "httpd:2.4.62");
    assert_eq!(
        clone["command"],
        json!([
            "cp",
            "-r",
            "/usr/local/apache2/conf/.",
            "/opt/opentelemetry-webserver/source-conf"
        ])
    );
    assert!(clone.get("readinessProbe").is_none(), "{clone}");
    assert_eq!(clone["securityContext"], json!({"runAsUser": 33}));
    let attach = init(&stored, "otel-agent-attach-apache");
    assert_eq!(attach["image"], agents::apache::DEFAULT_IMAGE);
    assert_eq!(attach["command"], json!(["/bin/sh", "-c"]));
    assert_eq!(
        attach["args"],
        json!([
            agents::apache::ATTACH_SCRIPT,
            "--",
            "/usr/local/apache2/conf"
        ])
    );
    // The kubelet expands a `$(VAR)` in the module config only from variables before it.
    assert_eq!(
        names(&attach["env"]),
        [
            "OTEL_NODE_IP",
            "OTEL_POD_IP",
            "APACHE_OTEL_DEBUG",
            "OTEL_LOGS_EXPORTER",
            "OTEL_APACHE_AGENT_CONF",
            "APACHE_SERVICE_INSTANCE_ID"
        ]
    );
    let conf = var(attach, "OTEL_APACHE_AGENT_CONF");
    for line in [
        "LoadModule otel_apache_module /opt/opentelemetry-webserver/agent/WebServerModule/Apache/libmod_apache_otel.so\n",
        "ApacheModuleOtelExporterEndpoint http://otel-collector.observability:4317\n",
        "ApacheModuleServiceName frontend\n",
        &format!("ApacheModuleServiceNamespace {ns}\n"),
    ] {
        assert!(conf.contains(line), "{line:?} in {conf:?}");
    }
    assert_eq!(
        names(&stored["spec"]["volumes"]),
        ["conf", "html", "otel-apache-conf-dir", "otel-apache-agent"]
    );
}

#[tokio::test]
async fn nginx_pod_gets_the_module_and_the_library_path() {
    let (env, ns) = setup("lang-nginx", Options::default()).await;
    let inst = env
        .instrumentation(
            &ns,
            "web-inst",
            spec(
                "http://otel-collector.observability:4317",
                json!({"nginx": one_env("NGINX_OTEL_DEBUG", "0")}),
            ),
        )
        .await;
    let mut p = pod_of(
        "edge",
        json!({INJECT_NGINX: "true"}),
        json!([{
            "name": "proxy", "image": "nginx:1.27.0",
            "env": [{"name": "LD_LIBRARY_PATH", "value": "/opt/lib"}],
            "securityContext": {"runAsUser": 101},
            "volumeMounts": [
                {"name": "conf", "mountPath": "/etc/nginx/nginx.conf", "subPath": "nginx.conf"},
                {"name": "cache", "mountPath": "/var/cache/nginx"}
            ]
        }]),
    );
    p["spec"]["volumes"] = json!([{"name": "conf", "configMap": {"name": "edge-conf"}},
                                  {"name": "cache", "emptyDir": {}}]);
    let stored = create_injected(&env, &ns, &[inst], &p, &[Language::Nginx]).await;

    let proxy = container(&stored, "proxy");
    assert_eq!(
        names(&proxy["env"]),
        env_order(&["LD_LIBRARY_PATH", "NGINX_OTEL_DEBUG", "OTEL_LOGS_EXPORTER"])
    );
    assert_eq!(
        var(proxy, "LD_LIBRARY_PATH"),
        "/opt/lib:/opt/opentelemetry-webserver/agent/sdk_lib/lib"
    );
    assert_eq!(
        proxy["volumeMounts"],
        json!([
            {"name": "cache", "mountPath": "/var/cache/nginx"},
            {"name": "otel-nginx-agent", "mountPath": "/opt/opentelemetry-webserver/agent"},
            {"name": "otel-nginx-conf-dir", "mountPath": "/etc/nginx"}
        ])
    );
    assert_eq!(
        names(&stored["spec"]["initContainers"]),
        [
            "otel-agent-source-container-clone",
            "otel-agent-attach-nginx"
        ]
    );
    let clone = init(&stored, "otel-agent-source-container-clone");
    assert_eq!(clone["image"], "nginx:1.27.0");
    assert_eq!(clone["command"], json!(["/bin/sh", "-c"]));
    assert_eq!(
        clone["args"],
        json!([agents::nginx::CLONE_SCRIPT, "--", "/etc/nginx"])
    );
    let attach = init(&stored, "otel-agent-attach-nginx");
    assert_eq!(attach["image"], agents::nginx::DEFAULT_IMAGE);
    assert_eq!(attach["command"], json!(["/bin/sh", "-c"]));
    assert_eq!(
        attach["args"],
        json!([agents::nginx::ATTACH_SCRIPT, "--", "nginx.conf"])
    );
    assert_eq!(
        names(&attach["env"]),
        [
            "OTEL_NODE_IP",
            "OTEL_POD_IP",
            "NGINX_OTEL_DEBUG",
            "OTEL_LOGS_EXPORTER",
            "OTEL_NGINX_AGENT_CONF",
            "OTEL_NGINX_SERVICE_INSTANCE_ID"
        ]
    );
    let conf = var(attach, "OTEL_NGINX_AGENT_CONF");
    for line in [
        "NginxModuleEnabled ON;\n",
        "NginxModuleOtelExporterEndpoint http://otel-collector.observability:4317;\n",
        "NginxModuleServiceName edge;\n",
        &format!("NginxModuleServiceNamespace {ns};\n"),
    ] {
        assert!(conf.contains(line), "{line:?} in {conf:?}");
    }
    assert_eq!(
        names(&stored["spec"]["volumes"]),
        ["conf", "cache", "otel-nginx-conf-dir", "otel-nginx-agent"]
    );
}
