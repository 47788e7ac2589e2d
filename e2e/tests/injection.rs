//! Pods that get injected, asserted as stored by the apiserver (read back with a GET).

use otel_injector::keys::{INJECT_JAVA, INJECTED_ANNOTATION, STATUS_ANNOTATION};
use serde_json::{Value, json};

use crate::harness::*;
use crate::support::api;
use crate::support::labeler::Labeler;

/// The Instrumentation of `tests/engine/inject_java.rs` (`SHOP`).
fn shop_spec() -> Value {
    json!({
        "exporter": {"endpoint": "http://otel-collector.observability:4318"},
        "propagators": ["tracecontext", "baggage"],
        "sampler": {"type": "parentbased_traceidratio", "argument": "0.25"},
        "env": [{"name": "OTEL_LOGS_EXPORTER", "value": "otlp"}],
        "java": {"env": [{"name": "OTEL_INSTRUMENTATION_JDBC_ENABLED", "value": "false"}]}
    })
}

/// A `fieldRef` env var as stored: the apiserver defaults `apiVersion: v1`.
fn fref(name: &str, path: &str) -> Value {
    json!({"name": name, "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": path}}})
}

fn lit(name: &str, value: &str) -> Value {
    json!({"name": name, "value": value})
}

/// Fields the apiserver sets on a stored container that the webhook did not write.
const CONTAINER_DEFAULTS: [&str; 3] = [
    "imagePullPolicy",
    "terminationMessagePath",
    "terminationMessagePolicy",
];

