//! Crafted pods against the engine: names that collide with what injection adds, env entries
//! without a value, and pods that would grow past the size bound. Every patch is applied with
//! the strict RFC 6902 applier and the result checked for validity.

use k8s_openapi::api::core::v1::Pod;
use otel_injector::admission::mutate;
use otel_injector::agents::Language;
use otel_injector::cluster::StaticCatalog;
use otel_injector::engine::{
    EngineConfig, MIN_PATCH_BYTES_PER_TARGET, Report, SkipReason, Snapshot,
};
use otel_injector::pod::valid;
use serde_json::{Value, json};

const INSTRUMENTATION: &str = r#"
apiVersion: opentelemetry.io/v1alpha1
kind: Instrumentation
metadata: {name: inst, namespace: shop}
spec:
  exporter: {endpoint: "http://collector:4318"}
  java:
    extensions: [{image: "ext:1", dir: /ext}]
"#;

fn catalog() -> StaticCatalog {
    StaticCatalog::from_yaml(INSTRUMENTATION).unwrap()
}

/// Runs the engine on `pod` as the webhook does (with its JSON size), applies the patch
/// strictly and checks the result; returns the patched pod and the report.
fn run_with(config: &EngineConfig, pod: &Value) -> (Value, Report) {
    let typed: Pod = serde_json::from_value(pod.clone()).unwrap();
    let bytes = pod.to_string().len();
    let catalog = catalog();
    let snapshot = Snapshot::take(&catalog, "shop", config).with_pod_bytes(bytes);
    let (patch, report) = mutate(&snapshot, &typed);
    let mut out = pod.clone();
    json_patch::patch(&mut out, &json_patch::Patch(patch))
        .unwrap_or_else(|e| panic!("the patch does not apply strictly: {e}"));
    let patched: Pod = serde_json::from_value(out.clone()).unwrap();
    valid::check(&patched).unwrap_or_else(|e| panic!("invalid patched pod: {e}"));
    (out, report)
}

fn run(pod: &Value) -> (Value, Report) {
    run_with(&EngineConfig::default(), pod)
}

fn pod(annotations: Value, spec: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "shop", "annotations": annotations},
        "spec": spec})
}

/// `out` is `before` with only the outcome recorded: the `otel-injector/status` annotation
/// `status` and the `otel-injector/injected: "false"` label.
fn assert_only_status(out: &Value, before: &Value, status: &str) {
    let mut expected = before.clone();
    expected["metadata"]["annotations"]["otel-injector/status"] = json!(status);
    expected["metadata"]["labels"]["otel-injector/injected"] = json!("false");
    assert_eq!(out, &expected);
}

fn reasons(r: &Report) -> Vec<(Option<Language>, SkipReason)> {
    r.skipped.iter().map(|s| (s.language, s.reason)).collect()
}

#[test]
fn a_container_named_like_an_agent_init_container_skips_that_language_only() {
    let p = pod(
        json!({
            "instrumentation.opentelemetry.io/inject-java": "true",
            "instrumentation.opentelemetry.io/inject-sdk": "true",
            "instrumentation.opentelemetry.io/java-container-names": "app",
            "instrumentation.opentelemetry.io/sdk-container-names": "opentelemetry-auto-instrumentation-java",
        }),
        json!({"containers": [
            {"name": "app", "image": "app"},
            {"name": "opentelemetry-auto-instrumentation-java", "image": "x"}]}),
    );
    let (out, r) = run(&p);
    assert_eq!(r.injected, [Language::Sdk]);
    assert_eq!(
        reasons(&r),
        [(Some(Language::Java), SkipReason::NameCollision)]
    );
    assert_eq!(
        r.warnings,
        [
            "inject-java: container name \"opentelemetry-auto-instrumentation-java\" is already taken; not injected"
        ]
    );
    // Java left nothing behind: no init container, no volume, app untouched.
    assert!(out["spec"].get("initContainers").is_none());
    assert!(out["spec"].get("volumes").is_none());
    assert!(out["spec"]["containers"][0].get("env").is_none());
    assert_eq!(
        out["metadata"]["annotations"]["otel-injector/injected"],
        "sdk"
    );
}

