//! The safety net's marker on the policy path: a pod whose workload was rolled back from
//! Java with the Instrumentation's current spec (`otel-injector/rolled-back: java=<hash>`) is
//! not injected by the policies, in mode `both` (the webhook behind them records the skip)
//! and in mode `policy` (the status policy does); a marker of another spec does not hold the
//! policies back.

use serde_json::{Value, json};

use crate::harness::{Env, Options, SCOPE_LABEL, cluster};
use crate::support::api;
use otel_injector::keys::{
    INJECT_JAVA, INJECTED_ANNOTATION, INJECTED_LABEL, ROLLED_BACK_ANNOTATION, STATUS_ANNOTATION,
};

use super::build::inst;
use super::{POLICY_SCOPE, create_all, create_instrumentations, delete_all, render, until};

/// A pod of namespace `ns` asking for Java, with the rolled-back marker `marker` if any.
fn pod(ns: &str, name: &str, marker: Option<&str>) -> Value {
    let mut annotations = json!({INJECT_JAVA: "true"});
    if let Some(m) = marker {
        annotations[ROLLED_BACK_ANNOTATION] = json!(m);
    }
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "annotations": annotations},
        "spec": {"containers": [{"name": "app", "image": "shop/checkout:1.4.2"}]}})
}

fn status(p: &Value) -> &str {
    p["metadata"]["annotations"][STATUS_ANNOTATION]
        .as_str()
        .unwrap_or("")
}

/// The pod as the API server stores it (dry run), once.
async fn stored(env: &Env, ns: &str, p: &Value) -> Value {
    let r = api::create_pod(&env.client, ns, p, true)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 201, "{}", r.body);
    r.body
}

#[tokio::test]
async fn policies_leave_a_rolled_back_workload_alone_in_modes_both_and_policy() {
    let env = Env::start_with(
        "policy-rollback",
        Options {
            args: vec!["--agent-delivery=image-volume".into()],
            ..Options::default()
        },
    )
    .await;
    let cp = cluster().await;
    let client = env.client.clone();
    let ns = "e2e-policy-rollback";
    // In the policies' scope; the webhook's comes once they are seen to inject alone.
    api::create_namespace(&client, ns, &[(POLICY_SCOPE, "rollback")], &[])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let scope_webhook = |value: Option<&str>| {
        let client = client.clone();
        let patch = json!({"metadata": {"labels": {SCOPE_LABEL: value}}});
        async move {
            let r = api::merge_patch(&client, &format!("/api/v1/namespaces/{ns}"), &patch)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(r.status, 200, "{}", r.body);
        }
    };
    let java = inst(
        ns,
        "java",
        json!({"exporter": {"endpoint": "http://collector:4318"}}),
    );
    create_instrumentations(&client, std::slice::from_ref(&java)).await;
    let render_mode = |mode: &str| {
        render(
            &cp.dir,
            std::slice::from_ref(&java),
            &[
                "--mode",
                mode,
                "--name-prefix",
                &format!("e2e-rollback-{mode}"),
                &format!("--namespace-label={POLICY_SCOPE}=rollback"),
                "--agent-delivery=image-volume",
            ],
        )
        .0
    };

    // Mode both: the policy injects (seen alone first, so that what follows is its doing),
    // the webhook serves what it leaves.
    let objects = render_mode("both");
    let hash = objects[0]["metadata"]["annotations"]["otel-injector/spec-hash"]
        .as_str()
        .expect("the policy names its spec hash")
        .to_owned();
    create_all(&client, &objects).await;
    let requests = || async { env.requests().await.total() };
    until(
        &client,
        ns,
        &pod(ns, "probe", None),
        "the policy's injection",
        |p| p["metadata"]["annotations"][INJECTED_ANNOTATION] == "java",
    )
    .await;
    scope_webhook(Some(env.id.as_str())).await;
    env.await_webhook(ns).await;
    let before = requests().await;
    let other_spec = stored(&env, ns, &pod(ns, "other", Some("java=00000000"))).await;
    assert_eq!(
        other_spec["metadata"]["annotations"][INJECTED_ANNOTATION],
        "java"
    );
    assert_eq!(
        status(&other_spec),
        format!("java=injected {ns}/java {hash}")
    );
    // The marker is read as the engine reads it: spaces around an entry, the hash in capitals.
    for marker in [
        format!("java={hash}"),
        format!("python=01020304, java = {}", hash.to_uppercase()),
    ] {
        let p = stored(&env, ns, &pod(ns, "marked", Some(&marker))).await;
        assert!(
            p["metadata"]["annotations"][INJECTED_ANNOTATION].is_null(),
            "{marker}: {}",
            p["metadata"]
        );
        assert_eq!(
            status(&p),
            format!("java=skipped rolled_back {ns}/java"),
            "{marker}: the webhook behind the policy"
        );
        assert!(p["spec"]["volumes"].is_null(), "{marker}: no agent volume");
    }
    assert!(
        requests().await > before,
        "the webhook answered the pods the policy left"
    );
    delete_all(&client, &objects).await;

    // Mode policy: the webhook out of scope, the status policy records the skip.
    scope_webhook(None).await;
    let objects = render_mode("policy");
    create_all(&client, &objects).await;
    let marked = pod(ns, "marked", Some(&format!("java={hash}")));
    until(
        &client,
        ns,
        &marked,
        "the status policy's rolled_back",
        |p| status(p) == format!("java=skipped rolled_back {ns}/java"),
    )
    .await;
    let before = requests().await;
    let p = stored(&env, ns, &marked).await;
    assert!(p["metadata"]["annotations"][INJECTED_ANNOTATION].is_null());
    assert_eq!(p["metadata"]["labels"][INJECTED_LABEL], "false");
    assert!(p["spec"]["volumes"].is_null());
    let other_spec = stored(&env, ns, &pod(ns, "other", Some("java=00000000"))).await;
    assert_eq!(
        other_spec["metadata"]["annotations"][INJECTED_ANNOTATION],
        "java"
    );
    assert_eq!(requests().await, before, "the webhook was not called");
    delete_all(&client, &objects).await;
}
