//! No pod left behind, through the real control plane: pods that asked for injection and were
//! admitted without the webhook (here: created in namespaces outside this test's webhook
//! configuration, as when it is unreachable or not registered yet) are found by the status
//! controller, counted in `status.missed` per Instrumentation and workload and in the metric,
//! announced by one `InjectionMissed` Event per workload, and, once the webhook is reachable,
//! restarted by the automatic rollout so that they come back injected: pods that ask by label,
//! pods of a namespace that asks, and pods that ask only by annotation in a namespace that
//! asks for nothing (how users of the Operator ask). `restart.rs`: the Operator's #1329, a
//! webhook down while Deployments' pods are recreated. `selector.rs`: a selector added while
//! the pods it asks for run.

mod restart;
mod selector;

use otel_injector::keys::INJECT_JAVA;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::harness::{Env, Options, Rbac, SCOPE_LABEL, endpoint_spec};
use crate::rollout::{create_workload, deployment, spec_hash, until_pods_say, until_rollout};
use crate::support::api;
use crate::support::controllers::toleration;
use crate::support::identity::NAMESPACE;
use crate::support::webhook::metric;
use crate::workloads::{list, running_pods};

/// A pod template whose pods ask for Java by label (`Some`), or carry no key at all.
fn template(app: &str, label: Option<&str>) -> Value {
    let mut labels = json!({"app": app});
    if let Some(v) = label {
        labels[INJECT_JAVA] = json!(v);
    }
    json!({
        "metadata": {"labels": labels},
        "spec": {
            "containers": [{"name": "app", "image": format!("shop/{app}:2.1.0")}],
            "tolerations": [toleration()]
        }
    })
}

fn pod(name: &str, template: &Value) -> Value {
    let mut p = json!({"apiVersion": "v1", "kind": "Pod", "metadata": template["metadata"].clone(),
                       "spec": template["spec"].clone()});
    p["metadata"]["name"] = json!(name);
    p
}

async fn status(env: &Env, ns: &str) -> Value {
    api::get_instrumentation(&env.client, ns, "java").await["status"].clone()
}

/// `(missed, [(kind, name, missed)])` of the status's workloads that have missed pods,
/// sorted.
fn missed_of(s: &Value) -> (i64, Vec<(String, String, i64)>) {
    let mut workloads = s["workloads"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|w| w["missed"].as_i64().unwrap_or(0) > 0)
        .map(|w| {
            (
                w["kind"].as_str().unwrap_or("").to_owned(),
                w["name"].as_str().unwrap_or("").to_owned(),
                w["missed"].as_i64().unwrap_or(0),
            )
        })
        .collect::<Vec<_>>();
    workloads.sort();
    (s["missed"].as_i64().unwrap_or(-1), workloads)
}

