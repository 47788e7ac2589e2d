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

mod attach;
mod webserver;

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
