//! Hostile values in annotations and Instrumentations, per language: a newline, quotes, a
//! trailing backslash, `$(...)`, backticks and `;`. Wherever such a value reaches a
//! web-server configuration file or a command it is refused with a warning (control
//! characters, names and paths outside their patterns) or written so the server reads it back
//! as the one value it was (quoted), and no shell ever evaluates it. Where it only reaches an
//! environment variable it is kept as data, verbatim.
//!
//! The web-server cases also run the real attach scripts on the value (see `kubelet/mod.rs`)
//! and read the file they write back with the servers' own tokenizing rules (ports of
//! Apache's `ap_getword_conf` and nginx's `ngx_conf_read_token`, below).

use std::collections::BTreeMap;

use crate::kubelet::{POD, Run, SHELLS, read_tree, write_tree};
use json_patch::Patch;
use k8s_openapi::api::core::v1::Pod;
use otel_injector::admission::mutate;
use otel_injector::agents::Language;
use otel_injector::cluster::StaticCatalog;
use otel_injector::engine::{EngineConfig, Report, Snapshot};
use otel_injector::keys::SERVICE_NAME_ANNOTATION;
use otel_injector::warnings::shorten;
use serde_json::{Value, json};

const NEWLINE: &str = "svc\nLoadModule evil_module /tmp/evil.so";
const QUOTE: &str = "svc\" \"evil";
const BACKSLASH: &str = "svc\\";
const DOLLAR: &str = "svc$(touch /sentinel/dollar)";
const BACKTICK: &str = "svc`touch /sentinel/backtick`";
const SEMICOLON: &str = "svc; include /etc/passwd; #";
const PAYLOADS: [&str; 6] = [NEWLINE, QUOTE, BACKSLASH, DOLLAR, BACKTICK, SEMICOLON];

fn has_control(p: &str) -> bool {
    p.chars().any(char::is_control)
}

/// One Instrumentation with every language section; `spec` is merged over it.
fn catalog(spec: Value) -> StaticCatalog {
    let mut base = json!({
        "exporter": {"endpoint": "http://collector:4317"},
        "java": {}, "nodejs": {}, "python": {}, "dotnet": {}, "go": {},
        "apacheHttpd": {}, "nginx": {}
    });
    for (k, v) in spec.as_object().unwrap() {
        base[k] = v.clone();
    }
    let inst = json!({
        "apiVersion": "opentelemetry.io/v1alpha1", "kind": "Instrumentation",
        "metadata": {"name": "inst", "namespace": "shop"}, "spec": base
    });
    // JSON is YAML.
    StaticCatalog::from_yaml(&inst.to_string()).unwrap()
}

fn pod(lang: &str, annotations: Value) -> Value {
    let mut a = json!({format!("instrumentation.opentelemetry.io/inject-{lang}"): "true"});
    for (k, v) in annotations.as_object().unwrap() {
        a[k] = v.clone();
    }
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "shop", "annotations": a},
        "spec": {"containers": [{"name": "app", "image": "app:1"}]}
    })
}

fn run(catalog: &StaticCatalog, pod: &Value) -> (Value, Report) {
    let config = EngineConfig::default();
    let typed: Pod = serde_json::from_value(pod.clone()).unwrap();
    let (ops, report) = mutate(&Snapshot::take(catalog, "shop", &config), &typed);
    let mut out = pod.clone();
    json_patch::patch(&mut out, &Patch(ops)).unwrap();
    (out, report)
}

fn env_var<'c>(container: &'c Value, name: &str) -> &'c str {
    container["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == name)
        .and_then(|e| e["value"].as_str())
        .unwrap_or_else(|| panic!("no {name} in {container}"))
}

