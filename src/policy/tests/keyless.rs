//! Which pods reach an injection policy's mutations when the renderer reads the namespaces
//! (live policies, `PolicyOptions::namespaces_read`): where neither the namespace's keys nor
//! a selector can ask, only the pods with a key of their own, each to its own language's
//! policy.

use serde_json::{Value, json};

use super::JAVA;
use crate::agents::Language;
use crate::cluster::StaticCatalog;
use crate::engine::EngineConfig;
use crate::keys::{
    INJECTED_LABEL, INSTRUMENTATION_ANNOTATION, LANGUAGES_ANNOTATION, OPT_OUT, OPT_OUT_LABEL,
};
use crate::policy::{LANGUAGES, Mode, PolicyOptions, render};

/// The injection policies rendered from `catalog` (the bindings and skip objects left out).
fn policies(catalog: &StaticCatalog, namespaces_read: bool) -> Vec<Value> {
    let options = PolicyOptions {
        namespaces_read,
        ..PolicyOptions::default()
    };
    render(catalog, &EngineConfig::default(), &options)
        .objects
        .into_iter()
        .filter(|o| o["kind"] == "MutatingAdmissionPolicy")
        .filter(|o| o["metadata"]["name"] != "otel-injector.not-injected")
        .collect()
}

/// The names of a policy's match conditions.
fn conditions(policy: &Value) -> Vec<String> {
    policy["spec"]["matchConditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap().to_owned())
        .collect()
}

/// The `not-injected-before` condition's expression, as the CLI's render holds it alone.
fn not_injected() -> String {
    let plain = StaticCatalog::from_yaml(JAVA).unwrap();
    let all = policies(&plain, false);
    assert_eq!(conditions(&all[0]), ["not-injected-before"]);
    all[0]["spec"]["matchConditions"][0]["expression"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// What a keyed policy's one condition asks: the condition is `(asks) && (not injected
/// before)`, the key first so that the pods that do not ask skip the pod-wide scan.
fn asks(policy: &Value) -> String {
    let conditions = policy["spec"]["matchConditions"].as_array().unwrap();
    assert_eq!(conditions.len(), 1, "{conditions:?}");
    let expression = conditions[0]["expression"].as_str().unwrap();
    let tail = format!(") && ({})", not_injected());
    expression
        .strip_prefix('(')
        .and_then(|e| e.strip_suffix(&tail))
        .unwrap_or_else(|| panic!("not (asks) && (not injected): {expression}"))
        .to_owned()
}

/// The names of the one policy `catalog` renders for shop/java, with namespaces read.
fn one_policy(catalog: &StaticCatalog) -> Vec<String> {
    let all = policies(catalog, true);
    assert_eq!(all.len(), 1, "{all:?}");
    conditions(&all[0])
}

#[test]
fn a_language_policy_takes_the_pods_with_its_key_and_those_of_namespaces_that_ask_for_it() {
    let plain = StaticCatalog::from_yaml(JAVA)
        .unwrap()
        .with_namespace("shop", &[]);
    let combined = policies(&plain, false);
    let split = policies(&plain, true);
    // A render that does not read the namespaces (the CLI's) cannot tell: one policy, every
    // pod, a mutation per language.
    assert_eq!(combined.len(), 1);
    assert_eq!(conditions(&combined[0]), ["not-injected-before"]);
    let mutations = combined[0]["spec"]["mutations"].as_array().unwrap();
    assert_eq!(mutations.len(), LANGUAGES.len());
    // Read: a policy per language, named after it, reached by the pods with that language's
    // key alone, holding the same mutation and the variables it reads.
    assert_eq!(split.len(), LANGUAGES.len());
    let variables = combined[0]["spec"]["variables"].as_array().unwrap();
    for ((policy, lang), mutation) in split.iter().zip(LANGUAGES).zip(mutations) {
        assert_eq!(
            policy["metadata"]["name"],
            format!("otel-injector.shop.java.{lang}")
        );
        assert_eq!(
            conditions(policy),
            [format!("asks-for-{lang}-and-not-injected-before")]
        );
        let key = lang.inject_annotation();
        assert_eq!(
            asks(policy),
            format!(
                "(has(object.metadata.annotations) && \"{key}\" in object.metadata.annotations) || (has(object.metadata.labels) && \"{key}\" in object.metadata.labels)"
            )
        );
        assert_eq!(
            policy["spec"]["mutations"],
            Value::from(vec![mutation.clone()])
        );
        assert_eq!(
            policy["metadata"]["annotations"][LANGUAGES_ANNOTATION],
            lang.as_str()
        );
        // Its variables are the combined policy's, less other languages' own, and hold
        // every variable its expressions read.
        let own = policy["spec"]["variables"].as_array().unwrap();
        assert!(own.iter().all(|v| variables.contains(v)), "{lang}");
        assert!(own.len() < variables.len(), "{lang}");
        let declared: Vec<&str> = own.iter().map(|v| v["name"].as_str().unwrap()).collect();
        let text = policy["spec"].to_string();
        for read in text.split("variables.").skip(1) {
            let name: String = read
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            assert!(declared.contains(&name.as_str()), "{lang}: {name}");
        }
    }
    // The namespace's own keys, annotation or label, `"false"` included: every pod of it
    // reaches the policy of the language they name, and that one only.
    let java = Language::Java.inject_annotation();
    let python = Language::Python.inject_annotation();
    let reaching = |catalog: &StaticCatalog, lang: Language| -> String {
        let all = policies(catalog, true);
        assert_eq!(all.len(), LANGUAGES.len());
        let policy = all
            .iter()
            .find(|p| p["metadata"]["annotations"][LANGUAGES_ANNOTATION] == lang.as_str())
            .unwrap();
        assert_eq!(
            conditions(policy),
            [format!("asks-for-{lang}-and-not-injected-before")]
        );
        asks(policy)
    };
    let own = |lang: Language| {
        let key = lang.inject_annotation();
        format!(
            "(has(object.metadata.annotations) && \"{key}\" in object.metadata.annotations) || (has(object.metadata.labels) && \"{key}\" in object.metadata.labels)"
        )
    };
    for value in ["true", "false"] {
        let annotated = StaticCatalog::from_yaml(JAVA)
            .unwrap()
            .with_namespace("shop", &[(java, value)]);
        assert_eq!(
            reaching(&annotated, Language::Java),
            format!("{} || request.namespace in [\"shop\"]", own(Language::Java)),
            "{value}"
        );
        assert_eq!(
            reaching(&annotated, Language::Python),
            own(Language::Python)
        );
    }
    let labeled = StaticCatalog::from_yaml(JAVA)
        .unwrap()
        .with_namespace_labels("shop", &[(java, "true")])
        .with_namespace("web", &[(java, "shop/java")]);
    assert_eq!(
        reaching(&labeled, Language::Java),
        format!("{} || request.namespace in [\"shop\"]", own(Language::Java)),
        "bound in shop alone: web's pods cannot use it"
    );
    // Bound in every namespace (shared): the namespaces that ask, wherever they are.
    let shared = JAVA.replace(
        "metadata: {name: java, namespace: shop}",
        "metadata: {name: java, namespace: shop, annotations: {otel-injector/cross-namespace: allowed}}",
    );
    let everywhere = StaticCatalog::from_yaml(&shared)
        .unwrap()
        .with_namespace("shop", &[])
        .with_namespace("web", &[(java, "shop/java")])
        .with_namespace_labels("ops", &[(python, "shop/java")]);
    assert_eq!(
        reaching(&everywhere, Language::Java),
        format!("{} || request.namespace in [\"web\"]", own(Language::Java))
    );
    assert_eq!(
        reaching(&everywhere, Language::Python),
        format!(
            "{} || request.namespace in [\"ops\"]",
            own(Language::Python)
        )
    );
    // A selector asks without a key: every pod.
    let selected = selecting();
    assert_eq!(one_policy(&selected), ["not-injected-before"]);
}

#[test]
fn an_instrumentation_named_as_a_per_language_policy_keeps_its_neighbour_in_one() {
    // `java.python` would own the name of `java`'s Python policy: `java` keeps one policy,
    // reached by any key of the pod's own.
    let yaml = format!(
        "{JAVA}---\n{}",
        JAVA.replace("{name: java,", "{name: java.python,")
    );
    let catalog = StaticCatalog::from_yaml(&yaml)
        .unwrap()
        .with_namespace("shop", &[]);
    let all = policies(&catalog, true);
    let java: Vec<&Value> = all
        .iter()
        .filter(|p| p["metadata"]["annotations"][INSTRUMENTATION_ANNOTATION] == "shop/java")
        .collect();
    assert_eq!(java.len(), 1);
    assert_eq!(java[0]["metadata"]["name"], "otel-injector.shop.java");
    assert_eq!(
        conditions(java[0]),
        ["asks-by-its-own-keys-or-its-namespaces-and-not-injected-before"]
    );
    let names: Vec<&str> = all
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap())
        .collect();
    let unique: std::collections::BTreeSet<&&str> = names.iter().collect();
    assert_eq!(unique.len(), names.len(), "{names:?}");
    assert!(names.contains(&"otel-injector.shop.java.python.java"));
}

#[test]
fn mode_policys_status_policy_takes_keyed_pods_and_those_of_namespaces_that_ask() {
    use crate::policy::Mode;
    let status = |catalog: &StaticCatalog, namespaces_read: bool| -> Value {
        let options = PolicyOptions {
            mode: Mode::Policy,
            namespaces_read,
            ..PolicyOptions::default()
        };
        render(catalog, &EngineConfig::default(), &options)
            .objects
            .into_iter()
            .find(|o| {
                o["kind"] == "MutatingAdmissionPolicy"
                    && o["metadata"]["name"] == "otel-injector.not-injected"
            })
            .expect("the status policy")["spec"]["matchConditions"]
            .clone()
    };
    let python = Language::Python.inject_annotation();
    let catalog = StaticCatalog::from_yaml(JAVA)
        .unwrap()
        .with_namespace("shop", &[])
        .with_namespace("web", &[(Language::Java.inject_annotation(), "true")])
        .with_namespace_labels("ops", &[(python, "shop/java")])
        .with_namespace("quiet", &[(python, "false")]);
    let read = status(&catalog, true);
    assert_eq!(
        conditions_of(&read),
        ["asks-by-its-own-keys-or-its-namespaces-and-not-injected-before"]
    );
    assert_eq!(
        read[0]["expression"],
        format!(
            "({}) && ({})",
            "(has(object.metadata.annotations) && object.metadata.annotations.exists(k, k.startsWith(\"instrumentation.opentelemetry.io/inject-\"))) || (has(object.metadata.labels) && object.metadata.labels.exists(k, k.startsWith(\"instrumentation.opentelemetry.io/inject-\"))) || request.namespace in [\"ops\", \"quiet\", \"web\"]",
            not_injected()
        )
    );
    // The CLI's render follows no namespace; a selector asks without a key.
    assert_eq!(
        conditions_of(&status(&catalog, false)),
        ["not-injected-before"]
    );
    let selected = selecting();
    assert_eq!(
        conditions_of(&status(&selected, true)),
        ["not-injected-before"]
    );
}

fn conditions_of(conditions: &Value) -> Vec<&str> {
    conditions
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect()
}

/// `JAVA` with a selector, in a namespace that asks for nothing.
fn selecting() -> StaticCatalog {
    let yaml = JAVA.replace(
        "metadata: {name: java, namespace: shop}",
        r#"metadata: {name: java, namespace: shop, annotations: {otel-injector/selector: '{"languages": ["java"], "podSelector": {"matchLabels": {"tier": "web"}}}'}}"#,
    );
    StaticCatalog::from_yaml(&yaml)
        .unwrap()
        .with_namespace("shop", &[])
}

#[test]
fn with_namespace_labels_only_the_instrumentations_their_bindings_can_match_are_rendered() {
    // shop/java in a labeled namespace, web/java in one without the label, ops/java shared
    // (bound in every labeled namespace); and a render that does not read the namespaces.
    let web = JAVA.replace("namespace: shop", "namespace: web");
    let ops = JAVA.replace(
        "metadata: {name: java, namespace: shop}",
        "metadata: {name: java, namespace: ops, annotations: {otel-injector/cross-namespace: allowed}}",
    );
    let catalog = StaticCatalog::from_yaml(&format!("{JAVA}---{web}---{ops}"))
        .unwrap()
        .with_namespace_labels("shop", &[("rollout", "on")])
        .with_namespace_labels("web", &[("rollout", "off")])
        .with_namespace("ops", &[]);
    let rendered = |namespaces_read: bool, labels: &[(&str, &str)]| {
        let options = PolicyOptions {
            namespaces_read,
            namespace_labels: labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            ..PolicyOptions::default()
        };
        let objects = render(&catalog, &EngineConfig::default(), &options).objects;
        let mut of: Vec<String> = objects
            .iter()
            .filter(|o| o["kind"] == "MutatingAdmissionPolicyBinding")
            .filter_map(|o| o["metadata"]["annotations"][INSTRUMENTATION_ANNOTATION].as_str())
            .map(str::to_owned)
            .collect();
        of.dedup();
        of
    };
    let all = ["ops/java", "shop/java", "web/java"].map(str::to_owned);
    assert_eq!(
        rendered(true, &[("rollout", "on")]),
        ["ops/java", "shop/java"]
    );
    // By the namespace's name label too, which every namespace has.
    let named = [("kubernetes.io/metadata.name", "web")];
    assert_eq!(rendered(true, &named), ["ops/java", "web/java"]);
    // No label asked for: every namespace can match. The CLI's render cannot tell.
    assert_eq!(rendered(true, &[]), all);
    assert_eq!(rendered(false, &[("rollout", "on")]), all);
}

/// Every injection policy's binding leaves out the pods labeled injected, so that the
/// API server's second pass over a pod a policy injected (reinvocation) evaluates none of
/// their conditions; the status policy, which runs again on purpose (`IfNeeded`), keeps
/// seeing them.
#[test]
fn injection_bindings_leave_out_pods_labeled_injected_and_the_status_binding_does_not() {
    let catalog = StaticCatalog::from_yaml(JAVA).unwrap();
    let opted_in = json!({"key": OPT_OUT_LABEL, "operator": "NotIn", "values": [OPT_OUT]});
    let not_injected = json!({"key": INJECTED_LABEL, "operator": "NotIn", "values": ["true"]});
    for namespaces_read in [false, true] {
        let options = PolicyOptions {
            mode: Mode::Policy,
            namespaces_read,
            ..PolicyOptions::default()
        };
        let objects = render(&catalog, &EngineConfig::default(), &options).objects;
        let bindings: Vec<&Value> = objects
            .iter()
            .filter(|o| o["kind"] == "MutatingAdmissionPolicyBinding")
            .collect();
        let selector = |b: &Value| b["spec"]["matchResources"]["objectSelector"].clone();
        let (injection, status): (Vec<&Value>, Vec<&Value>) = bindings
            .into_iter()
            .partition(|b| b["metadata"]["annotations"][INSTRUMENTATION_ANNOTATION].is_string());
        let expected = if namespaces_read { LANGUAGES.len() } else { 1 };
        assert_eq!(
            injection.len(),
            expected,
            "namespaces read: {namespaces_read}"
        );
        for b in injection {
            assert_eq!(
                selector(b),
                json!({"matchExpressions": [opted_in, not_injected]}),
                "{}",
                b["metadata"]["name"]
            );
        }
        let [status] = status.as_slice() else {
            panic!("one status binding: {status:?}")
        };
        assert_eq!(status["metadata"]["name"], "otel-injector.not-injected");
        assert_eq!(selector(status), json!({"matchExpressions": [opted_in]}));
    }
}
