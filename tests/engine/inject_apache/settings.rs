//! What the Instrumentation sets for Apache httpd: the module build by version, the config
//! path, `attrs`, the endpoint, the volumes and the init container's settings.

use otel_injector::agents::Language;
use otel_injector::agents::apache::ATTACH_SCRIPT;
use rstest::rstest;
use serde_json::{Value, json};

use crate::common::{APACHE, catalog, lit, run, web_server_mounts, with_section, with_spec};

use super::{agent_conf, default_attrs, web_pod};

/// Apache 2.2 loads its own build of the module; 2.4 (the default) the plain one.
#[rstest]
#[case::apache_2_2("\"2.2\"", "22")]
#[case::apache_2_4("\"2.4\"", "")]
fn the_version_picks_the_module_build(#[case] version: &str, #[case] suffix: &str) {
    let inst = with_section(APACHE.shop, &format!("version: {version}"));
    let web = json!({"containers": [{"name": "web", "image": "httpd:2.2"}]});
    let (out, d) = run(&catalog(&inst), &APACHE.pod(json!({}), web));
    assert_eq!(d.injected, [Language::ApacheHttpd]);
    let conf = out["spec"]["initContainers"][1]["env"][4]["value"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        conf,
        agent_conf(
            suffix,
            &default_attrs("p", "http://otel-collector.observability:4317")
        )
    );
    assert!(conf.contains(&format!(
        "\nLoadModule otel_apache_module /opt/opentelemetry-webserver/agent/WebServerModule/Apache/libmod_apache_otel{suffix}.so\n"
    )));
}

#[test]
fn custom_config_path_moves_the_clone_the_mounts_and_the_include() {
    let inst = with_section(APACHE.shop, "configPath: /etc/httpd/conf/");
    let pod = APACHE.pod(
        json!({}),
        json!({
            "containers": [{"name": "web", "image": "centos/httpd", "volumeMounts": [
                {"name": "conf", "mountPath": "/etc/httpd/conf"},
                {"name": "extra", "mountPath": "/etc/httpd/conf/extra"},
                {"name": "logs", "mountPath": "/etc/httpd/conf-logs"}
            ]}],
            "volumes": [{"name": "conf", "configMap": {"name": "c"}},
                        {"name": "extra", "configMap": {"name": "e"}},
                        {"name": "logs", "emptyDir": {}}]
        }),
    );
    let (out, d) = run(&catalog(&inst), &pod);
    assert_eq!(d.injected, [Language::ApacheHttpd]);
    let c = &out["spec"]["containers"][0];
    // Both mounts at or below the config dir are replaced by the edited copy.
    let mut mounts = vec![json!({"name": "logs", "mountPath": "/etc/httpd/conf-logs"})];
    mounts.extend(web_server_mounts("apache", "/etc/httpd/conf"));
    assert_eq!(c["volumeMounts"], Value::Array(mounts));
    let inits = &out["spec"]["initContainers"];
    assert_eq!(
        inits[0]["command"],
        json!([
            "cp",
            "-r",
            "/etc/httpd/conf/.",
            "/opt/opentelemetry-webserver/source-conf"
        ])
    );
    let mut clone_mounts = pod["spec"]["containers"][0]["volumeMounts"]
        .as_array()
        .unwrap()
        .clone();
    clone_mounts.push(
        json!({"name": "otel-apache-conf-dir", "mountPath": "/opt/opentelemetry-webserver/source-conf"}),
    );
    assert_eq!(inits[0]["volumeMounts"], Value::Array(clone_mounts));
    assert_eq!(
        inits[1]["args"],
        json!([ATTACH_SCRIPT, "--", "/etc/httpd/conf"])
    );
}

