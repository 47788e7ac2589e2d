//! Templates beyond image volumes: the engine's init containers (init-container delivery,
//! the web servers' clone), empty variables, and what a template cannot replay.

use serde_json::json;

use super::{JAVA, inst, names};
use crate::agents::Language;
use crate::cluster::StaticCatalog;
use crate::engine::{EngineConfig, SkipReason};
use crate::policy::pod::{AskedFor, Path, Paths};
use crate::policy::template;
use crate::policy::{PolicyOptions, render};
use k8s_openapi::api::core::v1::Pod;

#[test]
fn init_container_delivery_adds_the_engines_init_containers_with_the_targets_security() {
    // The flag's default, as the webhook's: the agent copied by an init container.
    let t = template::read(&inst(JAVA), Language::Java, &EngineConfig::default()).unwrap();
    assert_eq!(
        t.volumes,
        [
            json!({"name": "opentelemetry-auto-instrumentation-java", "emptyDir": {"sizeLimit": "200Mi"}})
        ]
    );
    assert_eq!(
        t.init_containers,
        [json!({
            "name": "opentelemetry-auto-instrumentation-java",
            "image": crate::agents::java::DEFAULT_IMAGE,
            "command": ["cp", "/javaagent.jar", "/otel-auto-instrumentation-java/javaagent.jar"],
            "resources": {
                "limits": {"cpu": "500m", "memory": "256Mi"},
                "requests": {"cpu": "50m", "memory": "64Mi"},
            },
            "volumeMounts": [{
                "name": "opentelemetry-auto-instrumentation-java",
                "mountPath": "/otel-auto-instrumentation-java",
            }],
        })]
    );
    // No initContainerSecurityContext: the first target's is copied in.
    assert!(t.init.security_from_target);
    // One of its own: written in the template, the target's is not read.
    let own = JAVA.replace(
        "  java:\n",
        "  initContainerSecurityContext: {runAsUser: 1000}\n  java:\n",
    );
    let t = template::read(&inst(&own), Language::Java, &EngineConfig::default()).unwrap();
    assert!(!t.init.security_from_target);
    assert_eq!(
        t.init_containers[0]["securityContext"],
        json!({"runAsUser": 1000})
    );
    // Java's extensions: one more init container each, after the agent's.
    let ext = JAVA.replace(
        "  java:\n",
        "  java:\n    extensions: [{image: \"ext:1\", dir: /ext}]\n",
    );
    let t = template::read(&inst(&ext), Language::Java, &EngineConfig::default()).unwrap();
    let names: Vec<&str> = names(&t.init_containers);
    assert_eq!(
        names,
        [
            "opentelemetry-auto-instrumentation-java",
            "opentelemetry-auto-instrumentation-extension-0"
        ]
    );
    assert!(t.init.security_from_target);
    assert!(t.hidden_below.is_empty(), "no clone, nothing moved to it");
}

#[test]
fn the_web_servers_clone_the_target_and_name_the_service_in_their_configuration() {
    // (language, its attach container, the directory whose mounts the clone takes over)
    for (lang, attach, hidden) in [
        (
            Language::ApacheHttpd,
            "otel-agent-attach-apache",
            "/usr/local/apache2/conf",
        ),
        (Language::Nginx, "otel-agent-attach-nginx", "/etc/nginx"),
    ] {
        let t = template::read(&inst(JAVA), lang, &EngineConfig::default()).unwrap();
        // The target's own mounts at or below the configuration directory move to the clone
        // (they would hide the edited copy); the agent's directory is not one of them.
        assert_eq!(t.hidden_below, [hidden], "{lang}");
        assert_eq!(
            names(&t.init_containers),
            ["otel-agent-source-container-clone", attach],
            "{lang}"
        );
        // The clone runs the target's image, with its env, envFrom, mounts and pull policy.
        assert_eq!(t.init.clone_of_target, Some(0), "{lang}");
        assert_eq!(t.init_containers[0]["image"], template::IMAGE, "{lang}");
        assert!(t.init.security_from_target, "{lang}");
        // The module's configuration names the pod's service.
        let conf = t.init_containers[1]["env"].to_string();
        assert!(conf.contains(template::SERVICE), "{lang}: {conf}");
    }
    // The Instrumentation's own configuration directory, read off the engine as well.
    let moved = JAVA.replace(
        "  java:\n",
        "  apacheHttpd: {configPath: /srv/httpd/conf/}\n  nginx: {configFile: /srv/nginx/main.conf}\n  java:\n",
    );
    for (lang, hidden) in [
        (Language::ApacheHttpd, "/srv/httpd/conf"),
        (Language::Nginx, "/srv/nginx"),
    ] {
        let t = template::read(&inst(&moved), lang, &EngineConfig::default()).unwrap();
        assert_eq!(t.hidden_below, [hidden], "{lang}");
    }
}

#[test]
fn an_empty_variable_gets_what_the_engine_writes_for_it() {
    let extended = |lang| {
        let t = template::read(&inst(JAVA), lang, &EngineConfig::default()).unwrap();
        t.extensions
            .into_iter()
            .map(|x| (x.name, x.prefix + "|" + &x.suffix, x.empty))
            .collect::<Vec<_>>()
    };
    // nginx sets LD_LIBRARY_PATH to its libraries alone, Python PYTHONPATH to the agent's
    // paths without the separators; Java and Node.js extend an empty value as any other.
    let lib = "/opt/opentelemetry-webserver/agent/sdk_lib/lib";
    assert_eq!(
        extended(Language::Nginx),
        [("LD_LIBRARY_PATH".into(), format!("|:{lib}"), lib.into())]
    );
    let python =
        "/otel-auto-instrumentation-python/opentelemetry/instrumentation/auto_instrumentation";
    let (name, parts, empty) = extended(Language::Python).remove(0);
    assert_eq!(name, "PYTHONPATH");
    assert_eq!(
        parts,
        format!("{python}:|:/otel-auto-instrumentation-python")
    );
    assert_eq!(empty, format!("{python}:/otel-auto-instrumentation-python"));
    let (_, parts, empty) = extended(Language::NodeJs).remove(0);
    assert_eq!(parts.replace('|', ""), empty);
}