/// No command or args of a container the webhook added carries the payload.
fn assert_not_in_commands(out: &Value, payload: &str) {
    let added = out["spec"]["initContainers"]
        .as_array()
        .into_iter()
        .flatten()
        .chain(out["spec"]["containers"].as_array().unwrap().iter().skip(1));
    for c in added {
        for part in ["command", "args"] {
            for a in c[part].as_array().into_iter().flatten() {
                assert!(
                    !a.as_str().unwrap().contains(payload),
                    "{payload:?} reached {part} of {}",
                    c["name"]
                );
            }
        }
    }
}

/// The service name of the SDK languages only reaches `OTEL_SERVICE_NAME`: kept verbatim,
/// control characters included (an environment value is data, never parsed).
fn service_name_is_env_data(lang: Language) {
    for p in PAYLOADS {
        let mut annotations = json!({SERVICE_NAME_ANNOTATION: p});
        if lang == Language::Go {
            annotations["instrumentation.opentelemetry.io/otel-go-auto-target-exe"] =
                json!("/app/server");
        }
        let (out, d) = run(&catalog(json!({})), &pod(lang.as_str(), annotations));
        assert_eq!(d.injected, [lang], "{p:?}");
        assert!(d.warnings.is_empty(), "{p:?}: {:?}", d.warnings);
        let target = if lang == Language::Go {
            &out["spec"]["containers"][1]
        } else {
            &out["spec"]["containers"][0]
        };
        assert_eq!(env_var(target, "OTEL_SERVICE_NAME"), p);
        assert_not_in_commands(&out, p);
    }
}

#[test]
fn java_service_name_is_data_and_extension_dirs_never_reach_a_shell() {
    service_name_is_env_data(Language::Java);
    for p in PAYLOADS {
        let cat = catalog(json!({"java": {"extensions": [{"image": "ext:1", "dir": p}]}}));
        let (out, d) = run(&cat, &pod("java", json!({})));
        if has_control(p) {
            assert!(d.injected.is_empty());
            assert_eq!(
                d.warnings,
                ["java: spec.java.extensions[0].dir has a control character; not injected"]
            );
            continue;
        }
        assert_eq!(d.injected, [Language::Java], "{p:?}");
        // An argument vector, run without a shell: the value is one path argument.
        assert_eq!(
            out["spec"]["initContainers"][1]["command"],
            json!([
                "cp",
                "-r",
                format!("{p}/."),
                "/otel-auto-instrumentation-java/extensions"
            ])
        );
    }
}

#[test]
fn nodejs_service_name_is_data() {
    service_name_is_env_data(Language::NodeJs);
}

#[test]
fn python_service_name_is_data_and_the_platform_is_one_of_two_words() {
    service_name_is_env_data(Language::Python);
    for p in PAYLOADS {
        let (out, d) = run(
            &catalog(json!({})),
            &pod(
                "python",
                json!({"instrumentation.opentelemetry.io/otel-python-platform": p}),
            ),
        );
        assert!(d.injected.is_empty());
        assert_eq!(
            d.warnings,
            [shorten(format!(
                "python: otel-python-platform {p:?} is not supported (use glibc or musl); not injected"
            ))]
        );
        assert_not_in_commands(&out, p);
    }
}

#[test]
fn dotnet_service_name_is_data_and_the_runtime_is_one_of_two_words() {
    service_name_is_env_data(Language::DotNet);
    for p in PAYLOADS {
        let (_, d) = run(
            &catalog(json!({})),
            &pod(
                "dotnet",
                json!({"instrumentation.opentelemetry.io/otel-dotnet-auto-runtime": p}),
            ),
        );
        assert!(d.injected.is_empty());
        assert_eq!(
            d.warnings,
            [shorten(format!(
                "dotnet: otel-dotnet-auto-runtime {p:?} is not supported (use linux-x64 or linux-musl-x64); not injected"
            ))]
        );
    }
}

