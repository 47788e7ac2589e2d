//! Live policies (`serve --apply-policies both|policy`), through the real API server: the
//! webhook's Lease holder applies the policies of an Instrumentation as soon as it exists, an
//! edit of its spec reaches the pods the API server injects with no `otel-injector policy` run
//! (a pod created 5 s after the edit gets the new spec), and a deleted Instrumentation's
//! objects go (a pod created 5 s after the delete is not injected: the bindings have no
//! `paramRef`). Where the namespace asks for nothing, only pods with a key of their own reach
//! the policy; a namespace annotated to ask is served as soon as the writer sees it. In mode
//! `policy` it also applies the status policy and the warning: a pod the policies do not
//! cover is marked and warned about. The namespace is in the policies' scope
//! and not the webhook's: only the API server injects there. The objects carry the field
//! manager `otel-injector-policies`.

use std::time::{Duration, Instant};

use axum::http::Method;
use serde_json::{Value, json};

use crate::harness::{Env, Options, Rbac};
use crate::support::api::{self, instrumentation_path};
use crate::support::identity::NAMESPACE;
use otel_injector::keys::{
    CONTAINER_NAMES, INJECT_JAVA, INJECT_NGINX, INJECTED_ANNOTATION, STATUS_ANNOTATION,
};

use super::build::inst;
use super::{POLICY_SCOPE, create_instrumentations, until, within};

const POLICIES: &str = "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies";
/// The kinds the writer applies (plural), bindings first.
const KINDS: [&str; 4] = [
    "mutatingadmissionpolicybindings",
    "validatingadmissionpolicybindings",
    "mutatingadmissionpolicies",
    "validatingadmissionpolicies",
];

/// The live writer's lines of a replica's log (its passes, their writes and timings).
fn writer_log(log: &str) -> String {
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("live policies"))
        .collect();
    lines.join("\n")
}

/// A webhook (image volumes) whose replica `id` holds the Lease the shipped Role names and
/// writes live policies in `mode`, named `<prefix>.…`, bound where [`POLICY_SCOPE`] is
/// `scope`.
pub(super) async fn start_writer(id: &str, mode: &str, prefix: &str, scope: &str) -> Env {
    Env::start_with(
        id,
        Options {
            rbac: Rbac::LivePolicies,
            // The Lease the shipped Role names, as the status tests use it.
            exclusive: true,
            args: [
                &format!("--apply-policies={mode}"),
                &format!("--policy-name-prefix={prefix}"),
                &format!("--policy-namespace-label={POLICY_SCOPE}={scope}"),
                &format!("--lease-identity={id}"),
                &format!("--lease-namespace={NAMESPACE}"),
                "--lease-name=otel-injector",
                "--lease-duration=3s",
                "--agent-delivery=image-volume",
            ]
            .map(|a| a.to_owned())
            .to_vec(),
            ..Options::default()
        },
    )
    .await
}

/// The endpoint the API server gave the pod's container, if it injected it.
pub(super) fn endpoint(pod: &Value) -> Option<&str> {
    pod["spec"]["containers"][0]["env"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == "OTEL_EXPORTER_OTLP_ENDPOINT")?["value"]
        .as_str()
}

pub(super) fn asking(ns: &str, name: &str, key: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "annotations": {key: "true"}},
        "spec": {"containers": [{"name": "app", "image": "shop/checkout:1.4.2"}]}})
}

/// Whether the object `name` of `kind` (plural) exists.
async fn exists(client: &kube::Client, plural: &str, name: &str) -> bool {
    let path = format!("/apis/admissionregistration.k8s.io/v1/{plural}/{name}");
    api::send(client, Method::GET, &path, None)
        .await
        .unwrap()
        .status
        == 200
}

#[tokio::test]
async fn live_policies_follow_an_edited_instrumentation_without_the_cli() {
    follows_edits("both").await;
}

#[tokio::test]
async fn live_policies_in_mode_policy_also_mark_and_warn_what_they_do_not_cover() {
    follows_edits("policy").await;
}

