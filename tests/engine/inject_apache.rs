//! Apache httpd injection, end to end through the engine: each case applies the returned JSON
//! patch to the input pod and compares the result (init containers, volumes, mounts, env).
//! What every language does alike is in `inject_languages.rs`; the Instrumentation is
//! `data/instrumentations/apache-httpd.yaml`.

mod settings;

use otel_injector::agents::Language;
use otel_injector::agents::apache::ATTACH_SCRIPT;
use serde_json::{Value, json};

use crate::common::{
    APACHE, GRPC_SDK, env, fref, head, lit, names, resource_attributes, run, web_server_mounts,
};

const IMAGE: &str =
    "ghcr.io/open-telemetry/opentelemetry-operator/autoinstrumentation-apache-httpd:1.0.4";

/// `OTEL_APACHE_AGENT_CONF` as the Operator writes it, with `attrs` lines (already sorted
/// into place by the caller) replacing the attribute block when given.
fn agent_conf(module_suffix: &str, attrs: &[(&str, &str)]) -> String {
    let lib = "/opt/opentelemetry-webserver/agent/sdk_lib/lib";
    let m = "/opt/opentelemetry-webserver/agent/WebServerModule/Apache";
    let mut s = format!(
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
         LoadModule otel_apache_module {m}/libmod_apache_otel{module_suffix}.so\n\
         #Attributes\n"
    );
    for (k, v) in attrs {
        s.push_str(&format!("{k} {v}\n"));
    }
    s
}

fn default_attrs<'a>(service: &'a str, endpoint: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![
        ("ApacheModuleEnabled", "ON"),
        ("ApacheModuleOtelExporterEndpoint", endpoint),
        ("ApacheModuleOtelSpanExporter", "otlp"),
        ("ApacheModuleResolveBackends", " ON"),
        ("ApacheModuleServiceInstanceId", "<<SID-PLACEHOLDER>>"),
        ("ApacheModuleServiceName", service),
        ("ApacheModuleServiceNamespace", "shop"),
        ("ApacheModuleTraceAsError", " ON"),
    ]
}

fn resources() -> Value {
    json!({"limits": {"cpu": "500m", "memory": "256Mi"},
           "requests": {"cpu": "1m", "memory": "128Mi"}})
}