#[test]
fn go_service_name_and_target_exe_are_data_for_the_sidecar() {
    service_name_is_env_data(Language::Go);
    for p in PAYLOADS {
        let (out, d) = run(
            &catalog(json!({})),
            &pod(
                "go",
                json!({"instrumentation.opentelemetry.io/otel-go-auto-target-exe": p}),
            ),
        );
        assert_eq!(d.injected, [Language::Go], "{p:?}");
        let sidecar = &out["spec"]["containers"][1];
        assert_eq!(env_var(sidecar, "OTEL_GO_AUTO_TARGET_EXE"), p);
        // The image's entrypoint runs; nothing of the pod's is a command.
        assert!(sidecar.get("command").is_none() && sidecar.get("args").is_none());
    }
}

#[test]
fn sdk_service_name_is_data() {
    service_name_is_env_data(Language::Sdk);
}

// === Web servers ===

/// The words of one Apache configuration line, as `ap_getword_conf` reads them: split at
/// whitespace; a word opened by `"` or `'` runs to the same quote, inside which `\` escapes
/// that quote or a `\`; outside quotes `\\` is one `\`.
fn apache_words(line: &str) -> Vec<String> {
    let b = line.as_bytes();
    let (mut i, mut words) = (0, Vec::new());
    loop {
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        if i == b.len() {
            return words;
        }
        let mut word = Vec::new();
        if b[i] == b'"' || b[i] == b'\'' {
            let q = b[i];
            i += 1;
            while i < b.len() && b[i] != q {
                if b[i] == b'\\' && i + 1 < b.len() && (b[i + 1] == q || b[i + 1] == b'\\') {
                    i += 1;
                }
                word.push(b[i]);
                i += 1;
            }
            i = (i + 1).min(b.len());
        } else {
            while i < b.len() && !b[i].is_ascii_whitespace() {
                if b[i] == b'\\' && i + 1 < b.len() && b[i + 1] == b'\\' {
                    i += 1;
                }
                word.push(b[i]);
                i += 1;
            }
        }
        words.push(String::from_utf8(word).unwrap());
    }
}

/// The directives of an Apache file (comment and blank lines left out). A line ending in
/// `\` would continue on the next one: that never happens here.
fn apache_directives(text: &str) -> Vec<Vec<String>> {
    text.lines()
        .inspect(|l| assert!(!l.ends_with('\\'), "continuation line {l:?}"))
        .filter(|l| !l.trim_start().starts_with('#') && !l.trim().is_empty())
        .map(apache_words)
        .collect()
}

/// The directives of an nginx file without blocks, as `ngx_conf_read_token` reads them:
/// words split at whitespace and ended by `;`; `#` at a word's start comments to the line's
/// end; `"` and `'` quote; `\` escapes the next character and is undone afterwards for
/// `"`, `'` and `\` (`\t`, `\r`, `\n` become those characters).
fn nginx_directives(text: &str) -> Vec<Vec<String>> {
    let chars: Vec<char> = text.chars().collect();
    let (mut i, mut directives, mut words) = (0, Vec::new(), Vec::new());
    let unescape = |raw: &[char]| {
        let mut out = String::new();
        let mut j = 0;
        while j < raw.len() {
            if raw[j] == '\\' && j + 1 < raw.len() {
                match raw[j + 1] {
                    '"' | '\'' | '\\' => {
                        out.push(raw[j + 1]);
                        j += 2;
                        continue;
                    }
                    't' | 'r' | 'n' => {
                        out.push(match raw[j + 1] {
                            't' => '\t',
                            'r' => '\r',
                            _ => '\n',
                        });
                        j += 2;
                        continue;
                    }
                    _ => {}
                }
            }
            out.push(raw[j]);
            j += 1;
        }
        out
    };
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c == ';' {
            directives.push(std::mem::take(&mut words));
            i += 1;
        } else if c == '#' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '{' || c == '}' {
            panic!("a block in a module config: {text:?}");
        } else {
            let quote = (c == '"' || c == '\'').then_some(c);
            let start = if quote.is_some() { i + 1 } else { i };
            let mut j = start;
            loop {
                assert!(j < chars.len(), "unterminated word in {text:?}");
                let ch = chars[j];
                if ch == '\\' {
                    j += 2;
                    continue;
                }
                let end = match quote {
                    Some(q) => ch == q,
                    None => ch.is_whitespace() || ch == ';' || ch == '{',
                };
                if end {
                    break;
                }
                j += 1;
            }
            words.push(unescape(&chars[start..j]));
            i = if quote.is_some() { j + 1 } else { j };
        }
    }
    assert!(words.is_empty(), "unterminated directive {words:?}");
    directives
}