async fn follows_edits(mode: &str) {
    let ns = &format!("e2e-policy-live-{mode}");
    let prefix = &format!("e2e-live-{mode}");
    let java_pod = |name: &str| asking(ns, name, INJECT_JAVA);
    let scope = format!("live-{mode}");
    let env = start_writer(&format!("policy-live-{mode}"), mode, prefix, &scope).await;
    let client = env.client.clone();
    // An Instrumentation in a namespace without the policies' label, created first: no
    // binding could match there, so the writer writes nothing for it until the label comes.
    let outside = &format!("{ns}-outside");
    with_java(&client, outside, &[], "http://c:4318").await;
    with_java(
        &client,
        ns,
        &[(POLICY_SCOPE, &scope)],
        "http://collector-a:4318",
    )
    .await;
    // The first pass writes the policies of the shared cluster's Instrumentations whose
    // bindings can match a namespace with the label (this test's, and those shared with every
    // namespace), so it may take a while; later passes write what changed.
    // The namespace asks for nothing: a policy per language (`<name>.<language>`).
    let policy = format!("{prefix}.{ns}.java.java");
    let t0 = Instant::now();
    while !exists(&client, "mutatingadmissionpolicybindings", &policy).await {
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "{policy} not applied in 120 s\n{}",
            env.webhook.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    until(&client, ns, &java_pod("first"), "the applied policy", |p| {
        endpoint(p) == Some("http://collector-a:4318")
    })
    .await;
    let stored = api::send(&client, Method::GET, &format!("{POLICIES}/{policy}"), None)
        .await
        .unwrap();
    assert_eq!(stored.status, 200, "{}", stored.body);
    assert_eq!(
        stored.body["metadata"]["managedFields"][0]["manager"],
        "otel-injector-policies"
    );
    // The namespace asks for nothing: only the pods with the language's key of their own
    // reach its policy's mutation. Once the namespace asks (its annotation, no CLI run), its
    // pods reach the policy of the language it asks for, and a pod without a key is injected
    // for the namespace.
    let (conditions, expression) = reaching(&client, &policy).await;
    assert_eq!(conditions, ["asks-for-java-and-not-injected-before"]);
    assert!(!expression.contains("request.namespace"), "{expression}");
    assert_eq!(
        stored.body["spec"]["mutations"].as_array().map(Vec::len),
        Some(1)
    );
    // A key of its own may be a label too.
    let mut labeled = asking(ns, "labeled", INJECT_JAVA);
    labeled["metadata"]["annotations"] = json!({});
    labeled["metadata"]["labels"] = json!({INJECT_JAVA: "true"});
    let r = api::create_pod(&client, ns, &labeled, true).await.unwrap();
    assert_eq!(
        endpoint(&r.body),
        Some("http://collector-a:4318"),
        "{}",
        r.body["metadata"]
    );
    env.annotate_namespace(ns, INJECT_JAVA, Some("java")).await;
    let annotated = Instant::now();
    let mut keyless = asking(ns, "keyless", INJECT_JAVA);
    keyless["metadata"]["annotations"] = json!({});
    let seen = within(&client, ns, &keyless, Duration::from_secs(30), |p| {
        endpoint(p) == Some("http://collector-a:4318")
    })
    .await;
    if let Err(last) = seen {
        panic!(
            "the namespace's request not seen in {ns} within 30 s: {}\nthe writer's log:\n{}",
            last["metadata"],
            writer_log(&env.webhook.log())
        );
    }
    eprintln!(
        "[e2e] live policies ({mode}): a pod asked for by its namespace injected {:?} after the namespace's annotation",
        annotated.elapsed()
    );
    let by_namespace = format!("request.namespace in [\"{ns}\"]");
    let (_, expression) = reaching(&client, &policy).await;
    assert!(expression.ends_with(&by_namespace), "{expression}");
    let python = format!("{prefix}.{ns}.java.python");
    let (conditions, expression) = reaching(&client, &python).await;
    assert_eq!(conditions, ["asks-for-python-and-not-injected-before"]);
    assert!(!expression.contains("request.namespace"), "{expression}");
    env.annotate_namespace(ns, INJECT_JAVA, None).await;
    let t0 = Instant::now();
    while reaching(&client, &policy).await.1.contains(&by_namespace) {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "{policy} still takes {ns}'s pods 30 s after it stopped asking"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    if mode == "policy" {
        // What no policy covers (nginx for two containers: the module goes to the first
        // only): marked, and warned about by the applied warning.
        let skipped = format!("nginx=skipped policy_unsupported {ns}/java");
        let mut web = asking(ns, "web", INJECT_NGINX);
        web["metadata"]["annotations"][CONTAINER_NAMES] = json!("app,side");
        let containers = web["spec"]["containers"]
            .as_array_mut()
            .expect("containers");
        containers.push(json!({"name": "side", "image": "shop/side:1"}));
        until_marked(&client, ns, &web, &skipped, prefix).await;
        // Without a key, in a namespace that comes to ask for it: the status policy takes
        // such pods from the namespaces that ask alone, so it marks it once the writer has
        // seen the namespace's annotations.
        env.annotate_namespace(ns, INJECT_NGINX, Some("true")).await;
        env.annotate_namespace(ns, CONTAINER_NAMES, Some("app,side"))
            .await;
        // (Where a selector exists, in this shared cluster another test's, every pod reaches
        // it: a selector asks without a key.)
        let status = format!("{prefix}.not-injected");
        let t0 = Instant::now();
        loop {
            let (conditions, expression) = reaching(&client, &status).await;
            let takes_ns = match conditions.as_slice() {
                [every] if every == "not-injected-before" => true,
                [keyed] => {
                    assert_eq!(
                        keyed,
                        "asks-by-its-own-keys-or-its-namespaces-and-not-injected-before"
                    );
                    expression.ends_with(&format!("\"{ns}\"]"))
                        || expression.contains(&format!("\"{ns}\","))
                }
                other => panic!("{other:?}"),
            };
            if takes_ns {
                break;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "{status} does not take {ns}'s pods 30 s after it asked: {expression}\n{}",
                env.webhook.log()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let mut keyless = web.clone();
        keyless["metadata"]["annotations"] = json!({});
        until_marked(&client, ns, &keyless, &skipped, prefix).await;
        env.annotate_namespace(ns, INJECT_NGINX, None).await;
        env.annotate_namespace(ns, CONTAINER_NAMES, None).await;
    }

    // By now the writer's passes saw the outside Instrumentation long ago (it came first)
    // and wrote nothing for it; labeled, its namespace gets its policies.
    let outside_policy = format!("{prefix}.{outside}.java.java");
    assert!(
        !exists(&client, "mutatingadmissionpolicybindings", &outside_policy).await,
        "{outside_policy} written for a namespace its binding cannot match"
    );
    let label = json!({"metadata": {"labels": {POLICY_SCOPE: scope}}});
    let r = api::merge_patch(&client, &format!("/api/v1/namespaces/{outside}"), &label)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 200, "{}", r.body);
    let labeled = Instant::now();
    while !exists(&client, "mutatingadmissionpolicybindings", &outside_policy).await {
        assert!(
            labeled.elapsed() < Duration::from_secs(30),
            "{outside_policy} not written 30 s after its namespace was labeled\n{}",
            writer_log(&env.webhook.log())
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!(
        "[e2e] live policies ({mode}): a namespace labeled into scope got its policies {:?} later",
        labeled.elapsed()
    );

    // The edit, and no CLI run: a pod 5 s later gets the new endpoint.
    let path = instrumentation_path(ns, "java");
    let edit = json!({"spec": {"exporter": {"endpoint": "http://collector-b:4318"}}});
    let r = api::merge_patch(&client, &path, &edit).await.unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    let edited = Instant::now();
    eprintln!(
        "[e2e] live policies ({mode}): edited at {:?}",
        std::time::SystemTime::now()
    );
    let mut took = None;
    while edited.elapsed() < Duration::from_secs(5) {
        let r = api::create_pod(&client, ns, &java_pod("probe"), true)
            .await
            .unwrap();
        if took.is_none() && endpoint(&r.body) == Some("http://collector-b:4318") {
            took = Some(edited.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!("[e2e] live policies ({mode}): the edited spec injected {took:?} after the edit");
    let r = api::create_pod(&client, ns, &java_pod("after-5s"), false)
        .await
        .unwrap();
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(
        endpoint(&r.body),
        Some("http://collector-b:4318"),
        "{}\n{}",
        r.body["metadata"]["annotations"],
        env.webhook.log()
    );
    assert_eq!(
        r.body["metadata"]["annotations"][INJECTED_ANNOTATION],
        "java"
    );
    assert!(
        took.is_some(),
        "no pod got the edited spec within 5 s of the edit\nthe writer's log:\n{}",
        writer_log(&env.webhook.log())
    );

    // Deleted: its objects go (the policies of the cluster's shared Instrumentations and the
    // outside one, which this webhook also rendered, bound only where its label is, stay:
    // removed below).
    let r = api::send(&client, Method::DELETE, &path, None)
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    // The bindings have no `paramRef`: the writer's deletion is what stops the injection, and
    // a pod created 5 s after the delete is not injected.
    let deleted = Instant::now();
    let not_injected = |p: &Value| !p["metadata"]["annotations"][INJECTED_ANNOTATION].is_string();
    let stopped = within(
        &client,
        ns,
        &java_pod("after-delete"),
        Duration::from_secs(5),
        not_injected,
    )
    .await;
    eprintln!(
        "[e2e] live policies ({mode}): injection stopped {:?} after the delete",
        deleted.elapsed()
    );
    if let Err(pod) = stopped {
        panic!(
            "a pod created 5 s after the delete was injected: {}\nthe writer's log:\n{}",
            pod["metadata"]["annotations"],
            writer_log(&env.webhook.log())
        );
    }
    gone(&client, &policy, Duration::from_secs(30), &env).await;
    drop(env);
    delete_prefixed(&client, prefix).await;
}

/// Deletes every object of the kinds the writer applies whose name starts with `<prefix>.`.
pub(super) async fn delete_prefixed(client: &kube::Client, prefix: &str) {
    for plural in KINDS {
        let all = format!("/apis/admissionregistration.k8s.io/v1/{plural}");
        let list = api::send(client, Method::GET, &all, None).await.unwrap();
        for o in list.body["items"].as_array().into_iter().flatten() {
            let name = o["metadata"]["name"].as_str().unwrap_or_default();
            if name.starts_with(&format!("{prefix}.")) {
                api::send(client, Method::DELETE, &format!("{all}/{name}"), None)
                    .await
                    .unwrap();
            }
        }
    }
}

/// Creates namespace `ns` with `labels`, and in it the Instrumentation `java` that exports to
/// `endpoint`.
async fn with_java(client: &kube::Client, ns: &str, labels: &[(&str, &str)], endpoint: &str) {
    api::create_namespace(client, ns, labels, &[])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let java = inst(ns, "java", json!({"exporter": {"endpoint": endpoint}}));
    create_instrumentations(client, std::slice::from_ref(&java)).await;
}

/// Waits until the policy and the binding named `name` are gone, at most `within`.
async fn gone(client: &kube::Client, name: &str, within: Duration, env: &Env) {
    let t0 = Instant::now();
    for plural in [
        "mutatingadmissionpolicybindings",
        "mutatingadmissionpolicies",
    ] {
        while exists(client, plural, name).await {
            assert!(
                t0.elapsed() < within,
                "{plural}/{name} still there after {within:?}\n{}",
                env.webhook.log()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// Creates `pod` (dry run) until it is marked `skipped` and warned about by the applied
/// warning (`<prefix>.warn-not-injected`), at most 30 s.
async fn until_marked(client: &kube::Client, ns: &str, pod: &Value, skipped: &str, prefix: &str) {
    let t0 = Instant::now();
    loop {
        let r = api::create_pod(client, ns, pod, true).await.unwrap();
        let warned = r.warnings.iter().any(|w| {
            w.starts_with(&format!(
                "Validation failed for ValidatingAdmissionPolicy '{prefix}.warn-not-injected'"
            )) && w.ends_with(skipped)
        });
        if r.body["metadata"]["annotations"][STATUS_ANNOTATION] == skipped && warned {
            return;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "not marked and warned in 30 s: {} {:?}",
            r.body["metadata"],
            r.warnings
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The names of the match conditions of the policy `name`, and the second's expression.
async fn reaching(client: &kube::Client, name: &str) -> (Vec<String>, String) {
    let stored = api::send(client, Method::GET, &format!("{POLICIES}/{name}"), None)
        .await
        .unwrap();
    assert_eq!(stored.status, 200, "{name}: {}", stored.body);
    let conditions = stored.body["spec"]["matchConditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let names = conditions
        .iter()
        .map(|c| c["name"].as_str().unwrap_or_default().to_owned())
        .collect();
    // A keyed policy's one condition is `(asks) && (not injected before)`: the first part.
    let expression = match conditions.as_slice() {
        [keyed] if keyed["name"] != "not-injected-before" => {
            let expression = keyed["expression"].as_str().unwrap_or_default();
            let (asks, _) = expression
                .split_once(") && (!(")
                .unwrap_or_else(|| panic!("{name}: {expression}"));
            asks.strip_prefix('(').unwrap_or(asks).to_owned()
        }
        _ => String::new(),
    };
    (names, expression)
}
