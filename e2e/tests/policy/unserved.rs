//! The policies alone, without a webhook: what they do not cover is marked and warned about,
//! a pod injected before is left as it is, a deleted Instrumentation stops injecting.

use std::time::{Duration, Instant};

use axum::http::Method;
use serde_json::json;

use crate::harness::{cluster, env_value};
use crate::support::api;

use super::corpus::{corpus_in, instrumentations};
use super::{
    POLICY_SCOPE, comparable, corpus_namespaces, create_all, create_instrumentations, delete_all,
    injected_java, render, until,
};
use otel_injector::keys::{INJECTED_ANNOTATION, INJECTED_LABEL, STATUS_ANNOTATION};

/// Item 3 with no webhook: the pods no policy covers get the status reason and a warning at
/// `kubectl` time; a pod injected before (reinvocation) is not changed again; a deleted
/// Instrumentation stops injecting.
#[tokio::test]
async fn alone_the_policies_mark_and_warn_what_they_do_not_cover() {
    let cp = cluster().await;
    let client = cp.client();
    let solo = "e2e-policy-alone-solo";
    let shop = "e2e-policy-alone-shop";
    corpus_namespaces(&client, solo, shop, &[(POLICY_SCOPE, "alone")]).await;
    let insts = instrumentations(solo, shop);
    create_instrumentations(&client, &insts).await;
    let (objects, _) = render(
        &cp.dir,
        &insts,
        &[
            "--name-prefix",
            "e2e-alone",
            &format!("--namespace-label={POLICY_SCOPE}=alone"),
        ],
    );
    let kinds: Vec<&str> = objects
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    assert!(kinds.contains(&"ValidatingAdmissionPolicy"), "{kinds:?}");
    create_all(&client, &objects).await;
    let pods = corpus_in(solo, shop);
    let find = |case: &str| pods.iter().find(|p| p.0 == case).expect("a case").clone();
    let (_, ns, java) = find("java-named");
    until(&client, &ns, &java, "the policy's injection", injected_java).await;
    // Both kinds of policy are live once the warning arrives.
    let (_, ns_go, go) = find("edge-go");
    let t0 = Instant::now();
    loop {
        let r = api::create_pod(&client, &ns_go, &go, true)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        if !r.warnings.is_empty() {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "no warning: {}",
            r.body["metadata"]
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let expected = [
        // Go is disabled by default, as in the webhook.
        (
            "edge-go",
            format!("go=skipped language_disabled {shop}/langs"),
        ),
        (
            "edge-true-of-several",
            format!("java=skipped multiple_instrumentations {shop}/*"),
        ),
        // A variant the agent refuses: the webhook instruments nothing either.
        (
            "edge-key-python-variant-2",
            format!("python=skipped nothing_instrumented {solo}/only"),
        ),
        (
            "edge-key-dotnet-variant-2",
            format!("dotnet=skipped nothing_instrumented {solo}/only"),
        ),
        (
            "edge-jto-value-from",
            format!("java=skipped nothing_instrumented {shop}/java"),
        ),
        (
            "edge-unknown-container",
            format!("java=skipped invalid_container_names {shop}/java"),
        ),
        (
            "edge-nginx-two-targets",
            format!("nginx=skipped policy_unsupported {shop}/java"),
        ),
        (
            "edge-go-true",
            format!("go=skipped language_disabled {shop}/*"),
        ),
        (
            "edge-not-found",
            format!("java=skipped instrumentation_not_found {shop}/missing"),
        ),
        (
            "edge-cross-namespace",
            format!("java=skipped policy_unsupported {shop}/java"),
        ),
        (
            "edge-two-languages",
            format!(
                "java=skipped policy_unsupported {shop}/java; python=skipped policy_unsupported {shop}/langs"
            ),
        ),
    ];
    for (case, status) in expected {
        let (_, ns, p) = find(case);
        let r = api::create_pod(&client, &ns, &p, false)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.status, 201, "{case}: {}", r.body);
        let stored = &r.body;
        assert_eq!(
            stored["metadata"]["annotations"][STATUS_ANNOTATION],
            status.as_str(),
            "{case}"
        );
        assert_eq!(
            stored["metadata"]["labels"][INJECTED_LABEL], "false",
            "{case}"
        );
        assert!(
            stored["metadata"]["annotations"][INJECTED_ANNOTATION].is_null(),
            "{case}"
        );
        assert_eq!(
            r.warnings,
            [format!(
                "Validation failed for ValidatingAdmissionPolicy 'e2e-alone.warn-not-injected' with binding 'e2e-alone.warn-not-injected': otel-injector policy: not injected: {status}"
            )],
            "{case}"
        );
        // The stored status reads back in the webhook's grammar.
        let stored_status = stored["metadata"]["annotations"][STATUS_ANNOTATION]
            .as_str()
            .unwrap_or("");
        let parsed: Result<otel_injector::engine::outcome::PodStatus, _> = stored_status.parse();
        assert!(parsed.is_ok(), "{case}: {parsed:?}");
    }
    // An injected pod: the outcome, no warning.
    let r = api::create_pod(&client, &ns, &java, false)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(r.warnings.is_empty(), "{:?}", r.warnings);
    assert_eq!(r.body["metadata"]["labels"][INJECTED_LABEL], "true");
    // A pod injected before (what a reinvocation sees) is not changed again.
    let mut again = comparable(&r.body);
    again["metadata"]["name"] = json!("java-again");
    let r2 = api::create_pod(&client, &ns, &again, false)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        r2.body["spec"], r.body["spec"],
        "a second pass changed the pod"
    );
    // The policy's delivery is the flag's default, as the webhook's: an init container.
    assert_eq!(
        env_value(&r2.body, 0, "JAVA_TOOL_OPTIONS"),
        " -javaagent:/otel-auto-instrumentation-java-app/javaagent.jar -Dotel.javaagent.extensions=/otel-auto-instrumentation-java-app/extensions"
    );
    let inits: Vec<&str> = r2.body["spec"]["initContainers"]
        .as_array()
        .map(|a| a.iter().filter_map(|c| c["name"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(
        inits,
        [
            "opentelemetry-auto-instrumentation-java",
            "opentelemetry-auto-instrumentation-extension-0"
        ]
    );

    // The Instrumentation deleted: the binding finds no params, nothing is injected.
    let r = api::send(
        &client,
        Method::DELETE,
        &format!("/apis/opentelemetry.io/v1alpha1/namespaces/{shop}/instrumentations/java"),
        None,
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 200, "{}", r.body);
    let mut later = java.clone();
    later["metadata"]["name"] = json!("java-after-delete");
    until(&client, &ns, &later, "no injection after the delete", |p| {
        p["metadata"]["annotations"][INJECTED_ANNOTATION].is_null()
    })
    .await;
    delete_all(&client, &objects).await;
}
