//! The attach step of the web servers' init containers: payloads written as one inert value,
//! and user variables that cannot replace the module config.

use std::collections::BTreeMap;

use otel_injector::agents::Language;
use otel_injector::keys::SERVICE_NAME_ANNOTATION;
use serde_json::json;

use crate::kubelet::{POD, Run, SHELLS, read_tree, write_tree};

use super::webserver::{APACHE, NGINX, Server, apache_words, nginx_directives};
use super::{PAYLOADS, catalog, env_var, has_control, pod, run};

/// Runs the attach script of `server` for a pod whose service name is each payload, and
/// reads the module config it writes back: the payload is the one value of the service name
/// directive, and no command in it ran.
pub(super) fn attach_script_keeps_payloads_inert(server: &Server, file: &str) {
    for p in PAYLOADS.into_iter().filter(|p| !has_control(p)) {
        let (out, d) = run(
            &catalog(json!({})),
            &pod(server.lang.as_str(), json!({SERVICE_NAME_ANNOTATION: p})),
        );
        assert_eq!(d.injected, [server.lang]);
        let attach = server.attach(&out).clone();
        for shell in SHELLS {
            let dir = tempfile::tempdir().unwrap();
            let agent_image = dir.path().join("agent-image");
            write_tree(
                &agent_image,
                &[(
                    "conf/opentelemetry_sdk_log4cxx.xml.template",
                    "__agent_log_dir__\n",
                )],
            );
            let mut volumes = BTreeMap::new();
            for m in attach["volumeMounts"].as_array().unwrap() {
                let name = m["name"].as_str().unwrap();
                let host = dir.path().join(name);
                std::fs::create_dir_all(&host).unwrap();
                volumes.insert(name.to_owned(), host);
            }
            // What the clone would have staged.
            let staged = &volumes[&format!(
                "otel-{}-conf-dir",
                if server.lang == Language::Nginx {
                    "nginx"
                } else {
                    "apache"
                }
            )];
            write_tree(
                staged,
                &[
                    ("httpd.conf", "Listen 80\n"),
                    ("nginx.conf", "events {}\n"),
                    ("version.txt", "1.27.0\n"),
                    ("conf.d/default.conf", "server {}\n"),
                ],
            );
            let sentinel = dir.path().join("sentinel");
            std::fs::create_dir_all(&sentinel).unwrap();
            Run {
                container: &attach,
                image: &[("/opt/opentelemetry", &agent_image)],
                volumes: &volumes,
                shell,
                scratch: dir.path(),
                extra: &[(&sentinel, "/sentinel")],
            }
            .run(&POD);
            assert_eq!(
                read_tree(&sentinel),
                BTreeMap::new(),
                "{p:?} ran ({shell:?})"
            );
            let written = std::fs::read_to_string(staged.join(file)).unwrap();
            let name = format!("{}ServiceName", server.prefix);
            let directives = (server.directives)(&written);
            assert_eq!(
                directives
                    .iter()
                    .filter(|d| d[0] == name)
                    .collect::<Vec<_>>(),
                [&vec![name.clone(), p.to_owned()]],
                "{written:?} ({shell:?})"
            );
            // Nothing but module settings (and, for Apache, its load lines) was written.
            for d in &directives {
                assert!(
                    d[0].starts_with(server.prefix) || d[0] == "LoadFile" || d[0] == "LoadModule",
                    "{d:?} in {written:?}"
                );
            }
        }
    }
}

#[test]
fn apache_attach_script_writes_payloads_as_one_inert_value() {
    attach_script_keeps_payloads_inert(&APACHE, "opentemetry_agent.conf");
}

#[test]
fn nginx_attach_script_writes_payloads_as_one_inert_value() {
    attach_script_keeps_payloads_inert(&NGINX, "conf.d/opentelemetry_agent.conf");
}

#[test]
fn the_tokenizer_ports_read_what_the_servers_read() {
    assert_eq!(
        apache_words(r#"Key "a \"b\" \\ c" d\\e 'x y'"#),
        ["Key", "a \"b\" \\ c", "d\\e", "x y"]
    );
    assert_eq!(
        nginx_directives("a b;\n# c;\nd \"e; f\" 'g\\'h' i\\;j;"),
        [vec!["a", "b"], vec!["d", "e; f", "g'h", "i\\;j"]]
    );
}

#[test]
fn user_variables_cannot_replace_the_module_config_of_the_attach_step() {
    for (server, section, pod_name_var) in [
        (&APACHE, "apacheHttpd", "APACHE_SERVICE_INSTANCE_ID"),
        (&NGINX, "nginx", "OTEL_NGINX_SERVICE_INSTANCE_ID"),
    ] {
        let evil = [
            json!({"name": server.conf_env, "value": "LoadModule evil_module /tmp/evil.so"}),
            json!({"name": pod_name_var, "value": "x; include /etc/passwd"}),
        ];
        let cat = catalog(json!({"env": evil, section: {"env": evil}}));
        let (out, d) = run(&cat, &pod(server.lang.as_str(), json!({})));
        assert_eq!(d.injected, [server.lang]);
        let env = server.attach(&out)["env"].as_array().unwrap();
        let names: Vec<&str> = env.iter().map(|e| e["name"].as_str().unwrap()).collect();
        assert_eq!(
            names,
            ["OTEL_NODE_IP", "OTEL_POD_IP", server.conf_env, pod_name_var]
        );
        assert!(env_var(server.attach(&out), server.conf_env).contains("ServiceName p"));
        assert_eq!(
            env[3]["valueFrom"],
            json!({"fieldRef": {"fieldPath": "metadata.name"}})
        );
    }
}