struct Server {
    lang: Language,
    prefix: &'static str,
    section: &'static str,
    path_field: &'static str,
    conf_env: &'static str,
    attach: &'static str,
    /// The directives of the module config in the attach container's env.
    directives: fn(&str) -> Vec<Vec<String>>,
}

const APACHE: Server = Server {
    lang: Language::ApacheHttpd,
    prefix: "ApacheModule",
    section: "apacheHttpd",
    path_field: "configPath",
    conf_env: "OTEL_APACHE_AGENT_CONF",
    attach: "otel-agent-attach-apache",
    directives: apache_directives,
};

const NGINX: Server = Server {
    lang: Language::Nginx,
    prefix: "NginxModule",
    section: "nginx",
    path_field: "configFile",
    conf_env: "OTEL_NGINX_AGENT_CONF",
    attach: "otel-agent-attach-nginx",
    directives: nginx_directives,
};

impl Server {
    fn attach<'p>(&self, out: &'p Value) -> &'p Value {
        out["spec"]["initContainers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == self.attach)
            .unwrap()
    }

    /// The module directive `key` read back from the module config in `out`.
    fn setting(&self, out: &Value, key: &str) -> Vec<String> {
        let conf = env_var(self.attach(out), self.conf_env);
        let found: Vec<Vec<String>> = (self.directives)(conf)
            .into_iter()
            .filter(|d| d[0] == key)
            .collect();
        assert_eq!(found.len(), 1, "{key} in {conf:?}");
        found[0].clone()
    }

    fn refused(&self, d: &Report, warning: &str) {
        assert!(d.injected.is_empty(), "{:?}", d.injected);
        assert_eq!(d.warnings, [shorten(warning.to_owned())]);
    }

    /// Payloads in the service name annotation, an `attrs` value and the endpoint.
    fn values_are_refused_or_read_back_whole(&self) {
        let lang = self.lang;
        let name = format!("{}ServiceName", self.prefix);
        let queue = format!("{}OtelMaxQueueSize", self.prefix);
        let endpoint = format!("{}OtelExporterEndpoint", self.prefix);
        for p in PAYLOADS {
            let (out, d) = run(
                &catalog(json!({})),
                &pod(lang.as_str(), json!({SERVICE_NAME_ANNOTATION: p})),
            );
            if has_control(p) {
                self.refused(
                    &d,
                    &format!("{lang}: the service name has a control character; not injected"),
                );
                let mut expected = pod(lang.as_str(), json!({SERVICE_NAME_ANNOTATION: p}));
                expected["metadata"]["annotations"]["otel-injector/status"] =
                    json!(format!("{lang}=skipped invalid_value shop/inst"));
                expected["metadata"]["labels"] = json!({"otel-injector/injected": "false"});
                assert_eq!(out, expected, "pod untouched but for the outcome");
            } else {
                assert_eq!(d.injected, [lang], "{p:?}: {:?}", d.warnings);
                assert_eq!(self.setting(&out, &name), [name.as_str(), p]);
                assert_not_in_commands(&out, p);
            }

            let attrs = json!({self.section: {"attrs": [{"name": queue, "value": p}]}});
            let (out, d) = run(&catalog(attrs), &pod(lang.as_str(), json!({})));
            if has_control(p) {
                self.refused(
                    &d,
                    &format!("{lang}: attrs {queue} has a control character; not injected"),
                );
            } else {
                assert_eq!(self.setting(&out, &queue), [queue.as_str(), p]);
            }

            let (out, d) = run(
                &catalog(json!({"exporter": {"endpoint": p}})),
                &pod(lang.as_str(), json!({})),
            );
            if has_control(p) {
                self.refused(
                    &d,
                    &format!(
                        "{lang}: spec.exporter.endpoint has a control character; not injected"
                    ),
                );
            } else {
                assert_eq!(self.setting(&out, &endpoint), [endpoint.as_str(), p]);
            }
        }
    }

    /// Payloads as an `attrs` name and as the config path.
    fn names_and_paths_are_refused(&self) {
        let lang = self.lang;
        for p in PAYLOADS {
            let attrs = json!({self.section: {"attrs": [{"name": p, "value": "1"}]}});
            let (_, d) = run(&catalog(attrs), &pod(lang.as_str(), json!({})));
            self.refused(
                &d,
                &format!("{lang}: attrs name {p:?} is not a directive name (letters, digits, _); not injected"),
            );

            let path = json!({self.section: {self.path_field: format!("/etc/{p}")}});
            let (_, d) = run(&catalog(path), &pod(lang.as_str(), json!({})));
            self.refused(
                &d,
                &format!(
                    "{lang}: spec.{}.{} must match ^[A-Za-z0-9._/-]*$, at most 256 characters; not injected",
                    self.section, self.path_field
                ),
            );
        }
    }
}