#[tokio::test]
async fn java_pod_is_stored_injected_exactly_as_the_engine_specifies() {
    let env = Env::start("java").await;
    let ns = env.namespace("shop", &[]).await;
    env.await_webhook(&ns).await;
    env.instrumentation(&ns, "java-inst", shop_spec()).await;
    let p = pod("checkout", &[(INJECT_JAVA, "true")]);
    env.until_dry_run(&ns, &p, "injection", |r| is_injected(&r.body))
        .await;

    let created = env.create(&ns, &p).await;
    assert!(created.warnings.is_empty(), "{:?}", created.warnings);
    let stored = env.stored(&ns, "checkout").await;

    // The same pod as the first case of tests/engine/inject_java.rs, in namespace `ns`.
    assert_eq!(
        annotations_less_status(&stored, "java=injected ", "true"),
        json!({INJECT_JAVA: "true", INJECTED_ANNOTATION: "java"})
    );
    let attrs = format!(
        "k8s.container.name=app,k8s.namespace.name={ns},\
         k8s.node.name=$(OTEL_RESOURCE_ATTRIBUTES_NODE_NAME),\
         k8s.pod.name=$(OTEL_RESOURCE_ATTRIBUTES_POD_NAME),\
         service.instance.id={ns}.$(OTEL_RESOURCE_ATTRIBUTES_POD_NAME).app,\
         service.namespace={ns},service.version=1.4.2"
    );
    let c = &stored["spec"]["containers"][0];
    assert_eq!(
        c["env"],
        json!([
            fref("OTEL_NODE_IP", "status.hostIP"),
            fref("OTEL_POD_IP", "status.podIP"),
            lit("PORT", "8080"),
            lit("OTEL_INSTRUMENTATION_JDBC_ENABLED", "false"),
            lit("OTEL_LOGS_EXPORTER", "otlp"),
            lit(
                "JAVA_TOOL_OPTIONS",
                " -javaagent:/otel-auto-instrumentation-java-app/javaagent.jar"
            ),
            lit("OTEL_SERVICE_NAME", "checkout"),
            lit(
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                "http://otel-collector.observability:4318"
            ),
            fref("OTEL_RESOURCE_ATTRIBUTES_POD_NAME", "metadata.name"),
            fref("OTEL_RESOURCE_ATTRIBUTES_NODE_NAME", "spec.nodeName"),
            lit("OTEL_PROPAGATORS", "tracecontext,baggage"),
            lit("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
            lit("OTEL_TRACES_SAMPLER_ARG", "0.25"),
            lit("OTEL_RESOURCE_ATTRIBUTES", &attrs),
        ]),
        "env of app, in order"
    );
    assert_eq!(
        c["volumeMounts"],
        json!([{"name": JAVA_INIT, "mountPath": "/otel-auto-instrumentation-java-app"}])
    );
    let inits = stored["spec"]["initContainers"]
        .as_array()
        .expect("init containers");
    assert_eq!(inits.len(), 1, "{inits:?}");
    assert_eq_but_defaults(
        &inits[0],
        &json!({
            "name": JAVA_INIT,
            "image": otel_injector::agents::java::DEFAULT_IMAGE,
            "command": ["cp", "/javaagent.jar", "/otel-auto-instrumentation-java/javaagent.jar"],
            "resources": {"limits": {"cpu": "500m", "memory": "256Mi"},
                          "requests": {"cpu": "50m", "memory": "64Mi"}},
            "volumeMounts": [{"name": JAVA_INIT, "mountPath": "/otel-auto-instrumentation-java"}]
        }),
        &CONTAINER_DEFAULTS,
        "java init container",
    );
    assert_eq!(
        stored["spec"]["volumes"],
        json!([{"name": JAVA_INIT, "emptyDir": {"sizeLimit": "200Mi"}}])
    );
}

#[tokio::test]
async fn instrumentation_selected_by_name() {
    let env = Env::start("by-name").await;
    let ns = env.namespace("shop", &[]).await;
    env.await_webhook(&ns).await;
    env.instrumentation(&ns, "alpha", endpoint_spec("http://alpha.example:4318"))
        .await;
    env.instrumentation(&ns, "beta", endpoint_spec("http://beta.example:4318"))
        .await;
    let p = pod("named", &[(INJECT_JAVA, "beta")]);
    env.until_dry_run(&ns, &p, "injection", |r| is_injected(&r.body))
        .await;

    env.create(&ns, &p).await;
    let stored = env.stored(&ns, "named").await;
    assert!(is_injected(&stored), "{stored}");
    assert_eq!(
        env_value(&stored, 0, "OTEL_EXPORTER_OTLP_ENDPOINT"),
        "http://beta.example:4318"
    );
    assert_eq!(stored["spec"]["initContainers"][0]["name"], JAVA_INIT);
}

#[tokio::test]
async fn instrumentation_selected_by_namespace_and_name() {
    let env = Env::start("by-ns-name").await;
    let ns = env.namespace("app", &[]).await;
    let other = env.namespace("platform", &[]).await;
    env.await_webhook(&ns).await;
    env.instrumentation(
        &other,
        "shared",
        endpoint_spec("http://platform.example:4318"),
    )
    .await;
    let p = pod("qualified", &[(INJECT_JAVA, &format!("{other}/shared"))]);
    env.until_dry_run(&ns, &p, "injection", |r| is_injected(&r.body))
        .await;

    env.create(&ns, &p).await;
    let stored = env.stored(&ns, "qualified").await;
    assert!(is_injected(&stored), "{stored}");
    assert_eq!(
        env_value(&stored, 0, "OTEL_EXPORTER_OTLP_ENDPOINT"),
        "http://platform.example:4318"
    );
    // The pod's own namespace, not the Instrumentation's, in the resource attributes.
    assert!(
        env_value(&stored, 0, "OTEL_RESOURCE_ATTRIBUTES")
            .contains(&format!("k8s.namespace.name={ns},")),
        "{stored}"
    );
}

#[tokio::test]
async fn namespace_annotation_injects_a_pod_without_annotations() {
    let env = Env::labeling("ns-level").await;
    assert_eq!(
        env.assert_registered_as_the_manifest().await,
        [
            "pods.otel-injector.opentelemetry.io",
            "namespaces.otel-injector.opentelemetry.io"
        ]
    );
    let ns = env.namespace("team", &[(INJECT_JAVA, "true")]).await;
    // The `namespaces.` entry selects namespaces by the label the webhook keeps on them.
    env.await_namespace_label(&ns, true).await;
    assert_label_applied_by_the_webhook(&env.stored_namespace(&ns).await);
    env.await_webhook(&ns).await;
    env.instrumentation(&ns, "java", endpoint_spec("http://team.example:4318"))
        .await;
    let p = pod("plain", &[]);
    env.until_dry_run(&ns, &p, "injection from the namespace annotation", |r| {
        is_injected(&r.body)
    })
    .await;

    let before = env.requests().await;
    env.create(&ns, &p).await;
    assert_eq!(
        env.requests().await.patched,
        before.patched + 1.0,
        "sent once (by the `namespaces.` entry) and patched"
    );
    let stored = env.stored(&ns, "plain").await;
    assert_eq!(
        annotations_less_status(&stored, "java=injected ", "true"),
        json!({INJECTED_ANNOTATION: "java"})
    );
    assert_eq!(stored["spec"]["initContainers"][0]["name"], JAVA_INIT);
    assert_eq!(
        env_value(&stored, 0, "OTEL_EXPORTER_OTLP_ENDPOINT"),
        "http://team.example:4318"
    );
}

#[tokio::test]
async fn pod_false_overrides_the_namespace_annotation() {
    let env = Env::labeling("pod-false").await;
    let ns = env.namespace("team", &[(INJECT_JAVA, "true")]).await;
    env.await_namespace_label(&ns, true).await;
    env.await_webhook(&ns).await;
    env.instrumentation(&ns, "java", endpoint_spec("http://team.example:4318"))
        .await;
    // The webhook knows the namespace annotation and the Instrumentation: a pod without
    // annotations would be injected...
    env.until_dry_run(&ns, &pod("probe", &[]), "namespace-level injection", |r| {
        is_injected(&r.body)
    })
    .await;

    // ... but this one says false. It carries an inject-* annotation, so the `pods.` entry
    // sends it (and the `namespaces.` entry does not: the webhook is called once).
    let p = pod("opted-out", &[(INJECT_JAVA, "false")]);
    let before = env.requests().await;
    let created = env.create(&ns, &p).await;
    let after = env.requests().await;
    assert_eq!(
        (after.total(), after.unchanged),
        (before.total() + 1.0, before.unchanged + 1.0),
        "the webhook was called once and left the pod unchanged"
    );
    assert!(created.warnings.is_empty(), "{:?}", created.warnings);
    assert_unchanged(&env.stored(&ns, "opted-out").await, &p);
}

#[tokio::test]
async fn generate_name_and_replicaset_owner_give_the_deployment_service_name() {
    let env = Env::start("owner").await;
    let ns = env.namespace("shop", &[]).await;
    env.await_webhook(&ns).await;
    env.instrumentation(&ns, "java", endpoint_spec("http://collector.example:4318"))
        .await;
    let mut p = pod("", &[(INJECT_JAVA, "true")]);
    p["metadata"] = json!({
        "generateName": "checkout-7d4b9c8f5-",
        "labels": {"app": "checkout", "pod-template-hash": "7d4b9c8f5"},
        "annotations": {INJECT_JAVA: "true"},
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
            "name": "checkout-7d4b9c8f5", "uid": "5f0c2a8e-0d6b-4c11-9a55-3f1f8e2f6a10",
            "controller": true}]
    });
    env.until_dry_run(&ns, &p, "injection", |r| is_injected(&r.body))
        .await;

    let created = env.create(&ns, &p).await;
    let name = created.body["metadata"]["name"]
        .as_str()
        .expect("generated name");
    assert!(name.starts_with("checkout-7d4b9c8f5-"), "{name}");
    let stored = env.stored(&ns, name).await;
    assert!(is_injected(&stored), "{stored}");
    assert_eq!(env_value(&stored, 0, "OTEL_SERVICE_NAME"), "checkout");
    let attrs = env_value(&stored, 0, "OTEL_RESOURCE_ATTRIBUTES");
    for want in [
        "k8s.deployment.name=checkout",
        "k8s.replicaset.name=checkout-7d4b9c8f5",
    ] {
        assert!(attrs.split(',').any(|a| a == want), "{want} in {attrs}");
    }
}

