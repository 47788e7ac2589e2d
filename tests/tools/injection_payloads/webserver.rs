//! Hostile values for the web servers' module configurations: refused, or read back whole by
//! the servers' own tokenizers (ported here).

use otel_injector::agents::Language;
use otel_injector::engine::Report;
use otel_injector::keys::SERVICE_NAME_ANNOTATION;
use otel_injector::warnings::shorten;
use serde_json::{Value, json};

use super::{PAYLOADS, assert_not_in_commands, catalog, env_var, has_control, pod, run};

/// The words of one Apache configuration line, as `ap_getword_conf` reads them: split at
/// whitespace; a word opened by `"` or `'` runs to the same quote, inside which `\` escapes
/// that quote or a `\`; outside quotes `\\` is one `\`.
pub(super) fn apache_words(line: &str) -> Vec<String> {
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
pub(super) fn apache_directives(text: &str) -> Vec<Vec<String>> {
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
pub(super) fn nginx_directives(text: &str) -> Vec<Vec<String>> {
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

pub(super) struct Server {
    pub(super) lang: Language,
    pub(super) prefix: &'static str,
    pub(super) section: &'static str,
    pub(super) path_field: &'static str,
    pub(super) conf_env: &'static str,
    pub(super) attach: &'static str,
    /// The directives of the module config in the attach container's env.
    pub(super) directives: fn(&str) -> Vec<Vec<String>>,
}

pub(super) const APACHE: Server = Server {
    lang: Language::ApacheHttpd,
    prefix: "ApacheModule",
    section: "apacheHttpd",
    path_field: "configPath",
    conf_env: "OTEL_APACHE_AGENT_CONF",
    attach: "otel-agent-attach-apache",
    directives: apache_directives,
};

pub(super) const NGINX: Server = Server {
    lang: Language::Nginx,
    prefix: "NginxModule",
    section: "nginx",
    path_field: "configFile",
    conf_env: "OTEL_NGINX_AGENT_CONF",
    attach: "otel-agent-attach-nginx",
    directives: nginx_directives,
};

impl Server {
    pub(super) fn attach<'p>(&self, out: &'p Value) -> &'p Value {
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