#[test]
fn what_a_template_cannot_replay_is_not_covered_with_the_reason() {
    // Go: a sidecar that reads the pod's target executable.
    let exe = (
        "instrumentation.opentelemetry.io/otel-go-auto-target-exe",
        &["/app"][..],
    );
    let go = JAVA.replace("  java:\n", "  go: {image: \"go:1\"}\n  java:\n");
    let err = template::read_variant(
        &inst(&go),
        Language::Go,
        Some(exe),
        &EngineConfig::default(),
    )
    .unwrap_err();
    assert_eq!(err.why, "the injection adds a container");
    assert_eq!(err.reason, SkipReason::PolicyUnsupported);
    let beta = JAVA.replace("  java:\n", "  nodejs: {}\n  java:\n").replace("metadata: {name: java, namespace: shop}", "metadata: {name: java, namespace: shop, annotations: {otel-injector/v1beta1-fields: '{\"defaultImages\":false}'}}");
    let err = template::read(&inst(&beta), Language::Python, &EngineConfig::default()).unwrap_err();
    assert_eq!(err.why, "the webhook skips it: image_required");
    assert_eq!(err.reason, SkipReason::ImageRequired);
}

#[test]
fn exporter_tls_is_a_template_unless_the_webhook_verifies_it() {
    let tls = JAVA.replace(
        "exporter: {endpoint: \"http://collector:4318\"}",
        "exporter: {endpoint: \"https://collector:4318\", tls: {secretName: certs, ca_file: ca.crt}}",
    );
    // The Secret's volume and mount, and the variable that points into it.
    let t = template::read(&inst(&tls), Language::Java, &EngineConfig::default()).unwrap();
    assert!(
        t.volumes
            .iter()
            .any(|v| v["secret"]["secretName"] == "certs"),
        "{:?}",
        t.volumes
    );
    assert!(
        t.appended
            .iter()
            .any(|a| a.entry["name"] == "OTEL_EXPORTER_OTLP_CERTIFICATE")
    );
    // With the webhook's --verify-exporter-tls, the policies leave it to the webhook.
    let catalog = StaticCatalog::from_yaml(&tls).unwrap();
    let coverage = |verify_exporter_tls| {
        let options = PolicyOptions {
            verify_exporter_tls,
            ..PolicyOptions::default()
        };
        let mut rendered = render(&catalog, &EngineConfig::default(), &options);
        rendered.coverage.remove("shop/java").unwrap()
    };
    assert_eq!(coverage(false).injected, crate::policy::LANGUAGES);
    let verified = coverage(true);
    assert!(verified.injected.is_empty());
    assert!(
        verified
            .not_covered
            .iter()
            .all(|(_, why)| why.starts_with("exporter TLS: the webhook checks its Secret")),
        "{:?}",
        verified.not_covered
    );
}

/// A web server's target that mounts its own configuration: the clone takes the mount over,
/// as the webhook does (`Template::hidden_below`); one that mounts into the agent's
/// directory is left to the webhook.
#[test]
fn a_web_servers_own_configuration_mount_is_covered_and_one_in_the_agents_directory_is_not() {
    let catalog = StaticCatalog::new([crate::crd::Instrumentation::clone(&inst(JAVA))]);
    let config = EngineConfig::default();
    let mut paths = Paths::new(&catalog, &config);
    let targets = ["app".to_owned()];
    // The path of a pod asking for `lang` whose container mounts `mounts` (each `(volume,
    // path)`), each volume an emptyDir.
    let mut path_of = |lang: Language, mounts: &[(&str, &str)]| {
        let mut volumes: Vec<&str> = mounts.iter().map(|(v, _)| *v).collect();
        volumes.dedup();
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "spec": {
                "containers": [{"name": "app", "image": "a", "volumeMounts": mounts.iter().map(|(v, p)| json!({"name": v, "mountPath": p})).collect::<Vec<_>>()}],
                "volumes": volumes.iter().map(|v| json!({"name": v, "emptyDir": {}})).collect::<Vec<_>>(),
            },
        }))
        .unwrap();
        paths.of(
            "shop",
            &pod,
            AskedFor::keys(&[(lang, "true")]),
            &[(lang, "shop/java")],
            &targets,
        )
    };
    let policy = Path::Policy("shop/java".into());
    for mount in [
        "/usr/local/apache2/conf",
        "/usr/local/apache2/conf/",
        "/usr/local/apache2/conf/extra",
        "/usr/local/apache2",
    ] {
        let got = path_of(Language::ApacheHttpd, &[("x", mount)]);
        assert_eq!(got, policy, "{mount}");
    }
    assert_eq!(
        path_of(
            Language::ApacheHttpd,
            &[("x", "/opt/opentelemetry-webserver/agent/x")]
        ),
        Path::Webhook("container app mounts something at or below the web server's paths".into())
    );
    let nginx = [
        ("data", "/data"),
        ("conf", "/etc/nginx/"),
        ("sites", "/etc/nginx/sites-enabled"),
        ("logs", "/var/log/nginx"),
    ];
    assert_eq!(path_of(Language::Nginx, &nginx), policy);
}