#[tokio::test]
async fn dry_run_returns_the_injected_pod_and_stores_nothing() {
    let env = Env::start("dry-run").await;
    let ns = env.namespace("shop", &[]).await;
    env.await_webhook(&ns).await;
    env.instrumentation(&ns, "java", endpoint_spec("http://collector.example:4318"))
        .await;
    let p = pod("dry", &[(INJECT_JAVA, "true")]);
    env.until_dry_run(&ns, &p, "injection", |r| is_injected(&r.body))
        .await;

    let before = env.requests().await;
    let r = env.dry_run(&ns, &p).await;
    let after = env.requests().await;
    assert_eq!(
        after.patched,
        before.patched + 1.0,
        "the webhook was called for the dry run (sideEffects: None) and patched"
    );
    assert!(is_injected(&r.body), "{}", r.body);
    assert_eq!(r.body["spec"]["initContainers"][0]["name"], JAVA_INIT);
    assert_eq!(env_value(&r.body, 0, "OTEL_SERVICE_NAME"), "dry");
    assert_eq!(
        api::get_pod(&env.client, &ns, "dry").await.unwrap(),
        None,
        "a dry-run pod is not stored"
    );
}

#[tokio::test]
async fn reinvocation_by_a_second_webhook_injects_once() {
    let env = Env::start("reinvoke").await;
    let labeler = Labeler::start("e2e.otel-injector.io/labeled", "yes").await;
    // Configurations run in name order: ours is `e2e-reinvoke-a-…`, this one `…-b-…`.
    let config =
        labeler.configuration(&format!("e2e-{}-b-labeler", env.id), (SCOPE_LABEL, &env.id));
    api::create_webhook_configuration(&env.client, &config)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let ns = env.namespace("shop", &[]).await;
    env.await_webhook(&ns).await;
    env.instrumentation(&ns, "java", endpoint_spec("http://collector.example:4318"))
        .await;
    let p = pod("twice", &[(INJECT_JAVA, "true")]);
    env.until_dry_run(&ns, &p, "injection and the label", |r| {
        is_injected(&r.body)
            && r.body["metadata"]["labels"]["e2e.otel-injector.io/labeled"] == "yes"
    })
    .await;

    let before = env.requests().await;
    let labeler_before = labeler.calls();
    env.create(&ns, &p).await;
    let after = env.requests().await;
    assert_eq!(
        (
            after.patched - before.patched,
            after.unchanged - before.unchanged
        ),
        (1.0, 1.0),
        "otel-injector was called twice (patched, then reinvoked after the labeler)"
    );
    assert_eq!(labeler.calls() - labeler_before, 1, "the labeler ran once");

    let stored = env.stored(&ns, "twice").await;
    assert_eq!(
        stored["metadata"]["labels"]["e2e.otel-injector.io/labeled"], "yes",
        "{stored}"
    );
    assert_eq!(
        stored["metadata"]["annotations"][INJECTED_ANNOTATION],
        "java"
    );
    let inits = stored["spec"]["initContainers"].as_array().unwrap();
    assert_eq!(
        inits.iter().filter(|c| c["name"] == JAVA_INIT).count(),
        1,
        "{inits:?}"
    );
    assert_eq!(inits.len(), 1);
    assert_eq!(env_named(&stored, 0, "JAVA_TOOL_OPTIONS").len(), 1);
    assert_eq!(
        env_value(&stored, 0, "JAVA_TOOL_OPTIONS"),
        " -javaagent:/otel-auto-instrumentation-java-app/javaagent.jar"
    );
    assert_eq!(stored["spec"]["volumes"].as_array().unwrap().len(), 1);
    assert_eq!(
        stored["spec"]["containers"][0]["volumeMounts"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

/// `kubectl apply -f dir/` (or a GitOps sync) sends a workload and its Instrumentation
/// together; a replica's watch may also lag a moment. The pod's create is answered once the
/// Instrumentation reaches the webhook's cache (`--instrumentation-wait`, 2 s by default),
/// not with a skip; with the wait off, the same order gives the skip. The Instrumentation
/// comes 1.5 s after the pod's create was sent (the API server calls the webhook well before
/// that, however loaded the machine), and the wait is 4 s (within the configuration's 5 s
/// `timeoutSeconds`), so that neither side of the race depends on the machine's speed.
#[tokio::test]
async fn a_pod_created_just_before_its_instrumentation_waits_for_it_and_is_injected() {
    // (the webhook's id, its flags, the outcome's head, the waits counted as found)
    let table = [
        (
            "late",
            vec!["--instrumentation-wait=4s".to_owned()],
            "java=injected {ns}/default ",
            1,
        ),
        (
            "late-off",
            vec!["--instrumentation-wait=0s".to_owned()],
            "java=skipped no_instrumentation {ns}/*",
            0,
        ),
    ];
    for (id, args, outcome, found) in table {
        let options = Options {
            args: args.clone(),
            ..Options::default()
        };
        let env = Env::start_with(id, options).await;
        let ns = env.namespace("late", &[]).await;
        env.await_webhook(&ns).await;
        let p = pod("early", &[(INJECT_JAVA, "true")]);
        let (created, ()) = tokio::join!(env.create(&ns, &p), async {
            tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
            env.instrumentation(&ns, "default", shop_spec()).await;
        });
        let stored = env.stored(&ns, "early").await;
        let status = stored["metadata"]["annotations"][STATUS_ANNOTATION]
            .as_str()
            .unwrap_or_default();
        let outcome = outcome.replace("{ns}", &ns);
        assert!(status.starts_with(&outcome), "{args:?}: {status}");
        assert_eq!(is_injected(&stored), found == 1, "{args:?}: {stored}");
        assert_eq!(created.warnings.len(), 1 - found, "{:?}", created.warnings);
        let metrics = env.webhook.metrics().await;
        let series =
            format!("otel_injector_instrumentation_waits_total{{outcome=\"found\"}} {found}\n");
        assert!(
            metrics.contains(&series),
            "{args:?}: {}",
            metrics
                .lines()
                .filter(|l| l.contains("instrumentation_waits"))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
}
