//! The agents' env notes against the oracle they replace: for every language and variant of
//! Instrumentations that exercise each kind of note, in both deliveries, the template read off
//! one engine run's notes says what probing the engine once per variable learns.

use super::{JAVA, image_volumes, inst};
use crate::agents::Language;
use crate::engine::EngineConfig;
use crate::policy::template::{self, Template, probe};
use crate::policy::vars;

const BETA: &str = r#"
apiVersion: opentelemetry.io/v1beta1
kind: Instrumentation
metadata: {name: beta, namespace: shop}
spec:
  envConfig: {exporter: {endpoint: "http://collector:4317", protocol: grpc}}
  resource: {attributes: {team: payments}, k8sMetadata: {enabled: false}, serviceMetadata: {enabled: false}}
  java: {image: "example/java:2.33.1"}
  nodejs: {image: "example/nodejs:0.60.0"}
"#;

/// The project's Instrumentations, and variations on Java's that make each note matter.
fn instrumentations() -> Vec<String> {
    let data = [
        include_str!("../../../tests/data/instrumentations/java.yaml"),
        include_str!("../../../tests/data/instrumentations/nodejs.yaml"),
        include_str!("../../../tests/data/instrumentations/python.yaml"),
        include_str!("../../../tests/data/instrumentations/dotnet.yaml"),
        include_str!("../../../tests/data/instrumentations/apache-httpd.yaml"),
        include_str!("../../../tests/data/instrumentations/nginx.yaml"),
        include_str!("../../../tests/data/instrumentations/sdk.yaml"),
    ];
    let java = |from: &str, to: &str| {
        assert!(JAVA.contains(from), "{from}");
        JAVA.replace(from, to)
    };
    let spec_env = |entries: &str| java("  java:\n", &format!("  env: [{entries}]\n  java:\n"));
    let lang_env = |section: &str, name: &str| {
        java(
            "  java:\n",
            &format!("  {section}:\n    env: [{{name: {name}, value: \"-x\"}}]\n  java:\n"),
        )
    };
    let mut all: Vec<String> = data.iter().map(|s| s.to_string()).collect();
    all.extend([
        JAVA.to_owned(),
        // A sampler without its argument: the user's argument still keeps it out.
        java(", argument: \"0.5\"", ""),
        // No sampler at all.
        java(
            "  sampler: {type: parentbased_traceidratio, argument: \"0.5\"}\n",
            "",
        ),
        // spec.env setting what the agents and the SDK configuration would add.
        spec_env("{name: OTEL_RESOURCE_ATTRIBUTES, value: \"team=a\"}"),
        spec_env(
            "{name: OTEL_RESOURCE_ATTRIBUTES, valueFrom: {fieldRef: {fieldPath: metadata.name}}}",
        ),
        spec_env("{name: OTEL_TRACES_SAMPLER_ARG, value: \"0.1\"}"),
        spec_env("{name: OTEL_EXPORTER_OTLP_ENDPOINT, value: \"http://other:4318\"}"),
        spec_env(
            "{name: OTEL_EXPORTER_OTLP_HEADERS, valueFrom: {secretKeyRef: {name: s, key: k}}}",
        ),
        // A language's own env setting the variable its agent extends.
        java(
            "OTEL_INSTRUMENTATION_JDBC_ENABLED, value: \"false\"",
            "JAVA_TOOL_OPTIONS, value: \"-x\"",
        ),
        lang_env("nodejs", "NODE_OPTIONS"),
        lang_env("python", "PYTHONPATH"),
        lang_env("dotnet", "DOTNET_STARTUP_HOOKS"),
        lang_env("nginx", "LD_LIBRARY_PATH"),
        // v1beta1: no resource attributes at all (nothing to merge), and its own attributes.
        BETA.replace("attributes: {team: payments}, ", ""),
        BETA.to_owned(),
        // Init containers with a security context of their own; the web servers' own
        // configuration directories (the clone takes over the mounts below them).
        java("  java:\n", "  initContainerSecurityContext: {runAsUser: 1000}\n  java:\n"),
        java(
            "  java:\n",
            "  apacheHttpd: {configPath: /srv/httpd/conf/}\n  nginx: {configFile: /srv/nginx/main.conf}\n  java:\n",
        ),
        // Pod UIDs, as the downward API gives them.
        java(
            "  java:\n",
            "  resource: {addK8sUIDAttributes: true}\n  java:\n",
        ),
    ]);
    all
}