#[test]
fn user_names_that_collide_with_what_a_language_adds() {
    let cases = [
        (
            "an init container named like a Java extension",
            "java",
            json!({"initContainers": [{"name": "opentelemetry-auto-instrumentation-extension-0"}],
                   "containers": [{"name": "app"}]}),
            "inject-java: container name \"opentelemetry-auto-instrumentation-extension-0\" is already taken; not injected",
        ),
        (
            "a volume named like the agent volume",
            "nodejs",
            json!({"containers": [{"name": "app"}],
                   "volumes": [{"name": "opentelemetry-auto-instrumentation-nodejs", "emptyDir": {}}]}),
            "inject-nodejs: volume name \"opentelemetry-auto-instrumentation-nodejs\" is already taken; not injected",
        ),
        (
            "a mount at the agent's path",
            "python",
            json!({"containers": [{"name": "app", "volumeMounts": [
                        {"name": "data", "mountPath": "/otel-auto-instrumentation-python"}]}],
                   "volumes": [{"name": "data", "emptyDir": {}}]}),
            "inject-python: container \"app\" already mounts \"/otel-auto-instrumentation-python\"; not injected",
        ),
        (
            "an app container named like the web-server clone",
            "apache-httpd",
            json!({"containers": [{"name": "app"}, {"name": "otel-agent-source-container-clone"}]}),
            "inject-apache-httpd: container name \"otel-agent-source-container-clone\" is already taken; not injected",
        ),
        (
            "an app container named like the nginx attach container",
            "nginx",
            json!({"containers": [{"name": "app"}, {"name": "otel-agent-attach-nginx"}]}),
            "inject-nginx: container name \"otel-agent-attach-nginx\" is already taken; not injected",
        ),
        (
            "a volume named like the .NET agent volume",
            "dotnet",
            json!({"containers": [{"name": "app"}],
                   "volumes": [{"name": "opentelemetry-auto-instrumentation-dotnet", "configMap": {"name": "x"}}]}),
            "inject-dotnet: volume name \"opentelemetry-auto-instrumentation-dotnet\" is already taken; not injected",
        ),
    ];
    for (what, lang, spec, warning) in cases {
        let key = format!("instrumentation.opentelemetry.io/inject-{lang}");
        let p = pod(json!({key: "true"}), spec);
        let (out, r) = run(&p);
        let lang: Language = lang.parse().unwrap();
        assert!(r.injected.is_empty(), "{what}: {:?}", r.injected);
        assert_eq!(
            reasons(&r),
            [(Some(lang), SkipReason::NameCollision)],
            "{what}"
        );
        assert_eq!(r.warnings, [warning], "{what}");
        // The pod is admitted unchanged but for the outcome.
        assert_only_status(
            &out,
            &p,
            &format!("{lang}=skipped name_collision shop/inst"),
        );
    }
}

#[test]
fn env_entries_without_a_value_are_extended_with_add() {
    // The API server omits empty values: `{"name": "JAVA_TOOL_OPTIONS"}` has no `value`.
    let cases = [
        (
            "java",
            "JAVA_TOOL_OPTIONS",
            " -javaagent:/otel-auto-instrumentation-java-app/javaagent.jar -Dotel.javaagent.extensions=/otel-auto-instrumentation-java-app/extensions",
        ),
        (
            "nodejs",
            "NODE_OPTIONS",
            " --require /otel-auto-instrumentation-nodejs/autoinstrumentation.js",
        ),
        (
            "python",
            "PYTHONPATH",
            "/otel-auto-instrumentation-python/opentelemetry/instrumentation/auto_instrumentation:/otel-auto-instrumentation-python",
        ),
        (
            "nginx",
            "LD_LIBRARY_PATH",
            "/opt/opentelemetry-webserver/agent/sdk_lib/lib",
        ),
    ];
    for (lang, var, expected) in cases {
        let key = format!("instrumentation.opentelemetry.io/inject-{lang}");
        let p = pod(
            json!({key: "true"}),
            json!({"containers": [{"name": "app", "image": "app:1", "env": [{"name": var}]}]}),
        );
        let (out, r) = run(&p);
        assert_eq!(
            r.injected,
            [lang.parse::<Language>().unwrap()],
            "{lang}: {:?}",
            r.warnings
        );
        let env = out["spec"]["containers"][0]["env"].as_array().unwrap();
        let value = env.iter().find(|e| e["name"] == var).unwrap();
        assert_eq!(value["value"], expected, "{lang}");
    }
    // OTEL_RESOURCE_ATTRIBUTES without a value gets the attributes, still last.
    let p = pod(
        json!({"instrumentation.opentelemetry.io/inject-sdk": "true"}),
        json!({"containers": [{"name": "app", "image": "app:1",
            "env": [{"name": "OTEL_RESOURCE_ATTRIBUTES"}, {"name": "A", "value": "1"}]}]}),
    );
    let (out, _) = run(&p);
    let env = out["spec"]["containers"][0]["env"].as_array().unwrap();
    let last = env.last().unwrap();
    assert_eq!(last["name"], "OTEL_RESOURCE_ATTRIBUTES");
    assert!(
        last["value"]
            .as_str()
            .unwrap()
            .starts_with("k8s.container.name=app,"),
        "{last}"
    );
}