#[test]
fn attrs_override_and_extend_the_module_settings() {
    let inst = with_section(
        APACHE.shop,
        "attrs:\n  - name: ApacheModuleOtelExporterEndpoint\n    value: http://agent:4317\n  - name: ApacheModuleOtelMaxQueueSize\n    value: \"4096\"\n  - name: ApacheModuleServiceName\n    value: storefront",
    );
    let (out, _) = run(&catalog(&inst), &web_pod());
    let conf = &out["spec"]["initContainers"][1]["env"][4]["value"];
    assert_eq!(
        conf.as_str().unwrap(),
        agent_conf(
            "",
            &[
                ("ApacheModuleEnabled", "ON"),
                ("ApacheModuleOtelExporterEndpoint", "http://agent:4317"),
                ("ApacheModuleOtelMaxQueueSize", "4096"),
                ("ApacheModuleOtelSpanExporter", "otlp"),
                ("ApacheModuleResolveBackends", " ON"),
                ("ApacheModuleServiceInstanceId", "<<SID-PLACEHOLDER>>"),
                ("ApacheModuleServiceName", "storefront"),
                ("ApacheModuleServiceNamespace", "shop"),
                ("ApacheModuleTraceAsError", " ON"),
            ]
        )
    );
    // The SDK env of the app is not affected by attrs.
    assert_eq!(
        out["spec"]["containers"][0]["env"][4],
        lit("OTEL_SERVICE_NAME", "p")
    );
}

#[test]
fn no_endpoint_means_the_local_default_in_the_module_config() {
    let inst = APACHE.shop.replace(
        "  exporter:\n    endpoint: http://otel-collector.observability:4317\n",
        "",
    );
    let (out, _) = run(&catalog(&inst), &web_pod());
    assert_eq!(
        out["spec"]["initContainers"][1]["env"][4]["value"],
        agent_conf("", &default_attrs("p", "http://localhost:4317/"))
    );
}

/// Both volumes follow the Instrumentation's size limit; a claim template makes the agent's
/// an ephemeral one.
#[rstest]
#[case::claim_template(
    "volumeClaimTemplate:\n  spec:\n    accessModes: [ReadWriteOnce]\n    resources:\n      requests:\n        storage: 1Gi",
    json!([
        {"name": "otel-apache-conf-dir", "emptyDir": {"sizeLimit": "200Mi"}},
        {"name": "otel-apache-agent", "ephemeral": {"volumeClaimTemplate": {"spec": {
            "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}}}
    ])
)]
#[case::size_limit(
    "volumeLimitSize: 300Mi",
    json!([
        {"name": "otel-apache-conf-dir", "emptyDir": {"sizeLimit": "300Mi"}},
        {"name": "otel-apache-agent", "emptyDir": {"sizeLimit": "300Mi"}}
    ])
)]
fn volumes_follow_the_claim_template_and_size_limit(#[case] section: &str, #[case] volumes: Value) {
    let (out, _) = run(&catalog(&with_section(APACHE.shop, section)), &web_pod());
    assert_eq!(out["spec"]["volumes"], volumes);
}

#[test]
fn init_settings_come_from_the_instrumentation() {
    let inst = with_section(
        &with_spec(
            APACHE.shop,
            "imagePullPolicy: Always\ninitContainerSecurityContext:\n  runAsNonRoot: true",
        ),
        "image: registry.example/apache-agent:2\nresourceRequirements:\n  limits:\n    memory: 64Mi",
    );
    let pod = APACHE.pod(
        json!({}),
        json!({"containers": [{"name": "web", "image": "httpd", "imagePullPolicy": "Never",
                               "securityContext": {"runAsUser": 33}}]}),
    );
    let (out, _) = run(&catalog(&inst), &pod);
    let inits = &out["spec"]["initContainers"];
    for i in [0, 1] {
        assert_eq!(inits[i]["securityContext"], json!({"runAsNonRoot": true}));
        // Unset requests keep their defaults, as the Operator's defaulting does.
        assert_eq!(
            inits[i]["resources"],
            json!({"limits": {"memory": "64Mi"}, "requests": {"cpu": "1m", "memory": "128Mi"}})
        );
    }
    // The clone pulls like the app; the agent like the Instrumentation says.
    assert_eq!(inits[0]["imagePullPolicy"], "Never");
    assert_eq!(inits[1]["imagePullPolicy"], "Always");
    assert_eq!(inits[1]["image"], "registry.example/apache-agent:2");
}
