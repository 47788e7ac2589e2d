//! The corpus cases generated from the engine's own list of the keys it reads
//! (`otel_injector::engine::keys_read`): one pod or more per key, so that a key the engine
//! starts to read is tried against the policies (a new kind of key does not compile here
//! until it has its cases; `tests/engine/keys_read.rs` keeps the list whole). A case the
//! policies must leave to the webhook is named `edge-key-…`.

use otel_injector::agents::Language;
use otel_injector::engine::{KeyRead, KeyUse, ReadOn, keys_read};
use serde_json::{Map, Value, json};

use super::build::{container, owned, pod};

/// A case as the corpus holds it: name, namespace (`solo` or `shop`), pod.
type Case = (&'static str, &'static str, Value);

fn name(text: String) -> &'static str {
    // A test process builds the corpus a few times: a few hundred bytes.
    Box::leak(text.into_boxed_str())
}

fn map(pairs: &[(&str, &str)]) -> Value {
    Value::Object(
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), json!(v)))
            .collect::<Map<_, _>>(),
    )
}

/// Whether a policy injects a pod asking for `lang` by itself: the policies' languages, with
/// the engine's default flags (Go is disabled there, so the webhook skips it too).
fn policy_language(lang: Language) -> bool {
    otel_injector::policy::LANGUAGES.contains(&lang)
}

fn case(covered: bool, what: &str, ns: &'static str, p: impl Fn(&str) -> Value) -> Case {
    let case = name(format!("{}key-{what}", if covered { "" } else { "edge-" }));
    (case, ns, p(case))
}

fn one(ann: Value, labels: Value) -> impl Fn(&str) -> Value {
    move |n: &str| {
        pod(
            n,
            ann.clone(),
            labels.clone(),
            json!([container("app", "shop/checkout:1.4.2", json!([]))]),
        )
    }
}

fn two(ann: Value) -> impl Fn(&str) -> Value {
    move |n: &str| {
        pod(
            n,
            ann.clone(),
            json!({}),
            json!([
                container("app", "shop/checkout:1.4.2", json!([])),
                container("worker", "shop/worker:1.4.2", json!([])),
            ]),
        )
    }
}