fn attach(conf: &str, conf_dir: &str) -> Value {
    json!({
        "name": "otel-agent-attach-apache",
        "image": IMAGE,
        "command": ["/bin/sh", "-c"],
        "args": [ATTACH_SCRIPT, "--", conf_dir],
        "env": [{"name": "OTEL_NODE_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}},
                {"name": "OTEL_POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                {"name": "APACHE_OTEL_DEBUG", "value": "0"},
                {"name": "OTEL_LOGS_EXPORTER", "value": "otlp"},
                {"name": "OTEL_APACHE_AGENT_CONF", "value": conf},
                {"name": "APACHE_SERVICE_INSTANCE_ID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
        "resources": resources(),
        "volumeMounts": [
            {"name": "otel-apache-agent", "mountPath": "/opt/opentelemetry-webserver/agent"},
            {"name": "otel-apache-conf-dir", "mountPath": "/opt/opentelemetry-webserver/source-conf"}
        ]
    })
}

fn volumes() -> Value {
    json!([
        {"name": "otel-apache-conf-dir", "emptyDir": {"sizeLimit": "200Mi"}},
        {"name": "otel-apache-agent", "emptyDir": {"sizeLimit": "200Mi"}}
    ])
}

/// A pod asking for Apache with one container `web` (image `httpd`).
fn web_pod() -> Value {
    APACHE.pod(
        json!({}),
        json!({"containers": [{"name": "web", "image": "httpd"}]}),
    )
}

#[test]
fn single_container_gets_the_module_through_its_config() {
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "frontend", "namespace": "shop",
            "annotations": {"instrumentation.opentelemetry.io/inject-apache-httpd": "true"}},
        "spec": {
            "containers": [{
                "name": "web", "image": "httpd:2.4.62", "imagePullPolicy": "IfNotPresent",
                "env": [{"name": "LISTEN", "value": "8080"}],
                "envFrom": [{"configMapRef": {"name": "web-env"}}],
                "securityContext": {"runAsUser": 33},
                "readinessProbe": {"httpGet": {"path": "/", "port": 8080}},
                "volumeMounts": [
                    {"name": "conf", "mountPath": "/usr/local/apache2/conf/httpd.conf", "subPath": "httpd.conf"},
                    {"name": "html", "mountPath": "/usr/local/apache2/htdocs"}
                ]
            }],
            "volumes": [{"name": "conf", "configMap": {"name": "web-conf"}},
                        {"name": "html", "emptyDir": {}}]
        }
    });
    let (out, d) = run(&APACHE.catalog(), &pod);
    assert_eq!(d.injected, [Language::ApacheHttpd]);
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
    let conf = "\n#Load the Otel Webserver SDK\n\
        LoadFile /opt/opentelemetry-webserver/agent/sdk_lib/lib/libopentelemetry_common.so\n\
        LoadFile /opt/opentelemetry-webserver/agent/sdk_lib/lib/libopentelemetry_resources.so\n\
        LoadFile /opt/opentelemetry-webserver/agent/sdk_lib/lib/libopentelemetry_trace.so\n\
        LoadFile /opt/opentelemetry-webserver/agent/sdk_lib/lib/libopentelemetry_otlp_recordable.so\n\
        LoadFile /opt/opentelemetry-webserver/agent/sdk_lib/lib/libopentelemetry_exporter_ostream_span.so\n\
        LoadFile /opt/opentelemetry-webserver/agent/sdk_lib/lib/libopentelemetry_exporter_otlp_grpc.so\n\
        #Load the Otel ApacheModule SDK\n\
        LoadFile /opt/opentelemetry-webserver/agent/sdk_lib/lib/libopentelemetry_webserver_sdk.so\n\
        #Load the Apache Module. In this example for Apache 2.4\n\
        #LoadModule otel_apache_module /opt/opentelemetry-webserver/agent/WebServerModule/Apache/libmod_apache_otel.so\n\
        #Load the Apache Module. In this example for Apache 2.2\n\
        #LoadModule otel_apache_module /opt/opentelemetry-webserver/agent/WebServerModule/Apache/libmod_apache_otel22.so\n\
        LoadModule otel_apache_module /opt/opentelemetry-webserver/agent/WebServerModule/Apache/libmod_apache_otel.so\n\
        #Attributes\n\
        ApacheModuleEnabled ON\n\
        ApacheModuleOtelExporterEndpoint http://otel-collector.observability:4317\n\
        ApacheModuleOtelSpanExporter otlp\n\
        ApacheModuleResolveBackends  ON\n\
        ApacheModuleServiceInstanceId <<SID-PLACEHOLDER>>\n\
        ApacheModuleServiceName frontend\n\
        ApacheModuleServiceNamespace shop\n\
        ApacheModuleTraceAsError  ON\n";
    let attrs = "k8s.container.name=web,k8s.namespace.name=shop,\
        k8s.node.name=$(OTEL_RESOURCE_ATTRIBUTES_NODE_NAME),\
        k8s.pod.name=$(OTEL_RESOURCE_ATTRIBUTES_POD_NAME),\
        service.instance.id=shop.$(OTEL_RESOURCE_ATTRIBUTES_POD_NAME).web,\
        service.namespace=shop,service.version=2.4.62";
    let expected = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "frontend", "namespace": "shop",
            "annotations": {"instrumentation.opentelemetry.io/inject-apache-httpd": "true",
                            "otel-injector/injected": "apache-httpd"}},
        "spec": {
            "containers": [{
                "name": "web", "image": "httpd:2.4.62", "imagePullPolicy": "IfNotPresent",
                "env": [
                    {"name": "OTEL_NODE_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}},
                    {"name": "OTEL_POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                    {"name": "LISTEN", "value": "8080"},
                    {"name": "APACHE_OTEL_DEBUG", "value": "0"},
                    {"name": "OTEL_LOGS_EXPORTER", "value": "otlp"},
                    {"name": "OTEL_SERVICE_NAME", "value": "frontend"},
                    {"name": "OTEL_EXPORTER_OTLP_ENDPOINT", "value": "http://otel-collector.observability:4317"},
                    {"name": "OTEL_RESOURCE_ATTRIBUTES_POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "OTEL_RESOURCE_ATTRIBUTES_NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                    {"name": "OTEL_PROPAGATORS", "value": "tracecontext,baggage"},
                    {"name": "OTEL_TRACES_SAMPLER", "value": "parentbased_traceidratio"},
                    {"name": "OTEL_TRACES_SAMPLER_ARG", "value": "0.25"},
                    {"name": "OTEL_RESOURCE_ATTRIBUTES", "value": attrs}
                ],
                "envFrom": [{"configMapRef": {"name": "web-env"}}],
                "securityContext": {"runAsUser": 33},
                "readinessProbe": {"httpGet": {"path": "/", "port": 8080}},
                // The app's own mount inside the config directory is gone: the edited copy
                // (which contains that file) is mounted over the whole directory.
                "volumeMounts": [
                    {"name": "html", "mountPath": "/usr/local/apache2/htdocs"},
                    {"name": "otel-apache-agent", "mountPath": "/opt/opentelemetry-webserver/agent"},
                    {"name": "otel-apache-conf-dir", "mountPath": "/usr/local/apache2/conf"}
                ]
            }],
            "initContainers": [
                {
                    "name": "otel-agent-source-container-clone",
                    "image": "httpd:2.4.62",
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["cp", "-r", "/usr/local/apache2/conf/.", "/opt/opentelemetry-webserver/source-conf"],
                    "env": [{"name": "LISTEN", "value": "8080"}, {"name": "APACHE_OTEL_DEBUG", "value": "0"}],
                    "envFrom": [{"configMapRef": {"name": "web-env"}}],
                    "resources": {"limits": {"cpu": "500m", "memory": "256Mi"},
                                  "requests": {"cpu": "1m", "memory": "128Mi"}},
                    "securityContext": {"runAsUser": 33},
                    // No probes: the clone keeps only what copying the config needs.
                    "volumeMounts": [
                        {"name": "conf", "mountPath": "/usr/local/apache2/conf/httpd.conf", "subPath": "httpd.conf"},
                        {"name": "html", "mountPath": "/usr/local/apache2/htdocs"},
                        {"name": "otel-apache-conf-dir", "mountPath": "/opt/opentelemetry-webserver/source-conf"}
                    ]
                },
                {
                    "name": "otel-agent-attach-apache",
                    "image": IMAGE,
                    "command": ["/bin/sh", "-c"],
                    "args": [ATTACH_SCRIPT, "--", "/usr/local/apache2/conf"],
                    "env": [
                        {"name": "OTEL_NODE_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}},
                        {"name": "OTEL_POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                        {"name": "APACHE_OTEL_DEBUG", "value": "0"},
                        {"name": "OTEL_LOGS_EXPORTER", "value": "otlp"},
                        {"name": "OTEL_APACHE_AGENT_CONF", "value": conf},
                        {"name": "APACHE_SERVICE_INSTANCE_ID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
                    ],
                    "resources": {"limits": {"cpu": "500m", "memory": "256Mi"},
                                  "requests": {"cpu": "1m", "memory": "128Mi"}},
                    "securityContext": {"runAsUser": 33},
                    "volumeMounts": [
                        {"name": "otel-apache-agent", "mountPath": "/opt/opentelemetry-webserver/agent"},
                        {"name": "otel-apache-conf-dir", "mountPath": "/opt/opentelemetry-webserver/source-conf"}
                    ]
                }
            ],
            "volumes": [
                {"name": "conf", "configMap": {"name": "web-conf"}},
                {"name": "html", "emptyDir": {}},
                {"name": "otel-apache-conf-dir", "emptyDir": {"sizeLimit": "200Mi"}},
                {"name": "otel-apache-agent", "emptyDir": {"sizeLimit": "200Mi"}}
            ]
        }
    });
    assert_eq!(out, expected);
    // The helpers below reproduce this case.
    assert_eq!(
        conf,
        agent_conf(
            "",
            &default_attrs("frontend", "http://otel-collector.observability:4317")
        )
    );
    assert_eq!(
        out["spec"]["containers"][0]["env"],
        env(vec![
            head(),
            vec![
                lit("LISTEN", "8080"),
                lit("APACHE_OTEL_DEBUG", "0"),
                lit("OTEL_LOGS_EXPORTER", "otlp")
            ],
            GRPC_SDK.tail("frontend", "web", Some("2.4.62")),
        ])
    );
    let mut a = attach(conf, "/usr/local/apache2/conf");
    a["securityContext"] = json!({"runAsUser": 33});
    assert_eq!(out["spec"]["initContainers"][1], a);
}

#[test]
fn the_attach_script_includes_the_module_config_from_the_config_dir() {
    // The effects the Operator's script has, in our words.
    assert!(ATTACH_SCRIPT.contains("cp -r /opt/opentelemetry/* \"$agent\""));
    assert!(ATTACH_SCRIPT.contains("\"$staged/opentemetry_agent.conf\""));
    assert!(ATTACH_SCRIPT.contains(
        "printf '\\nInclude %s/opentemetry_agent.conf\\n' \"$conf_dir\" >> \"$staged/httpd.conf\""
    ));
    assert!(ATTACH_SCRIPT.contains("s|<<SID-PLACEHOLDER>>|$APACHE_SERVICE_INSTANCE_ID|g"));
    assert!(ATTACH_SCRIPT.contains("__agent_log_dir__"));
}

#[test]
fn multiple_containers_get_the_env_and_only_the_first_gets_the_module() {
    let pod = APACHE.pod(
        json!({"instrumentation.opentelemetry.io/container-names": "web,sidecar"}),
        json!({"containers": [
            {"name": "proxy", "image": "envoy:1.30"},
            {"name": "web", "image": "httpd:2.4", "securityContext": {"runAsUser": 33}},
            {"name": "sidecar", "image": "rabbitmq:3", "securityContext": {"runAsUser": 999}}
        ]}),
    );
    let (out, d) = run(&APACHE.catalog(), &pod);
    assert_eq!(d.injected, [Language::ApacheHttpd]);
    assert_eq!(
        d.warnings,
        [
            "apache-httpd: only \"web\" gets the module (one config clone per pod); \"sidecar\" gets the SDK env only"
        ]
    );
    let cs = &out["spec"]["containers"];
    assert_eq!(cs[0], pod["spec"]["containers"][0], "proxy untouched");
    let lang = vec![
        lit("APACHE_OTEL_DEBUG", "0"),
        lit("OTEL_LOGS_EXPORTER", "otlp"),
    ];
    assert_eq!(
        cs[1]["env"],
        env(vec![
            head(),
            lang.clone(),
            GRPC_SDK.tail("p", "web", Some("2.4"))
        ])
    );
    assert_eq!(
        cs[2]["env"],
        env(vec![head(), lang, GRPC_SDK.tail("p", "sidecar", Some("3"))])
    );
    assert_eq!(
        cs[1]["volumeMounts"],
        Value::Array(web_server_mounts("apache", "/usr/local/apache2/conf"))
    );
    assert_eq!(cs[2].get("volumeMounts"), None);
    let inits = &out["spec"]["initContainers"];
    assert_eq!(
        names(inits),
        [
            "otel-agent-source-container-clone",
            "otel-agent-attach-apache"
        ]
    );
    // The clone is of the first target, and both run with its security context.
    assert_eq!(inits[0]["image"], "httpd:2.4");
    assert_eq!(inits[0]["securityContext"], json!({"runAsUser": 33}));
    let mut a = attach(
        &agent_conf(
            "",
            &default_attrs("p", "http://otel-collector.observability:4317"),
        ),
        "/usr/local/apache2/conf",
    );
    a["securityContext"] = json!({"runAsUser": 33});
    assert_eq!(inits[1], a);
    assert_eq!(out["spec"]["volumes"], volumes());
}

#[test]
fn user_set_variables_win() {
    let pod = APACHE.pod(
        json!({}),
        json!({"containers": [{"name": "web", "image": "httpd", "env": [
            {"name": "OTEL_SERVICE_NAME", "value": "mine"},
            {"name": "APACHE_OTEL_DEBUG", "value": "1"},
            {"name": "OTEL_LOGS_EXPORTER", "value": "none"},
            {"name": "OTEL_EXPORTER_OTLP_ENDPOINT", "value": "http://local:4317"}
        ]}]}),
    );
    let (out, _) = run(&APACHE.catalog(), &pod);
    assert_eq!(
        out["spec"]["containers"][0]["env"],
        env(vec![
            head(),
            vec![
                lit("OTEL_SERVICE_NAME", "mine"),
                lit("APACHE_OTEL_DEBUG", "1"),
                lit("OTEL_LOGS_EXPORTER", "none"),
                lit("OTEL_EXPORTER_OTLP_ENDPOINT", "http://local:4317"),
                fref("OTEL_RESOURCE_ATTRIBUTES_POD_NAME", "metadata.name"),
                fref("OTEL_RESOURCE_ATTRIBUTES_NODE_NAME", "spec.nodeName"),
                lit("OTEL_PROPAGATORS", "tracecontext,baggage"),
                lit("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
                lit("OTEL_TRACES_SAMPLER_ARG", "0.25"),
                lit(
                    "OTEL_RESOURCE_ATTRIBUTES",
                    &resource_attributes("web", None)
                ),
            ],
        ])
    );
    // The module config uses the Instrumentation's endpoint and the derived service name,
    // as the Operator does (it does not read the container's env).
    assert_eq!(
        out["spec"]["initContainers"][1]["env"][4]["value"],
        agent_conf(
            "",
            &default_attrs("p", "http://otel-collector.observability:4317")
        )
    );
    // The clone sees the user's values.
    assert_eq!(
        out["spec"]["initContainers"][0]["env"],
        pod["spec"]["containers"][0]["env"]
    );
}
