//! The forms of the objects: API objects, live policies' (no params) and the API server's
//! manifest files (names under the reserved suffix, no params).

use serde_json::{Value, json};

use super::JAVA;
use crate::cluster::StaticCatalog;
use crate::engine::EngineConfig;
use crate::policy::objects::object_name;
use crate::policy::*;

/// `object` of the API form without what only that form has: `paramKind` and `paramRef`.
fn without_params(object: &Value) -> Value {
    let mut out = object.clone();
    let spec = out["spec"].as_object_mut().unwrap();
    spec.remove("paramKind");
    spec.remove("paramRef");
    out
}

#[test]
fn long_names_are_shortened_by_digest() {
    let long = "n".repeat(250);
    for form in [Form::Api, Form::Live, Form::Static] {
        let options = PolicyOptions {
            form,
            ..PolicyOptions::default()
        };
        let name = object_name(&options, "shop", &long);
        assert!(name.len() <= 253, "{name}");
        assert!(name.ends_with(options.suffix()), "{name}");
        assert_ne!(name, object_name(&options, "shop", &"m".repeat(250)));
        assert_eq!(
            object_name(&options, "shop", "java"),
            format!("otel-injector.shop.java{}", options.suffix())
        );
    }
}

/// Live policies' form: the API form's objects under the same names, without params (their
/// writer deletes a deleted Instrumentation's objects), in both modes and in the per-language
/// form live policies render where the namespaces are read.
#[test]
fn the_live_form_is_the_api_form_without_params() {
    let catalog = StaticCatalog::from_yaml(JAVA)
        .unwrap()
        .with_namespace("shop", &[]);
    let config = EngineConfig::default();
    for mode in [Mode::Policy, Mode::Both] {
        let options = PolicyOptions {
            mode,
            namespaces_read: true,
            ..PolicyOptions::default()
        };
        let api = render(&catalog, &config, &options).objects;
        let live_options = PolicyOptions {
            form: Form::Live,
            ..options
        };
        let live = render(&catalog, &config, &live_options).objects;
        assert_eq!(live.len(), api.len());
        let mut with_params = 0;
        for (object, api) in live.iter().zip(&api) {
            let name = object["metadata"]["name"].as_str().unwrap();
            assert!(object["spec"].get("paramKind").is_none(), "{name}");
            assert!(object["spec"].get("paramRef").is_none(), "{name}");
            with_params += usize::from(api["spec"].get("paramRef").is_some());
            assert_eq!(object, &without_params(api), "{name}");
        }
        // Each language's binding had one.
        assert_eq!(with_params, LANGUAGES.len(), "{mode:?}");
    }
}

/// The API server's manifest form: every name ends in the reserved suffix, and nothing reads
/// params (its loader refuses `paramKind` and `paramRef`); the rest is the API form's.
#[test]
fn the_manifest_form_is_the_api_form_without_params_under_static_names() {
    let catalog = StaticCatalog::from_yaml(JAVA).unwrap();
    let config = EngineConfig::default();
    let api = render(&catalog, &config, &PolicyOptions::default()).objects;
    let static_options = PolicyOptions {
        form: Form::Static,
        ..PolicyOptions::default()
    };
    let files = render(&catalog, &config, &static_options).objects;
    assert_eq!(files.len(), api.len());
    for (file, object) in files.iter().zip(&api) {
        let name = file["metadata"]["name"].as_str().unwrap();
        assert_eq!(
            name,
            format!(
                "{}{STATIC_SUFFIX}",
                object["metadata"]["name"].as_str().unwrap()
            )
        );
        assert!(file["spec"].get("paramKind").is_none(), "{name}");
        assert!(file["spec"].get("paramRef").is_none(), "{name}");
        if let Some(policy) = file["spec"]["policyName"].as_str() {
            assert!(policy.ends_with(STATIC_SUFFIX), "{policy}");
        }
        let mut expected = without_params(object);
        expected["metadata"]["name"] = json!(name);
        if let Some(policy) = expected["spec"].get_mut("policyName") {
            *policy = json!(format!("{}{STATIC_SUFFIX}", policy.as_str().unwrap()));
        }
        assert_eq!(file, &expected);
    }
    let (mutating, validating) = by_plugin(files);
    assert_eq!(mutating.len(), 4);
    assert!(
        mutating
            .iter()
            .all(|o| o["kind"].as_str().unwrap().starts_with("Mutating"))
    );
    let kinds: Vec<&str> = validating
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding"
        ]
    );
}

/// Every policy declares the variables it reads and only those, each after the ones it reads:
/// per-language live policies, the CLI's, selectors' and mode `policy`'s status and warning.
#[test]
fn every_policy_declares_what_it_reads_and_nothing_else() {
    use crate::crd::parse_instrumentations;
    use crate::policy::vars::references;
    let yaml = format!("{JAVA}\n---\n{}", super::selected::SELECTORS);
    let catalog = StaticCatalog::new(parse_instrumentations(&yaml).unwrap())
        .with_namespace("shop", &[])
        .with_namespace("platform", &[]);
    let mut checked = 0;
    for (mode, namespaces_read) in [Mode::Policy, Mode::Both]
        .into_iter()
        .flat_map(|m| [(m, false), (m, true)])
    {
        let options = PolicyOptions {
            mode,
            namespaces_read,
            form: Form::Live,
            ..PolicyOptions::default()
        };
        for object in render(&catalog, &EngineConfig::default(), &options).objects {
            let Some(declared) = object["spec"]["variables"].as_array() else {
                continue;
            };
            let name = &object["metadata"]["name"];
            let names: Vec<&str> = declared
                .iter()
                .map(|v| v["name"].as_str().unwrap())
                .collect();
            let mut rest = object["spec"].clone();
            rest.as_object_mut().unwrap().remove("variables");
            let rest = rest.to_string();
            let mut read: Vec<&str> = references(&rest).collect();
            for (i, v) in declared.iter().enumerate() {
                for r in references(v["expression"].as_str().unwrap()) {
                    assert!(names[..i].contains(&r), "{name}: {} reads {r}", names[i]);
                    read.push(r);
                }
            }
            for r in &read {
                assert!(names.contains(r), "{name}: {r} read, not declared");
            }
            for n in &names {
                assert!(read.contains(n), "{name}: {n} declared, never read");
            }
            checked += 1;
        }
    }
    assert!(checked >= 20, "{checked}");
}