/// A pod of `n` tiny containers, all of them targeted.
fn many_containers(lang: &str, n: usize) -> Value {
    let names: Vec<String> = (0..n).map(|i| format!("c{i}")).collect();
    let containers: Vec<Value> = names.iter().map(|n| json!({"name": n})).collect();
    pod(
        json!({
            format!("instrumentation.opentelemetry.io/inject-{lang}"): "true",
            "instrumentation.opentelemetry.io/container-names": names.join(","),
        }),
        json!({"containers": containers}),
    )
}

#[test]
fn amplifying_pods_are_admitted_unchanged() {
    // 3,000 containers: a 60 KiB pod whose patch would be megabytes. Refused before any
    // work by the per-target lower bound.
    let p = many_containers("java", 3000);
    let (out, r) = run(&p);
    assert_only_status(&out, &p, "pod=skipped pod_too_large");
    assert_eq!(reasons(&r), [(None, SkipReason::PodTooLarge)]);
    assert!(
        r.warnings[0].starts_with("otel-injector: the injected pod would be over "),
        "{:?}",
        r.warnings
    );
    assert!(r.injected.is_empty());

    // Under the estimate but over the bound once the patch exists: the exact check drops it.
    let small = many_containers("java", 4);
    let bytes = small.to_string().len();
    let config = EngineConfig {
        max_pod_bytes: bytes + 4 * MIN_PATCH_BYTES_PER_TARGET + 1,
        ..EngineConfig::default()
    };
    let (out, r) = run_with(&config, &small);
    assert_only_status(&out, &small, "pod=skipped pod_too_large");
    assert_eq!(reasons(&r), [(None, SkipReason::PodTooLarge)]);
    assert!(r.injected.is_empty());

    // With room, the same pod is injected.
    let (_, r) = run(&small);
    assert_eq!(r.injected, [Language::Java]);
}

#[test]
fn the_per_target_estimate_is_a_lower_bound() {
    // The smallest injection there is (SDK only, an Instrumentation with nothing set, tiny
    // names) still costs more per container than the estimate the early check uses.
    let empty = StaticCatalog::from_yaml(
        "apiVersion: opentelemetry.io/v1alpha1\nkind: Instrumentation\nmetadata: {name: i, namespace: s}\n",
    )
    .unwrap();
    for n in [1usize, 10, 100] {
        let p = many_containers("sdk", n);
        let typed: Pod = serde_json::from_value(p.clone()).unwrap();
        let config = EngineConfig::default();
        let (patch, r) = mutate(&Snapshot::take(&empty, "s", &config), &typed);
        assert_eq!(r.injected, [Language::Sdk]);
        let bytes = serde_json::to_vec(&patch).unwrap().len();
        assert!(
            bytes >= n * MIN_PATCH_BYTES_PER_TARGET,
            "{n} containers: {bytes} bytes of patch"
        );
    }
}

#[test]
fn values_that_cannot_be_written_are_refused_as_invalid() {
    // A newline in the service name would become its own line in the Apache config.
    let p = pod(
        json!({"instrumentation.opentelemetry.io/inject-apache-httpd": "true",
               "resource.opentelemetry.io/service.name": "shop\nLoadModule evil /x.so"}),
        json!({"containers": [{"name": "web", "image": "httpd:2.4"}]}),
    );
    let (out, r) = run(&p);
    assert_only_status(&out, &p, "apache-httpd=skipped invalid_value shop/inst");
    assert_eq!(
        reasons(&r),
        [(Some(Language::ApacheHttpd), SkipReason::InvalidValue)]
    );

    // An exporter TLS Secret whose name cannot be part of a volume name.
    let dotted = StaticCatalog::from_yaml(
        "apiVersion: opentelemetry.io/v1alpha1\nkind: Instrumentation\n\
         metadata: {name: inst, namespace: shop}\n\
         spec: {exporter: {endpoint: 'https://c:4317', tls: {secretName: my.tls, ca_file: ca.crt}}}\n",
    )
    .unwrap();
    let p = pod(
        json!({"instrumentation.opentelemetry.io/inject-java": "true"}),
        json!({"containers": [{"name": "app"}]}),
    );
    let typed: Pod = serde_json::from_value(p).unwrap();
    let config = EngineConfig::default();
    let (patch, r) = mutate(&Snapshot::take(&dotted, "shop", &config), &typed);
    assert_eq!(
        serde_json::to_value(&patch).unwrap()[0]["value"],
        "java=skipped invalid_value shop/inst",
        "only the outcome is recorded"
    );
    assert_eq!(patch.len(), 2);
    assert_eq!(
        reasons(&r),
        [(Some(Language::Java), SkipReason::InvalidValue)]
    );
    assert_eq!(
        r.warnings,
        ["inject-java: exporter TLS Secret name \"my.tls\" is not a valid DNS label; not injected"]
    );
}