/// The cases of one key.
fn cases_of(k: &KeyRead) -> Vec<Case> {
    let key = k.key.as_str();
    let java = Language::Java.inject_annotation();
    match k.role {
        KeyUse::Request(lang) => {
            assert_eq!(k.on, ReadOn::InjectionKey);
            let covered = policy_language(lang);
            vec![
                case(
                    covered,
                    &format!("{lang}-annotation"),
                    "solo",
                    one(map(&[(key, "true")]), json!({})),
                ),
                case(
                    covered,
                    &format!("{lang}-label"),
                    "solo",
                    one(json!({}), map(&[(key, "true")])),
                ),
            ]
        }
        KeyUse::LanguageContainers(lang) => vec![case(
            policy_language(lang),
            &format!("{lang}-containers"),
            "solo",
            two(map(&[(lang.inject_annotation(), "true"), (key, "worker")])),
        )],
        KeyUse::Containers => vec![case(
            true,
            "containers",
            "solo",
            two(map(&[(java, "true"), (key, "app,worker")])),
        )],
        KeyUse::Variant(lang) => {
            // Per variant key, its values: those of the agent's variants (a policy injects
            // each) and one the agent refuses (the webhook too).
            let values: &[(&str, bool)] = match lang {
                Language::Python => &[("glibc", true), ("musl", true), ("alpine", false)],
                Language::DotNet => &[
                    ("linux-x64", true),
                    ("linux-musl-x64", true),
                    ("linux-arm64", false),
                ],
                Language::Go => &[("/usr/local/bin/checkout", false)],
                other => panic!("a new variant key of {other} ({key}): give it its values here"),
            };
            // Each as an annotation, and as a label where it is a valid label value (the
            // engine reads a label over an annotation).
            let label_value = |v: &str| {
                v.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            };
            let request = map(&[(lang.inject_annotation(), "true")]);
            let mut cases = Vec::new();
            for (i, (value, covered)) in values.iter().enumerate() {
                let covered = *covered && policy_language(lang);
                cases.push(case(
                    covered,
                    &format!("{lang}-variant-{i}"),
                    "solo",
                    one(
                        map(&[(lang.inject_annotation(), "true"), (key, value)]),
                        json!({}),
                    ),
                ));
                if label_value(value) {
                    cases.push(case(
                        covered,
                        &format!("{lang}-variant-{i}-label"),
                        "solo",
                        one(request.clone(), map(&[(key, value)])),
                    ));
                }
            }
            cases
        }
        KeyUse::ResourceAttribute => vec![case(
            true,
            "resource-attributes",
            "solo",
            one(
                map(&[
                    (java, "true"),
                    (&format!("{key}service.namespace"), "payments"),
                    (&format!("{key}service.name"), "pay"),
                ]),
                json!({}),
            ),
        )],
        KeyUse::ServiceLabel => {
            // `langs` derives the service from these labels (useLabelsForResourceAttributes).
            let what = key.rsplit('/').next().unwrap_or(key);
            vec![case(
                true,
                &format!("label-{what}"),
                "shop",
                one(
                    map(&[(Language::NodeJs.inject_annotation(), "langs")]),
                    map(&[(key, "pay-1.2.3")]),
                ),
            )]
        }
        KeyUse::OwnerHash => vec![case(true, "owner-hash", "shop", |n| {
            owned(
                one(map(&[(java, "java")]), json!({}))(n),
                "ReplicaSet",
                "pay-7d4b9c5f8",
                Some("7d4b9c5f8"),
            )
        })],
        KeyUse::InjectedBefore => vec![case(
            false,
            "injected-before",
            "solo",
            one(map(&[(java, "true"), (key, "java")]), json!({})),
        )],
        // The API server takes a mirror pod only with its node.
        KeyUse::Mirror => vec![case(false, "mirror", "solo", |n| {
            let mut p = one(map(&[(java, "true"), (key, "0f3c")]), json!({}))(n);
            p["spec"]["nodeName"] = json!("node-1");
            p
        })],
        // A marker of another spec: the webhook injects, and so must the policy.
        KeyUse::RolledBack => vec![case(
            true,
            "rolled-back-other-spec",
            "solo",
            one(map(&[(java, "true"), (key, "java=00000000")]), json!({})),
        )],
        // On the `solo` namespace ([`namespace_labels`]): every `solo` case reads it.
        KeyUse::PodSecurity => vec![case(
            true,
            "pod-security",
            "solo",
            one(
                map(&[(Language::Sdk.inject_annotation(), "true")]),
                json!({}),
            ),
        )],
        // On the Instrumentations ([`instrumentation_annotations`]): `copied` asks for
        // init-container delivery, which its policy replays whatever the flag says.
        KeyUse::Delivery => vec![case(
            true,
            "delivery",
            "shop",
            one(map(&[(java, "copied")]), json!({})),
        )],
        // `only` is annotated as shared: its policy serves other namespaces.
        KeyUse::CrossNamespace => vec![case(
            true,
            "cross-namespace",
            "shop",
            one(map(&[(java, "SOLO/only")]), json!({})),
        )],
        // `copied`'s selector selects the pods labeled `e2e-selected` in its namespace, with
        // no key of theirs: its policy injects them as the webhook does.
        KeyUse::Selector => vec![case(
            true,
            "selector",
            "shop",
            one(json!({}), json!({"e2e-selected": "true"})),
        )],
        // `based` stands on `java`: its policy holds the merge, as the webhook injects it.
        KeyUse::Base => vec![case(
            true,
            "base",
            "shop",
            one(map(&[(java, "based")]), json!({})),
        )],
    }
}

/// Every generated case.
pub fn cases() -> Vec<Case> {
    keys_read().iter().flat_map(cases_of).collect()
}

/// The labels of the `solo` namespace the generated cases need.
pub fn namespace_labels() -> Vec<(String, String)> {
    keys_read()
        .into_iter()
        .filter(|k| k.on == ReadOn::NamespaceLabel)
        .map(|k| match k.role {
            KeyUse::PodSecurity => (k.key, "baseline".to_owned()),
            other => panic!(
                "a new namespace label {} ({other:?}): its value here",
                k.key
            ),
        })
        .collect()
}

/// The annotations of the corpus' Instrumentations the generated cases need, by name
/// (`only` in `solo`, `copied` in `shop`, a copy of `java` delivered by init container,
/// with the selector of the generated `key-selector`, `based` in `shop`, laid over
/// `java`).
pub fn instrumentation_annotations(inst: &str) -> Value {
    let mut out = Map::new();
    for k in keys_read()
        .into_iter()
        .filter(|k| k.on == ReadOn::Instrumentation)
    {
        match (k.role, inst) {
            (KeyUse::Delivery, "copied") => {
                out.insert(k.key, json!("init-container"));
            }
            (KeyUse::CrossNamespace, "only") => {
                out.insert(k.key, json!("allowed"));
            }
            (KeyUse::Base, "based") => {
                out.insert(k.key, json!("java"));
            }
            (KeyUse::Selector, "copied") => {
                out.insert(
                    k.key,
                    json!(r#"{"languages": ["java"], "podSelector": {"matchLabels": {"e2e-selected": "true"}}}"#),
                );
            }
            (KeyUse::Delivery | KeyUse::CrossNamespace | KeyUse::Base | KeyUse::Selector, _) => {}
            (other, _) => panic!(
                "a new Instrumentation key {} ({other:?}): its value here",
                k.key
            ),
        }
    }
    Value::Object(out)
}