#[test]
fn the_notes_say_what_probing_the_engine_learns() {
    let mut compared = 0;
    for yaml in instrumentations() {
        let inst = inst(&yaml);
        let before = compared;
        for config in [image_volumes(), EngineConfig::default()] {
            for &lang in Language::ALL {
                for variant in vars::variants(lang) {
                    let Ok(typed) = template::read_variant(&inst, lang, variant, &config) else {
                        continue;
                    };
                    let at = format!("{lang} {variant:?} of\n{yaml}");
                    let (probed, refuse_empty) = probe::probed(&typed, &config).unwrap();
                    assert!(refuse_empty.is_empty(), "{at}: {refuse_empty:?}");
                    same_env(&typed, &probed, &at);
                    compared += 1;
                }
            }
        }
        assert!(compared > before, "no template of\n{yaml}");
    }
    // Every language but Go (a sidecar) and its variants, in both deliveries (472 today).
    assert!(compared > 400, "{compared} templates compared");
}

fn same_env(typed: &Template, probed: &Template, at: &str) {
    assert_eq!(typed.prepended, probed.prepended, "{at}");
    assert_eq!(typed.appended.len(), probed.appended.len(), "{at}");
    // The probes set only the template's own variables: what else keeps one out (the
    // sampler's argument, when the Instrumentation gives none) only the notes can say.
    let seen = |n: &String| {
        typed.prepended.iter().any(|e| e["name"] == n.as_str())
            || typed.appended.iter().any(|a| a.entry["name"] == n.as_str())
    };
    for (t, p) in typed.appended.iter().zip(&probed.appended) {
        assert_eq!((&t.entry, t.kind), (&p.entry, p.kind), "{at}");
        let by: Vec<&String> = t.kept_out_by.iter().filter(|n| seen(n)).collect();
        let probed_by: Vec<&String> = p.kept_out_by.iter().collect();
        assert_eq!(by, probed_by, "{} kept out by, {at}", t.entry["name"]);
    }
    assert_eq!(typed.extensions, probed.extensions, "{at}");
    assert_eq!(typed.refuse_literal, probed.refuse_literal, "{at}");
    assert_eq!(typed.refuse_value_from, probed.refuse_value_from, "{at}");
    assert_eq!(
        typed.merges_resource_attributes, probed.merges_resource_attributes,
        "{at}"
    );
    assert_eq!(typed.agent_refuses, probed.agent_refuses, "{at}");
    assert_eq!(typed.init, probed.init, "{at}");
    assert_eq!(typed.hidden_below, probed.hidden_below, "{at}");
}

/// What only the notes can say: with no argument in the Instrumentation, the template adds
/// `OTEL_TRACES_SAMPLER` alone, and a container's own `OTEL_TRACES_SAMPLER_ARG` still keeps
/// it out, as the webhook does.
#[test]
fn a_users_sampler_argument_keeps_the_sampler_out_without_one_in_the_spec() {
    let no_argument = JAVA.replace(", argument: \"0.5\"", "");
    for (yaml, expected) in [
        (
            JAVA.to_owned(),
            ["OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG"].as_slice(),
        ),
        (no_argument, &["OTEL_TRACES_SAMPLER"]),
    ] {
        let t = template::read(&inst(&yaml), Language::Java, &image_volumes()).unwrap();
        let sampler: Vec<(&str, &[String])> = t
            .appended
            .iter()
            .filter(|a| {
                a.entry["name"]
                    .as_str()
                    .unwrap()
                    .starts_with("OTEL_TRACES_SAMPLER")
            })
            .map(|a| (a.entry["name"].as_str().unwrap(), a.kept_out_by.as_slice()))
            .collect();
        let by = ["OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG"];
        assert_eq!(
            sampler.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
            expected,
            "{yaml}"
        );
        for (name, kept_out_by) in sampler {
            assert_eq!(kept_out_by, by, "{name} of\n{yaml}");
        }
    }
}
