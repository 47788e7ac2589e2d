//! Selectors in mode `policy` (no webhook serves these namespaces), through the real API
//! server and controllers: a platform team's Instrumentation laid over a shared base, with
//! a selector for the Deployments of the namespaces labeled `env=prod` whose pods are
//! labeled `tier=backend`. The API server injects them with no annotation on the pods;
//! `"false"` on a template wins; a namespace the selector does not select is left alone; a
//! team's own selector comes before the platform's, with the webhook's warning naming both;
//! a change of the base makes the pods outdated, and after the render `rollout` restarts
//! them with the new merge. Beside it, a pod that asks by its namespace's annotation alone
//! (the API server evaluates match conditions without the namespace).

use std::time::{Duration, Instant};

use otel_injector::keys::{
    BASE_ANNOTATION, INJECT_JAVA, SELECTED_BY_ANNOTATION, SELECTOR_ANNOTATION, STATUS_ANNOTATION,
};
use serde_json::{Value, json};

use crate::harness::{Env, env_value, is_injected};
use crate::rollout::{
    create_workload, deployment, otel_injector, pods_sending_to, rollout_plan, until_pods_say,
};
use crate::support::api;
use crate::workloads::{list, template};

use super::{POLICY_SCOPE, create_all, create_instrumentations, delete_all, render};

const SCOPE: &str = "selected";
const PREFIX: &str = "e2e-selected";

/// A template of `name` with these pod labels and annotations.
fn labeled(name: &str, labels: &[(&str, &str)], annotations: &[(&str, &str)]) -> Value {
    let mut t = template(name, annotations);
    for (k, v) in labels {
        t["metadata"]["labels"][*k] = json!(v);
    }
    t
}

fn pod_of(t: &Value, name: &str) -> Value {
    let mut pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": t["metadata"].clone(),
                         "spec": t["spec"].clone()});
    pod["metadata"]["name"] = json!(name);
    pod
}

fn instrumentation(ns: &str, name: &str, annotations: Value, spec: Value) -> Value {
    json!({"apiVersion": "opentelemetry.io/v1alpha1", "kind": "Instrumentation",
           "metadata": {"name": name, "namespace": ns, "annotations": annotations},
           "spec": spec})
}

/// Creates (or replaces) the objects rendered from `insts` in mode `policy`.
async fn apply(env: &Env, insts: &[Value], old: &[Value]) -> Vec<Value> {
    let cp = crate::harness::cluster().await;
    let (objects, _) = render(
        &cp.dir,
        insts,
        &[
            "--mode",
            "policy",
            "--name-prefix",
            PREFIX,
            &format!("--namespace-label={POLICY_SCOPE}={SCOPE}"),
            "--agent-delivery=image-volume",
        ],
    );
    delete_all(&env.client, old).await;
    create_all(&env.client, &objects).await;
    objects
}