#[test]
fn cross_namespace_references_follow_the_policy() {
    use otel_injector::engine::CrossNamespace;
    let catalog = StaticCatalog::from_yaml(
        "apiVersion: opentelemetry.io/v1alpha1\nkind: Instrumentation\n\
         metadata: {name: shared, namespace: platform, annotations: {otel-injector/cross-namespace: allowed}}\n\
         ---\n\
         apiVersion: opentelemetry.io/v1alpha1\nkind: Instrumentation\n\
         metadata: {name: private, namespace: platform}\n",
    )
    .unwrap();
    let cases = [
        (CrossNamespace::All, "platform/private", None),
        (CrossNamespace::OptIn, "platform/shared", None),
        (
            CrossNamespace::OptIn,
            "platform/private",
            Some(
                "inject-sdk: Instrumentation \"platform/private\" is not shared with other namespaces; not injected",
            ),
        ),
        (
            CrossNamespace::Deny,
            "platform/shared",
            Some(
                "inject-sdk: Instrumentation \"platform/shared\" is not shared with other namespaces; not injected",
            ),
        ),
    ];
    for (policy, reference, denied) in cases {
        let p: Pod = serde_json::from_value(pod(
            json!({"instrumentation.opentelemetry.io/inject-sdk": reference}),
            json!({"containers": [{"name": "app"}]}),
        ))
        .unwrap();
        let config = EngineConfig {
            cross_namespace: policy,
            ..EngineConfig::default()
        };
        let (patch, r) = mutate(&Snapshot::take(&catalog, "shop", &config), &p);
        match denied {
            None => {
                assert_eq!(r.injected, [Language::Sdk], "{policy:?} {reference}");
                assert_eq!(r.injected[0].instrumentation, reference);
            }
            Some(warning) => {
                // Only the outcome is recorded.
                assert_eq!(
                    serde_json::to_value(&patch).unwrap(),
                    json!([
                        {"op": "add", "path": "/metadata/annotations/otel-injector~1status",
                            "value": format!("sdk=skipped cross_namespace_denied {reference}")},
                        {"op": "add", "path": "/metadata/labels",
                            "value": {"otel-injector/injected": "false"}}
                    ]),
                    "{policy:?} {reference}"
                );
                assert_eq!(
                    reasons(&r),
                    [(Some(Language::Sdk), SkipReason::CrossNamespaceDenied)]
                );
                assert_eq!(r.warnings, [warning]);
            }
        }
    }
}

#[test]
fn pods_that_ask_for_nothing_are_not_decoded() {
    let review = |object: Value| {
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "namespace": "shop", "operation": "CREATE", "object": object}})
        .to_string()
    };
    let config = EngineConfig::default();
    // A pod the typed decoder would reject: not decoded at all, so no warning.
    let broken = json!({"metadata": {"name": "p"}, "spec": {"containers": "not a list"}});
    let (_, s) =
        otel_injector::admission::review(review(broken.clone()).as_bytes(), &catalog(), &config)
            .unwrap();
    assert!(s.report.warnings.is_empty(), "{:?}", s.report.warnings);
    assert!(!s.patched && !s.report.requested);
    // The same pod asking for injection is decoded, and the failure is reported.
    let mut asking = broken;
    asking["metadata"]["annotations"] =
        json!({"instrumentation.opentelemetry.io/inject-java": "true"});
    let (_, s) =
        otel_injector::admission::review(review(asking.clone()).as_bytes(), &catalog(), &config)
            .unwrap();
    assert_eq!(s.report.warnings.len(), 1);
    assert!(
        s.report.warnings[0].starts_with("otel-injector: pod could not be decoded"),
        "{:?}",
        s.report.warnings
    );
    // A namespace that asks makes every pod in it count, annotated or not.
    let ns = catalog().with_namespace(
        "shop",
        &[("instrumentation.opentelemetry.io/inject-java", "true")],
    );
    let plain = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "app"}]}});
    let (_, s) = otel_injector::admission::review(review(plain).as_bytes(), &ns, &config).unwrap();
    assert!(s.patched);
    assert_eq!(s.report.injected, [Language::Java]);
}