async fn until_missed(
    env: &Env,
    ns: &str,
    want: &(i64, Vec<(String, String, i64)>),
    limit: Duration,
) -> Duration {
    let t0 = Instant::now();
    loop {
        let s = status(env, ns).await;
        if missed_of(&s) == *want {
            return t0.elapsed();
        }
        assert!(
            t0.elapsed() < limit,
            "status of {ns}/java missing {want:?} within {limit:?}: {s}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until `selector` in `ns` has `count` pods stored (not terminating).
async fn until_stored(env: &Env, ns: &str, selector: &str, count: usize, limit: Duration) {
    let t0 = Instant::now();
    loop {
        let pods = list(
            env,
            &format!("/api/v1/namespaces/{ns}/pods?labelSelector={selector}"),
        )
        .await;
        if pods
            .iter()
            .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
            .count()
            == count
        {
            return;
        }
        assert!(
            t0.elapsed() < limit,
            "{count} pods {selector} in {ns} within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn w(kind: &str, name: &str, n: i64) -> (String, String, i64) {
    (kind.to_owned(), name.to_owned(), n)
}

/// The `InjectionMissed` Events of a namespace: (regarding kind, name, note).
async fn missed_events(env: &Env, ns: &str) -> Vec<(String, String, String)> {
    let events = list(
        env,
        &format!("/apis/events.k8s.io/v1/namespaces/{ns}/events"),
    )
    .await;
    let mut out: Vec<_> = events
        .iter()
        .filter(|e| e["reason"] == "InjectionMissed")
        .map(|e| {
            assert_eq!(e["type"], "Warning", "{e}");
            assert_eq!(e["reportingController"], "otel-injector", "{e}");
            (
                e["regarding"]["kind"].as_str().unwrap_or("").to_owned(),
                e["regarding"]["name"].as_str().unwrap_or("").to_owned(),
                e["note"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    out.sort();
    out
}

/// A webhook with the status controller, its finder and the automatic rollout, alone in the
/// cluster: the finder watches every pod of it, and the status controller writes every
/// Instrumentation's status.
async fn finder_env(id: &str) -> Env {
    Env::start_with(
        id,
        Options {
            rbac: Rbac::Missed,
            exclusive: true,
            args: [
                "--status=true",
                "--rollout=true",
                "--events=true",
                &format!("--lease-identity={id}"),
                &format!("--lease-namespace={NAMESPACE}"),
                "--lease-name=otel-injector",
                "--lease-duration=3s",
            ]
            .map(String::from)
            .to_vec(),
            ..Options::default()
        },
    )
    .await
}

#[tokio::test]
async fn pods_admitted_without_the_webhook_are_found_announced_and_restarted_injected() {
    let env = finder_env("missed").await;
    let limit = Duration::from_secs(60);
    // Two namespaces outside this webhook's configuration (no scope label): pods created
    // there are admitted without it. In `labels` pods ask by label; `asks` asks for every pod.
    let by_label = format!("{}-labels", env.id);
    let asking = format!("{}-asks", env.id);
    api::create_namespace(&env.client, &by_label, &[], &[])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    api::create_namespace(&env.client, &asking, &[], &[(INJECT_JAVA, "true")])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    for ns in [&by_label, &asking] {
        let inst = json!({
            "apiVersion": "opentelemetry.io/v1alpha1", "kind": "Instrumentation",
            "metadata": {"name": "java", "namespace": ns,
                         "annotations": {"otel-injector/rollout": "automatic"}},
            "spec": endpoint_spec("http://collector:4318")
        });
        let r = api::create_instrumentation(&env.client, ns, &inst)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.status, 201, "{}", r.body);
    }
    // Rolled out at once with nothing to restart: what follows is the missed pods' trigger.
    let hashes = [
        spec_hash(&env, &by_label, "java").await,
        spec_hash(&env, &asking, "java").await,
    ];
    for (ns, h) in [&by_label, &asking].into_iter().zip(&hashes) {
        let s = until_rollout(&env, ns, "Complete", h, limit).await;
        assert_eq!(s["message"], "nothing to restart", "{s}");
    }
    let baseline = metric(
        &env.webhook.metrics().await,
        "otel_injector_status_pods_missed",
    )
    .expect("the missed-pods gauge");

    let web = template("web", Some("true"));
    create_workload(&env, &by_label, "deployments", &deployment("web", 2, &web)).await;
    let solo = pod("solo", &template("solo", Some("true")));
    // Asks by annotation only, where the namespace asks for nothing: found too.
    let mut hidden = pod("hidden", &template("hidden", None));
    hidden["metadata"]["annotations"] = json!({INJECT_JAVA: "true"});
    for p in [&solo, &hidden] {
        let r = api::create_pod(&env.client, &by_label, p, false)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.status, 201, "{}", r.body);
    }
    let api_template = template("api", None);
    create_workload(
        &env,
        &asking,
        "deployments",
        &deployment("api", 1, &api_template),
    )
    .await;
    let t_created = Instant::now();
    let groups = [
        (&by_label, "app=web", 2),
        (&by_label, "app=solo", 1),
        (&by_label, "app=hidden", 1),
        (&asking, "app=api", 1),
    ];
    // The webhook becomes reachable for both namespaces (as when its endpoints come back) as
    // soon as the pods are stored, well within the rollout's wait for the missed count to
    // settle: what it restarts goes through the webhook.
    for (ns, sel, n) in groups {
        until_stored(&env, ns, sel, n, limit).await;
    }
    for ns in [&by_label, &asking] {
        let r = api::merge_patch(
            &env.client,
            &format!("/api/v1/namespaces/{ns}"),
            &json!({"metadata": {"labels": {SCOPE_LABEL: env.id}}}),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.status, 200, "{}", r.body);
    }
    for (ns, sel, n) in groups {
        let pods = running_pods(&env, ns, sel, n, limit).await;
        for p in &pods {
            assert!(
                p["metadata"]["annotations"]["otel-injector/status"].is_null(),
                "admitted without the webhook: {p}"
            );
        }
    }

    // Found and counted: 2 + 1 + 1 in `labels`, 1 in `asks`.
    let found = until_missed(
        &env,
        &by_label,
        &(4, vec![w("Deployment", "web", 2)]),
        limit,
    )
    .await;
    until_missed(&env, &asking, &(1, vec![w("Deployment", "api", 1)]), limit).await;
    eprintln!(
        "[e2e] missed pods counted {:?} after their creation ({found:?} after the first read)",
        t_created.elapsed()
    );
    // The gauge counts every missed pod of the cluster, each once; no other test's pods
    // change meanwhile (the cluster is held exclusively), so exactly these 5 are added.
    let t0 = Instant::now();
    loop {
        let gauge = metric(
            &env.webhook.metrics().await,
            "otel_injector_status_pods_missed",
        )
        .expect("the missed-pods gauge");
        if gauge == baseline + 5.0 {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the gauge counts the 5 pods on top of {baseline}: {gauge}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The automatic rollout restarts the two Deployments; their new pods are injected, and
    // only the two bare pods stay missed.
    let v = |ns: &str, h: &str| format!("java=injected {ns}/java {h}");
    until_pods_say(
        &env,
        &by_label,
        "app=web",
        2,
        &v(&by_label, &hashes[0]),
        limit,
    )
    .await;
    until_pods_say(&env, &asking, "app=api", 1, &v(&asking, &hashes[1]), limit).await;
    until_missed(&env, &by_label, &(2, vec![]), limit).await;
    until_missed(&env, &asking, &(0, vec![]), limit).await;
    for (ns, h, name) in [(&by_label, &hashes[0], "web"), (&asking, &hashes[1], "api")] {
        let s = until_rollout(&env, ns, "Complete", h, limit).await;
        assert_eq!(
            s["restarted"],
            json!([format!("Deployment/{ns}/{name}")]),
            "{s}"
        );
    }
    eprintln!(
        "[e2e] missed pods restarted and injected {:?} after their creation",
        t_created.elapsed()
    );

    // One Event per workload, and one on the Instrumentation for the pods without one.
    let note = |n: &str, of: &str, ns: &str| {
        let (were, them) = if n == "1" {
            ("was", "it")
        } else {
            ("were", "them")
        };
        format!(
            "{n} {of} asked for Instrumentation {ns}/java and {were} admitted without injection: \
             the webhook was unreachable or not registered when created; a restart injects {them}"
        )
    };
    assert_eq!(
        missed_events(&env, &by_label).await,
        [
            (
                "Deployment".to_owned(),
                "web".to_owned(),
                note(
                    "2",
                    &format!("pods of Deployment/{by_label}/web"),
                    &by_label
                )
            ),
            (
                "Instrumentation".to_owned(),
                "java".to_owned(),
                note("2", "pods without a controller", &by_label)
            ),
        ]
    );
    assert_eq!(
        missed_events(&env, &asking).await,
        [(
            "Deployment".to_owned(),
            "api".to_owned(),
            note("1", &format!("pod of Deployment/{asking}/api"), &asking)
        )]
    );

    // A namespace that starts asking after its pods were created: they are read again
    // (one list of that namespace) and counted.
    let later = format!("{}-later", env.id);
    api::create_namespace(&env.client, &later, &[], &[])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let inst = json!({
        "apiVersion": "opentelemetry.io/v1alpha1", "kind": "Instrumentation",
        "metadata": {"name": "java", "namespace": &later},
        "spec": endpoint_spec("http://collector:4318")
    });
    let r = api::create_instrumentation(&env.client, &later, &inst)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 201, "{}", r.body);
    let quiet = pod("quiet", &template("quiet", None));
    let r = api::create_pod(&env.client, &later, &quiet, false)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 201, "{}", r.body);
    until_stored(&env, &later, "app=quiet", 1, limit).await;
    let r = api::merge_patch(
        &env.client,
        &format!("/api/v1/namespaces/{later}"),
        &json!({"metadata": {"annotations": {INJECT_JAVA: "true"}}}),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 200, "{}", r.body);
    let t0 = Instant::now();
    until_missed(&env, &later, &(1, vec![]), limit).await;
    eprintln!(
        "[e2e] a pod of a namespace that started asking counted {:?} after the namespace changed",
        t0.elapsed()
    );
}