#[test]
fn apache_values_are_refused_or_read_back_whole() {
    APACHE.values_are_refused_or_read_back_whole();
    APACHE.names_and_paths_are_refused();
}

#[test]
fn nginx_values_are_refused_or_read_back_whole() {
    NGINX.values_are_refused_or_read_back_whole();
    NGINX.names_and_paths_are_refused();
}

#[test]
fn ordinary_values_are_written_as_the_operator_writes_them() {
    // Only values that need it are quoted, so the usual file is the Operator's, byte for byte;
    // an empty value (an `attrs` entry with `valueFrom`) is quoted so the directive keeps its
    // argument.
    let cat = catalog(json!({
        "exporter": {"endpoint": "http://$(OTEL_NODE_IP):4317"},
        "apacheHttpd": {"attrs": [{"name": "ApacheModuleOtelMaxQueueSize", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]},
        "nginx": {"attrs": [{"name": "NginxModuleOtelMaxQueueSize", "value": "my queue"}]}
    }));
    let (out, _) = run(
        &cat,
        &pod(
            "apache-httpd",
            json!({SERVICE_NAME_ANNOTATION: "web-frontend"}),
        ),
    );
    let conf = env_var(APACHE.attach(&out), APACHE.conf_env);
    for line in [
        "\nApacheModuleOtelExporterEndpoint http://$(OTEL_NODE_IP):4317\n",
        "\nApacheModuleOtelMaxQueueSize \"\"\n",
        "\nApacheModuleResolveBackends  ON\n",
        "\nApacheModuleServiceName web-frontend\n",
    ] {
        assert!(conf.contains(line), "{line:?} in {conf:?}");
    }
    let (out, _) = run(
        &cat,
        &pod("nginx", json!({SERVICE_NAME_ANNOTATION: "a \"b\" c\\"})),
    );
    let conf = env_var(NGINX.attach(&out), NGINX.conf_env);
    for line in [
        "NginxModuleOtelExporterEndpoint http://$(OTEL_NODE_IP):4317;\n",
        "NginxModuleOtelMaxQueueSize \"my queue\";\n",
        "NginxModuleServiceName \"a \\\"b\\\" c\\\\\";\n",
    ] {
        assert!(conf.contains(line), "{line:?} in {conf:?}");
    }
}

/// Runs the attach script of `server` for a pod whose service name is each payload, and
/// reads the module config it writes back: the payload is the one value of the service name
/// directive, and no command in it ran.
fn attach_script_keeps_payloads_inert(server: &Server, file: &str) {
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
