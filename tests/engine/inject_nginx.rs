//! nginx injection, end to end through the engine: each case applies the returned JSON patch
//! to the input pod and compares the result (init containers, volumes, mounts, env). What
//! every language does alike is in `inject_languages.rs`; the Instrumentation is
//! `data/instrumentations/nginx.yaml`.

use crate::common::{
    GRPC_SDK, NGINX, assert_not_injected, catalog, env, head, lit, names, run, web_server_mounts,
    with_section, with_spec,
};
use otel_injector::agents::Language;
use otel_injector::agents::nginx::{ATTACH_SCRIPT, CLONE_SCRIPT};
use serde_json::{Value, json};

/// nginx's module ships in the Apache httpd agent image.
const IMAGE: &str =
    "ghcr.io/open-telemetry/opentelemetry-operator/autoinstrumentation-apache-httpd:1.0.4";
const LIB: &str = "/opt/opentelemetry-webserver/agent/sdk_lib/lib";

/// `OTEL_NGINX_AGENT_CONF`: one `key value;` line per setting, sorted by key.
fn agent_conf(service: &str, overrides: &[(&str, &str)]) -> String {
    let mut attrs = std::collections::BTreeMap::from([
        ("NginxModuleEnabled", "ON"),
        (
            "NginxModuleOtelExporterEndpoint",
            "http://otel-collector.observability:4317",
        ),
        ("NginxModuleOtelSpanExporter", "otlp"),
        ("NginxModuleResolveBackends", "ON"),
        ("NginxModuleServiceInstanceId", "<<SID-PLACEHOLDER>>"),
        ("NginxModuleServiceName", service),
        ("NginxModuleServiceNamespace", "shop"),
        ("NginxModuleTraceAsError", "ON"),
    ]);
    for (k, v) in overrides {
        attrs.insert(k, v);
    }
    attrs
        .into_iter()
        .map(|(k, v)| format!("{k} {v};\n"))
        .collect()
}

/// The nginx variables of a target that had none of its own.
fn module_env() -> Vec<Value> {
    vec![
        lit("NGINX_OTEL_DEBUG", "0"),
        lit("LD_LIBRARY_PATH", LIB),
        lit("OTEL_LOGS_EXPORTER", "otlp"),
    ]
}

/// A pod asking for nginx with one container `proxy` (image `nginx`).
fn proxy_pod() -> Value {
    NGINX.pod(
        json!({}),
        json!({"containers": [{"name": "proxy", "image": "nginx"}]}),
    )
}