/// Dry-runs `pod` in `ns` until `done` holds of the API server's answer; returns it.
async fn until(
    env: &Env,
    ns: &str,
    pod: &Value,
    what: &str,
    done: impl Fn(&api::Response) -> bool,
) -> api::Response {
    let t0 = Instant::now();
    loop {
        let r = api::create_pod(&env.client, ns, pod, true)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        if done(&r) {
            return r;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "{what} within 30 s: {} {:?}",
            r.body["metadata"],
            r.warnings
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn in_mode_policy_a_selector_instruments_deployments_and_a_base_change_rolls_out() {
    let env = Env::start("policy-selected").await;
    let client = env.client.clone();
    let (platform, prod, dev, asked) = (
        "e2e-policy-sel-platform",
        "e2e-policy-sel-prod",
        "e2e-policy-sel-dev",
        "e2e-policy-sel-asked",
    );
    api::create_namespace(&client, platform, &[], &[])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    for (ns, labels) in [
        (prod, vec![(POLICY_SCOPE, SCOPE), ("env", "prod")]),
        (dev, vec![(POLICY_SCOPE, SCOPE)]),
    ] {
        api::create_namespace(&client, ns, &labels, &[])
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    api::create_namespace(
        &client,
        asked,
        &[(POLICY_SCOPE, SCOPE)],
        &[(INJECT_JAVA, "true")],
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let limit = Duration::from_secs(90);

    let base = |endpoint: &str| {
        instrumentation(
            platform,
            "base",
            json!({}),
            json!({"exporter": {"endpoint": endpoint},
                   "env": [{"name": "OTEL_METRICS_EXPORTER", "value": "none"}]}),
        )
    };
    // Scoped to this test's namespaces: other tests read the same Instrumentations.
    let selector = json!({
        "languages": ["java"],
        "namespaceSelector": {"matchLabels": {"env": "prod", POLICY_SCOPE: SCOPE}},
        "podSelector": {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["backend", "both"]}]},
    });
    let java = instrumentation(
        platform,
        "java",
        json!({SELECTOR_ANNOTATION: selector.to_string(), BASE_ANNOTATION: "base"}),
        json!({"resource": {"resourceAttributes": {"team": "platform"}}}),
    );
    let own = instrumentation(
        asked,
        "java",
        json!({}),
        json!({"exporter": {"endpoint": "http://asked:4318"}}),
    );
    let mut insts = vec![base("http://platform-a:4318"), java, own];
    create_instrumentations(&client, &insts).await;
    let mut objects = apply(&env, &insts, &[]).await;

    let web = labeled("web", &[("tier", "backend")], &[]);
    let r = until(
        &env,
        prod,
        &pod_of(&web, "settle"),
        "the selector's policy",
        |r| is_injected(&r.body),
    )
    .await;
    assert_eq!(
        env_value(&r.body, 0, "OTEL_EXPORTER_OTLP_ENDPOINT"),
        "http://platform-a:4318"
    );
    assert_eq!(
        env_value(&r.body, 0, "OTEL_METRICS_EXPORTER"),
        "none",
        "the base's"
    );
    assert!(r.warnings.is_empty(), "{:?}", r.warnings);
    // Asked for by the namespace alone: injected too.
    let plain = pod_of(&template("plain", &[]), "plain");
    let r = until(&env, asked, &plain, "the namespace's request", |r| {
        is_injected(&r.body)
    })
    .await;
    assert_eq!(
        env_value(&r.body, 0, "OTEL_EXPORTER_OTLP_ENDPOINT"),
        "http://asked:4318"
    );

    let hash = |objects: &[Value]| -> String {
        let policy = objects
            .iter()
            .find(|o| o["metadata"]["name"] == format!("{PREFIX}.{platform}.java"))
            .expect("the policy of platform/java");
        policy["metadata"]["annotations"]["otel-injector/spec-hash"]
            .as_str()
            .expect("its spec hash")
            .to_owned()
    };
    let h1 = hash(&objects);
    let v1 = format!("java=injected {platform}/java {h1}");
    create_workload(&env, prod, "deployments", &deployment("web", 2, &web)).await;
    let off = labeled("off", &[("tier", "backend")], &[(INJECT_JAVA, "false")]);
    create_workload(&env, prod, "deployments", &deployment("off", 1, &off)).await;
    let elsewhere = labeled("elsewhere", &[("tier", "backend")], &[]);
    create_workload(
        &env,
        dev,
        "deployments",
        &deployment("elsewhere", 1, &elsewhere),
    )
    .await;
    let first = until_pods_say(&env, prod, "app=web", 2, &v1, limit).await;
    for p in pods_sending_to(&env, prod, "app=web", "http://platform-a:4318").await {
        assert_eq!(
            p["metadata"]["annotations"][SELECTED_BY_ANNOTATION],
            format!("java={platform}/java").as_str(),
            "the pod says which selector asked"
        );
    }
    // Left alone, with no status: opted out by "false", a namespace not selected.
    for (ns, app) in [(prod, "off"), (dev, "elsewhere")] {
        let t0 = Instant::now();
        let pods = loop {
            let pods = list(
                &env,
                &format!("/api/v1/namespaces/{ns}/pods?labelSelector=app={app}"),
            )
            .await;
            if pods.len() == 1 {
                break pods;
            }
            assert!(t0.elapsed() < limit, "{app}'s pod in {ns}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        assert!(!is_injected(&pods[0]), "{app}: {}", pods[0]);
        let status = &pods[0]["metadata"]["annotations"][STATUS_ANNOTATION];
        assert!(status.is_null(), "{app} asked for nothing: {status}");
    }

    // The team's own selector comes first, with the webhook's warning naming both.
    let own = json!({"languages": ["java"], "podSelector": {"matchLabels": {"tier": "both"}}});
    let team = instrumentation(
        prod,
        "team",
        json!({SELECTOR_ANNOTATION: own.to_string()}),
        json!({"exporter": {"endpoint": "http://team:4318"}}),
    );
    create_instrumentations(&client, std::slice::from_ref(&team)).await;
    insts.push(team);
    objects = apply(&env, &insts, &objects).await;
    let both = labeled("both", &[("tier", "both")], &[]);
    let r = until(
        &env,
        prod,
        &pod_of(&both, "both"),
        "the team's selector",
        |r| {
            is_injected(&r.body)
                && env_value(&r.body, 0, "OTEL_EXPORTER_OTLP_ENDPOINT") == "http://team:4318"
        },
    )
    .await;
    let warn = format!("{PREFIX}.warn-selectors");
    assert_eq!(
        r.warnings,
        [format!(
            "Validation failed for ValidatingAdmissionPolicy '{warn}' with binding '{warn}': \
             inject-java: the selectors of \"{prod}/team\" and \"{platform}/java\" both select this pod; using \"{prod}/team\""
        )]
    );

    // The base alone changes: the pods run an older merge, and the rollout replaces them
    // once the policies are rendered again.
    let r = api::merge_patch(
        &client,
        &api::instrumentation_path(platform, "base"),
        &json!({"spec": {"exporter": {"endpoint": "http://platform-b:4318"}}}),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 200, "{}", r.body);
    insts[0] = base("http://platform-b:4318");
    let inst = format!("{platform}/java");
    let out = rollout_plan(&inst).await;
    assert_eq!(
        out,
        format!(
            "Instrumentation {inst}: 0 pods current, 2 outdated, 0 missed, 0 skipped for want of it\n\
             to restart (1 workload):\n\
             \x20 Deployment/{prod}/web: 2 outdated\n\
             dry run: nothing restarted\n"
        )
    );
    objects = apply(&env, &insts, &objects).await;
    let h2 = hash(&objects);
    assert_ne!(h1, h2, "a base's change is a new spec of its dependents");
    until(&env, prod, &pod_of(&web, "settle"), "the new merge", |r| {
        is_injected(&r.body)
            && env_value(&r.body, 0, "OTEL_EXPORTER_OTLP_ENDPOINT") == "http://platform-b:4318"
    })
    .await;
    let (code, out, err) =
        otel_injector(&["rollout", "--instrumentation", &inst, "--timeout", "60s"]).await;
    assert_eq!((code, err.as_str()), (0, ""), "{out}");
    let v2 = format!("java=injected {platform}/java {h2}");
    let second = until_pods_say(&env, prod, "app=web", 2, &v2, limit).await;
    assert!(first.is_disjoint(&second), "every pod replaced");
    pods_sending_to(&env, prod, "app=web", "http://platform-b:4318").await;
    delete_all(&client, &objects).await;
}