#[test]
fn single_container_gets_the_module_through_its_config() {
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "edge", "namespace": "shop",
            "annotations": {"instrumentation.opentelemetry.io/inject-nginx": "true"}},
        "spec": {
            "containers": [{
                "name": "proxy", "image": "nginx:1.27.0",
                "env": [{"name": "LD_LIBRARY_PATH", "value": "/opt/lib"}],
                "securityContext": {"runAsUser": 101},
                "volumeMounts": [
                    {"name": "conf", "mountPath": "/etc/nginx/nginx.conf", "subPath": "nginx.conf"},
                    {"name": "cache", "mountPath": "/var/cache/nginx"}
                ]
            }],
            "volumes": [{"name": "conf", "configMap": {"name": "edge-conf"}},
                        {"name": "cache", "emptyDir": {}}]
        }
    });
    let (out, d) = run(&NGINX.catalog(), &pod);
    assert_eq!(d.injected, [Language::Nginx]);
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
    let conf = "NginxModuleEnabled ON;\n\
        NginxModuleOtelExporterEndpoint http://otel-collector.observability:4317;\n\
        NginxModuleOtelSpanExporter otlp;\n\
        NginxModuleResolveBackends ON;\n\
        NginxModuleServiceInstanceId <<SID-PLACEHOLDER>>;\n\
        NginxModuleServiceName edge;\n\
        NginxModuleServiceNamespace shop;\n\
        NginxModuleTraceAsError ON;\n";
    let attrs = "k8s.container.name=proxy,k8s.namespace.name=shop,\
        k8s.node.name=$(OTEL_RESOURCE_ATTRIBUTES_NODE_NAME),\
        k8s.pod.name=$(OTEL_RESOURCE_ATTRIBUTES_POD_NAME),\
        service.instance.id=shop.$(OTEL_RESOURCE_ATTRIBUTES_POD_NAME).proxy,\
        service.namespace=shop,service.version=1.27.0";
    let expected = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "edge", "namespace": "shop",
            "annotations": {"instrumentation.opentelemetry.io/inject-nginx": "true",
                            "otel-injector/injected": "nginx"}},
        "spec": {
            "containers": [{
                "name": "proxy", "image": "nginx:1.27.0",
                "env": [
                    {"name": "OTEL_NODE_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}},
                    {"name": "OTEL_POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                    {"name": "LD_LIBRARY_PATH", "value": "/opt/lib:/opt/opentelemetry-webserver/agent/sdk_lib/lib"},
                    {"name": "NGINX_OTEL_DEBUG", "value": "0"},
                    {"name": "OTEL_LOGS_EXPORTER", "value": "otlp"},
                    {"name": "OTEL_SERVICE_NAME", "value": "edge"},
                    {"name": "OTEL_EXPORTER_OTLP_ENDPOINT", "value": "http://otel-collector.observability:4317"},
                    {"name": "OTEL_RESOURCE_ATTRIBUTES_POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "OTEL_RESOURCE_ATTRIBUTES_NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                    {"name": "OTEL_PROPAGATORS", "value": "tracecontext,baggage"},
                    {"name": "OTEL_TRACES_SAMPLER", "value": "parentbased_traceidratio"},
                    {"name": "OTEL_TRACES_SAMPLER_ARG", "value": "0.25"},
                    {"name": "OTEL_RESOURCE_ATTRIBUTES", "value": attrs}
                ],
                "securityContext": {"runAsUser": 101},
                "volumeMounts": [
                    {"name": "cache", "mountPath": "/var/cache/nginx"},
                    {"name": "otel-nginx-agent", "mountPath": "/opt/opentelemetry-webserver/agent"},
                    {"name": "otel-nginx-conf-dir", "mountPath": "/etc/nginx"}
                ]
            }],
            "initContainers": [
                {
                    "name": "otel-agent-source-container-clone",
                    "image": "nginx:1.27.0",
                    "command": ["/bin/sh", "-c"],
                    "args": [CLONE_SCRIPT, "--", "/etc/nginx"],
                    "env": [{"name": "LD_LIBRARY_PATH", "value": "/opt/lib"},
                            {"name": "NGINX_OTEL_DEBUG", "value": "0"}],
                    "resources": {"limits": {"cpu": "500m", "memory": "256Mi"},
                                  "requests": {"cpu": "1m", "memory": "128Mi"}},
                    "securityContext": {"runAsUser": 101},
                    "volumeMounts": [
                        {"name": "conf", "mountPath": "/etc/nginx/nginx.conf", "subPath": "nginx.conf"},
                        {"name": "cache", "mountPath": "/var/cache/nginx"},
                        {"name": "otel-nginx-conf-dir", "mountPath": "/opt/opentelemetry-webserver/source-conf"}
                    ]
                },
                {
                    "name": "otel-agent-attach-nginx",
                    "image": IMAGE,
                    "command": ["/bin/sh", "-c"],
                    "args": [ATTACH_SCRIPT, "--", "nginx.conf"],
                    "env": [
                        {"name": "OTEL_NODE_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}},
                        {"name": "OTEL_POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                        {"name": "NGINX_OTEL_DEBUG", "value": "0"},
                        {"name": "OTEL_LOGS_EXPORTER", "value": "otlp"},
                        {"name": "OTEL_NGINX_AGENT_CONF", "value": conf},
                        {"name": "OTEL_NGINX_SERVICE_INSTANCE_ID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
                    ],
                    "resources": {"limits": {"cpu": "500m", "memory": "256Mi"},
                                  "requests": {"cpu": "1m", "memory": "128Mi"}},
                    "securityContext": {"runAsUser": 101},
                    "volumeMounts": [
                        {"name": "otel-nginx-agent", "mountPath": "/opt/opentelemetry-webserver/agent"},
                        {"name": "otel-nginx-conf-dir", "mountPath": "/opt/opentelemetry-webserver/source-conf"}
                    ]
                }
            ],
            "volumes": [
                {"name": "conf", "configMap": {"name": "edge-conf"}},
                {"name": "cache", "emptyDir": {}},
                {"name": "otel-nginx-conf-dir", "emptyDir": {}},
                {"name": "otel-nginx-agent", "emptyDir": {}}
            ]
        }
    });
    assert_eq!(out, expected);
    // The helpers below reproduce this case.
    assert_eq!(conf, agent_conf("edge", &[]));
    assert_eq!(
        out["spec"]["containers"][0]["env"],
        env(vec![
            head(),
            vec![
                lit("LD_LIBRARY_PATH", &format!("/opt/lib:{LIB}")),
                lit("NGINX_OTEL_DEBUG", "0"),
                lit("OTEL_LOGS_EXPORTER", "otlp")
            ],
            GRPC_SDK.tail("edge", "proxy", Some("1.27.0")),
        ])
    );
}

#[test]
fn the_scripts_record_the_version_and_edit_the_config_file() {
    assert!(CLONE_SCRIPT.contains("nginx -v"));
    assert!(CLONE_SCRIPT.contains("${banner##*/}"));
    assert!(CLONE_SCRIPT.contains("\"$staged/version.txt\""));
    assert!(ATTACH_SCRIPT.contains("env OTEL_RESOURCE_ATTRIBUTES;"));
    assert!(
        ATTACH_SCRIPT
            .contains("load_module %s/WebServerModule/Nginx/%s/ngx_http_opentelemetry_module.so;")
    );
    assert!(ATTACH_SCRIPT.contains("\"$staged/opentelemetry_agent.conf\" \"$staged/conf.d\""));
    assert!(ATTACH_SCRIPT.contains("s|<<SID-PLACEHOLDER>>|$OTEL_NGINX_SERVICE_INSTANCE_ID|g"));
}

#[test]
fn library_path_is_set_when_absent() {
    let (out, _) = run(&NGINX.catalog(), &proxy_pod());
    assert_eq!(
        out["spec"]["containers"][0]["env"],
        env(vec![
            head(),
            module_env(),
            GRPC_SDK.tail("p", "proxy", None),
        ])
    );
    // The clone sees the app's env before the extension.
    assert_eq!(
        out["spec"]["initContainers"][0]["env"],
        json!([lit("NGINX_OTEL_DEBUG", "0")])
    );
}

/// (The same from nginx.env is in inject_languages.rs.)
#[test]
fn library_path_from_value_from_skips_that_container() {
    let from = json!({"name": "LD_LIBRARY_PATH",
        "valueFrom": {"configMapKeyRef": {"name": "libs", "key": "path"}}});
    let pod = NGINX.pod(
        json!({}),
        json!({"containers": [{"name": "proxy", "image": "nginx", "env": [from]}]}),
    );
    let (out, d) = run(&NGINX.catalog(), &pod);
    assert_eq!(out, pod);
    assert_not_injected(
        &d,
        Language::Nginx,
        "nginx: container \"proxy\" sets LD_LIBRARY_PATH with valueFrom; not instrumented",
    );

    // The next target gets the module instead.
    let pod = NGINX.pod(
        json!({"instrumentation.opentelemetry.io/inject-nginx-container-names": "proxy,edge"}),
        json!({"containers": [{"name": "proxy", "image": "nginx", "env": [from]},
                              {"name": "edge", "image": "nginx:1.26"}]}),
    );
    let (out, d) = run(&NGINX.catalog(), &pod);
    assert_eq!(d.injected, [Language::Nginx]);
    assert_eq!(d.warnings.len(), 1);
    assert_eq!(out["spec"]["containers"][0], pod["spec"]["containers"][0]);
    assert_eq!(out["spec"]["initContainers"][0]["image"], "nginx:1.26");
    assert_eq!(
        out["spec"]["containers"][1]["volumeMounts"],
        Value::Array(web_server_mounts("nginx", "/etc/nginx"))
    );
}

#[test]
fn multiple_containers_get_the_env_and_only_the_first_gets_the_module() {
    let pod = NGINX.pod(
        json!({"instrumentation.opentelemetry.io/container-names": "edge,api"}),
        json!({"containers": [
            {"name": "edge", "image": "nginx:1.27"},
            {"name": "api", "image": "shop/api:3",
             "env": [{"name": "LD_LIBRARY_PATH", "value": "/usr/lib/api"}]}
        ]}),
    );
    let (out, d) = run(&NGINX.catalog(), &pod);
    assert_eq!(d.injected, [Language::Nginx]);
    assert_eq!(
        d.warnings,
        [
            "nginx: only \"edge\" gets the module (one config clone per pod); \"api\" gets the SDK env only"
        ]
    );
    let cs = &out["spec"]["containers"];
    assert_eq!(
        cs[0]["env"],
        env(vec![
            head(),
            module_env(),
            GRPC_SDK.tail("p", "edge", Some("1.27")),
        ])
    );
    // The second target keeps its LD_LIBRARY_PATH and gets no mounts.
    assert_eq!(
        cs[1]["env"],
        env(vec![
            head(),
            vec![
                lit("LD_LIBRARY_PATH", "/usr/lib/api"),
                lit("NGINX_OTEL_DEBUG", "0"),
                lit("OTEL_LOGS_EXPORTER", "otlp")
            ],
            GRPC_SDK.tail("p", "api", Some("3")),
        ])
    );
    assert_eq!(
        cs[0]["volumeMounts"],
        Value::Array(web_server_mounts("nginx", "/etc/nginx"))
    );
    assert_eq!(cs[1].get("volumeMounts"), None);
    assert_eq!(
        names(&out["spec"]["initContainers"]),
        [
            "otel-agent-source-container-clone",
            "otel-agent-attach-nginx"
        ]
    );
    assert_eq!(
        out["spec"]["initContainers"][1]["env"][4]["value"],
        agent_conf("p", &[])
    );
}

#[test]
fn custom_config_file_sets_the_directory_and_the_file_name() {
    let inst = with_section(NGINX.shop, "configFile: /opt/app/conf/main.conf");
    let pod = NGINX.pod(
        json!({}),
        json!({
            "containers": [{"name": "proxy", "image": "nginx", "volumeMounts": [
                {"name": "main", "mountPath": "/opt/app/conf/main.conf", "subPath": "main.conf"},
                {"name": "sites", "mountPath": "/opt/app/conf/conf.d"},
                {"name": "nginx", "mountPath": "/etc/nginx"}
            ]}],
            "volumes": [{"name": "main", "configMap": {"name": "m"}},
                        {"name": "sites", "configMap": {"name": "s"}},
                        {"name": "nginx", "emptyDir": {}}]
        }),
    );
    let (out, d) = run(&catalog(&inst), &pod);
    assert_eq!(d.injected, [Language::Nginx]);
    let mut mounts = vec![json!({"name": "nginx", "mountPath": "/etc/nginx"})];
    mounts.extend(web_server_mounts("nginx", "/opt/app/conf"));
    assert_eq!(
        out["spec"]["containers"][0]["volumeMounts"],
        Value::Array(mounts)
    );
    let inits = &out["spec"]["initContainers"];
    assert_eq!(
        inits[0]["args"],
        json!([CLONE_SCRIPT, "--", "/opt/app/conf"])
    );
    assert_eq!(inits[1]["args"], json!([ATTACH_SCRIPT, "--", "main.conf"]));
    // The clone keeps every original mount, so the copy holds their content.
    assert_eq!(
        inits[0]["volumeMounts"].as_array().unwrap().len(),
        pod["spec"]["containers"][0]["volumeMounts"]
            .as_array()
            .unwrap()
            .len()
            + 1
    );
}

#[test]
fn attrs_override_and_extend_the_module_settings() {
    let inst = with_section(
        NGINX.shop,
        "attrs:\n  - name: NginxModuleOtelMaxQueueSize\n    value: \"4096\"\n  - name: NginxModuleTraceAsError\n    value: \"OFF\"",
    );
    let (out, _) = run(&catalog(&inst), &proxy_pod());
    assert_eq!(
        out["spec"]["initContainers"][1]["env"][4]["value"],
        agent_conf(
            "p",
            &[
                ("NginxModuleOtelMaxQueueSize", "4096"),
                ("NginxModuleTraceAsError", "OFF")
            ]
        )
    );
}

#[test]
fn image_and_init_settings_come_from_the_instrumentation() {
    let inst = with_section(
        &with_spec(
            NGINX.shop,
            "imagePullPolicy: IfNotPresent\ninitContainerSecurityContext:\n  runAsUser: 101",
        ),
        "image: registry.example/nginx-agent:3",
    );
    let pod = NGINX.pod(
        json!({}),
        json!({"containers": [{"name": "proxy", "image": "nginx",
                               "securityContext": {"runAsUser": 0}}]}),
    );
    let (out, _) = run(&catalog(&inst), &pod);
    let inits = &out["spec"]["initContainers"];
    assert_eq!(inits[1]["image"], "registry.example/nginx-agent:3");
    assert_eq!(inits[1]["imagePullPolicy"], "IfNotPresent");
    assert_eq!(
        inits[0].get("imagePullPolicy"),
        None,
        "clone pulls like the app"
    );
    for i in [0, 1] {
        assert_eq!(inits[i]["securityContext"], json!({"runAsUser": 101}));
    }
}
